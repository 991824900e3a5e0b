"""``process_batch``: per-file retries, quarantine, undecodable records, whole-batch failures."""

from __future__ import annotations

import threading
from collections.abc import Sequence
from datetime import UTC, datetime
from typing import Any

import pytest
from tests.support.factories import numbered

from ferry.core.events import (
    FileExtracted,
    FileFailed,
    FileManifest,
    FileTransformed,
)
from ferry.core.runtime.processing import process_batch
from ferry.core.runtime.stage import Record, RunStats, Stage
from ferry.core.wire.avro import EventCodec
from ferry.datasets.spec import DatasetSpec
from ferry.errors import ConfigError, PermanentError, TransientError
from ferry.settings import Settings, get_settings
from ferry.stages.transform.counts import FileCounts
from ferry.stages.transform.handlers import TransformDeps, transform_batch
from ferry.stages.transform.job import FileResult

MAX = 3
T0 = datetime(2024, 1, 2, 3, 4, 5, tzinfo=UTC)


def settings() -> Settings:
    base = get_settings()
    return base.model_copy(
        update={
            "retry": base.retry.model_copy(
                update={"max_attempts": MAX, "initial_backoff_s": 0.001, "max_backoff_s": 0.002}
            ),
            "kafka": base.kafka.model_copy(update={"topic_prefix": "unit"}),
        }
    )


def manifest(n: int) -> FileManifest:
    return numbered("flights", n, f"f{n}.csv", size_bytes=10 + n)


EV = [FileExtracted(manifest(n)) for n in range(4)]


def done(ev: FileExtracted) -> list[FileTransformed]:
    return [FileTransformed(ev.manifest.advance(rows_out=1, updated_at=ev.manifest.updated_at))]


class Handler:
    """Records the file_ids of every call; ``script(call_no, events)`` gives the results."""

    def __init__(self, script: Any) -> None:
        self.script = script
        self.calls: list[list[str]] = []

    def __call__(self, events: Sequence[FileExtracted], deps: Any) -> Any:
        self.calls.append([e.file_id for e in events])
        return self.script(len(self.calls), events)


def records(codec: EventCodec, values: Sequence[bytes]) -> list[Record]:
    return [Record("unit.extracted", 0, 10 + i, f"k{i}".encode(), v) for i, v in enumerate(values)]


def run(
    codec: EventCodec,
    handler: Handler,
    values: Sequence[bytes],
    stats: RunStats | None = None,
    stop: threading.Event | None = None,
) -> Any:
    stage = Stage("transform", {FileExtracted: handler}, batch_size=10)
    return process_batch(
        records(codec, values), stage, None, codec, settings(), stop or threading.Event(), stats
    )


def decoded(codec: EventCodec, out: Any) -> list[tuple[str, bytes, Any]]:
    return [(r.topic, r.key, codec.decode(r.value)) for r in out]


def test_all_succeed_in_one_call(codec: EventCodec) -> None:
    h = Handler(lambda n, evs: [done(e) for e in evs])
    stats = RunStats()
    out = decoded(codec, run(codec, h, [codec.encode(e) for e in EV[:3]], stats))
    assert h.calls == [[e.file_id for e in EV[:3]]]
    assert [(t, k, type(ev), ev.file_id) for t, k, ev in out] == [
        ("unit.transformed", e.file_id.encode(), FileTransformed, e.file_id) for e in EV[:3]
    ]
    assert stats.handler_calls == 1


def test_per_file_transient_error_retries_only_that_file(codec: EventCodec) -> None:
    a, b, c = EV[:3]

    def script(n: int, evs: Sequence[FileExtracted]) -> list[Any]:
        return [TransientError("reset") if e == b and n < 3 else done(e) for e in evs]

    h = Handler(script)
    stats = RunStats()
    out = decoded(codec, run(codec, h, [codec.encode(e) for e in (a, b, c)], stats))
    assert h.calls == [[a.file_id, b.file_id, c.file_id], [b.file_id], [b.file_id]]
    assert [(t, ev.file_id) for t, _, ev in out] == [
        ("unit.transformed", a.file_id),
        ("unit.transformed", b.file_id),
        ("unit.transformed", c.file_id),
    ]
    assert stats.handler_calls == 3


