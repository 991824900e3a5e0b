"""extract: the NAS scanner, ``extract_file`` on FakeHdfs, ExtractService with a fake producer."""

from __future__ import annotations

import os
import threading
import unicodedata
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest

from ferry.clusters.hdfs import is_temp_path, temp_path_for
from ferry.core.avro import EventCodec, default_codec
from ferry.core.config import Settings, get_settings
from ferry.core.errors import ConfigError, HdfsPathExists, HdfsUnavailable, TransientError
from ferry.core.events import FileExtracted, FileFailed, derive_file_id, sha256_file
from ferry.datasets import DatasetSpec, FinishedPolicy
from ferry.stages.extract.handlers import ExtractDeps, SourceChanged, extract_file
from ferry.stages.extract.scanner import Candidate, NasScanner
from ferry.stages.extract.service import ExtractService, free_name
from ferry.testing.hdfs_fake import FakeHdfs

HEADER = b"year,month,day,dep_time\n"
DATA = HEADER + b"2013,1,1,517\n2013,1,1,533\n"
LANDING = "/ferry/landing"
FS_B = "hdfs://nn-b:18020"


@pytest.fixture
def flights(specs: dict[str, DatasetSpec]) -> DatasetSpec:
    """The repo's flights definition: stable policy, 2 polls, 2.0 s apart, ``flights_*.csv``."""
    spec = specs["flights"]
    assert (spec.finished.policy, spec.finished.stable_polls, spec.finished.poll_interval_s) == (
        "stable",
        2,
        2.0,
    )
    return spec


def with_(spec: DatasetSpec, **update: Any) -> DatasetSpec:
    return spec.model_copy(update=update)


def drop(
    nas: Path, name: str, data: bytes, subdir: str = "flights", mtime_ns: int | None = None
) -> Path:
    path = nas / subdir / name
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(data)
    if mtime_ns is not None:
        os.utime(path, ns=(mtime_ns, mtime_ns))
    return path


def names(cands: list[Candidate]) -> list[str]:
    return [c.relative for c in cands]


# -- scanner: stable policy (C09) -----------------------------------------------------------


def test_stable_file_is_taken_after_stable_polls_unchanged_scans(
    tmp_path: Path, flights: DatasetSpec
) -> None:
    path = drop(tmp_path, "flights_1.csv", DATA)
    scanner = NasScanner(tmp_path, {"flights": flights})
    assert scanner.scan(0.0) == []  # first sight
    assert scanner.scan(2.0) == []  # unchanged once
    [cand] = scanner.scan(4.0)  # unchanged twice, 4 s = 2 polls x 2.0 s
    st = path.stat()
    assert cand == Candidate(path, flights, "flights/flights_1.csv", len(DATA), st.st_mtime_ns)


def test_stable_needs_the_elapsed_time_not_only_the_poll_count(
    tmp_path: Path, flights: DatasetSpec
) -> None:
    drop(tmp_path, "flights_1.csv", DATA)
    scanner = NasScanner(tmp_path, {"flights": flights})
    for t in (0.0, 0.1, 0.2, 0.3, 3.999):
        assert scanner.scan(t) == [], t
    assert names(scanner.scan(4.0)) == ["flights/flights_1.csv"]


def test_stable_needs_the_poll_count_not_only_the_elapsed_time(
    tmp_path: Path, flights: DatasetSpec
) -> None:
    drop(tmp_path, "flights_1.csv", DATA)
    scanner = NasScanner(tmp_path, {"flights": flights})
    assert scanner.scan(0.0) == []
    assert scanner.scan(100.0) == []  # only one unchanged scan so far
    assert names(scanner.scan(100.5)) == ["flights/flights_1.csv"]


def test_growing_file_is_never_taken_until_it_stops(tmp_path: Path, flights: DatasetSpec) -> None:
    """C09: a slow copy grows between every scan; it is taken only once stable, at full size."""
    path = drop(tmp_path, "flights_big.csv", HEADER)
    scanner = NasScanner(tmp_path, {"flights": flights})
    t = 0.0
    for i in range(10):
        assert scanner.scan(t) == [], i
        with path.open("ab") as fh:
            fh.write(b"2013,1,1,%d\n" % i)
        t += 2.0
    final_size = path.stat().st_size
    assert scanner.scan(t) == []  # first sight of the final size
    assert scanner.scan(t + 2.0) == []
    [cand] = scanner.scan(t + 4.0)
    assert (
        cand.size == final_size == len(HEADER) + sum(len(b"2013,1,1,%d\n" % i) for i in range(10))
    )


def test_mtime_change_at_same_size_restarts_the_wait(tmp_path: Path, flights: DatasetSpec) -> None:
    path = drop(tmp_path, "flights_1.csv", DATA, mtime_ns=1_000_000_000)
    scanner = NasScanner(tmp_path, {"flights": flights})
    assert scanner.scan(0.0) == []
    assert scanner.scan(2.0) == []
    path.write_bytes(DATA.replace(b"517", b"518"))  # rewritten in place, same size
    os.utime(path, ns=(2_000_000_000, 2_000_000_000))
    assert scanner.scan(4.0) == []
    assert scanner.scan(6.0) == []
    [cand] = scanner.scan(8.0)
    assert cand.mtime_ns == 2_000_000_000


def test_hidden_and_non_matching_names_are_ignored(tmp_path: Path, flights: DatasetSpec) -> None:
    every = with_(flights, nas=flights.nas.model_copy(update={"pattern": "*"}))
    for name in (".flights_1.csv.part", ".flights_2.csv"):
        drop(tmp_path, name, DATA)
    drop(tmp_path, "visible.csv", DATA)
    (tmp_path / "flights" / "subdir.csv").mkdir()
    scanner = NasScanner(tmp_path, {"flights": every})
    for t in (0.0, 2.0):
        assert scanner.scan(t) == []
    assert names(scanner.scan(4.0)) == ["flights/visible.csv"]
    # with the real pattern, the visible non-matching name is ignored too
    strict = NasScanner(tmp_path, {"flights": flights})
    assert [strict.scan(t) for t in (0.0, 2.0, 4.0)] == [[], [], []]


def test_missing_dataset_directory_is_skipped(
    tmp_path: Path, flights: DatasetSpec, specs: dict[str, DatasetSpec]
) -> None:
    drop(tmp_path, "flights_1.csv", DATA)  # no weather/ directory at all
    scanner = NasScanner(tmp_path, dict(specs))
    assert [names(scanner.scan(t)) for t in (0.0, 2.0, 4.0)] == [[], [], ["flights/flights_1.csv"]]


def test_forget_makes_the_scanner_wait_again(tmp_path: Path, flights: DatasetSpec) -> None:
    path = drop(tmp_path, "flights_1.csv", DATA)
    scanner = NasScanner(tmp_path, {"flights": flights})
    assert [len(scanner.scan(t)) for t in (0.0, 2.0, 4.0)] == [0, 0, 1]
    assert len(scanner.scan(5.0)) == 1  # not forgotten: still finished
    scanner.forget(path)
    assert [len(scanner.scan(t)) for t in (6.0, 8.0, 10.0)] == [0, 0, 1]


