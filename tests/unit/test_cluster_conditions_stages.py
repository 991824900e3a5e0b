"""Case C22, each stage's hold and resume: the runner's processing (transform, transfer, load)
holds a file a :class:`~ferry.errors.ClusterCondition` refuses past ``max_attempts`` and
carries it on once the condition clears; transform and load give a job's condition to every file
(no bisection); extract leaves the file on the NAS and lands it later. The classification and
the board are in test_cluster_conditions.py."""

from __future__ import annotations

import json
import threading
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest
from tests.support.extract_helpers import DATA, Extract, failed_events, take
from tests.support.factories import extracted, transferred
from tests.support.fakes import FakeProducer
from tests.unit.test_cluster_conditions import POLICY, QUOTA, SPARK_QUOTA
from tests.unit.test_load_handler import Job as LoadJob
from tests.unit.test_processing import EXTRACTED, TRANSFORMED, record
from tests.unit.test_transform_handler import Job as TransformJob

from ferry.core.events import FileExtracted, FileFailed
from ferry.core.runtime import processing
from ferry.core.runtime.conditions import ConditionBoard, conditions_path
from ferry.core.runtime.processing import process_batch
from ferry.core.runtime.stage import RunStats, Stage
from ferry.core.wire.avro import EventCodec
from ferry.datasets.spec import DatasetSpec
from ferry.errors import (
    ClusterCondition,
    DataNodeUnreachable,
    HdfsTimeout,
    HdfsUnavailable,
    SparkJobFailed,
)
from ferry.settings import Settings, get_settings
from ferry.stages.extract.holds import NasHolds
from ferry.stages.load.handlers import load_batch
from ferry.stages.transform.handlers import transform_batch

# -- the runner's processing (transform, transfer, load) -----------------------------------------


def stage_settings(tmp_path: Path, **retry: Any) -> Settings:
    base = get_settings()
    return base.model_copy(
        update={
            "var_dir": tmp_path,
            "retry": POLICY.model_copy(update=retry),
            "kafka": base.kafka.model_copy(update={"topic_prefix": "unit"}),
        }
    )


def test_processing_holds_a_file_while_a_condition_lasts_then_carries_it_on(
    tmp_path: Path, codec: EventCodec
) -> None:
    settings = stage_settings(tmp_path)
    stats = RunStats()
    seen: list[list[tuple[str, str, int]]] = []

    def handler(ev: FileExtracted, deps: Any) -> list[Any]:
        board = stats.conditions
        seen.append([(h.reason, h.where, h.files) for h in board.current()] if board else [])
        if len(seen) <= 8:  # far past max_attempts (3)
            raise QUOTA
        return [TRANSFORMED]

    stage = Stage("transform", {FileExtracted: handler})
    out = process_batch(
        [record(codec.encode(EXTRACTED))], stage, None, codec, settings, threading.Event(), stats
    )
    assert out is not None and [r.topic for r in out] == ["unit.transformed"]
    assert seen[0] == [] and seen[1:] == [[("quota_exceeded", "/ferry/landing", 1)]] * 8
    assert stats.conditions is not None and stats.conditions.current() == []
    assert not conditions_path(settings, "transform").exists()
    assert stats.handler_calls == 9


def test_processing_quarantines_with_the_conditions_reason_after_its_window(
    tmp_path: Path, codec: EventCodec, monkeypatch: pytest.MonkeyPatch
) -> None:
    settings = stage_settings(tmp_path, condition_window_s=5.5)
    now = [0.0]  #: processing's clock: each handler call takes 1 s
    monkeypatch.setattr(processing, "time", SimpleNamespace(monotonic=lambda: now[0]))

    def handler(ev: FileExtracted, deps: Any) -> list[Any]:
        now[0] += 1.0
        raise QUOTA

    stage = Stage("transform", {FileExtracted: handler})
    out = process_batch(
        [record(codec.encode(EXTRACTED))], stage, None, codec, settings, threading.Event()
    )
    assert out is not None and [r.topic for r in out] == ["unit.failed"]
    failed = codec.decode(out[0].value)
    assert isinstance(failed, FileFailed)
    assert (failed.stage, failed.reason, failed.attempt) == ("transform", "quota_exceeded", 6)


