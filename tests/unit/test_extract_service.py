"""extract: ExtractService with a fake producer: archive/delete/keep only after the ack, workers,
stop, and moves under ``.ferry/`` that never overwrite.
"""

from __future__ import annotations

import threading
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest
from tests.support.extract_helpers import (
    DATA,
    HEADER,
    LANDING,
    LATIN1,
    Extract,
    drop,
    service,
    take,
    with_,
)
from tests.support.factories import FS_B
from tests.support.fakes import FakeProducer

from ferry.core.events import FileExtracted
from ferry.core.identity import derive_file_id, sha256_file
from ferry.core.wire.avro import EventCodec
from ferry.datasets.fields import FinishedPolicy
from ferry.datasets.spec import DatasetSpec
from ferry.errors import TransientError
from ferry.nas import free_name

# -- ExtractService ---------------------------------------------------------------------------


def test_service_archives_only_after_the_ack(ex: Extract) -> None:
    seen_at_flush: list[tuple[bool, bool]] = []
    path = ex.drop("flights_1.csv", DATA)
    archived = ex.nas / ".ferry" / "archive" / "flights" / "flights_1.csv"
    producer = FakeProducer(
        on_flush=lambda: seen_at_flush.append((path.exists(), archived.exists()))
    )
    svc, hdfs = ex.service(producer)
    svc.handle(take(svc))
    assert seen_at_flush == [(True, False)]  # still on the NAS while the ack was outstanding
    assert (path.exists(), archived.read_bytes()) == (False, DATA)
    [(topic, key, value)] = producer.acked
    ev = ex.codec.decode(value)
    assert isinstance(ev, FileExtracted)
    assert (topic, key) == ("unit.extracted", ev.file_id.encode())
    assert ev.manifest.uris["landing"] == f"{FS_B}{LANDING}/flights/{ev.file_id}/flights_1.csv"
    assert list(hdfs.files.values()) == [DATA]
    assert (svc.stats.extracted, svc.stats.failed) == (1, 0)


def test_service_failed_ack_leaves_the_nas_file_in_place(ex: Extract) -> None:
    path = ex.drop("flights_1.csv", DATA)
    producer = FakeProducer(fail_flushes=99)
    svc, _ = ex.service(producer)
    with pytest.raises(TransientError, match="broker rejected"):
        svc.handle(take(svc))
    assert producer.flushes == 3  # settings.retry.max_attempts
    assert path.read_bytes() == DATA
    assert not (ex.nas / ".ferry").exists()
    assert producer.acked == []


def test_service_ack_after_one_failure_archives(ex: Extract) -> None:
    path = ex.drop("flights_1.csv", DATA)
    producer = FakeProducer(fail_flushes=1)
    svc, _ = ex.service(producer)
    svc.handle(take(svc))
    assert producer.flushes == 2 and len(producer.acked) == 1
    assert not path.exists()
    assert (ex.nas / ".ferry" / "archive" / "flights" / "flights_1.csv").read_bytes() == DATA


def test_service_moves_empties_to_the_empty_directory(ex: Extract) -> None:
    ex.drop("flights_h.csv", HEADER)
    producer = FakeProducer()
    svc, hdfs = ex.service(producer)
    svc.handle(take(svc))
    assert (ex.nas / ".ferry" / "empty" / "flights" / "flights_h.csv").read_bytes() == HEADER
    assert not (ex.nas / "flights" / "flights_h.csv").exists()
    assert not (ex.nas / ".ferry" / "archive").exists()
    [(topic, key, value)] = producer.acked
    ev = ex.codec.decode(value)
    assert (topic, ev.reason, key) == ("unit.failed", "empty_header_only", ev.file_id.encode())
    assert hdfs.files == {}
    assert (svc.stats.extracted, svc.stats.failed, svc.stats.by_reason) == (
        0,
        1,
        {"empty_header_only": 1},
    )


def test_service_empty_is_moved_even_under_delete(ex: Extract) -> None:
    ex.drop("flights_z.csv", b"")
    svc, _ = ex.service(FakeProducer(), after="delete")
    svc.handle(take(svc))
    assert (ex.nas / ".ferry" / "empty" / "flights" / "flights_z.csv").read_bytes() == b""


def test_service_delete_policy_unlinks_file_and_marker(ex: Extract) -> None:
    spec = with_(ex.spec, finished=FinishedPolicy(policy="marker"))
    path = ex.drop("flights_1.csv", DATA)
    marker = ex.drop("flights_1.csv.done", b"")
    svc, _ = ex.service(FakeProducer(), spec=spec, after="delete")
    [cand] = svc.scanner.scan(0.0)
    svc.handle(cand)
    assert (path.exists(), marker.exists(), (ex.nas / ".ferry").exists()) == (False, False, False)


def test_service_archives_the_marker_with_its_file(ex: Extract) -> None:
    spec = with_(ex.spec, finished=FinishedPolicy(policy="marker"))
    ex.drop("flights_1.csv", DATA)
    ex.drop("flights_1.csv.done", b"")
    svc, _ = ex.service(FakeProducer(), spec=spec)
    assert svc.run_once() == 1
    assert sorted(p.name for p in (ex.nas / ".ferry" / "archive" / "flights").iterdir()) == [
        "flights_1.csv",
        "flights_1.csv.done",
    ]
    assert svc.run_once() == 0