def test_done_file_is_not_taken_again_until_it_changes(
    tmp_path: Path, flights: DatasetSpec
) -> None:
    path = drop(tmp_path, "flights_1.csv", DATA)
    scanner = NasScanner(tmp_path, {"flights": flights})
    [cand] = [c for t in (0.0, 2.0, 4.0) for c in scanner.scan(t)]
    scanner.done(cand)
    assert [scanner.scan(t) for t in (6.0, 8.0, 10.0, 12.0)] == [[], [], [], []]
    with path.open("ab") as fh:
        fh.write(b"2013,1,2,600\n")
    assert [len(scanner.scan(t)) for t in (14.0, 16.0, 18.0)] == [0, 0, 1]


# -- scanner: marker policy -----------------------------------------------------------------


def test_marker_policy_takes_a_file_only_once_its_marker_exists(
    tmp_path: Path, flights: DatasetSpec
) -> None:
    spec = with_(flights, finished=FinishedPolicy(policy="marker", marker_suffix=".done"))
    path = drop(tmp_path, "flights_1.csv", DATA)
    scanner = NasScanner(tmp_path, {"flights": spec})
    assert [scanner.scan(t) for t in (0.0, 10.0, 20.0)] == [[], [], []]
    marker = drop(tmp_path, "flights_1.csv.done", b"")
    [cand] = scanner.scan(20.1)  # at once: no stability wait under the marker policy
    assert (cand.path, cand.marker, cand.relative, cand.size) == (
        path,
        marker,
        "flights/flights_1.csv",
        len(DATA),
    )


def test_marker_file_itself_is_never_a_candidate(tmp_path: Path, flights: DatasetSpec) -> None:
    spec = with_(
        flights,
        nas=flights.nas.model_copy(update={"pattern": "*"}),
        finished=FinishedPolicy(policy="marker", marker_suffix=".ok"),
    )
    drop(tmp_path, "a.csv", DATA)
    drop(tmp_path, "a.csv.ok", b"")
    drop(tmp_path, "b.csv.ok", b"")  # a marker without its file
    scanner = NasScanner(tmp_path, {"flights": spec})
    assert names(scanner.scan(0.0)) == ["flights/a.csv"]


# -- scanner: names (C07) -------------------------------------------------------------------

ODD = "flights_données été 100%=#x.csv"


def test_odd_names_are_kept_and_relative_is_nfc(tmp_path: Path, flights: DatasetSpec) -> None:
    nfd, nfc = unicodedata.normalize("NFD", ODD), unicodedata.normalize("NFC", ODD)
    assert nfd != nfc
    p_nfd = drop(tmp_path, nfd, DATA)
    p_nfc = drop(tmp_path, nfc, DATA + b"2013,1,1,600\n")
    scanner = NasScanner(tmp_path, {"flights": flights})
    cands = [c for t in (0.0, 2.0, 4.0) for c in scanner.scan(t)]
    assert sorted((c.path, c.relative, c.size) for c in cands) == sorted(
        [
            (p_nfd, f"flights/{nfc}", len(DATA)),
            (p_nfc, f"flights/{nfc}", len(DATA) + 13),
        ]
    )
    assert all(c.path.exists() for c in cands)  # the on-disk (NFD) name is kept for opening


def test_non_ascii_pattern_matches_an_nfd_name(tmp_path: Path, flights: DatasetSpec) -> None:
    spec = with_(flights, nas=flights.nas.model_copy(update={"pattern": "données_*.csv"}))
    drop(tmp_path, unicodedata.normalize("NFD", "données_1.csv"), DATA)
    scanner = NasScanner(tmp_path, {"flights": spec})
    assert [names(scanner.scan(t)) for t in (0.0, 2.0, 4.0)] == [[], [], ["flights/données_1.csv"]]


# -- extract_file -----------------------------------------------------------------------------


def candidate(
    tmp_path: Path, spec: DatasetSpec, name: str, data: bytes, mtime_ns: int | None = None
) -> Candidate:
    path = drop(tmp_path, name, data, mtime_ns=mtime_ns)
    st = path.stat()
    relative = unicodedata.normalize("NFC", f"{spec.nas.subdir}/{name}")
    return Candidate(path, spec, relative, st.st_size, st.st_mtime_ns)


def deps(hdfs: FakeHdfs) -> ExtractDeps:
    return ExtractDeps(hdfs, LANDING, FS_B, chunk_bytes=7)  # tiny chunks: many writes


def test_extract_lands_the_exact_bytes_at_the_landing_path(
    tmp_path: Path, flights: DatasetSpec
) -> None:
    hdfs = FakeHdfs("b")
    cand = candidate(
        tmp_path, flights, "flights_2013-01-01.csv", DATA, mtime_ns=1_700_000_000_123_000_000
    )
    [ev] = extract_file(cand, deps(hdfs))
    sha = sha256_file(cand.path)
    fid = derive_file_id("flights", sha)
    dest = f"{LANDING}/flights/{fid}/flights_2013-01-01.csv"
    assert isinstance(ev, FileExtracted)
    assert hdfs.files == {dest: DATA}
    m = ev.manifest
    assert (m.file_id, m.dataset, m.source_path, m.size_bytes, m.sha256) == (
        fid,
        "flights",
        "flights/flights_2013-01-01.csv",
        len(DATA),
        sha,
    )
    assert dict(m.uris) == {"landing": FS_B + dest}
    assert (m.rows_in, m.rows_out, m.attempt) == (None, None, 1)
    assert m.source_mtime == datetime(2023, 11, 14, 22, 13, 20, 123000, tzinfo=UTC)


def test_odd_nfd_name_lands_under_its_nfc_name(tmp_path: Path, flights: DatasetSpec) -> None:
    hdfs = FakeHdfs("b")
    cand = candidate(tmp_path, flights, unicodedata.normalize("NFD", ODD), DATA)
    [ev] = extract_file(cand, deps(hdfs))
    nfc = unicodedata.normalize("NFC", ODD)
    dest = f"{LANDING}/flights/{ev.file_id}/{nfc}"
    assert list(hdfs.files) == [dest]
    assert ev.manifest.uris["landing"] == FS_B + dest
    assert ev.manifest.source_path == f"flights/{nfc}"


def test_same_bytes_renamed_get_the_same_file_id(tmp_path: Path, flights: DatasetSpec) -> None:
    hdfs = FakeHdfs("b")
    [a] = extract_file(candidate(tmp_path, flights, "flights_a.csv", DATA), deps(hdfs))
    [b] = extract_file(candidate(tmp_path, flights, "flights_b.csv", DATA), deps(hdfs))
    [c] = extract_file(
        candidate(tmp_path, flights, "flights_c.csv", DATA + b"2013,1,1,1\n"), deps(hdfs)
    )
    assert a.file_id == b.file_id != c.file_id
    assert sorted(hdfs.files) == sorted(
        [
            f"{LANDING}/flights/{a.file_id}/flights_a.csv",
            f"{LANDING}/flights/{a.file_id}/flights_b.csv",
            f"{LANDING}/flights/{c.file_id}/flights_c.csv",
        ]
    )