def test_processing_quarantines_an_ordinary_failure_on_time_beside_a_held_file(
    tmp_path: Path, codec: EventCodec
) -> None:
    settings = stage_settings(tmp_path)
    a = extracted("flights", 1)
    b = extracted("flights", 2)
    calls = {a.file_id: 0, b.file_id: 0}

    def batch(events: list[FileExtracted], deps: Any) -> list[Any]:
        out: list[Any] = []
        for ev in events:
            calls[ev.file_id] += 1
            if ev.file_id == a.file_id:
                out.append(SparkJobFailed("executor lost"))
            else:
                out.append(QUOTA if calls[ev.file_id] <= 6 else [TRANSFORMED])
        return out

    stage = Stage("transform", {FileExtracted: batch}, batch_size=8)
    recs = [record(codec.encode(e), key=e.file_id.encode(), offset=n) for n, e in enumerate((a, b))]
    out = process_batch(recs, stage, None, codec, settings, threading.Event())
    assert out is not None
    assert [(r.topic, r.key) for r in out] == [
        ("unit.failed", a.file_id.encode()),
        ("unit.transformed", TRANSFORMED.file_id.encode()),
    ]
    failed = codec.decode(out[0].value)
    assert (failed.reason, failed.attempt) == ("spark_job_failed", 3)
    assert calls == {a.file_id: 3, b.file_id: 7}


def outage(kind: type[Exception], message: str, cluster: str) -> Exception:
    """An outage as the WebHDFS client raises it: ``classify`` names the cluster."""
    exc = kind(message)
    exc.cluster = cluster  # type: ignore[attr-defined]
    return exc


@pytest.mark.parametrize(
    ("error", "reason", "cluster"),
    [
        (
            outage(HdfsUnavailable, "LISTSTATUS via NameNode 127.0.0.1:28070: reset", "a"),
            "hdfs_unavailable",
            "a",
        ),
        (outage(HdfsTimeout, "no answer within 30s", "a"), "hdfs_timeout", "a"),
        (
            outage(DataNodeUnreachable, "datanode unreachable at 127.0.0.1:28075", "a"),
            "datanode_unreachable",
            "a",
        ),
        (
            HdfsUnavailable("footer could not be read (BlockMissingException)"),
            "hdfs_unavailable",
            "",
        ),
    ],
)
def test_processing_holds_files_while_a_cluster_is_out_of_reach_then_carries_them_on(
    tmp_path: Path, codec: EventCodec, error: Exception, reason: str, cluster: str
) -> None:
    """Issue 47's hour (seed 693378033): load quarantined a batch of 189 files on one reset
    NameNode listing and 152 on a DataNode restart, transfer 43 on a refused DataNode (C06),
    all good files. Out of reach is a condition of the cluster: held past max_attempts (3), on
    the board by its own reason and cluster, carried on once the cluster answers."""
    settings = stage_settings(tmp_path)
    stats = RunStats()
    seen: list[list[tuple[str, str, int]]] = []
    a, b = extracted("flights", 1), extracted("flights", 2)

    def batch(events: list[FileExtracted], deps: Any) -> list[Any]:
        board = stats.conditions
        seen.append([(h.reason, h.cluster, h.files) for h in board.current()] if board else [])
        if len(seen) <= 7:
            return [error for _ in events]
        return [[TRANSFORMED] for _ in events]

    stage = Stage("load", {FileExtracted: batch}, batch_size=8)
    recs = [record(codec.encode(e), key=e.file_id.encode(), offset=n) for n, e in enumerate((a, b))]
    out = process_batch(recs, stage, None, codec, settings, threading.Event(), stats)
    assert out is not None and [r.topic for r in out] == ["unit.transformed"] * 2
    assert seen[0] == [] and seen[1:] == [[(reason, cluster, 2)]] * 7
    assert stats.conditions is not None and stats.conditions.current() == []
    assert stats.handler_calls == 8


def test_processing_quarantines_an_outage_with_its_own_reason_after_the_window(
    tmp_path: Path, codec: EventCodec, monkeypatch: pytest.MonkeyPatch
) -> None:
    """C06 (a DataNode address this host cannot reach, a configuration fault) is held like any
    outage, on the board, and quarantined as ``datanode_unreachable`` naming the address once
    ``retry.condition_window_s`` passed."""
    settings = stage_settings(tmp_path, condition_window_s=5.5)
    now = [0.0]  #: processing's clock: each handler call takes 1 s
    monkeypatch.setattr(processing, "time", SimpleNamespace(monotonic=lambda: now[0]))

    def handler(ev: FileExtracted, deps: Any) -> list[Any]:
        now[0] += 1.0
        raise outage(DataNodeUnreachable, "datanode unreachable at 172.18.0.5:9866", "a")

    stage = Stage("transfer", {FileExtracted: handler})
    out = process_batch(
        [record(codec.encode(EXTRACTED))], stage, None, codec, settings, threading.Event()
    )
    assert out is not None and [r.topic for r in out] == ["unit.failed"]
    failed = codec.decode(out[0].value)
    assert isinstance(failed, FileFailed)
    assert (failed.stage, failed.reason, failed.attempt) == ("transfer", "datanode_unreachable", 6)
    assert "172.18.0.5:9866" in failed.error