def test_per_file_transient_error_past_the_ceiling_is_quarantined(codec: EventCodec) -> None:
    a, b = EV[:2]

    class Reset(TransientError):
        reason = "connection_reset"

    h = Handler(lambda n, evs: [Reset(f"reset #{n}") if e == b else done(e) for e in evs])
    out = decoded(codec, run(codec, h, [codec.encode(e) for e in (a, b)]))
    assert h.calls == [[a.file_id, b.file_id], [b.file_id], [b.file_id]]
    (t0, _, ok), (t1, k1, failed) = out
    assert (t0, ok.file_id) == ("unit.transformed", a.file_id)
    assert isinstance(failed, FileFailed)
    assert (t1, k1, failed.reason, failed.attempt, failed.manifest) == (
        "unit.failed",
        b.file_id.encode(),
        "connection_reset",
        MAX,
        b.manifest,
    )
    assert (failed.source_topic, failed.source_partition, failed.source_offset) == (
        "unit.extracted",
        0,
        11,
    )
    assert "reset #3" in failed.error  # the last attempt's error, not the first


def test_permanent_error_is_quarantined_at_once_with_its_reason(codec: EventCodec) -> None:
    a, b, c = EV[:3]

    def script(n: int, evs: Sequence[FileExtracted]) -> list[Any]:
        out: list[Any] = []
        for e in evs:
            if e == a:
                out.append(PermanentError("header column 1 is 'yr'", reason="header_mismatch"))
            elif e == c and n == 1:
                out.append(TransientError("reset"))
            else:
                out.append(done(e))
        return out

    h = Handler(script)
    out = decoded(codec, run(codec, h, [codec.encode(e) for e in (a, b, c)]))
    assert h.calls == [[a.file_id, b.file_id, c.file_id], [c.file_id]]
    (ta, _, fa), (tb, _, _), (tc, _, _) = out
    assert (ta, fa.reason, fa.attempt, fa.manifest) == (
        "unit.failed",
        "header_mismatch",
        1,
        a.manifest,
    )
    assert "header column 1 is 'yr'" in fa.error
    assert (tb, tc) == ("unit.transformed", "unit.transformed")


def test_undecodable_record_is_quarantined_raw_and_the_rest_proceeds(codec: EventCodec) -> None:
    a, b = EV[:2]
    h = Handler(lambda n, evs: [done(e) for e in evs])
    out = run(codec, h, [codec.encode(a), b"not-avro", codec.encode(b)])
    assert h.calls == [[a.file_id, b.file_id]]
    got = decoded(codec, out)
    bad = [ev for t, _, ev in got if t == "unit.failed"]
    assert [(t, ev.file_id) for t, _, ev in got if t == "unit.transformed"] == [
        ("unit.transformed", a.file_id),
        ("unit.transformed", b.file_id),
    ]
    [failed] = bad
    [failed_key] = [k for t, k, _ in got if t == "unit.failed"]
    assert failed_key == b"unit.extracted-0-11"  # its coordinates, not its key (case C24)
    assert (failed.reason, failed.attempt, failed.manifest) == ("undecodable", 1, None)
    assert (failed.raw_key, failed.raw_value) == (b"k1", b"not-avro")
    assert (failed.source_topic, failed.source_partition, failed.source_offset) == (
        "unit.extracted",
        0,
        11,
    )


def test_event_type_without_handler_is_quarantined(codec: EventCodec) -> None:
    a = EV[0]
    other = FileTransformed(EV[1].manifest)
    h = Handler(lambda n, evs: [done(e) for e in evs])
    got = decoded(codec, run(codec, h, [codec.encode(other), codec.encode(a)]))
    assert h.calls == [[a.file_id]]
    assert [(t, getattr(ev, "reason", None)) for t, _, ev in got] == [
        ("unit.failed", "unexpected_event"),
        ("unit.transformed", None),
    ]
    assert got[0][2].manifest == other.manifest


