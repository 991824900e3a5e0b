"""extract: a file that changes after it was taken (issue 33, ``ferry.stages.extract.afterwards``)
is reported at once (``changed_after_extract``, both sizes) and its new bytes flow as a new
version: only the appended bytes behind the header when the taken part is intact and ended with
a line break, else the whole new content; the watch survives a restart and ends in time."""

from __future__ import annotations

import io
import json
import os
from pathlib import Path

import pytest
from tests.support.extract_helpers import DATA, HEADER, drop, service, with_
from tests.support.fakes import FakeProducer
from tests.support.hdfs_fake import FakeHdfs

from ferry.core.events import FileExtracted, FileFailed
from ferry.core.identity import derive_file_id
from ferry.core.wire.avro import EventCodec
from ferry.datasets.fields import FinishedPolicy
from ferry.datasets.spec import DatasetSpec
from ferry.stages.extract.afterwards import CHANGED_AFTER_EXTRACT, ArchiveWatch
from ferry.stages.extract.handlers import Spliced
from ferry.stages.extract.service import ExtractService

MORE = b"2013,1,1,542\n2013,1,1,544\n"


def _sha(data: bytes) -> str:
    import hashlib

    return hashlib.sha256(data).hexdigest()


@pytest.fixture
def fast(flights: DatasetSpec) -> DatasetSpec:
    """flights, finished after one unchanged scan 10 ms later."""
    return with_(flights, finished=FinishedPolicy(stable_polls=1, poll_interval_s=0.01))


def watched_service(
    tmp_path: Path, spec: DatasetSpec, codec: EventCodec, watch_s: float = 3600
) -> tuple[ExtractService, FakeHdfs, FakeProducer]:
    producer = FakeProducer()
    svc, hdfs = service(tmp_path, spec, producer, codec)
    svc.afterwards = ArchiveWatch(
        svc.settings.paths.nas_dir, {spec.name: spec}, codec, watch_s=watch_s, check_s=0.0
    )
    return svc, hdfs, producer


def one_taken(tmp_path: Path, spec: DatasetSpec, codec: EventCodec) -> Path:
    """A watched service that took ``flights_1.csv`` (DATA) and moved it; returns the NAS."""
    svc, _hdfs, _producer = watched_service(tmp_path, spec, codec)
    drop(svc.settings.paths.nas_dir, "flights_1.csv", DATA)
    settle(svc)
    return svc.settings.paths.nas_dir


def events(svc: ExtractService, producer: FakeProducer) -> list[object]:
    return [svc.codec.decode(v) for _t, _k, v in producer.acked]


def settle(svc: ExtractService, until: int = 50) -> None:
    """run_once until a scan handled something (at most ``until`` scans, 20 ms apart)."""
    import time

    for _ in range(until):
        if svc.run_once():
            return
        time.sleep(0.02)  # between polls of a bounded loop (until × 20 ms), not a hope
    raise AssertionError("nothing was handled")


def test_appended_rows_are_reported_and_flow_behind_the_header(
    tmp_path: Path, fast: DatasetSpec, codec: EventCodec
) -> None:
    svc, hdfs, producer = watched_service(tmp_path, fast, codec)
    nas = svc.settings.paths.nas_dir
    drop(nas, "flights_1.csv", DATA)
    settle(svc)
    [first] = events(svc, producer)
    assert isinstance(first, FileExtracted)
    archived = nas / ".ferry" / "archive" / "flights" / "flights_1.csv"
    with archived.open("ab") as f:  # a writer that kept its descriptor goes on
        f.write(MORE)
    svc.run_once()
    [_, report] = events(svc, producer)
    assert isinstance(report, FileFailed)
    assert (report.stage, report.reason, report.file_id) == (
        "extract",
        CHANGED_AFTER_EXTRACT,
        first.file_id,
    )
    assert f"taken as {len(DATA)} bytes" in report.error
    assert f"is now {len(DATA) + len(MORE)} bytes" in report.error
    assert svc.stats.changed == 1
    settle(svc)
    [_, _, second] = events(svc, producer)
    assert isinstance(second, FileExtracted)
    m = second.manifest
    assert (m.file_id, m.source_path, m.size_bytes, m.sha256) == (
        derive_file_id("flights", _sha(HEADER + MORE)),
        "flights/flights_1.csv",
        len(HEADER + MORE),
        _sha(HEADER + MORE),
    )
    assert m.uris["landing"].endswith(f"/flights/{m.file_id}/flights_1.csv")
    assert sorted(hdfs.files.values()) == sorted([DATA, HEADER + MORE])
    assert archived.read_bytes() == DATA + MORE  # the copy stays where it is
    # and it is watched from its new extent: a second append, a second report and version
    with archived.open("ab") as f:
        f.write(b"2013,1,1,554\n")
    settle(svc)
    kinds = [(type(e).__name__, e.file_id) for e in events(svc, producer)[3:]]  # type: ignore[attr-defined]
    assert kinds == [
        ("FileFailed", m.file_id),
        ("FileExtracted", derive_file_id("flights", _sha(HEADER + b"2013,1,1,554\n"))),
    ]