def test_processing_counts_ordinary_attempts_after_a_hold_anew(
    tmp_path: Path, codec: EventCodec
) -> None:
    settings = stage_settings(tmp_path)
    answers: list[Any] = [QUOTA] * 10 + [SparkJobFailed("executor lost")] * 2 + [[TRANSFORMED]]

    def handler(ev: FileExtracted, deps: Any) -> list[Any]:
        answer = answers.pop(0)
        if isinstance(answer, BaseException):
            raise answer
        return list(answer)

    stage = Stage("transform", {FileExtracted: handler})
    out = process_batch(
        [record(codec.encode(EXTRACTED))], stage, None, codec, settings, threading.Event()
    )
    assert out is not None and [r.topic for r in out] == ["unit.transformed"]
    assert answers == []


@pytest.mark.parametrize(
    "error",
    [QUOTA, outage(HdfsUnavailable, "NameNode 127.0.0.1:28070: connection refused", "a")],
    ids=["quota", "namenode-refused"],
)
def test_processing_holds_a_whole_batch_a_handler_raised_a_condition_for(
    tmp_path: Path, codec: EventCodec, error: Exception
) -> None:
    settings = stage_settings(tmp_path)
    calls = [0]

    def batch(events: list[FileExtracted], deps: Any) -> list[Any]:
        calls[0] += 1
        if calls[0] <= 5:
            raise error
        return [[TRANSFORMED] for _ in events]

    stage = Stage("transform", {FileExtracted: batch}, batch_size=8)
    out = process_batch(
        [record(codec.encode(EXTRACTED))], stage, None, codec, settings, threading.Event()
    )
    assert out is not None and [r.topic for r in out] == ["unit.transformed"]
    assert calls == [6]


def test_shutdown_while_held_abandons_the_batch_and_clears_the_board(
    tmp_path: Path, codec: EventCodec
) -> None:
    settings = stage_settings(tmp_path)
    stop = threading.Event()
    stats = RunStats()

    def handler(ev: FileExtracted, deps: Any) -> list[Any]:
        if stats.handler_calls >= 4:
            stop.set()
        raise QUOTA

    stage = Stage("transform", {FileExtracted: handler})
    out = process_batch(
        [record(codec.encode(EXTRACTED))], stage, None, codec, settings, stop, stats
    )
    assert out is None  # nothing produced, offset not stored: redelivered
    assert stats.conditions is not None and stats.conditions.current() == []


# -- transform and load --------------------------------------------------------------------------


def test_transform_gives_a_staging_condition_to_every_file_without_bisecting(
    specs: dict[str, DatasetSpec],
) -> None:
    evs = [extracted("flights", n) for n in range(1, 9)]
    job = TransformJob(error=RuntimeError(SPARK_QUOTA.replace("/warehouse", "/ferry/staging")))
    out = transform_batch(evs, job.deps(specs))
    assert len(job.calls) == 1 and job.resets == 0
    assert all(type(r) is ClusterCondition for r in out)
    assert {(r.reason, r.cluster, r.where) for r in out} == {  # type: ignore[union-attr]
        ("quota_exceeded", "b", "/ferry/staging")
    }


def test_load_gives_a_warehouse_condition_to_every_file_of_the_job(
    specs: dict[str, DatasetSpec],
) -> None:
    a, b = transferred("flights", 1), transferred("flights", 2)
    job = LoadJob(error=RuntimeError(SPARK_QUOTA))
    out = load_batch([a, b], job.deps(specs))
    assert [(type(r), r.reason, r.cluster, r.where) for r in out] == [  # type: ignore[union-attr]
        (ClusterCondition, "quota_exceeded", "a", "/warehouse")
    ] * 2
    assert (len(job.calls), job.resets) == (1, 0)


# -- extract: the file stays on the NAS ----------------------------------------------------------


def extract_with_conditions(ex: Extract, tmp_path: Path, **retry: Any) -> tuple[Any, Any, Any]:
    producer = FakeProducer()
    svc, hdfs = ex.service(producer)
    board = ConditionBoard("extract", tmp_path / "run" / "extract.1.conditions")
    svc.holds = NasHolds(svc.settings.retry.model_copy(update=retry), board)
    return svc, hdfs, producer


