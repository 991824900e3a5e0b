"""The file page's lineage chain (NAS → landing → staging → HDFS A → table, rows at each step).

The chain is read from OpenLineage run events by :mod:`ferry.lineage.chain`, the same reader
that takes them back from the ``openlineage`` topic. The tracker does not consume that topic: it
builds each stage's COMPLETE (or FAIL) event with the stages' own builder
(:class:`ferry.lineage.events.EventBuilder`) from the manifests it already folds, so the page
shows exactly the datasets and counts the stages emit, also for files handled before lineage
was turned on and in deployments where it is off (``lineage.transport: none``, the default).
"""

from __future__ import annotations

from collections.abc import Mapping
from datetime import UTC, datetime
from typing import Any

from openlineage.client.event_v2 import RunState
from openlineage.client.serde import Serde

from ferry.core.events import FileLoaded, FileManifest
from ferry.core.services import SERVICES
from ferry.lineage.chain import Hop, chain, hops
from ferry.lineage.events import EventBuilder, facts_of
from ferry.lineage.naming import Names
from ferry.tracker.pages import esc
from ferry.tracker.record import detail


def _manifest(record: Mapping[str, Any]) -> FileManifest:
    """What the record knows of the file's manifest (URIs and counts merged over its events)."""
    x = detail(record)
    rows = record.get("rows") or {}
    at = datetime.fromtimestamp((x["created_ms"] or 0) / 1000, tz=UTC)
    return FileManifest(
        file_id=record["file_id"],
        dataset=record.get("dataset") or "",
        source_path=record.get("source_path") or "",
        size_bytes=x["size_bytes"] or 0,
        sha256=x["sha256"] or "",
        created_at=at,
        updated_at=at,
        trace_id="",
        uris=dict(x["uris"]),
        rows_in=rows.get("rows_in"),
        rows_out=rows.get("rows_out"),
        rows_rejected=rows.get("rows_rejected"),
        reject_reasons=dict(record.get("reject_reasons") or {}),
    )


def record_hops(record: Mapping[str, Any], names: Names) -> list[Hop]:
    """The file's hops as its run events say them: one COMPLETE per step it reached, and the
    FAIL of the stage that quarantined it."""
    b = EventBuilder(names, {})
    m = _manifest(record)
    if not m.dataset:
        return []
    steps = record.get("steps") or {}
    facts = facts_of(m)
    events = []
    for s in SERVICES:
        if s.output is None or s.output.TOPIC not in steps:
            continue
        if s.output is FileLoaded:
            out: Any = FileLoaded(m, record.get("table") or m.uris.get("table", ""))
        else:
            out = s.output(manifest=m)  # type: ignore[call-arg]
        at = datetime.fromtimestamp(steps[s.output.TOPIC]["first_ms"] / 1000, tz=UTC).isoformat()
        run_id = names.child_run_id(m.file_id, s.name, "tracker", 0, 0)  # one run per hop
        events.append(
            b.child(
                RunState.COMPLETE,
                s.name,
                run_id,
                facts,
                at=at,
                inputs=[b.stage_input(s.name, m)],
                outputs=b.outputs(out),
            )
        )
    failure = record.get("failure")
    if record.get("state") == "failed" and failure:
        at = datetime.fromtimestamp(failure["at_ms"] / 1000, tz=UTC).isoformat()
        error = f"{failure['reason']}: {failure['error']}"
        inputs = [b.stage_input(failure["stage"], m)]
        run_id = names.child_run_id(m.file_id, failure["stage"], "tracker-failed", 0, 0)
        events.append(
            b.child(
                RunState.FAIL, failure["stage"], run_id, facts, at=at, inputs=inputs, error=error
            )
        )
    return hops(Serde.to_dict(e) for e in events).get(m.file_id, [])


def _rows(n: int | None) -> str:
    return "" if n is None else f"{n:,}"


def lineage_section(record: Mapping[str, Any], names: Names) -> str:
    """The page section: the chain of datasets with rows, then one row per stage run."""
    try:
        file_hops = record_hops(record, names)
    except (KeyError, ValueError) as exc:  # a record without the URIs its steps should have
        return f"<section><h3>Lineage</h3><p class='error'>not shown: {esc(exc)}</p></section>"
    if not file_hops:
        return ""
    nodes = " → ".join(
        f"<span class='node'>{esc(n.where)}"
        f"{'' if n.rows is None else ' (' + _rows(n.rows) + ' rows)'}</span>"
        for n in chain(file_hops)
    )
    rows = "".join(
        f"<tr class='hop {esc(h.state.lower())}'><td>{esc(h.stage)}</td><td>{esc(h.state)}</td>"
        f"<td>{'<br>'.join(esc(i.where) for i in h.inputs)}</td>"
        f"<td>{'<br>'.join(esc(o.where) + ' ' + _rows(o.rows) for o in h.outputs)}</td>"
        f"<td>{esc(h.error or '')}</td></tr>"
        for h in file_hops
    )
    return (
        f"<section><h3>Lineage</h3><p id='lineage-chain'>{nodes}</p>"
        "<table id='lineage'><tr><th>stage</th><th>run</th><th>read</th><th>wrote (rows)</th>"
        f"<th>error</th></tr>{rows}</table></section>"
    )


__all__ = ["lineage_section", "record_hops"]