def test_whole_batch_transient_error_is_retried_then_each_file_quarantined(
    codec: EventCodec,
) -> None:
    def script(n: int, evs: Sequence[FileExtracted]) -> list[Any]:
        raise TransientError(f"Spark master lost #{n}")

    h = Handler(script)
    stats = RunStats()
    got = decoded(codec, run(codec, h, [codec.encode(e) for e in EV[:3]], stats))
    assert h.calls == [[e.file_id for e in EV[:3]]] * MAX
    assert stats.handler_calls == MAX
    assert [(t, k, ev.reason, ev.attempt, ev.manifest) for t, k, ev in got] == [
        ("unit.failed", e.file_id.encode(), "transient", MAX, e.manifest) for e in EV[:3]
    ]
    assert all(f"Spark master lost #{MAX}" in ev.error for _, _, ev in got)


def test_whole_batch_error_after_a_per_file_one_reports_the_last(codec: EventCodec) -> None:
    a, b = EV[:2]

    def script(n: int, evs: Sequence[FileExtracted]) -> list[Any]:
        if n == 1:
            return [done(a), TransientError("per-file reset")]
        raise TransientError(f"batch failed #{n}")

    h = Handler(script)
    (ta, _, _), (tb, _, fb) = decoded(codec, run(codec, h, [codec.encode(a), codec.encode(b)]))
    assert h.calls == [[a.file_id, b.file_id], [b.file_id], [b.file_id]]
    assert ta == "unit.transformed"
    assert (tb, fb.attempt) == ("unit.failed", MAX)
    assert "batch failed #3" in fb.error


def test_whole_batch_transient_then_success(codec: EventCodec) -> None:
    def script(n: int, evs: Sequence[FileExtracted]) -> list[Any]:
        if n == 1:
            raise TransientError("master failing over")
        return [done(e) for e in evs]

    h = Handler(script)
    got = decoded(codec, run(codec, h, [codec.encode(e) for e in EV[:2]]))
    assert h.calls == [[e.file_id for e in EV[:2]]] * 2
    assert [t for t, _, _ in got] == ["unit.transformed"] * 2


def test_whole_batch_permanent_error_quarantines_only_pending_files(codec: EventCodec) -> None:
    a, b = EV[:2]

    def script(n: int, evs: Sequence[FileExtracted]) -> list[Any]:
        if n == 1:
            return [done(a), TransientError("reset")]
        raise PermanentError("bad spec", reason="config_mismatch")

    h = Handler(script)
    got = decoded(codec, run(codec, h, [codec.encode(a), codec.encode(b)]))
    assert [(t, getattr(ev, "reason", None), getattr(ev, "attempt", None)) for t, _, ev in got] == [
        ("unit.transformed", None, None),
        ("unit.failed", "config_mismatch", 2),
    ]


def test_wrong_number_of_results_is_a_handler_error(codec: EventCodec) -> None:
    h = Handler(lambda n, evs: [done(evs[0])])
    got = decoded(codec, run(codec, h, [codec.encode(e) for e in EV[:2]]))
    assert h.calls == [[EV[0].file_id, EV[1].file_id]]
    assert [(t, ev.reason) for t, _, ev in got] == [("unit.failed", "handler_error")] * 2


def test_handler_bug_quarantines_the_batch(codec: EventCodec) -> None:
    h = Handler(lambda n, evs: 1 / 0)
    got = decoded(codec, run(codec, h, [codec.encode(e) for e in EV[:2]]))
    assert len(h.calls) == 1
    assert [(t, ev.reason) for t, _, ev in got] == [("unit.failed", "handler_error")] * 2
    assert all("ZeroDivisionError" in ev.error for _, _, ev in got)


def test_non_ferry_exception_as_a_result_is_a_handler_error(codec: EventCodec) -> None:
    a, b = EV[:2]
    h = Handler(lambda n, evs: [done(a), ValueError("oops")])
    got = decoded(codec, run(codec, h, [codec.encode(a), codec.encode(b)]))
    assert [(t, getattr(ev, "reason", None)) for t, _, ev in got] == [
        ("unit.transformed", None),
        ("unit.failed", "handler_error"),
    ]
    assert "ValueError: oops" in got[1][2].error


