"""Pure reads of the tracker's index: the files listing (filters, search, paging), the overview
(per stage and dataset) and the last hour's charts. No I/O; times are epoch ms unless named
``_s``/``_min``.
"""

from __future__ import annotations

import math
from collections import Counter
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

from ferry.core.services import STAGES
from ferry.core.timeline import STEPS, Timeline, to_ms
from ferry.tracker.state import (
    PRODUCES,
    QUARANTINE_STATES,
    Entry,
    TrackerState,
    attention,
)

#: Width of the "now" window for files/min and MB/min, minutes.
RATE_WINDOW_MIN = 5
#: Chart span and bucket widths.
CHART_SPAN_MIN = 60
LATENCY_BUCKET_MIN = 5

#: Query parameters of the files listing, with what each filters.
PARAMS = ("state", "dataset", "stage", "reason", "since", "until", "q", "offset", "limit", "sort")


class QueryError(ValueError):
    """A listing parameter is malformed (the views answer 400 with its text)."""


@dataclass(frozen=True)
class FileQuery:
    """A files listing request.

    ``state``: a step name (``failed``: every failed file), ``stuck``, or a quarantine state:
    ``quarantined`` (failed, and neither superseded nor dismissed), ``superseded``,
    ``dismissed``; ``stage``: the stage the file waits in or failed in; ``reason``: failure
    reason code; ``since_ms``/``until_ms``: bounds on the time the file entered its current
    state (epoch ms or ISO 8601, UTC when naive);
    ``q``: prefix of the file id, of the NAS path, or of the NAS file name; ``sort``:
    ``attention`` (quarantined, stuck, waiting, loaded; newest first within each) or ``file_id``.
    """

    state: str | None = None
    dataset: str | None = None
    stage: str | None = None
    reason: str | None = None
    since_ms: int | None = None
    until_ms: int | None = None
    q: str | None = None
    offset: int = 0
    limit: int = 50
    sort: str = "attention"

    @classmethod
    def parse(
        cls, params: Mapping[str, str], *, limit: int = 50, sort: str = "attention"
    ) -> FileQuery:
        """Build from query-string parameters (empty values count as absent).

        Raises:
            QueryError: a number is not an integer, is negative, or ``sort`` is unknown.
        """
        p = {k: v.strip() for k, v in params.items() if k in PARAMS and v and v.strip()}

        def num(name: str, default: int | None) -> int | None:
            if name not in p:
                return default
            try:
                value = int(p[name])
            except ValueError:
                raise QueryError(f"{name} must be an integer") from None
            if value < 0:
                raise QueryError(f"{name} must be >= 0")
            return value

        def when(name: str) -> int | None:
            if name not in p or p[name].isdigit():
                return num(name, None)
            try:
                t = datetime.fromisoformat(p[name])
            except ValueError:
                raise QueryError(f"{name} must be epoch ms or an ISO 8601 time") from None
            return to_ms(t if t.tzinfo else t.replace(tzinfo=UTC))

        chosen_sort = p.get("sort", sort)
        if chosen_sort not in ("attention", "file_id"):
            raise QueryError("sort must be attention or file_id")
        state = p.get("state")
        return cls(
            state="open" if state == "quarantined" else state,
            dataset=p.get("dataset"),
            stage=p.get("stage"),
            reason=p.get("reason"),
            since_ms=when("since"),
            until_ms=when("until"),
            q=p.get("q"),
            offset=num("offset", 0) or 0,
            limit=num("limit", limit) or 0,
            sort=chosen_sort,
        )

    def matches(
        self,
        e: Entry,
        now_ms: int,
        sla_s: Mapping[str, float],
        closure: Callable[[Entry], tuple[str, str | None]] | None = None,
    ) -> bool:
        """Whether ``e`` is listed; ``closure`` tells a failed file's quarantine state
        (:meth:`TrackerState.closure`), for the quarantine states of ``state``."""
        if self.dataset and e.dataset != self.dataset:
            return False
        if self.state == "stuck":
            if not e.stuck(now_ms, sla_s):
                return False
        elif self.state in QUARANTINE_STATES:
            if e.state != "failed" or closure is None or closure(e)[0] != self.state:
                return False
        elif self.state and e.state != self.state:
            return False
        if self.stage and e.stage != self.stage:
            return False
        if self.reason and e.reason != self.reason:
            return False
        if self.since_ms is not None and e.entered_ms < self.since_ms:
            return False
        if self.until_ms is not None and e.entered_ms > self.until_ms:
            return False
        if self.q:
            name = e.source_path.rsplit("/", 1)[-1]
            if not (
                e.file_id.startswith(self.q.lower())
                or e.source_path.startswith(self.q)
                or name.startswith(self.q)
            ):
                return False
        return True


def select(
    state: TrackerState, query: FileQuery, now_ms: int, sla_s: Mapping[str, float]
) -> tuple[int, list[Entry]]:
    """(number of matching files, the requested page of them in the query's order)."""
    hits = [e for e in state.entries.values() if query.matches(e, now_ms, sla_s, state.closure)]
    if query.sort == "file_id":
        hits.sort(key=lambda e: e.file_id)
    else:
        hits.sort(key=lambda e: (_rank(state, e, now_ms, sla_s), -e.entered_ms, e.file_id))
    return len(hits), hits[query.offset : query.offset + query.limit]


def _rank(state: TrackerState, e: Entry, now_ms: int, sla_s: Mapping[str, float]) -> int:
    """:func:`attention`, with a superseded or dismissed quarantine entry ranked with the loaded
    files (it needs no one)."""
    rank = attention(e, now_ms, sla_s)
    return 3 if rank == 0 and state.closure(e)[0] != "open" else rank