def test_a_rewritten_copy_flows_whole(tmp_path: Path, fast: DatasetSpec, codec: EventCodec) -> None:
    svc, hdfs, producer = watched_service(tmp_path, fast, codec)
    nas = svc.settings.paths.nas_dir
    drop(nas, "flights_1.csv", DATA)
    settle(svc)
    archived = nas / ".ferry" / "archive" / "flights" / "flights_1.csv"
    rewritten = DATA.replace(b"517", b"518") + MORE  # its first bytes are not those taken
    archived.write_bytes(rewritten)
    svc.run_once()
    settle(svc)
    last = events(svc, producer)[-1]
    assert isinstance(last, FileExtracted)
    assert last.manifest.sha256 == _sha(rewritten)
    assert sorted(hdfs.files.values()) == sorted([DATA, rewritten])


def test_a_copy_taken_inside_a_record_flows_whole(
    tmp_path: Path, fast: DatasetSpec, codec: EventCodec
) -> None:
    """Taken as ``…,51`` (no line break at the end): the record was cut; all of it flows."""
    svc, _hdfs, producer = watched_service(tmp_path, fast, codec)
    nas = svc.settings.paths.nas_dir
    cut = DATA[:-3]
    drop(nas, "flights_1.csv", cut)
    settle(svc)
    archived = nas / ".ferry" / "archive" / "flights" / "flights_1.csv"
    with archived.open("ab") as f:
        f.write(DATA[-3:] + MORE)
    settle(svc)
    last = events(svc, producer)[-1]
    assert isinstance(last, FileExtracted)
    assert last.manifest.sha256 == _sha(DATA + MORE)


def test_an_empty_file_written_after_it_was_moved_flows(
    tmp_path: Path, fast: DatasetSpec, codec: EventCodec
) -> None:
    svc, _hdfs, producer = watched_service(tmp_path, fast, codec)
    nas = svc.settings.paths.nas_dir
    drop(nas, "flights_1.csv", b"")
    settle(svc)
    [empty] = events(svc, producer)
    assert isinstance(empty, FileFailed) and empty.reason == "empty_zero_bytes"
    moved = nas / ".ferry" / "empty" / "flights" / "flights_1.csv"
    moved.write_bytes(DATA)
    settle(svc)
    kinds = [(type(e).__name__, getattr(e, "reason", None)) for e in events(svc, producer)[1:]]
    assert kinds == [("FileFailed", CHANGED_AFTER_EXTRACT), ("FileExtracted", None)]
    assert events(svc, producer)[-1].manifest.sha256 == _sha(DATA)  # type: ignore[attr-defined]


def test_the_watch_survives_a_restart_and_ends_in_time(
    tmp_path: Path, fast: DatasetSpec, codec: EventCodec
) -> None:
    svc, _hdfs, producer = watched_service(tmp_path, fast, codec)
    nas = svc.settings.paths.nas_dir
    drop(nas, "flights_1.csv", DATA)
    drop(nas, "flights_2.csv", DATA + MORE)
    settle(svc)
    records = sorted((nas / ".ferry" / "watch").glob("*.json"))
    assert len(records) == 2
    archived = nas / ".ferry" / "archive" / "flights" / "flights_1.csv"
    with archived.open("ab") as f:  # while extract is down
        f.write(MORE)
    again = ArchiveWatch(nas, {fast.name: fast}, codec, watch_s=3600, check_s=0.0)
    assert again.load() == 2
    reports, ready = again.check(0.0)
    assert [(r.reason, r.manifest.source_path) for r in reports] == [  # type: ignore[union-attr]
        (CHANGED_AFTER_EXTRACT, "flights/flights_1.csv")
    ]
    assert ready == []  # first sight of the new size: not finished yet
    # a record past its watch is removed at load, and a watch that ended is dropped at a check
    expired = ArchiveWatch(nas, {fast.name: fast}, codec, watch_s=3600, check_s=0.0)
    for rec in records:
        body = rec.read_text(encoding="ascii")
        rec.write_text(body.replace('"until_s": ', '"until_s": 1, "_": '), encoding="ascii")
    assert expired.load() == 0
    assert list((nas / ".ferry" / "watch").glob("*.json")) == []
    short = ArchiveWatch(nas, {fast.name: fast}, codec, watch_s=1e-9, check_s=0.0)
    drop(nas, "flights_3.csv", DATA + MORE + MORE)
    svc.afterwards = short
    settle(svc)
    assert short.check(1.0) == ([], [])
    assert short.entries == {}