@pytest.mark.parametrize(
    ("data", "reason"),
    [
        (b"", "empty_zero_bytes"),
        (b"  \n\r\n\t\n", "empty_blank"),
        (b"\xef\xbb\xbf\n", "empty_blank"),
        (HEADER, "empty_header_only"),
        (HEADER.replace(b"\n", b"\r\n") + b"\r\n\r\n", "empty_header_only"),
    ],
)
def test_empty_files_fail_with_reason_and_land_nothing(
    tmp_path: Path, flights: DatasetSpec, data: bytes, reason: str
) -> None:
    hdfs = FakeHdfs("b")
    cand = candidate(tmp_path, flights, "flights_e.csv", data)
    [ev] = extract_file(cand, deps(hdfs))
    assert isinstance(ev, FileFailed)
    assert (ev.stage, ev.reason, ev.attempt) == ("extract", reason, 1)
    assert ev.manifest is not None
    assert (ev.manifest.size_bytes, ev.manifest.source_path, dict(ev.manifest.uris)) == (
        len(data),
        "flights/flights_e.csv",
        {},
    )
    assert ev.manifest.file_id == derive_file_id("flights", sha256_file(cand.path))
    assert (hdfs.files, hdfs.calls) == ({}, [])


def test_one_data_row_is_not_empty(tmp_path: Path, flights: DatasetSpec) -> None:
    hdfs = FakeHdfs("b")
    [ev] = extract_file(
        candidate(tmp_path, flights, "flights_1.csv", HEADER + b"2013,1,1,1"), deps(hdfs)
    )
    assert isinstance(ev, FileExtracted)


def test_upload_failing_mid_stream_leaves_nothing(tmp_path: Path, flights: DatasetSpec) -> None:
    """C02: the DataNode fails after the temp file was created and 10 bytes written."""
    hdfs = FakeHdfs("b")
    hdfs.fail("create", HdfsUnavailable("no DataNode can take the block"), after_bytes=10)
    cand = candidate(tmp_path, flights, "flights_1.csv", DATA)
    with pytest.raises(HdfsUnavailable, match="no DataNode"):
        extract_file(cand, deps(hdfs))
    assert hdfs.files == {}
    created = [p for op, p in hdfs.calls if op == "create"]
    deleted = [p for op, p in hdfs.calls if op == "delete"]
    assert len(created) == 1 and is_temp_path(created[0])
    assert deleted == created  # only what this attempt created is removed
    # the next attempt lands the file normally
    [ev] = extract_file(cand, deps(hdfs))
    assert hdfs.files == {f"{LANDING}/flights/{ev.file_id}/flights_1.csv": DATA}


def test_upload_refused_at_create_deletes_nothing(tmp_path: Path, flights: DatasetSpec) -> None:
    hdfs = FakeHdfs("b")
    hdfs.fail("create", HdfsUnavailable("connection reset"))
    with pytest.raises(HdfsUnavailable):
        extract_file(candidate(tmp_path, flights, "flights_1.csv", DATA), deps(hdfs))
    assert hdfs.files == {}
    assert [op for op, _ in hdfs.calls if op in ("create", "delete")] == ["create"]


def test_file_grown_since_the_scan_is_not_landed(tmp_path: Path, flights: DatasetSpec) -> None:
    """C09: the upstream resumed writing after the scanner judged the file finished."""
    hdfs = FakeHdfs("b")
    cand = candidate(tmp_path, flights, "flights_1.csv", DATA)
    with cand.path.open("ab") as fh:
        fh.write(b"2013,1,1,999\n")
    with pytest.raises(SourceChanged, match="flights/flights_1.csv"):
        extract_file(cand, deps(hdfs))
    assert (hdfs.files, hdfs.calls) == ({}, [])


# -- ExtractService ---------------------------------------------------------------------------


class FakeProducer:
    """The producer calls ``produce_and_wait`` makes: produce(...) then flush(timeout).

    ``fail_flushes`` flushes report a delivery error through ``on_delivery``; ``on_flush`` runs
    before each flush settles (to look at the NAS while the ack is outstanding)."""

    class Msg:
        def __init__(self, topic: str) -> None:
            self._topic = topic

        def topic(self) -> str:
            return self._topic

        def partition(self) -> int:
            return 0

    def __init__(self, fail_flushes: int = 0, on_flush: Any = None) -> None:
        self.fail_flushes = fail_flushes
        self.on_flush = on_flush
        self.queued: list[tuple[str, bytes, bytes, Any]] = []
        self.acked: list[tuple[str, bytes, bytes]] = []
        self.flushes = 0

    def produce(self, topic: str, value: bytes, key: bytes, on_delivery: Any) -> None:
        self.queued.append((topic, key, value, on_delivery))

    def poll(self, timeout: float = 0) -> int:
        return 0

    def flush(self, timeout: float = 0) -> int:
        self.flushes += 1
        if self.on_flush is not None:
            self.on_flush()
        queued, self.queued = self.queued, []
        for topic, key, value, cb in queued:
            if self.fail_flushes > 0:
                cb("broker down", self.Msg(topic))
            else:
                self.acked.append((topic, key, value))
                cb(None, self.Msg(topic))
        if self.fail_flushes > 0:
            self.fail_flushes -= 1
        return 0


@pytest.fixture(scope="module")
def codec() -> EventCodec:
    return default_codec(get_settings().paths.schemas_dir)


def svc_settings(nas: Path, after: str = "archive", workers: int = 4) -> Settings:
    base = get_settings()
    return base.model_copy(
        update={
            "retry": base.retry.model_copy(
                update={"max_attempts": 3, "initial_backoff_s": 0.001, "max_backoff_s": 0.002}
            ),
            "kafka": base.kafka.model_copy(update={"topic_prefix": "unit"}),
            "paths": base.paths.model_copy(update={"nas_dir": nas}),
            "extract": base.extract.model_copy(update={"after_extract": after, "workers": workers}),
        }
    )


def service(
    tmp_path: Path,
    spec: DatasetSpec,
    producer: FakeProducer,
    codec: EventCodec,
    after: str = "archive",
    workers: int = 4,
) -> tuple[ExtractService, FakeHdfs]:
    hdfs = FakeHdfs("b")
    nas = tmp_path / "nas"
    svc = ExtractService(
        svc_settings(nas, after, workers),
        NasScanner(nas, {spec.name: spec}),
        deps(hdfs),
        producer,
        codec,
    )
    return svc, hdfs


def take(svc: ExtractService, t0: float = 0.0) -> Candidate:
    for t in (t0, t0 + 2.0, t0 + 4.0):
        got = svc.scanner.scan(t)
    [cand] = got
    return cand