def _group_lags(lags: Mapping[tuple[str, str], int]) -> dict[str, int]:
    out: dict[str, int] = {}
    for (group, _topic), lag in lags.items():
        out[group] = out.get(group, 0) + lag
    return out


def overview(
    state: TrackerState,
    now_ms: int,
    sla_s: Mapping[str, float],
    lags: Mapping[tuple[str, str], int],
    groups: Mapping[str, str],
) -> dict[str, Any]:
    """The overview body: per dataset (and ``"*"``, all) per stage: ``waiting`` (files waiting
    to enter it; ``None`` for extract, whose queue is the NAS), ``stuck``, ``quarantined``,
    ``done`` (retained files it produced; loaded also counts pruned ones), ``files_per_min`` and
    ``mb_per_min`` over the last :data:`RATE_WINDOW_MIN` minutes; per stage ``group`` and
    ``lag`` (records behind, from ``lags``: (group, topic) → lag; ``groups``: stage → group).
    """
    since = now_ms - RATE_WINDOW_MIN * 60_000
    datasets = ["*", *state.datasets()]

    def blank() -> dict[str, dict[str, Any]]:
        return {
            s: {
                "waiting": None if s == "extract" else 0,
                "stuck": 0,
                "quarantined": 0,
                "done": 0,
                "files": 0,
                "bytes": 0,
            }
            for s in STAGES
        }

    acc = {d: blank() for d in datasets}
    for e in state.entries.values():
        for d in ("*", e.dataset):
            stages = acc[d]
            w = e.waiting_in
            if w:
                stages[w]["waiting"] += 1
                if e.stuck(now_ms, sla_s):
                    stages[w]["stuck"] += 1
            if e.state == "failed" and e.failed_stage in stages and state.closure(e)[0] == "open":
                stages[e.failed_stage]["quarantined"] += 1
            for s in STAGES:
                t = e.at(PRODUCES[s])
                if t is not None:
                    stages[s]["done"] += 1
                    if since <= t <= now_ms:
                        stages[s]["files"] += 1
                        stages[s]["bytes"] += e.size_bytes
    for d, n in state.pruned.items():
        acc["*"]["load"]["done"] += n
        acc.setdefault(d, blank())["load"]["done"] += n
    group_lag = _group_lags(lags)
    out: dict[str, Any] = {}
    for d, stages in acc.items():
        out[d] = {}
        for s, v in stages.items():
            files, size = v.pop("files"), v.pop("bytes")
            v["files_per_min"] = round(files / RATE_WINDOW_MIN, 2)
            v["mb_per_min"] = round(size / 1e6 / RATE_WINDOW_MIN, 3)
            out[d][s] = v
    lag = {s: {"group": groups[s], "lag": group_lag.get(groups[s])} for s in STAGES if s in groups}
    return {"now_ms": now_ms, "rate_window_min": RATE_WINDOW_MIN, "lag": lag, "datasets": out}


def percentile(values: list[float], p: float) -> float | None:
    """Nearest-rank percentile (``p`` in 0..1) of ``values``; ``None`` when empty."""
    if not values:
        return None
    ordered = sorted(values)
    return ordered[max(0, math.ceil(p * len(ordered)) - 1)]


def charts(state: TrackerState, now_ms: int, dataset: str | None = None) -> dict[str, Any]:
    """The last hour: files/min per stage (1-minute buckets) and NAS → Hive latency p50/p95, s
    (5-minute buckets, by load time; from the file's NAS mtime, else when extract saw it).

    Shape: ``{"t": [bucket start, epoch s], "files_per_min": {stage: [n]}, "latency": {"t": [...],
    "p50": [s | None], "p95": [s | None], "files": [n]}}``.
    """
    minute = 60_000
    end = (now_ms // minute + 1) * minute
    start = end - CHART_SPAN_MIN * minute
    per_min = {s: [0] * CHART_SPAN_MIN for s in STAGES}
    nb = CHART_SPAN_MIN // LATENCY_BUCKET_MIN
    lat: list[list[float]] = [[] for _ in range(nb)]
    for e in state.entries.values():
        if dataset and e.dataset != dataset:
            continue
        for s in STAGES:
            t = e.at(PRODUCES[s])
            if t is not None and start <= t < end:
                per_min[s][(t - start) // minute] += 1
        loaded = e.at("loaded")
        if loaded is not None and e.start_ms is not None and start <= loaded < end:
            lat[(loaded - start) // (LATENCY_BUCKET_MIN * minute)].append(
                max(0.0, (loaded - e.start_ms) / 1000)
            )
    return {
        "t": [(start + i * minute) // 1000 for i in range(CHART_SPAN_MIN)],
        "files_per_min": per_min,
        "latency": {
            "t": [(start + i * LATENCY_BUCKET_MIN * minute) // 1000 for i in range(nb)],
            "p50": [percentile(b, 0.5) for b in lat],
            "p95": [percentile(b, 0.95) for b in lat],
            "files": [len(b) for b in lat],
        },
    }


def summary(
    timelines: Iterable[Timeline], now_ms: int, sla_s: Mapping[str, float]
) -> dict[str, Any]:
    """Files per state and stuck files per stage of ``timelines`` (the ``/summary`` shape)."""
    states: Counter[str] = Counter()
    stuck: Counter[str] = Counter()
    for tl in timelines:
        states[tl.state or "unknown"] += 1
        if tl.stuck(now_ms, sla_s):
            stuck[tl.waiting_in or "unknown"] += 1
    return {
        "files": sum(states.values()),
        "states": {s: states.get(s, 0) for s in STEPS},
        "stuck": dict(stuck),
    }
