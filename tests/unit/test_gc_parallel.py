"""The gc sweep removes several files' copies at once (``retention.parallel_files``) without
changing what it removes: one file's records in offset order, progress committed only up to the
first record not done, so a cluster that stops answering mid-round loses nothing."""

from __future__ import annotations

import threading
from pathlib import Path

import pytest
from tests.support.gc_helpers import Copies, FakeTopic, after, file, ms, sweepers

from ferry.clusters.hdfs.port import HdfsPort
from ferry.core.events import FileLoaded, failed
from ferry.core.wire.avro import EventCodec
from ferry.errors import TransientError
from ferry.gc.metrics import GcMetrics
from ferry.settings.retention import RetentionSettings

FOUR = RetentionSettings(parallel_files=4)


def loaded(topic: FakeTopic, codec: EventCodec, m, days: float) -> None:  # type: ignore[no-untyped-def]
    topic.append(0, ms(after(days)), codec.encode(FileLoaded(m, table="t")), m.file_id.encode())


def landing(m) -> str:  # type: ignore[no-untyped-def]
    return f"/ferry/landing/{m.dataset}/{m.file_id}/{m.source_path.rsplit('/', 1)[-1]}"


@pytest.fixture
def topic(monkeypatch: pytest.MonkeyPatch) -> FakeTopic:
    t = FakeTopic()
    t.install(monkeypatch)
    return t


def test_four_files_are_swept_at_once(
    tmp_path: Path, codec: EventCodec, topic: FakeTopic, monkeypatch: pytest.MonkeyPatch
) -> None:
    copies = Copies(tmp_path / "nas")
    files = [copies.lay(file("flights", n), after(0)) for n in range(12)]
    for m in files:
        loaded(topic, codec, m, 0.01)
    # The first 4 landing lookups wait for each other: the sweep passes only if 4 run at once.
    meet = threading.Barrier(4, timeout=10)
    met = threading.local()
    real = HdfsPort.status_or_none

    def status_or_none(port, path):  # type: ignore[no-untyped-def]
        if not getattr(met, "done", False) and "/landing/" in path:
            met.done = True
            meet.wait()
        return real(port, path)

    monkeypatch.setattr(type(copies.b), "status_or_none", status_or_none)
    fourteen = sweepers(FOUR, topic, codec, copies.remover(FOUR, GcMetrics()))[0]
    assert fourteen.label == "14d"
    assert fourteen.sweep(ms(after(14.02)), threading.Event()) == 12
    assert not meet.broken
    assert [landing(m) in copies.b.files for m in files] == [False] * 12
    assert topic.committed["p.gc.14d"] == {0: 12, 1: 0}


def test_one_files_records_are_swept_in_order_never_at_once(
    tmp_path: Path, codec: EventCodec, topic: FakeTopic, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A quarantined file released and loaded a day later: its FileFailed and FileLoaded fall due
    in the same round of the 14-day class. Swept in order, the failure sees the later run and
    keeps everything; the load then removes landing, staging and incoming, and the rejects stay
    for their 90 days. (Swept at once, the failure could find the copies already gone, take the
    file for never re-run and remove its rejects with the quarantine's 14 days.)"""
    copies = Copies(tmp_path / "nas")
    others = [copies.lay(file("weather", n), after(0)) for n in range(10)]
    q = copies.lay(file("flights", 3), after(0))
    quarantined = failed(stage="load", reason="x", error="x", manifest=q)
    topic.append(0, ms(after(0.01)), codec.encode(quarantined), q.file_id.encode())
    loaded(topic, codec, q, 1.01)  # offset 1: in the same round as its failure
    for m in others:
        loaded(topic, codec, m, 1.02)
    for zone in ("staging", "rejects"):  # re-staged on day 1 after the release
        copies.b.set_mtime(f"/ferry/{zone}/flights/{q.file_id}/part-0.parquet", ms(after(1)))
    copies.a.set_mtime(f"/ferry/incoming/flights/{q.file_id}/part-0.parquet", ms(after(1)))
    seen: list[tuple[str, str]] = []
    overlaps: list[str] = []
    running: set[str] = set()
    lock = threading.Lock()
    load_started = threading.Event()
    remover = copies.remover(FOUR, GcMetrics())
    real = type(remover).remove

    def remove(self, event, zones, event_ms, now_ms, label):  # type: ignore[no-untyped-def]
        fid, kind = event.manifest.file_id, type(event).__name__
        with lock:
            if fid in running:
                overlaps.append(fid)
            running.add(fid)
            seen.append((fid, kind))
        if fid == q.file_id and kind == "FileLoaded":
            load_started.set()
        if fid == q.file_id and kind == "FileFailed":
            # Give a concurrent sweep of the load every chance to start first; in order, the
            # load's sweep starts only after this returns, so this wait always runs out.
            load_started.wait(0.5)
        try:
            return real(self, event, zones, event_ms, now_ms, label)
        finally:
            with lock:
                running.discard(fid)

    monkeypatch.setattr(type(remover), "remove", remove)
    fourteen = sweepers(FOUR, topic, codec, remover)[0]
    assert fourteen.sweep(ms(after(15.5)), threading.Event()) == 12
    assert overlaps == []
    assert [kind for fid, kind in seen if fid == q.file_id] == ["FileFailed", "FileLoaded"]
    assert f"/ferry/rejects/flights/{q.file_id}/part-0.parquet" in copies.b.files
    assert landing(q) not in copies.b.files
    assert f"/ferry/staging/flights/{q.file_id}/part-0.parquet" not in copies.b.files
    assert f"/ferry/incoming/flights/{q.file_id}/part-0.parquet" not in copies.a.files


def test_a_cluster_failing_mid_round_commits_only_the_records_before_it(
    tmp_path: Path, codec: EventCodec, topic: FakeTopic
) -> None:
    copies = Copies(tmp_path / "nas")
    files = [copies.lay(file("flights", n), after(0)) for n in range(10)]
    for m in files:
        loaded(topic, codec, m, 0.01)
    copies.b.fail("status", TransientError("NameNode B: timed out"), path_contains=files[5].file_id)
    fourteen = sweepers(FOUR, topic, codec, copies.remover(FOUR, GcMetrics()))[0]
    with pytest.raises(TransientError, match="NameNode B: timed out"):
        fourteen.sweep(ms(after(14.02)), threading.Event())
    assert topic.committed["p.gc.14d"] == {0: 5, 1: 0}
    assert [landing(m) in copies.b.files for m in files[:6]] == [False] * 5 + [True]
    # The next sweep starts at the failed record; those already swept after it are "gone".
    assert fourteen.sweep(ms(after(14.03)), threading.Event()) == 5
    assert topic.committed["p.gc.14d"] == {0: 10, 1: 0}
    assert [landing(m) in copies.b.files for m in files] == [False] * 10