def test_service_archives_only_after_the_ack(
    tmp_path: Path, flights: DatasetSpec, codec: EventCodec
) -> None:
    seen_at_flush: list[tuple[bool, bool]] = []
    nas = tmp_path / "nas"
    path = drop(nas, "flights_1.csv", DATA)
    archived = nas / ".ferry" / "archive" / "flights" / "flights_1.csv"
    producer = FakeProducer(
        on_flush=lambda: seen_at_flush.append((path.exists(), archived.exists()))
    )
    svc, hdfs = service(tmp_path, flights, producer, codec)
    svc.handle(take(svc))
    assert seen_at_flush == [(True, False)]  # still on the NAS while the ack was outstanding
    assert (path.exists(), archived.read_bytes()) == (False, DATA)
    [(topic, key, value)] = producer.acked
    ev = codec.decode(value)
    assert isinstance(ev, FileExtracted)
    assert (topic, key) == ("unit.extracted", ev.file_id.encode())
    assert ev.manifest.uris["landing"] == f"{FS_B}{LANDING}/flights/{ev.file_id}/flights_1.csv"
    assert list(hdfs.files.values()) == [DATA]
    assert (svc.stats.extracted, svc.stats.failed) == (1, 0)


def test_service_failed_ack_leaves_the_nas_file_in_place(
    tmp_path: Path, flights: DatasetSpec, codec: EventCodec
) -> None:
    nas = tmp_path / "nas"
    path = drop(nas, "flights_1.csv", DATA)
    producer = FakeProducer(fail_flushes=99)
    svc, _ = service(tmp_path, flights, producer, codec)
    with pytest.raises(TransientError, match="broker rejected"):
        svc.handle(take(svc))
    assert producer.flushes == 3  # settings.retry.max_attempts
    assert path.read_bytes() == DATA
    assert not (nas / ".ferry").exists()
    assert producer.acked == []


def test_service_ack_after_one_failure_archives(
    tmp_path: Path, flights: DatasetSpec, codec: EventCodec
) -> None:
    nas = tmp_path / "nas"
    path = drop(nas, "flights_1.csv", DATA)
    producer = FakeProducer(fail_flushes=1)
    svc, _ = service(tmp_path, flights, producer, codec)
    svc.handle(take(svc))
    assert producer.flushes == 2 and len(producer.acked) == 1
    assert not path.exists()
    assert (nas / ".ferry" / "archive" / "flights" / "flights_1.csv").read_bytes() == DATA


def test_service_moves_empties_to_the_empty_directory(
    tmp_path: Path, flights: DatasetSpec, codec: EventCodec
) -> None:
    nas = tmp_path / "nas"
    drop(nas, "flights_h.csv", HEADER)
    producer = FakeProducer()
    svc, hdfs = service(tmp_path, flights, producer, codec)
    svc.handle(take(svc))
    assert (nas / ".ferry" / "empty" / "flights" / "flights_h.csv").read_bytes() == HEADER
    assert not (nas / "flights" / "flights_h.csv").exists()
    assert not (nas / ".ferry" / "archive").exists()
    [(topic, key, value)] = producer.acked
    ev = codec.decode(value)
    assert (topic, ev.reason, key) == ("unit.failed", "empty_header_only", ev.file_id.encode())
    assert hdfs.files == {}
    assert (svc.stats.extracted, svc.stats.failed, svc.stats.by_reason) == (
        0,
        1,
        {"empty_header_only": 1},
    )


def test_service_empty_is_moved_even_under_delete(
    tmp_path: Path, flights: DatasetSpec, codec: EventCodec
) -> None:
    nas = tmp_path / "nas"
    drop(nas, "flights_z.csv", b"")
    svc, _ = service(tmp_path, flights, FakeProducer(), codec, after="delete")
    svc.handle(take(svc))
    assert (nas / ".ferry" / "empty" / "flights" / "flights_z.csv").read_bytes() == b""


def test_service_delete_policy_unlinks_file_and_marker(
    tmp_path: Path, flights: DatasetSpec, codec: EventCodec
) -> None:
    spec = with_(flights, finished=FinishedPolicy(policy="marker"))
    nas = tmp_path / "nas"
    path = drop(nas, "flights_1.csv", DATA)
    marker = drop(nas, "flights_1.csv.done", b"")
    svc, _ = service(tmp_path, spec, FakeProducer(), codec, after="delete")
    [cand] = svc.scanner.scan(0.0)
    svc.handle(cand)
    assert (path.exists(), marker.exists(), (nas / ".ferry").exists()) == (False, False, False)


def test_service_archives_the_marker_with_its_file(
    tmp_path: Path, flights: DatasetSpec, codec: EventCodec
) -> None:
    spec = with_(flights, finished=FinishedPolicy(policy="marker"))
    nas = tmp_path / "nas"
    drop(nas, "flights_1.csv", DATA)
    drop(nas, "flights_1.csv.done", b"")
    svc, _ = service(tmp_path, spec, FakeProducer(), codec)
    assert svc.run_once() == 1
    assert sorted(p.name for p in (nas / ".ferry" / "archive" / "flights").iterdir()) == [
        "flights_1.csv",
        "flights_1.csv.done",
    ]
    assert svc.run_once() == 0


def test_service_keep_policy_extracts_once(
    tmp_path: Path, flights: DatasetSpec, codec: EventCodec
) -> None:
    """``keep``: the file stays and later scans do not extract it again (only a restart does)."""
    nas = tmp_path / "nas"
    path = drop(nas, "flights_1.csv", DATA)
    producer = FakeProducer()
    svc, _ = service(tmp_path, flights, producer, codec, after="keep")
    svc.handle(take(svc))
    assert path.read_bytes() == DATA
    assert [svc.scanner.scan(t) for t in (6.0, 8.0, 10.0, 12.0)] == [[], [], [], []]
    assert len(producer.acked) == 1


def test_service_quarantines_a_permanent_hdfs_error_and_moves_the_file(
    tmp_path: Path, flights: DatasetSpec, codec: EventCodec
) -> None:
    nas = tmp_path / "nas"
    drop(nas, "flights_1.csv", DATA)
    producer = FakeProducer()
    svc, hdfs = service(tmp_path, flights, producer, codec)
    hdfs.fail("create", HdfsPathExists("refused"), times=99)
    svc.handle(take(svc))
    [(topic, key, value)] = producer.acked
    ev = codec.decode(value)
    assert (topic, key, ev.reason, ev.attempt) == (
        "unit.failed",
        b"flights/flights_1.csv",
        "hdfs_exists",
        3,
    )
    assert ev.manifest is None
    assert [op for op, _ in hdfs.calls].count("create") == 1  # permanent: not retried
    assert (nas / ".ferry" / "failed" / "flights" / "flights_1.csv").read_bytes() == DATA


def test_service_retries_a_transient_hdfs_error(
    tmp_path: Path, flights: DatasetSpec, codec: EventCodec
) -> None:
    nas = tmp_path / "nas"
    drop(nas, "flights_1.csv", DATA)
    producer = FakeProducer()
    svc, hdfs = service(tmp_path, flights, producer, codec)
    hdfs.fail("create", HdfsUnavailable("reset"), after_bytes=5, times=2)
    svc.handle(take(svc))
    assert [op for op, _ in hdfs.calls].count("create") == 3
    assert list(hdfs.files.values()) == [DATA]
    assert isinstance(codec.decode(producer.acked[0][2]), FileExtracted)