def test_other_instances_records_are_left_alone(
    tmp_path: Path, fast: DatasetSpec, codec: EventCodec
) -> None:
    svc, _hdfs, _producer = watched_service(tmp_path, fast, codec)
    nas = svc.settings.paths.nas_dir
    drop(nas, "flights_1.csv", DATA)
    settle(svc)
    weather_only = ArchiveWatch(nas, {}, codec, watch_s=3600, check_s=0.0)
    assert weather_only.load() == 0
    assert len(list((nas / ".ferry" / "watch").glob("*.json"))) == 1


@pytest.mark.parametrize("size", [1, 2, 3, 5, 1 << 10])
def test_a_spliced_stream_reads_the_head_then_the_tail(size: int) -> None:
    data = b"head\n0123456789"
    s = Spliced(io.BytesIO(data), 5, 10)  # type: ignore[arg-type]
    for _ in range(2):  # seek(0) starts over
        s.seek(0)
        out = b""
        while chunk := s.read(size):
            out += chunk
        assert out == b"head\n56789"
    s.seek(0)
    assert s.read() == b"head\n56789"
    no_head = Spliced(io.BytesIO(data), 0, 10)  # type: ignore[arg-type]
    no_head.seek(0)
    assert no_head.read(3) + no_head.read() == b"56789"
    with pytest.raises(ValueError):
        s.seek(3)


def test_a_watch_of_a_removed_copy_ends(
    tmp_path: Path, fast: DatasetSpec, codec: EventCodec
) -> None:
    svc, _hdfs, _producer = watched_service(tmp_path, fast, codec)
    nas = svc.settings.paths.nas_dir
    drop(nas, "flights_1.csv", DATA)
    settle(svc)
    assert svc.afterwards is not None
    os.unlink(nas / ".ferry" / "archive" / "flights" / "flights_1.csv")
    assert svc.afterwards.check(0.0) == ([], [])
    assert svc.afterwards.entries == {}
    assert list((nas / ".ferry" / "watch").glob("*.json")) == []


def test_checks_thin_out_as_a_watched_file_ages(tmp_path: Path, codec: EventCodec) -> None:
    watch = ArchiveWatch(tmp_path, {}, codec, watch_s=86400, check_s=10.0)
    assert [watch.next_check_s(age) for age in (0, 80, 800, 8 * 3600, 20 * 3600)] == [
        10.0,
        10.0,
        100.0,
        3600.0,
        3600.0,
    ]


def test_an_old_watched_file_is_checked_an_eighth_of_its_age_later(
    tmp_path: Path, fast: DatasetSpec, codec: EventCodec
) -> None:
    nas = one_taken(tmp_path, fast, codec)
    watch = ArchiveWatch(nas, {fast.name: fast}, codec, watch_s=86400, check_s=10.0)
    assert watch.load() == 1
    [w] = watch.entries.values()
    w.taken_s -= 3600  # taken an hour ago: the next check 450 s after this one
    assert watch.check(1000.0) == ([], [])
    with w.path.open("ab") as f:
        f.write(MORE)
    assert watch.check(1000.0 + 449) == ([], [])  # not looked at yet
    reports, _ = watch.check(1000.0 + 451)
    assert [(r.reason, r.file_id) for r in reports] == [(CHANGED_AFTER_EXTRACT, w.file_id)]


def test_a_record_written_before_taken_s_was_kept_loads(
    tmp_path: Path, fast: DatasetSpec, codec: EventCodec
) -> None:
    """Records of an earlier extract have no taken_s: the watch's start is until_s − watch."""
    nas = one_taken(tmp_path, fast, codec)
    [rec] = (nas / ".ferry" / "watch").glob("*.json")
    body = json.loads(rec.read_text(encoding="ascii"))
    del body["taken_s"]
    rec.write_text(json.dumps(body), encoding="ascii")
    again = ArchiveWatch(nas, {fast.name: fast}, codec, watch_s=3600, check_s=0.0)
    assert again.load() == 1
    [w] = again.entries.values()
    assert w.taken_s == body["until_s"] - 3600
    assert again.manifest(w).source_path == "flights/flights_1.csv"