def test_extract_holds_the_file_on_the_nas_then_lands_it_once_the_condition_clears(
    ex: Extract, tmp_path: Path
) -> None:
    path = ex.drop("flights_1.csv", DATA)
    svc, hdfs, producer = extract_with_conditions(
        ex, tmp_path, initial_backoff_s=2.0, condition_backoff_s=5.0
    )
    hdfs.fail("create", QUOTA, times=3)
    cand = take(svc)
    for n in (1, 2, 3):
        svc.handle(cand)
        assert producer.acked == [] and path.read_bytes() == DATA
        assert not (ex.nas / ".ferry").exists()  # not moved to .ferry/failed
        h = svc.holds.held[cand.path]
        assert h.tries == n
        [held] = svc.holds.board.current()
        assert (held.reason, held.place, held.files) == ("quota_exceeded", "b:/ferry/landing", 1)
    # one create per attempt: the file is held, not retried inside the attempt
    assert [op for op, _ in hdfs.calls].count("create") == 3
    assert svc.holds.due([cand], h.next_at - 0.001) == []  # backoff min(5, 2·2^2) = 5 s
    assert h.next_at - h.first >= 5.0
    assert svc.holds.due([cand], h.next_at) == [cand]
    assert (
        json.loads((tmp_path / "run" / "extract.1.conditions").read_text())["conditions"][0][
            "files"
        ]
        == 1
    )
    svc.handle(cand)  # the condition cleared
    [(topic, _key, value)] = producer.acked
    assert topic == "unit.extracted" and isinstance(ex.codec.decode(value), FileExtracted)
    assert list(hdfs.files.values()) == [DATA]
    assert not path.exists() and svc.holds.held == {} and svc.holds.board.current() == []
    assert not (tmp_path / "run" / "extract.1.conditions").exists()
    assert svc.holds.attempts == 3


def test_extract_quarantines_with_the_conditions_reason_after_its_window(
    ex: Extract, tmp_path: Path
) -> None:
    ex.drop("flights_1.csv", DATA)
    svc, hdfs, producer = extract_with_conditions(ex, tmp_path, condition_window_s=1e-9)
    hdfs.fail("create", QUOTA, times=99)
    cand = take(svc)
    svc.handle(cand)
    assert producer.acked == []
    svc.handle(cand)  # the window passed
    [ev] = failed_events(ex.codec, producer)
    assert (ev.stage, ev.reason, ev.attempt) == ("extract", "quota_exceeded", 2)
    assert (ex.nas / ".ferry" / "failed" / "flights" / "flights_1.csv").read_bytes() == DATA
    assert svc.holds.board.current() == [] and svc.holds.held == {}


def test_extract_releases_a_held_file_moved_away_by_hand(ex: Extract, tmp_path: Path) -> None:
    path = ex.drop("flights_1.csv", DATA)
    svc, hdfs, _producer = extract_with_conditions(ex, tmp_path)
    hdfs.fail("create", QUOTA, times=99)
    cand = take(svc)
    svc.handle(cand)
    path.unlink()
    assert svc.holds.due([], 0.0) == []
    assert svc.holds.held == {} and svc.holds.board.current() == []


@pytest.mark.parametrize(
    ("error", "reason"),
    [
        (HdfsUnavailable("Connection refused: NameNode 127.0.0.1:19870"), "hdfs_unavailable"),
        (DataNodeUnreachable("datanode 127.0.0.1:19864 unreachable"), "datanode_unreachable"),
    ],
)
def test_extract_holds_the_file_while_cluster_b_is_out_of_reach_then_lands_it(
    ex: Extract, tmp_path: Path, error: Exception, reason: str
) -> None:
    """Issue 47's nemesis (seeds 47, 4747): B's DataNode killed for 84 s or its NameNode
    restarting quarantined good files in extract only. Out of reach is a condition of the
    cluster: the file stays on the NAS, the board says so, and it lands once B answers."""
    path = ex.drop("flights_1.csv", DATA)
    svc, hdfs, producer = extract_with_conditions(ex, tmp_path, max_attempts=2)
    hdfs.fail("create", error, times=99)
    cand = take(svc)
    for n in (1, 2):
        svc.handle(cand)
        assert producer.acked == [] and path.read_bytes() == DATA
        assert not (ex.nas / ".ferry").exists()
        [held] = svc.holds.board.current()
        assert (held.reason, held.files, svc.holds.held[cand.path].tries) == (reason, 1, n)
    hdfs._faults.clear()  # B answers again
    svc.handle(cand)
    [(topic, _key, value)] = producer.acked
    assert topic == "unit.extracted" and isinstance(ex.codec.decode(value), FileExtracted)
    assert not path.exists() and svc.holds.held == {} and svc.holds.board.current() == []


def test_extract_quarantines_with_the_outages_reason_after_the_window(
    ex: Extract, tmp_path: Path
) -> None:
    ex.drop("flights_1.csv", DATA)
    svc, hdfs, producer = extract_with_conditions(ex, tmp_path, condition_window_s=1e-9)
    hdfs.fail("create", DataNodeUnreachable("datanode 10.0.0.9:9864 unreachable"), times=99)
    cand = take(svc)
    svc.handle(cand)
    assert producer.acked == []
    svc.handle(cand)  # the window passed
    [ev] = failed_events(ex.codec, producer)
    assert (ev.stage, ev.reason, ev.attempt) == ("extract", "datanode_unreachable", 2)
    assert (ex.nas / ".ferry" / "failed" / "flights" / "flights_1.csv").read_bytes() == DATA