def test_service_skips_a_file_that_changed_since_the_scan(
    tmp_path: Path, flights: DatasetSpec, codec: EventCodec
) -> None:
    nas = tmp_path / "nas"
    path = drop(nas, "flights_1.csv", HEADER)
    producer = FakeProducer()
    svc, hdfs = service(tmp_path, flights, producer, codec)
    cand = take(svc)
    with path.open("ab") as fh:
        fh.write(b"2013,1,1,1\n")
    svc.handle(cand)
    assert (producer.acked, hdfs.files, path.exists(), (nas / ".ferry").exists()) == (
        [],
        {},
        True,
        False,
    )
    # forgotten: it is taken again, whole, once stable
    [again] = [c for t in (10.0, 12.0, 14.0) for c in svc.scanner.scan(t)]
    assert again.size == len(HEADER) + 11


def test_service_forgets_a_vanished_file(
    tmp_path: Path, flights: DatasetSpec, codec: EventCodec
) -> None:
    nas = tmp_path / "nas"
    path = drop(nas, "flights_1.csv", DATA)
    producer = FakeProducer()
    svc, hdfs = service(tmp_path, flights, producer, codec)
    cand = take(svc)
    path.unlink()
    svc.handle(cand)
    assert (producer.acked, hdfs.files, producer.flushes) == ([], {}, 0)


def test_service_stop_is_honoured_before_the_next_file(
    tmp_path: Path, flights: DatasetSpec, codec: EventCodec
) -> None:
    nas = tmp_path / "nas"
    spec = with_(flights, finished=FinishedPolicy(policy="marker"))
    for n in ("flights_1.csv", "flights_2.csv"):
        drop(nas, n, DATA + n.encode() + b"\n")
        drop(nas, n + ".done", b"")
    producer = FakeProducer(on_flush=lambda: svc.stop())
    # One worker: the second file has not started when the first one's flush stops the service.
    svc, _ = service(tmp_path, spec, producer, codec, workers=1)
    assert svc.run_once() == 1
    assert isinstance(svc._stop, threading.Event) and svc._stop.is_set()


def test_service_lands_a_scan_on_several_workers_and_archives_each_after_its_ack(
    tmp_path: Path, flights: DatasetSpec, codec: EventCodec
) -> None:
    nas = tmp_path / "nas"
    spec = with_(flights, finished=FinishedPolicy(policy="marker"))
    names = [f"flights_{i}.csv" for i in range(6)]
    for n in names:
        drop(nas, n, DATA + n.encode() + b"\n")
        drop(nas, n + ".done", b"")
    producer = FakeProducer()
    svc, hdfs = service(tmp_path, spec, producer, codec, workers=3)
    assert svc.run_once() == 6
    assert svc.stats.extracted == 6
    assert sorted(p.name for p in (nas / ".ferry" / "archive" / "flights").iterdir()) == sorted(
        names + [n + ".done" for n in names]
    )
    assert sorted(path.rsplit("/", 1)[1] for path in hdfs.files) == sorted(names)


# -- file names HDFS cannot hold (bad_file_name, name_too_long) ------------------------------

#: ``flights_café.csv`` written by a Latin-1 client: Python lists it with a surrogate escape.
LATIN1 = os.fsdecode(b"flights_caf\xe9.csv")


def test_non_utf8_name_is_refused_before_any_read_or_hdfs_call(
    tmp_path: Path, flights: DatasetSpec
) -> None:
    hdfs = FakeHdfs("b")
    assert LATIN1 == "flights_caf\udce9.csv"
    [ev] = extract_file(candidate(tmp_path, flights, LATIN1, DATA), deps(hdfs))
    assert isinstance(ev, FileFailed)
    assert (ev.stage, ev.reason, ev.attempt, ev.manifest, ev.raw_key) == (
        "extract",
        "bad_file_name",
        1,
        None,
        b"flights/flights_caf\xe9.csv",
    )
    assert ev.error == (
        "flights/flights_caf\\xe9.csv: file name is not valid UTF-8 "
        "(bytes b'flights_caf\\xe9.csv'); not landed"
    )
    assert (hdfs.files, hdfs.calls) == ({}, [])


def test_colon_in_a_name_is_refused_as_bad_file_name(tmp_path: Path, flights: DatasetSpec) -> None:
    hdfs = FakeHdfs("b")
    [ev] = extract_file(candidate(tmp_path, flights, "flights_12:00.csv", DATA), deps(hdfs))
    assert isinstance(ev, FileFailed)
    assert (ev.reason, ev.error) == (
        "bad_file_name",
        "flights/flights_12:00.csv: file name holds ':', which HDFS does not allow in a path "
        "component; not landed",
    )
    assert hdfs.calls == []


