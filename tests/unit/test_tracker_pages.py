"""The tracker's index, listing (filters, search, paging, order), overview, charts, retention and
the HTML pages' escaping — pure functions, no broker."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
from tests.support.factories import failed as make_failed
from tests.support.factories import named

from ferry.core.events import (
    FileExtracted,
    FileLoaded,
    FileManifest,
    FileTransferred,
    FileTransformed,
)
from ferry.core.timeline import to_ms
from ferry.lineage.naming import Names
from ferry.tracker import filepage, pages
from ferry.tracker.query import FileQuery, QueryError, charts, overview, percentile, select
from ferry.tracker.record import apply
from ferry.tracker.state import TrackerState

T0 = datetime(2024, 3, 1, 8, 0, tzinfo=UTC)
SLA = {"transform": 60.0, "transfer": 60.0, "load": 60.0}
NASTY = 'a<b&c"d[e]:x:'


def ms(minutes: float) -> int:
    return to_ms(T0 + timedelta(minutes=minutes))


def manifest(name: str, minutes: float, dataset: str = "weather", **kw: Any) -> FileManifest:
    at = T0 + timedelta(minutes=minutes)
    return named(dataset, name, at=at, size_bytes=2_000_000, trace_id="1" * 32, **kw)


def failed(name: str, minutes: float, reason: str = "rows_invalid", error: str = "bad") -> Any:
    at = T0 + timedelta(minutes=minutes)
    return make_failed("transform", manifest(name, 0), reason=reason, error=error, attempt=2, at=at)


def build(events: list[Any]) -> tuple[TrackerState, dict[str, dict[str, Any]]]:
    store: dict[str, dict[str, Any]] = {}
    for ev in events:
        fid = ev.manifest.file_id
        store[fid] = apply(store.get(fid), ev, fid, 0)[1]
    state = TrackerState()
    state.load(store.values(), {})
    return state, store


def fid(name: str, dataset: str = "weather") -> str:
    return manifest(name, 0, dataset).file_id


EVENTS = [
    FileExtracted(manifest("waiting", 0)),  # waits in transform; stuck at minute 10
    FileExtracted(manifest("fresh", 9.5)),  # waits in transform, not stuck
    FileExtracted(manifest(NASTY, 0)),
    failed(NASTY, 1, reason="rows<invalid>", error='no "valid" rows & <script>'),
    FileExtracted(manifest("done", 0, "flights")),
    FileTransformed(manifest("done", 2, "flights", rows_in=10, rows_out=9, rows_rejected=1)),
    FileTransferred(manifest("done", 3, "flights")),
    FileLoaded(manifest("done", 6, "flights"), table="ferry.flights", partition={}),
]
NOW = ms(10)


def test_listing_orders_quarantined_then_stuck_then_waiting_then_loaded() -> None:
    state, _ = build(EVENTS)
    count, page = select(state, FileQuery(), NOW, SLA)
    assert count == 4
    assert [e.file_id for e in page] == [
        fid(NASTY),
        fid("waiting"),
        fid("fresh"),
        fid("done", "flights"),
    ]


@pytest.mark.parametrize(
    ("params", "expected"),
    [
        ({"state": "stuck"}, ["waiting"]),
        ({"state": "quarantined"}, [NASTY]),
        ({"state": "failed", "reason": "rows<invalid>"}, [NASTY]),
        ({"reason": "other"}, []),
        ({"stage": "transform"}, [NASTY, "waiting", "fresh"]),
        ({"dataset": "flights"}, ["done"]),
        ({"q": "weather/fr"}, ["fresh"]),
        ({"q": "fre"}, ["fresh"]),
        ({"q": "a<b&"}, [NASTY]),
        ({"since": str(ms(9))}, ["fresh"]),
        ({"since": "2024-03-01T08:05", "until": "2024-03-01T08:09"}, ["done"]),
        ({"state": "loaded", "dataset": "flights"}, ["done"]),
    ],
)
def test_filters(params: dict[str, str], expected: list[str]) -> None:
    state, _ = build(EVENTS)
    names = {fid(n): n for n in ("waiting", "fresh", NASTY)} | {fid("done", "flights"): "done"}
    count, page = select(state, FileQuery.parse(params), NOW, SLA)
    assert (count, [names[e.file_id] for e in page]) == (len(expected), expected)


def test_search_by_file_id_prefix_and_paging() -> None:
    state, _ = build(EVENTS)
    count, page = select(state, FileQuery.parse({"q": fid("fresh")[:6]}), NOW, SLA)
    assert [e.file_id for e in page] == [fid("fresh")]
    ids = sorted(state.entries)
    q = FileQuery.parse({"offset": "1", "limit": "2"}, sort="file_id")
    assert select(state, q, NOW, SLA) == (4, [state.entries[i] for i in ids[1:3]])
    assert select(state, FileQuery.parse({"offset": "9"}), NOW, SLA) == (4, [])


@pytest.mark.parametrize(
    "params", [{"limit": "x"}, {"offset": "-1"}, {"sort": "size"}, {"since": "yesterday"}]
)
def test_bad_parameters_are_refused(params: dict[str, str]) -> None:
    with pytest.raises(QueryError):
        FileQuery.parse(params)


def test_overview_figures_per_stage_and_dataset() -> None:
    state, _ = build(EVENTS)
    state.pruned["flights"] = 5
    ov = overview(
        state, ms(7), SLA, {("ferry.load", "ferry.transferred"): 3}, {"load": "ferry.load"}
    )
    all_ = ov["datasets"]["*"]
    assert all_["transform"] == {
        "waiting": 2,
        "stuck": 1,
        "quarantined": 1,
        "done": 1,
        "files_per_min": 0.2,  # "done" transformed at minute 2, inside the 5-minute window
        "mb_per_min": 0.4,
    }
    assert all_["extract"]["waiting"] is None and all_["extract"]["done"] == 4
    assert all_["load"]["done"] == 6  # 1 retained + 5 pruned
    assert ov["datasets"]["flights"]["load"]["done"] == 6
    assert ov["lag"] == {"load": {"group": "ferry.load", "lag": 3}}


def test_charts_bucket_the_last_hour() -> None:
    state, _ = build(EVENTS)
    c = charts(state, ms(10))
    assert len(c["t"]) == 60 and c["t"][-1] == ms(10) // 1000
    assert sum(c["files_per_min"]["extract"]) == 4
    assert c["files_per_min"]["load"][-5] == 1  # loaded at minute 6: bucket 5 minutes back
    assert [p for p in c["latency"]["p50"] if p is not None] == [360.0]
    assert percentile([1.0, 2.0, 3.0, 4.0], 0.95) == 4.0 and percentile([], 0.5) is None


def test_retention_selects_only_old_loaded_files_of_the_partition() -> None:
    state, _ = build(EVENTS)
    assert [e.file_id for e in state.expired(0, ms(7))] == [fid("done", "flights")]
    assert state.expired(0, ms(5)) == [] and state.expired(1, ms(7)) == []
    state.load(list(build(EVENTS)[1].values()), {"0:flights": 4, "1:flights": 1})
    assert state.counts(NOW, SLA)["states"]["loaded"] == 6


def test_every_text_from_files_is_escaped() -> None:
    state, store = build(EVENTS)
    _, page = select(state, FileQuery(), NOW, SLA)
    html = pages.files_body(FileQuery(q=NASTY), {"q": NASTY}, 4, page, NOW, SLA, state.datasets())
    record = store[fid(NASTY)]
    names = Names("ferry", Path("/nas"), "hive://h:1", "hdfs://a/warehouse")
    html += filepage.file_body(record, False, NOW, names=names)  # the lineage chain too
    html += filepage.render_status_page([], NOW, SLA, NASTY)
    ov = overview(state, NOW, SLA, {}, {})
    html += pages.overview_body(ov, state.counts(NOW, SLA), NASTY)
    for raw in (NASTY, "rows<invalid>", 'no "valid" rows & <script>', f"weather/{NASTY}.csv"):
        assert raw not in html
    assert "weather/a&lt;b&amp;c&quot;d[e]:x:.csv" in html
    assert (
        "rows&lt;invalid&gt;" in html and "no &quot;valid&quot; rows &amp; &lt;script&gt;" in html
    )
    assert "<script" not in html


def test_file_page_bars_and_commands() -> None:
    _, store = build(EVENTS)
    done = store[fid("done", "flights")]
    assert filepage.bars(done, NOW) == [
        {"stage": "extract", "start_ms": ms(0), "end_ms": ms(0), "wait_ms": 0, "work_ms": 0},
        {
            "stage": "transform",
            "start_ms": ms(0),
            "end_ms": ms(2),
            "wait_ms": 0,
            "work_ms": 120_000,
        },
        {"stage": "transfer", "start_ms": ms(2), "end_ms": ms(3), "wait_ms": 0, "work_ms": 60_000},
        {"stage": "load", "start_ms": ms(3), "end_ms": ms(6), "wait_ms": 0, "work_ms": 180_000},
    ]
    f = fid(NASTY)
    assert filepage.commands(store[f]) == [
        f"ferry replay transform --file {f}",
        f"ferry quarantine release {f}",
        f"ferry status {f}",
    ]
    waiting = store[fid("waiting")]
    assert filepage.bars(waiting, NOW)[-1] == {
        "stage": "transform",
        "start_ms": ms(0),
        "end_ms": None,
        "wait_ms": 0,
        "work_ms": 600_000,
    }
    assert store[f]["x"]["failures"] == [
        {
            "stage": "transform",
            "reason": "rows<invalid>",
            "error": 'no "valid" rows & <script>',
            "attempt": 2,
            "at_ms": ms(1),
        }
    ]
    assert done["x"]["sha256"] == manifest("done", 0, "flights").sha256
