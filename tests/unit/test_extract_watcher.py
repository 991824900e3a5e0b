"""extract: event-driven finished-file detection (ferry.stages.extract.watcher, case C09) with a
real temp directory and watchdog's real inotify observer: what completes a file at once, what
withdraws it, what is never taken, which mounts are polled, and the service woken by the event."""

from __future__ import annotations

import os
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from tests.support.extract_helpers import DATA, HEADER, service
from tests.support.fakes import FakeProducer

from ferry.core.wire.avro import EventCodec
from ferry.datasets.fields import FinishedPolicy
from ferry.datasets.spec import DatasetSpec
from ferry.stages.extract.scanner import Candidate, NasScanner
from ferry.stages.extract.watcher import NasWatcher, choose_detection, mount_note
from ferry_kit.testing.waiting import wait_for

pytestmark = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="inotify is Linux")


class Wakes:
    """Counts the watcher's wake-ups."""

    def __init__(self) -> None:
        self.count = 0
        self._lock = threading.Lock()

    def __call__(self) -> None:
        with self._lock:
            self.count += 1


@pytest.fixture
def watched(tmp_path: Path, flights: DatasetSpec) -> Iterator[tuple[NasScanner, NasWatcher, Path]]:
    """A scanner on ``tmp_path`` (flights only) with a started watcher; the flights directory."""
    (tmp_path / "flights").mkdir()
    scanner = NasScanner(tmp_path, {"flights": flights})
    watcher = NasWatcher(scanner, Wakes())
    watcher.start()
    try:
        yield scanner, watcher, tmp_path / "flights"
    finally:
        watcher.stop()


def decisions(watcher: NasWatcher) -> list[tuple[str, str]]:
    return list(watcher.handler.decisions)


def write_closed(scanner: NasScanner, path: Path, data: bytes) -> Path:
    """Write ``data`` to ``path`` in one open-write-close and wait (10 s at most) until the
    watcher has marked it complete on close."""
    path.write_bytes(data)
    wait_for(lambda: scanner.is_marked(path), f"{path.name} marked on close", 10)
    return path


def test_a_rename_from_a_hidden_name_is_complete_at_once(
    watched: tuple[NasScanner, NasWatcher, Path], flights: DatasetSpec
) -> None:
    scanner, watcher, d = watched
    tmp = d / ".flights_1.csv.tmp"
    tmp.write_bytes(DATA)  # closed after writing: hidden, never marked
    os.rename(tmp, d / "flights_1.csv")
    wait_for(lambda: decisions(watcher), "the watcher's decision on the rename", 10)
    assert decisions(watcher) == [("complete", "flights_1.csv")]
    st = (d / "flights_1.csv").stat()
    # first scan at t=0 takes it: no stable_polls x poll_interval_s wait
    assert scanner.scan(0.0) == [
        Candidate(d / "flights_1.csv", flights, "flights/flights_1.csv", len(DATA), st.st_mtime_ns)
    ]


def test_a_file_written_in_place_is_complete_when_its_writer_closes_it(
    watched: tuple[NasScanner, NasWatcher, Path],
) -> None:
    scanner, watcher, d = watched
    path = d / "flights_2.csv"
    with path.open("wb") as f:
        f.write(HEADER)
        f.flush()
        assert scanner.scan(0.0) == []
        assert scanner.scan(0.0) == []  # open: neither marked nor stable
        f.write(DATA[len(HEADER) :])
    wait_for(lambda: scanner.is_marked(path), "flights_2.csv marked on close", 10)
    assert decisions(watcher) == [("complete", "flights_2.csv")]
    [cand] = scanner.scan(0.0)
    assert (cand.path, cand.size) == (path, len(DATA))


def test_a_write_after_the_close_withdraws_the_mark(
    watched: tuple[NasScanner, NasWatcher, Path],
) -> None:
    scanner, watcher, d = watched
    path = write_closed(scanner, d / "flights_3.csv", HEADER)
    with path.open("ab") as f:  # the writer reopens it and appends
        f.write(b"2013,1,1,517\n")
        f.flush()
        wait_for(lambda: not scanner.is_marked(path), "the mark withdrawn by the write", 10)
        assert decisions(watcher) == [("complete", "flights_3.csv"), ("changed", "flights_3.csv")]
        assert scanner.scan(0.0) == []  # back to the stable check: first sight
    wait_for(lambda: scanner.is_marked(path), "flights_3.csv marked again on close", 10)
    assert decisions(watcher)[2:] == [("complete", "flights_3.csv")]
    [cand] = scanner.scan(1.0)
    assert cand.size == len(HEADER) + len(b"2013,1,1,517\n")