def _name_of(nbytes: int, letter: str = "x") -> str:
    """``flights_<letters>.csv`` of exactly ``nbytes`` bytes of UTF-8."""
    fill = nbytes - len("flights_.csv")
    each = len(letter.encode())
    return "flights_" + letter * (fill // each) + "x" * (fill % each) + ".csv"


def test_temp_name_overhead_comes_from_temp_path_for() -> None:
    temp = temp_path_for("/d/" + "n" * 10).rsplit("/", 1)[1]
    assert len(temp.encode()) - 10 == 44  # "." + name + ".ferry-tmp-" + 32 hex


@pytest.mark.parametrize("nbytes", [212, 255, 256, 400])
def test_name_whose_temp_name_is_over_255_bytes_is_refused(
    tmp_path: Path, flights: DatasetSpec, nbytes: int
) -> None:
    hdfs = FakeHdfs("b")
    name = _name_of(nbytes)
    if nbytes > 255:  # more than the local file system holds: only the handler is exercised
        path = tmp_path / "flights" / "short.csv"
        drop(tmp_path, "short.csv", DATA)
        cand = Candidate(path.with_name(name), flights, f"flights/{name}", len(DATA), 0)
    else:
        cand = candidate(tmp_path, flights, name, DATA)
    [ev] = extract_file(cand, deps(hdfs))
    assert isinstance(ev, FileFailed)
    assert (ev.reason, ev.manifest, ev.raw_key) == (
        "name_too_long",
        None,
        f"flights/{name}".encode(),
    )
    assert ev.error == (
        f"flights/{name}: file name is {nbytes} bytes of UTF-8; with the upload's temp name "
        f"(44 bytes more) it is {nbytes + 44}, over HDFS's 255-byte limit on a path component; "
        "not landed"
    )
    assert (hdfs.files, hdfs.calls) == ({}, [])


def test_longest_name_whose_temp_name_fits_lands(tmp_path: Path, flights: DatasetSpec) -> None:
    hdfs = FakeHdfs("b")
    name = _name_of(211)  # 211 + 44 = 255 bytes: fits exactly
    [ev] = extract_file(candidate(tmp_path, flights, name, DATA), deps(hdfs))
    assert isinstance(ev, FileExtracted)
    assert list(hdfs.files) == [f"{LANDING}/flights/{ev.file_id}/{name}"]


def test_name_length_is_counted_in_utf8_bytes_not_letters(
    tmp_path: Path, flights: DatasetSpec
) -> None:
    hdfs = FakeHdfs("b")
    name = _name_of(212, "é")  # 108 letters, 212 bytes
    assert len(name) < 212 == len(name.encode())
    [ev] = extract_file(candidate(tmp_path, flights, name, DATA), deps(hdfs))
    assert isinstance(ev, FileFailed) and ev.reason == "name_too_long"
    assert hdfs.calls == []


# -- encoding check on the hash pass (not_utf8) ----------------------------------------------


@pytest.mark.parametrize("chunk", [1, 2, 3, 7, 1 << 20])
@pytest.mark.parametrize(
    ("tail", "offset", "why"),
    [
        (b"2013,1,1,caf\xe9\n", 12, "byte 0xe9: invalid continuation byte"),
        (b"2013,1,1,\xff\n", 9, "byte 0xff: invalid start byte"),
        (b"2013,1,1,\xc3", 9, "byte 0xc3: unexpected end of data"),  # cut off at the end
        (b"2013,1,1,\xed\xa0\x80\n", 9, "byte 0xed: invalid continuation byte"),  # surrogate
    ],
)
def test_invalid_utf8_fails_with_the_byte_offset_and_lands_nothing(
    tmp_path: Path, flights: DatasetSpec, chunk: int, tail: bytes, offset: int, why: str
) -> None:
    hdfs = FakeHdfs("b")
    data = DATA + tail
    cand = candidate(tmp_path, flights, "flights_1.csv", data)
    [ev] = extract_file(cand, ExtractDeps(hdfs, LANDING, FS_B, chunk_bytes=chunk))
    assert isinstance(ev, FileFailed)
    assert (ev.stage, ev.reason, ev.attempt) == ("extract", "not_utf8", 1)
    assert ev.error == (
        f"flights/flights_1.csv: not valid UTF-8 at byte offset {len(DATA) + offset} ({why}); "
        "not landed"
    )
    assert ev.manifest is not None
    sha = sha256_file(cand.path)  # the whole file's hash, though the check stopped early
    assert (ev.manifest.sha256, ev.manifest.size_bytes) == (sha, len(data))
    assert ev.manifest.file_id == derive_file_id("flights", sha)
    assert (hdfs.files, hdfs.calls) == ({}, [])


@pytest.mark.parametrize("chunk", [1, 2, 3, 7])
def test_valid_utf8_split_across_chunks_and_a_bom_land(
    tmp_path: Path, flights: DatasetSpec, chunk: int
) -> None:
    """C10: a BOM is valid; multi-byte letters cut by any chunk boundary are valid."""
    hdfs = FakeHdfs("b")
    data = b"\xef\xbb\xbf" + DATA + "2013,1,1,données 日本 😀\n".encode()
    cand = candidate(tmp_path, flights, "flights_1.csv", data)
    [ev] = extract_file(cand, ExtractDeps(hdfs, LANDING, FS_B, chunk_bytes=chunk))
    assert isinstance(ev, FileExtracted)
    assert list(hdfs.files.values()) == [data]


def test_the_hash_and_encoding_check_read_the_file_once(
    tmp_path: Path, flights: DatasetSpec, monkeypatch: pytest.MonkeyPatch
) -> None:
    import ferry.stages.extract.handlers as handlers

    reads: list[int] = []
    real = handlers._chunks

    def counting(path: Path, size: int) -> Any:
        reads.append(size)
        return real(path, size)

    monkeypatch.setattr(handlers, "_chunks", counting)
    hdfs = FakeHdfs("b")
    extract_file(candidate(tmp_path, flights, "flights_1.csv", DATA + b"\xff\n"), deps(hdfs))
    assert reads == [7]  # one pass; not_utf8 stops before the upload's pass


# -- scanner: file-system errors and what it ignores (warned once) ----------------------------


def warnings_of(caplog: pytest.LogCaptureFixture) -> list[str]:
    return [
        r.getMessage()
        for r in caplog.records
        if r.name == "ferry.stages.extract.scanner" and r.levelname == "WARNING"
    ]


def test_symlink_loop_is_skipped_and_warned_once(
    tmp_path: Path, flights: DatasetSpec, caplog: pytest.LogCaptureFixture
) -> None:
    drop(tmp_path, "flights_1.csv", DATA)
    loop = tmp_path / "flights" / "flights_loop.csv"
    os.symlink("flights_loop.csv", loop)  # ln -s x.csv x.csv
    scanner = NasScanner(tmp_path, {"flights": flights})
    assert [names(scanner.scan(t)) for t in (0.0, 2.0, 4.0)] == [[], [], ["flights/flights_1.csv"]]
    assert warnings_of(caplog) == [
        f"extract: NAS path {loop} cannot be read ([Errno 40] Too many levels of symbolic "
        "links); skipped"
    ]


def test_plain_file_where_the_dataset_directory_should_be_is_warned_once(
    tmp_path: Path, specs: dict[str, DatasetSpec], caplog: pytest.LogCaptureFixture
) -> None:
    drop(tmp_path, "flights_1.csv", DATA)
    weather = tmp_path / specs["weather"].nas.subdir
    weather.write_bytes(b"not a directory")
    scanner = NasScanner(tmp_path, dict(specs))
    assert [names(scanner.scan(t)) for t in (0.0, 2.0, 4.0)] == [[], [], ["flights/flights_1.csv"]]
    assert warnings_of(caplog) == [
        f"extract: NAS path {weather} should be the directory of dataset 'weather' but is not "
        "a directory; skipped"
    ]


def test_unlistable_dataset_directory_is_warned_once_and_others_flow(
    tmp_path: Path,
    specs: dict[str, DatasetSpec],
    caplog: pytest.LogCaptureFixture,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    import ferry.stages.extract.scanner as scanner_mod

    drop(tmp_path, "flights_1.csv", DATA)
    weather = tmp_path / specs["weather"].nas.subdir
    weather.mkdir()
    real = os.listdir

    def listdir(path: Any) -> list[str]:
        if Path(path) == weather:
            raise PermissionError(13, "Permission denied", str(path))
        return real(path)

    monkeypatch.setattr(scanner_mod.os, "listdir", listdir)
    scanner = NasScanner(tmp_path, dict(specs))
    assert [names(scanner.scan(t)) for t in (0.0, 2.0, 4.0)] == [[], [], ["flights/flights_1.csv"]]
    assert warnings_of(caplog) == [
        f"extract: NAS path {weather} directory of dataset 'weather' cannot be listed "
        "([Errno 13] Permission denied); skipped"
    ]


def test_non_matching_names_and_unknown_root_entries_are_warned_once(
    tmp_path: Path, flights: DatasetSpec, caplog: pytest.LogCaptureFixture
) -> None:
    drop(tmp_path, "flights_1.csv", DATA)
    drop(tmp_path, "Flights_2.CSV", DATA)  # wrong case: the pattern is case-sensitive
    drop(tmp_path, ".hidden.csv", DATA)  # hidden: silent
    drop(tmp_path, "flights_3.csv", DATA, subdir="Flights")  # typed for flights/
    (tmp_path / ".ferry").mkdir()  # Ferry's own: silent
    scanner = NasScanner(tmp_path, {"flights": flights})
    for t in (0.0, 2.0, 4.0, 6.0):
        scanner.scan(t)
    assert warnings_of(caplog) == [
        f"extract: NAS path {tmp_path / 'Flights'} is not a sub-directory any dataset defines "
        "(flights); ignored",
        f"extract: NAS path {tmp_path / 'flights' / 'Flights_2.CSV'} does not match dataset "
        "'flights''s pattern 'flights_*.csv'; ignored",
    ]


def test_a_warning_comes_back_once_the_problem_recurs(
    tmp_path: Path, flights: DatasetSpec, caplog: pytest.LogCaptureFixture
) -> None:
    stray = drop(tmp_path, "notes.txt", b"x")
    scanner = NasScanner(tmp_path, {"flights": flights})
    scanner.scan(0.0)
    scanner.scan(1.0)
    stray.unlink()
    scanner.scan(2.0)
    stray.write_bytes(b"x")
    scanner.scan(3.0)
    scanner.scan(4.0)
    assert len(warnings_of(caplog)) == 2


def test_non_utf8_name_is_a_candidate_with_a_safe_warning_free_scan(
    tmp_path: Path, flights: DatasetSpec, caplog: pytest.LogCaptureFixture
) -> None:
    path = drop(tmp_path, LATIN1, DATA)
    scanner = NasScanner(tmp_path, {"flights": flights})
    [cand] = [c for t in (0.0, 2.0, 4.0) for c in scanner.scan(t)]
    assert (cand.path, cand.relative) == (path, "flights/flights_caf\udce9.csv")
    assert warnings_of(caplog) == []


def test_build_skips_a_dataset_whose_directory_is_a_plain_file(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    import ferry.stages.extract.service as service_mod

    monkeypatch.setattr(service_mod, "ensure_topics", lambda *a: None)
    monkeypatch.setattr(service_mod, "build_admin", lambda *a: None)
    monkeypatch.setattr(service_mod, "build_producer", lambda *a: FakeProducer())
    nas = tmp_path / "nas"
    nas.mkdir()
    (nas / "flights").write_bytes(b"stray")
    svc = service_mod.build(svc_settings(nas))
    assert (nas / "flights").read_bytes() == b"stray"
    assert (nas / "weather").is_dir()
    [msg] = [r.getMessage() for r in caplog.records if r.levelname == "ERROR"]
    assert msg == (
        f"extract: dataset 'flights' skipped: its NAS sub-directory {nas / 'flights'} cannot "
        "be created (FileExistsError: File exists); if a plain file has that name, move it "
        "away and restart"
    )
    assert svc.run_once() == 0  # the scan goes on (the stray file is warned about once)


# -- ExtractService: one file's error never ends the service ----------------------------------


def failed_events(codec: EventCodec, producer: FakeProducer) -> list[FileFailed]:
    out = [codec.decode(v) for t, _, v in producer.acked if t == "unit.failed"]
    assert all(isinstance(e, FileFailed) for e in out)
    return out  # type: ignore[return-value]


def test_service_quarantines_a_non_utf8_name_and_the_others_flow(
    tmp_path: Path, flights: DatasetSpec, codec: EventCodec
) -> None:
    spec = with_(flights, finished=FinishedPolicy(policy="marker"))
    nas = tmp_path / "nas"
    for n in (LATIN1, "flights_1.csv"):
        drop(nas, n, DATA)
        drop(nas, n + ".done", b"")
    producer = FakeProducer()
    svc, hdfs = service(tmp_path, spec, producer, codec)
    assert svc.run_once() == 2
    [failed] = failed_events(codec, producer)
    assert (failed.reason, failed.raw_key) == ("bad_file_name", b"flights/flights_caf\xe9.csv")
    assert b"flights/flights_caf\\xe9.csv" in [k for _, k, _ in producer.acked]
    assert (nas / ".ferry" / "failed" / "flights" / LATIN1).read_bytes() == DATA
    assert (nas / ".ferry" / "failed" / "flights" / (LATIN1 + ".done")).exists()
    assert (nas / ".ferry" / "archive" / "flights" / "flights_1.csv").read_bytes() == DATA
    assert [p.rsplit("/", 1)[1] for p in hdfs.files] == ["flights_1.csv"]
    assert (svc.stats.extracted, svc.stats.failed, svc.stats.by_reason) == (
        1,
        1,
        {"bad_file_name": 1},
    )


@pytest.mark.parametrize(
    "error",
    [
        OSError(116, "Stale file handle"),
        UnicodeEncodeError("utf-8", "caf\udce9", 3, 4, "surrogates not allowed"),
        KeyError("boom"),
    ],
)
def test_service_quarantines_an_unexpected_error_and_goes_on(
    tmp_path: Path,
    flights: DatasetSpec,
    codec: EventCodec,
    monkeypatch: pytest.MonkeyPatch,
    caplog: pytest.LogCaptureFixture,
    error: Exception,
) -> None:
    import ferry.stages.extract.service as service_mod

    spec = with_(flights, finished=FinishedPolicy(policy="marker"))
    nas = tmp_path / "nas"
    for n in ("flights_1.csv", "flights_2.csv"):
        drop(nas, n, DATA + n.encode() + b"\n")
        drop(nas, n + ".done", b"")
    real = service_mod.extract_file

    def extract(cand: Candidate, deps: ExtractDeps) -> Any:
        if cand.path.name == "flights_1.csv":
            raise error
        return real(cand, deps)

    monkeypatch.setattr(service_mod, "extract_file", extract)
    producer = FakeProducer()
    svc, hdfs = service(tmp_path, spec, producer, codec)
    assert svc.run_once() == 2
    [failed] = failed_events(codec, producer)
    assert (failed.stage, failed.reason, failed.attempt, failed.raw_key) == (
        "extract",
        "extract_error",
        1,
        b"flights/flights_1.csv",
    )
    assert failed.error == f"flights/flights_1.csv: {type(error).__name__}: {error}"
    assert sorted(p.name for p in (nas / ".ferry" / "failed" / "flights").iterdir()) == [
        "flights_1.csv",
        "flights_1.csv.done",
    ]
    assert [p.rsplit("/", 1)[1] for p in hdfs.files] == ["flights_2.csv"]
    assert svc.stats.by_reason == {"extract_error": 1}
    [rec] = [r for r in caplog.records if r.levelname == "ERROR"]
    assert rec.exc_info is not None and rec.exc_info[1] is error  # traceback logged


def test_service_lets_a_config_error_through(
    tmp_path: Path, flights: DatasetSpec, codec: EventCodec, monkeypatch: pytest.MonkeyPatch
) -> None:
    import ferry.stages.extract.service as service_mod

    def extract(cand: Candidate, deps: ExtractDeps) -> Any:
        raise ConfigError("bad settings")

    monkeypatch.setattr(service_mod, "extract_file", extract)
    nas = tmp_path / "nas"
    path = drop(nas, "flights_1.csv", DATA)
    producer = FakeProducer()
    svc, _ = service(tmp_path, flights, producer, codec)
    with pytest.raises(ConfigError, match="bad settings"):
        svc.handle(take(svc))
    assert (path.exists(), producer.acked, (nas / ".ferry").exists()) == (True, [], False)


@pytest.mark.parametrize(
    ("name", "data", "reason"),
    [
        ("flights_1.csv", DATA + b"\xff\n", "not_utf8"),
        (_name_of(240), DATA, "name_too_long"),
    ],
)
def test_service_quarantines_refused_files_without_retries(
    tmp_path: Path, flights: DatasetSpec, codec: EventCodec, name: str, data: bytes, reason: str
) -> None:
    nas = tmp_path / "nas"
    drop(nas, name, data)
    producer = FakeProducer()
    svc, hdfs = service(tmp_path, flights, producer, codec)
    svc.handle(take(svc))
    [failed] = failed_events(codec, producer)
    assert (failed.reason, failed.attempt) == (reason, 1)
    assert (hdfs.files, hdfs.calls) == ({}, [])
    assert (nas / ".ferry" / "failed" / "flights" / name).read_bytes() == data
    assert not (nas / "flights" / name).exists()


# -- ExtractService: never overwrite under .ferry/ ---------------------------------------------


def test_a_redelivery_under_the_same_name_does_not_overwrite_the_archive(
    tmp_path: Path, flights: DatasetSpec, codec: EventCodec
) -> None:
    nas = tmp_path / "nas"
    fixed = DATA + b"2013,1,1,999\n"
    drop(nas, "flights_1.csv", DATA)
    producer = FakeProducer()
    svc, _ = service(tmp_path, flights, producer, codec)
    svc.handle(take(svc))
    drop(nas, "flights_1.csv", fixed)  # the corrected re-delivery
    svc.handle(take(svc, 10.0))
    drop(nas, "flights_1.csv", fixed)  # the same again: same file_id, so a counter
    svc.handle(take(svc, 20.0))
    fid = derive_file_id(
        "flights", sha256_file(nas / ".ferry" / "archive" / "flights" / "flights_1.csv")
    )
    fixed_id = str(codec.decode(producer.acked[1][2]).file_id)
    assert (
        fid
        != fixed_id
        == derive_file_id(
            "flights",
            sha256_file(
                nas
                / ".."
                / "nas"
                / ".ferry"
                / "archive"
                / "flights"
                / f"flights_1.{fixed_id[:12]}.csv"
            ),
        )
    )
    archive = nas / ".ferry" / "archive" / "flights"
    assert {p.name: p.read_bytes() for p in archive.iterdir()} == {
        "flights_1.csv": DATA,
        f"flights_1.{fixed_id[:12]}.csv": fixed,
        f"flights_1.{fixed_id[:12]}.2.csv": fixed,
    }


def test_the_marker_keeps_following_its_renamed_file(
    tmp_path: Path, flights: DatasetSpec, codec: EventCodec
) -> None:
    spec = with_(flights, finished=FinishedPolicy(policy="marker"))
    nas = tmp_path / "nas"
    producer = FakeProducer()
    svc, _ = service(tmp_path, spec, producer, codec)
    ids: list[str] = []
    for body in (DATA, DATA + b"2013,1,1,1\n"):
        drop(nas, "flights_1.csv", body)
        drop(nas, "flights_1.csv.done", b"")
        assert svc.run_once() == 1
        ids.append(str(codec.decode(producer.acked[-1][2]).file_id))
    archive = nas / ".ferry" / "archive" / "flights"
    assert sorted(p.name for p in archive.iterdir()) == sorted(
        [
            "flights_1.csv",
            "flights_1.csv.done",
            f"flights_1.{ids[1][:12]}.csv",
            f"flights_1.{ids[1][:12]}.csv.done",
        ]
    )


def test_a_failed_file_without_file_id_gets_a_timestamp_name(
    tmp_path: Path, flights: DatasetSpec, codec: EventCodec, monkeypatch: pytest.MonkeyPatch
) -> None:
    import ferry.stages.extract.service as service_mod

    at = datetime(2024, 5, 6, 7, 8, 9, 123456, tzinfo=UTC)
    monkeypatch.setattr(service_mod, "utc_now", lambda: at)
    nas = tmp_path / "nas"
    name = "flights_12:00.csv"  # bad_file_name: no manifest, so no file_id
    failed = nas / ".ferry" / "failed" / "flights"
    failed.mkdir(parents=True)
    (failed / name).write_bytes(b"earlier")
    drop(nas, name, DATA)
    svc, _ = service(tmp_path, flights, FakeProducer(), codec)
    svc.handle(take(svc))
    assert {p.name: p.read_bytes() for p in failed.iterdir()} == {
        name: b"earlier",
        "flights_12:00.20240506T070809123456Z.csv": DATA,
    }


def test_free_name_cuts_the_stem_to_stay_within_255_bytes(tmp_path: Path) -> None:
    name = "x" + "é" * 120 + ".csv"  # 245 bytes; the stem may keep 238, cut inside an "é"
    (tmp_path / name).write_bytes(b"")
    got = free_name(tmp_path, name, "0123456789ab")
    assert got.name == "x" + "é" * 118 + ".0123456789ab.csv"
    assert len(got.name.encode()) == 254
    got.write_bytes(b"")
    assert free_name(tmp_path, name, "0123456789ab").name == (
        "x" + "é" * 117 + ".0123456789ab.2.csv"
    )
    assert free_name(tmp_path, "other.csv", "x") == tmp_path / "other.csv"


def test_a_failed_move_is_logged_and_the_file_not_taken_again(
    tmp_path: Path,
    flights: DatasetSpec,
    codec: EventCodec,
    monkeypatch: pytest.MonkeyPatch,
    caplog: pytest.LogCaptureFixture,
) -> None:
    import ferry.stages.extract.service as service_mod

    def move(src: str, dst: Any) -> None:
        raise PermissionError(13, "Permission denied", src)

    monkeypatch.setattr(service_mod.shutil, "move", move)
    nas = tmp_path / "nas"
    path = drop(nas, "flights_1.csv", DATA)
    producer = FakeProducer()
    svc, _ = service(tmp_path, flights, producer, codec)
    svc.handle(take(svc))
    assert (path.read_bytes(), len(producer.acked)) == (DATA, 1)
    assert [svc.scanner.scan(t) for t in (6.0, 8.0, 10.0)] == [[], [], []]
    assert [r.levelname for r in caplog.records if r.name == "ferry.stages.extract.service"] == [
        "ERROR"
    ]
