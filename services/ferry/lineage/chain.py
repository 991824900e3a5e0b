"""A file's lineage chain read back from OpenLineage run events (as JSON data): which stage
read which dataset and wrote which, with the rows at each step — NAS → landing → staging →
HDFS A incoming → table — and where it failed. Used by the tracker's file page and by anyone
reading the events back (the end-to-end test reads the ``openlineage`` topic with it).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

#: Terminal states win over START when several events of one run are seen.
_RANK = {"START": 0, "RUNNING": 1, "OTHER": 1, "COMPLETE": 2, "ABORT": 2, "FAIL": 2}


@dataclass(frozen=True)
class Node:
    """One dataset as a hop saw it: namespace, name, rows (``None``: not counted there)."""

    namespace: str
    name: str
    rows: int | None = None

    @property
    def where(self) -> str:
        """``hdfs://ns/path``, ``hive://host:port/db.table``, or a NAS file's path."""
        if self.namespace == "file":
            return self.name
        return self.namespace + ("" if self.name.startswith("/") else "/") + self.name


@dataclass(frozen=True)
class Hop:
    """One stage's run on the file: its last state, what it read and wrote, its error."""

    stage: str
    state: str
    time: str
    inputs: tuple[Node, ...]
    outputs: tuple[Node, ...]
    error: str | None = None


def file_key(event: Mapping[str, Any]) -> str:
    """The file an event is about: its ``ferry`` facet's file id, else ``nas:<source path>``."""
    ferry = (event.get("run") or {}).get("facets", {}).get("ferry") or {}
    return ferry.get("fileId") or f"nas:{ferry.get('sourcePath', '')}"


def _nodes(datasets: Iterable[Mapping[str, Any]], stats: str, group: str) -> tuple[Node, ...]:
    out = []
    for d in datasets:
        facet = (d.get(group) or {}).get(stats) or {}
        out.append(Node(d["namespace"], d["name"], facet.get("rowCount")))
    return tuple(out)


def hops(events: Iterable[Mapping[str, Any]]) -> dict[str, list[Hop]]:
    """file key (:func:`file_key`) → its stages' runs in time order, each at its last state.

    Only child runs (with a ``parent`` facet) are hops; datasets and rows are those of the
    run's terminal event (its START's when it has none yet)."""
    best: dict[str, tuple[int, str, Mapping[str, Any]]] = {}
    for ev in events:
        run = ev.get("run") or {}
        facets = run.get("facets") or {}
        if "parent" not in facets:
            continue
        rank = _RANK.get(ev.get("eventType", ""), 0)
        have = best.get(run["runId"])
        if have is None or (rank, ev["eventTime"]) >= (have[0], have[1]):
            best[run["runId"]] = (rank, ev["eventTime"], ev)
    out: dict[str, list[Hop]] = {}
    for _, time, ev in sorted(best.values(), key=lambda b: b[1]):
        facets = ev["run"]["facets"]
        error = (facets.get("errorMessage") or {}).get("message")
        hop = Hop(
            stage=(facets.get("ferry") or {}).get("stage") or ev["job"]["name"],
            state=ev["eventType"],
            time=time,
            inputs=_nodes(ev.get("inputs") or [], "inputStatistics", "inputFacets"),
            outputs=_nodes(ev.get("outputs") or [], "outputStatistics", "outputFacets"),
            error=error,
        )
        out.setdefault(file_key(ev), []).append(hop)
    return out


def chain(file_hops: Iterable[Hop]) -> list[Node]:
    """The datasets a file passed through, in order (each once; rows: the largest count any
    hop gave it, e.g. landing's rows come from transform's read)."""
    order: dict[tuple[str, str], int | None] = {}
    for hop in file_hops:
        for node in (*hop.inputs, *hop.outputs):
            key = (node.namespace, node.name)
            rows = order.get(key)
            if node.rows is not None and (rows is None or node.rows > rows):
                rows = node.rows
            order[key] = rows
    return [Node(ns, name, rows) for (ns, name), rows in order.items()]


__all__ = ["Hop", "Node", "chain", "file_key", "hops"]