def test_config_error_stops_the_runner(codec: EventCodec) -> None:
    def script(n: int, evs: Sequence[FileExtracted]) -> list[Any]:
        raise ConfigError("no such dataset dir")

    with pytest.raises(ConfigError):
        run(codec, Handler(script), [codec.encode(EV[0])])


def test_stop_before_the_batch_abandons_it(codec: EventCodec) -> None:
    stop = threading.Event()
    stop.set()
    h = Handler(lambda n, evs: [done(e) for e in evs])
    assert run(codec, h, [codec.encode(EV[0])], stop=stop) is None
    assert h.calls == []


def test_duplicate_records_of_one_file_each_get_an_answer(codec: EventCodec) -> None:
    a = EV[0]
    h = Handler(lambda n, evs: [done(e) for e in evs])
    got = decoded(codec, run(codec, h, [codec.encode(a), codec.encode(a)]))
    assert h.calls == [[a.file_id, a.file_id]]
    assert [(t, ev.file_id) for t, _, ev in got] == [("unit.transformed", a.file_id)] * 2


def test_transform_batch_isolates_a_bad_file_retries_it_alone_then_quarantines_it(
    codec: EventCodec, specs: dict[str, DatasetSpec]
) -> None:
    """A CSV Spark cannot read, dropped with three good ones: the good files are transformed in
    the first attempt, only the bad one is retried (alone), then quarantined as
    ``spark_job_failed`` with its NAS path; before, all four were quarantined as ``transient``."""
    evs = [
        FileExtracted(
            manifest(n).advance(
                uris={"landing": f"hdfs://nn-b:18020/ferry/landing/flights/f{n}.csv"},
                updated_at=T0,
            )
        )
        for n in range(4)
    ]
    a, bad, c, d = evs
    jobs: list[list[str]] = []

    def run_batch(
        spark: Any, spec: DatasetSpec, files: dict[str, str], **roots: str
    ) -> dict[str, FileResult]:
        jobs.append(list(files.values()))
        if bad.file_id in files.values():
            raise RuntimeError(
                "An error occurred while calling o58.csv.\n: org.apache.spark.SparkException: "
                "Job aborted: java.lang.ArrayIndexOutOfBoundsException: 20481\n\tat ..."
            )
        return {
            fid: FileResult(
                fid, uri, "transformed", FileCounts(5, 5, 0), staged_path=f"/ferry/staging/{fid}"
            )
            for uri, fid in files.items()
        }

    resets: list[int] = []
    deps = TransformDeps(
        specs, lambda: "SPARK", lambda: resets.append(1), run_batch, "hdfs://nn-b:18020/s", "r"
    )
    stage = Stage("transform", {FileExtracted: transform_batch}, batch_size=10)
    stats = RunStats()
    out = process_batch(
        records(codec, [codec.encode(e) for e in evs]),
        stage,
        deps,
        codec,
        settings(),
        threading.Event(),
        stats,
    )
    got = decoded(codec, out)
    ids = [e.file_id for e in evs]
    assert jobs == [ids, ids[:2], ids[2:], [a.file_id], [bad.file_id]] + [[bad.file_id]] * (MAX - 1)
    assert (stats.handler_calls, len(resets)) == (MAX, 2 + MAX)
    assert [(t, ev.file_id) for t, _, ev in got] == [
        ("unit.transformed", a.file_id),
        ("unit.failed", bad.file_id),
        ("unit.transformed", c.file_id),
        ("unit.transformed", d.file_id),
    ]
    succeeded = [fid for job in jobs if bad.file_id not in job for fid in job]
    assert sorted(succeeded) == sorted([a.file_id, c.file_id, d.file_id])  # each produced once
    failed = got[1][2]
    assert (failed.reason, failed.attempt, failed.manifest) == (
        "spark_job_failed",
        MAX,
        bad.manifest,
    )
    assert "SparkJobFailed: flights/f1.csv (" in failed.error
    assert "ArrayIndexOutOfBoundsException: 20481" in failed.error