def test_service_keep_policy_extracts_once(ex: Extract) -> None:
    """``keep``: the file stays and later scans do not extract it again (only a restart does)."""
    path = ex.drop("flights_1.csv", DATA)
    producer = FakeProducer()
    svc, _ = ex.service(producer, after="keep")
    svc.handle(take(svc))
    assert path.read_bytes() == DATA
    assert [svc.scanner.scan(t) for t in (6.0, 8.0, 10.0, 12.0)] == [[], [], [], []]
    assert len(producer.acked) == 1


def test_service_stop_is_honoured_before_the_next_file(ex: Extract) -> None:
    spec = with_(ex.spec, finished=FinishedPolicy(policy="marker"))
    for n in ("flights_1.csv", "flights_2.csv"):
        ex.drop(n, DATA + n.encode() + b"\n")
        ex.drop(n + ".done", b"")
    producer = FakeProducer(on_flush=lambda: svc.stop())
    # One worker: the second file has not started when the first one's flush stops the service.
    svc, _ = ex.service(producer, spec=spec, workers=1)
    assert svc.run_once() == 1
    assert isinstance(svc._stop, threading.Event) and svc._stop.is_set()


def test_service_lands_a_scan_on_several_workers_and_archives_each_after_its_ack(
    ex: Extract,
) -> None:
    spec = with_(ex.spec, finished=FinishedPolicy(policy="marker"))
    names = [f"flights_{i}.csv" for i in range(6)]
    for n in names:
        ex.drop(n, DATA + n.encode() + b"\n")
        ex.drop(n + ".done", b"")
    producer = FakeProducer()
    svc, hdfs = ex.service(producer, spec=spec, workers=3)
    assert svc.run_once() == 6
    assert svc.stats.extracted == 6
    assert sorted(p.name for p in (ex.nas / ".ferry" / "archive" / "flights").iterdir()) == sorted(
        names + [n + ".done" for n in names]
    )
    assert sorted(path.rsplit("/", 1)[1] for path in hdfs.files) == sorted(names)


# -- ExtractService: never overwrite under .ferry/ ---------------------------------------------


def test_a_redelivery_under_the_same_name_does_not_overwrite_the_archive(ex: Extract) -> None:
    fixed = DATA + b"2013,1,1,999\n"
    ex.drop("flights_1.csv", DATA)
    producer = FakeProducer()
    svc, _ = ex.service(producer)
    svc.handle(take(svc))
    ex.drop("flights_1.csv", fixed)  # the corrected re-delivery
    svc.handle(take(svc, 10.0))
    ex.drop("flights_1.csv", fixed)  # the same again: same file_id, so a counter
    svc.handle(take(svc, 20.0))
    fid = derive_file_id(
        "flights", sha256_file(ex.nas / ".ferry" / "archive" / "flights" / "flights_1.csv")
    )
    fixed_id = str(ex.codec.decode(producer.acked[1][2]).file_id)
    assert (
        fid
        != fixed_id
        == derive_file_id(
            "flights",
            sha256_file(
                ex.nas
                / ".."
                / "nas"
                / ".ferry"
                / "archive"
                / "flights"
                / f"flights_1.{fixed_id[:12]}.csv"
            ),
        )
    )
    archive = ex.nas / ".ferry" / "archive" / "flights"
    assert {p.name: p.read_bytes() for p in archive.iterdir()} == {
        "flights_1.csv": DATA,
        f"flights_1.{fixed_id[:12]}.csv": fixed,
        f"flights_1.{fixed_id[:12]}.2.csv": fixed,
    }


def test_the_marker_keeps_following_its_renamed_file(ex: Extract) -> None:
    spec = with_(ex.spec, finished=FinishedPolicy(policy="marker"))
    producer = FakeProducer()
    svc, _ = ex.service(producer, spec=spec)
    ids: list[str] = []
    for body in (DATA, DATA + b"2013,1,1,1\n"):
        ex.drop("flights_1.csv", body)
        ex.drop("flights_1.csv.done", b"")
        assert svc.run_once() == 1
        ids.append(str(ex.codec.decode(producer.acked[-1][2]).file_id))
    archive = ex.nas / ".ferry" / "archive" / "flights"
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
    import ferry.stages.extract.moves as moves_mod

    at = datetime(2024, 5, 6, 7, 8, 9, 123456, tzinfo=UTC)
    monkeypatch.setattr(moves_mod, "utc_now", lambda: at)
    nas = tmp_path / "nas"
    name = LATIN1  # bad_file_name (not UTF-8): no manifest, so no file_id
    failed = nas / ".ferry" / "failed" / "flights"
    failed.mkdir(parents=True)
    (failed / name).write_bytes(b"earlier")
    drop(nas, name, DATA)
    svc, _ = service(tmp_path, flights, FakeProducer(), codec)
    svc.handle(take(svc))
    assert {p.name: p.read_bytes() for p in failed.iterdir()} == {
        name: b"earlier",
        "flights_caf\udce9.20240506T070809123456Z.csv": DATA,
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
    ex: Extract, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    import ferry.stages.extract.moves as moves_mod

    def move(src: str, dst: Any) -> None:
        raise PermissionError(13, "Permission denied", src)

    monkeypatch.setattr(moves_mod.shutil, "move", move)
    path = ex.drop("flights_1.csv", DATA)
    producer = FakeProducer()
    svc, _ = ex.service(producer)
    svc.handle(take(svc))
    assert (path.read_bytes(), len(producer.acked)) == (DATA, 1)
    assert [svc.scanner.scan(t) for t in (6.0, 8.0, 10.0)] == [[], [], []]
    assert [r.levelname for r in caplog.records if r.name == "ferry.stages.extract.moves"] == [
        "ERROR"
    ]