def test_hidden_and_foreign_names_are_never_marked(
    watched: tuple[NasScanner, NasWatcher, Path],
) -> None:
    scanner, watcher, d = watched
    (d / ".flights_4.csv").write_bytes(DATA)
    (d / "notes.txt").write_bytes(DATA)  # not the pattern flights_*.csv
    os.rename(d / "notes.txt", d / "notes2.txt")
    (d / "flights_5.csv").write_bytes(DATA)  # the sentinel: events arrive in order
    wait_for(lambda: decisions(watcher), "the sentinel's decision", 10)
    assert decisions(watcher) == [("complete", "flights_5.csv")]
    assert [c.path.name for c in scanner.scan(0.0)] == ["flights_5.csv"]


def test_a_marked_file_that_changed_unseen_falls_back_to_the_stable_check(
    watched: tuple[NasScanner, NasWatcher, Path],
) -> None:
    scanner, _, d = watched
    path = write_closed(scanner, d / "flights_6.csv", DATA)
    os.utime(path, ns=(1, 1))  # attributes only: no write event, but not what was marked
    assert scanner.scan(0.0) == []
    assert scanner.scan(2.0) == []
    assert [c.path for c in scanner.scan(4.0)] == [path]


def test_the_marker_policy_is_not_changed_by_marks(tmp_path: Path, flights: DatasetSpec) -> None:
    spec = flights.model_copy(update={"finished": FinishedPolicy(policy="marker")})
    path = tmp_path / "flights" / "flights_7.csv"
    path.parent.mkdir()
    path.write_bytes(DATA)
    scanner = NasScanner(tmp_path, {"flights": spec})
    assert scanner.mark_complete(path) is False  # marker policy: only the marker counts
    assert scanner.is_marked(path) is False
    assert scanner.scan(0.0) == []


def test_the_log_says_a_network_mount_hides_remote_writers(tmp_path: Path) -> None:
    assert mount_note(tmp_path, fstype="ext4") == ""
    assert mount_note(tmp_path, fstype="nfs4") == (
        " (a nfs4 mount: a writer on another host is not seen, so each dataset's stable "
        "window or marker policy decides when a file is finished)"
    )
    assert mount_note(tmp_path, fstype="fuse.sshfs").startswith(" (a fuse.sshfs mount")


def test_auto_polls_remote_mounts_and_watches_local_ones(tmp_path: Path) -> None:
    assert choose_detection("auto", tmp_path, fstype="ext4") == "inotify"
    assert choose_detection("auto", tmp_path, fstype="tmpfs") == "inotify"
    assert choose_detection("auto", tmp_path, fstype="overlay") == "inotify"
    for remote in ("nfs", "nfs4", "cifs", "smb3", "fuse.sshfs", "9p"):
        assert choose_detection("auto", tmp_path, fstype=remote) == "poll"
    assert choose_detection("poll", tmp_path, fstype="ext4") == "poll"
    assert choose_detection("inotify", tmp_path, fstype="nfs4") == "inotify"


def test_the_service_takes_a_renamed_file_on_the_event_not_the_clock(
    tmp_path: Path, flights: DatasetSpec, codec: EventCodec
) -> None:
    producer = FakeProducer()
    svc, hdfs = service(tmp_path, flights, producer, codec)
    svc.settings = svc.settings.model_copy(
        update={
            "extract": svc.settings.extract.model_copy(
                update={"detection": "inotify", "poll_interval_s": 3600.0}
            )
        }
    )
    nas = tmp_path / "nas"
    (nas / "flights").mkdir(parents=True)
    runner = threading.Thread(target=svc.run, name="extract-under-test")
    runner.start()
    try:
        wait_for(lambda: svc.stats.scans >= 1, "the first scan", 10)
        assert svc.detection == "inotify"
        tmp = nas / "flights" / ".flights_9.csv.part"
        tmp.write_bytes(DATA)
        os.replace(tmp, nas / "flights" / "flights_9.csv")
        # the next poll is an hour away: only the event can bring the file in
        wait_for(lambda: svc.stats.extracted == 1, "flights_9.csv extracted", 20)
    finally:
        svc.stop()
        runner.join(10)
    assert not runner.is_alive()
    assert list(hdfs.files.values()) == [DATA]
    assert (nas / ".ferry" / "archive" / "flights" / "flights_9.csv").read_bytes() == DATA
    assert svc.stats.scans == 2


def test_a_closed_file_is_taken_once_its_settle_time_passed(
    tmp_path: Path, flights: DatasetSpec
) -> None:
    (tmp_path / "flights").mkdir()
    scanner = NasScanner(tmp_path, {"flights": flights})
    watcher = NasWatcher(scanner, Wakes(), close_settle_s=0.3)
    watcher.start()
    try:
        path = write_closed(scanner, tmp_path / "flights" / "flights_10.csv", DATA)
        now = time.monotonic()
        due = scanner.next_due(now)
        assert due is not None and now < due <= now + 0.3
        assert scanner.scan(now) == []  # still settling (and first sight for the stable check)
        assert scanner.next_due(due) is None
        assert [c.path for c in scanner.scan(due)] == [path]  # due: taken without the 4 s wait
    finally:
        watcher.stop()
    assert decisions(watcher) == [("complete", "flights_10.csv")]
