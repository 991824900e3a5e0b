"""The tracker's timeline fold (pure), stuck detection, summary and the status page."""

from __future__ import annotations

from dataclasses import replace
from datetime import UTC, datetime, timedelta

import pytest
from tests.support.factories import failed, undecodable
from tests.support.factories import manifest as make_manifest

from ferry.core.events import (
    FileExtracted,
    FileLoaded,
    FileManifest,
    FileTransferred,
    FileTransformed,
)
from ferry.core.identity import derive_file_id
from ferry.core.timeline import Failure, StepMark, Timeline, fold, stage_latencies, to_ms
from ferry.tracker.filepage import render_status_page
from ferry.tracker.query import summary

T0 = datetime(2024, 3, 1, 8, 0, tzinfo=UTC)
SHA = "cd" * 32
FID = derive_file_id("weather", SHA)
SLA = {"transform": 60.0, "transfer": 30.0, "load": 60.0}


def manifest(minutes: int, **kw: object) -> FileManifest:
    return make_manifest(
        "weather",
        SHA,
        at=T0,
        source_path="weather/2013-01-01.csv",
        size_bytes=10,
        trace_id="1" * 32,
        updated_at=T0 + timedelta(minutes=minutes),
        **kw,
    )


def ms(minutes: int) -> int:
    return to_ms(T0 + timedelta(minutes=minutes))


def run(events: list[object]) -> Timeline:
    tl = None
    for ev in events:
        tl = fold(tl, ev, FID)  # type: ignore[arg-type]
    assert tl is not None
    return tl


def test_full_pipeline_timeline_is_exact() -> None:
    tl = run(
        [
            FileExtracted(manifest(0)),
            FileTransformed(manifest(2, rows_in=10, rows_out=9, rows_rejected=1)),
            FileTransferred(manifest(3)),
            FileLoaded(manifest(5), table="ferry.weather", partition={"day": "2013-01-01"}),
        ]
    )
    assert tl.to_dict() == {
        "file_id": FID,
        "dataset": "weather",
        "source_path": "weather/2013-01-01.csv",
        "state": "loaded",
        "waiting_in": None,
        "steps": {
            "extracted": {"first_ms": ms(0), "last_ms": ms(0), "events": 1},
            "transformed": {"first_ms": ms(2), "last_ms": ms(2), "events": 1},
            "transferred": {"first_ms": ms(3), "last_ms": ms(3), "events": 1},
            "loaded": {"first_ms": ms(5), "last_ms": ms(5), "events": 1},
        },
        "last_event": "FileLoaded",
        "attempts": 1,
        "failure": None,
        "rows": {"rows_in": 10, "rows_out": 9, "rows_rejected": 1},
        "table": "ferry.weather",
    }
    assert Timeline.from_dict(tl.to_dict()) == tl


def test_state_is_order_insensitive_across_topics() -> None:
    events = [
        FileExtracted(manifest(0)),
        FileTransformed(manifest(2)),
        FileTransferred(manifest(3)),
    ]
    a = run(events)
    b = run(list(reversed(events)))
    assert a.state == b.state == "transferred"
    assert a.last_event == b.last_event == "FileTransferred"
    assert (
        stage_latencies(None, a)
        == stage_latencies(None, b)
        == {"transform": 120.0, "transfer": 60.0}
    )
    assert a.steps == b.steps
    assert a.waiting_in == "load"


def test_failure_then_release_and_success() -> None:
    fail = failed(
        "transfer",
        manifest(2),
        reason="hdfs_timeout",
        error="timed out",
        attempt=6,
        at=T0 + timedelta(minutes=4),
    )
    tl = run([FileExtracted(manifest(0)), FileTransformed(manifest(2)), fail])
    assert tl.state == "failed"
    assert tl.attempts == 6
    assert tl.failure == Failure("transfer", "hdfs_timeout", "timed out", 6, ms(4))
    assert tl.waiting_in is None and not tl.stuck(ms(10_000), SLA)
    tl2 = fold(tl, FileTransferred(manifest(9)), FID)
    assert tl2.state == "transferred"
    assert tl2.failure == tl.failure  # the last failure stays visible


def test_replayed_event_counts_and_moves_last_seen() -> None:
    tl = run([FileExtracted(manifest(0)), FileTransformed(manifest(2)), FileExtracted(manifest(7))])
    assert tl.steps["extracted"] == StepMark(ms(0), ms(7), 2)
    assert tl.state == "extracted" and tl.waiting_in == "transform"


def test_stuck_after_the_waiting_stage_sla() -> None:
    tl = run([FileExtracted(manifest(0)), FileTransformed(manifest(2))])  # waits in transfer (30 s)
    assert not tl.stuck(ms(2) + 30_000, SLA)
    assert tl.stuck(ms(2) + 30_001, SLA)


def test_stage_latencies_only_when_a_stage_completes_first_time() -> None:
    before = run([FileExtracted(manifest(0))])
    after = fold(before, FileTransformed(manifest(2)), FID)
    assert stage_latencies(before, after) == {"transform": 120.0}
    again = fold(after, FileTransformed(manifest(3)), FID)
    assert stage_latencies(after, again) == {}
    # transformed consumed before extracted: measured when extracted arrives
    early = fold(None, FileTransformed(manifest(2)), FID)
    assert stage_latencies(None, early) == {}
    assert stage_latencies(early, fold(early, FileExtracted(manifest(0)), FID)) == {
        "transform": 120.0
    }


def test_undecodable_failure_keyed_by_record_key() -> None:
    fail = undecodable("transform", ("t.extracted", 0, 3), error="not avro", at=T0)
    tl = fold(None, fail, "t.extracted-0-3")
    assert (tl.file_id, tl.state, tl.dataset) == ("t.extracted-0-3", "failed", None)


def test_fold_rejects_non_events() -> None:
    with pytest.raises(ValueError, match="not a Ferry event"):
        fold(None, object(), FID)  # type: ignore[arg-type]


def test_summary_and_status_page() -> None:
    loaded = run([FileExtracted(manifest(0)), FileLoaded(manifest(5), table="t")])
    waiting = replace(run([FileExtracted(manifest(0))]), file_id="other<&>")
    s = summary([loaded, waiting], ms(10), SLA)
    assert s == {
        "files": 2,
        "states": {"extracted": 1, "transformed": 0, "transferred": 0, "loaded": 1, "failed": 0},
        "stuck": {"transform": 1},
    }
    page = render_status_page([loaded, waiting], ms(10), SLA, "ferry")
    assert f"<td class='file-id'>{FID}</td>" in page
    assert "other&lt;&amp;&gt;" in page and "other<&>" not in page
    assert "2 file(s)" in page
