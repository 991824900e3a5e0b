"""extract: a NAS file some process holds open for writing is not taken (issue 33,
``ferry.stages.extract.writers``): writers found in /proc by real child processes, the inotify
"written, not closed" note, and the service holding a paused writer's file past its stable
window."""

from __future__ import annotations

import subprocess
import sys
import threading
from collections.abc import Iterator, Mapping
from pathlib import Path

import pytest
from tests.support.extract_helpers import DATA, HEADER, candidate, drop, service, with_
from tests.support.fakes import FakeProducer

from ferry.core.wire.avro import EventCodec
from ferry.datasets.fields import FinishedPolicy
from ferry.datasets.spec import DatasetSpec
from ferry.stages.extract.scanner import Candidate, NasScanner
from ferry.stages.extract.watcher import NasWatcher
from ferry.stages.extract.writers import ProcScan, Writer, WriterCheck, open_writers
from ferry_kit.testing.waiting import wait_for

pytestmark = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="/proc is Linux")

#: Opens argv[1] in mode argv[2], writes argv[3] (if any), prints "open", waits for a line on
#: stdin, writes argv[4] (if any), closes.
HOLDER = r"""
import sys
with open(sys.argv[1], sys.argv[2]) as f:
    if sys.argv[3]:
        f.write(sys.argv[3].encode())
        f.flush()
    print("open", flush=True)
    sys.stdin.readline()
    if sys.argv[4]:
        f.write(sys.argv[4].encode())
"""


class Holder:
    """A child process holding ``path`` open in ``mode`` until :meth:`finish`."""

    def __init__(self, path: Path, mode: str, first: bytes = b"", rest: bytes = b"") -> None:
        self.proc = subprocess.Popen(  # noqa: S603
            [sys.executable, "-c", HOLDER, str(path), mode, first.decode(), rest.decode()],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            text=True,
        )
        assert self.proc.stdout is not None
        assert self.proc.stdout.readline() == "open\n"

    def finish(self) -> None:
        assert self.proc.stdin is not None
        self.proc.stdin.write("go\n")
        self.proc.stdin.close()
        assert self.proc.wait(timeout=30) == 0


@pytest.fixture
def holders() -> Iterator[list[Holder]]:
    made: list[Holder] = []
    yield made
    for h in made:
        if h.proc.poll() is None:
            h.proc.kill()
            h.proc.wait(timeout=30)


def ident(path: Path) -> tuple[int, int]:
    st = path.stat()
    return st.st_dev, st.st_ino


def test_proc_shows_write_descriptors_and_not_readers(
    tmp_path: Path, holders: list[Holder]
) -> None:
    appended, updated, read = (tmp_path / n for n in ("a.csv", "b.csv", "c.csv"))
    for p in (appended, updated, read):
        p.write_bytes(DATA)
    files = {ident(p): p.name for p in (appended, updated, read)}
    assert open_writers(files) == ProcScan({})
    a, b = Holder(appended, "ab"), Holder(updated, "r+b")  # O_WRONLY|O_APPEND, O_RDWR
    c = Holder(read, "rb")
    holders += [a, b, c]
    seen = open_writers(files)
    assert seen.hidden == 0  # these tests run as one user: every process is visible
    assert {files[k]: [(w.pid, w.command, w.fd) for w in ws] for k, ws in seen.writers.items()} == {
        "a.csv": [(a.proc.pid, "python", 3)],
        "b.csv": [(b.proc.pid, "python", 3)],
    }
    a.finish()
    b.finish()
    c.finish()
    assert open_writers(files) == ProcScan({})


def test_proc_matches_the_inode_not_the_name(tmp_path: Path, holders: list[Holder]) -> None:
    """Another file of the same base name elsewhere, held open, is not this file's writer."""
    (tmp_path / "x").mkdir()
    ours, other = tmp_path / "flights_1.csv", tmp_path / "x" / "flights_1.csv"
    ours.write_bytes(DATA)
    other.write_bytes(DATA)
    holders.append(Holder(other, "ab"))
    assert open_writers({ident(ours): ours.name}) == ProcScan({})
    assert list(open_writers({ident(other): other.name}).writers) == [ident(other)]


def _cand(tmp_path: Path, spec: DatasetSpec, name: str) -> Candidate:
    c = candidate(tmp_path, spec, name, DATA)
    return Candidate(c.path, spec, c.relative, c.size, c.mtime_ns, identity=ident(c.path))


class Finder:
    """A fake /proc: writers per (dev, ino), ``hidden`` processes; records its calls."""

    def __init__(self, writers: Mapping[tuple[int, int], tuple[Writer, ...]], hidden: int = 0):
        self.scan = ProcScan(writers, hidden)
        self.calls: list[dict[tuple[int, int], str]] = []

    def __call__(self, files: Mapping[tuple[int, int], str]) -> ProcScan:
        self.calls.append(dict(files))
        return self.scan


def test_a_file_with_a_writer_is_held_and_named_in_the_log(
    tmp_path: Path, flights: DatasetSpec, caplog: pytest.LogCaptureFixture
) -> None:
    busy, free = (
        _cand(tmp_path, flights, "flights_1.csv"),
        _cand(tmp_path, flights, "flights_2.csv"),
    )
    assert busy.identity is not None
    check = WriterCheck(Finder({busy.identity: (Writer(4242, "sftp-server", 7),)}))
    caplog.set_level("INFO", "ferry.stages.extract.writers")
    assert check.split([busy, free]) == ([free], [busy])
    assert check.split([busy]) == ([], [busy])  # logged once while the same writer holds it
    assert [r.getMessage() for r in caplog.records] == [
        "extract: flights/flights_1.csv is open for writing by pid 4242 (sftp-server) fd 7; "
        "not taken until its writer closes it"
    ]


def test_a_write_not_yet_closed_holds_the_file_until_the_close(
    tmp_path: Path, flights: DatasetSpec
) -> None:
    """inotify's note counts when /proc cannot see every process (another user's writer)."""
    c = _cand(tmp_path, flights, "flights_1.csv")
    check = WriterCheck(Finder({}, hidden=3))
    check.written(c.path)
    assert check.split([c]) == ([], [c])
    check.closed(c.path)
    assert check.split([c]) == ([c], [])
    inotify_only = WriterCheck(None)  # no /proc at all (not Linux)
    inotify_only.written(c.path)
    assert inotify_only.split([c]) == ([], [c])


def test_a_lost_close_event_is_forgiven_when_proc_sees_every_process(
    tmp_path: Path, flights: DatasetSpec
) -> None:
    c = _cand(tmp_path, flights, "flights_1.csv")
    check = WriterCheck(Finder({}, hidden=0))
    check.written(c.path)
    assert check.split([c]) == ([c], [])
    assert check.is_written(c.path) is False


def test_proc_is_not_read_for_a_file_inotify_saw_closed(
    tmp_path: Path, flights: DatasetSpec
) -> None:
    vouched, polled = (
        _cand(tmp_path, flights, "flights_1.csv"),
        _cand(tmp_path, flights, "flights_2.csv"),
    )
    finder = Finder({})
    check = WriterCheck(finder)
    assert check.split([vouched, polled], closed=lambda p: p == vouched.path) == (
        [vouched, polled],
        [],
    )
    assert finder.calls == [{polled.identity: "flights_2.csv"}]
    finder.scan = ProcScan({}, hidden=1)  # another user's processes cannot be seen
    check.written(vouched.path)  # written again after its close: looked up, and held
    assert check.split([vouched], closed=lambda p: True) == ([], [vouched])
    assert finder.calls[-1] == {vouched.identity: "flights_1.csv"}


def test_refused_entries_are_never_held_nor_looked_up(tmp_path: Path, flights: DatasetSpec) -> None:
    c = _cand(tmp_path, flights, "flights_1.csv")
    refused = Candidate(c.path, flights, c.relative, 0, 0, refusal=("symlink_refused", "a link"))
    finder = Finder({})
    check = WriterCheck(finder)
    check.written(c.path)
    assert check.split([refused]) == ([refused], [])
    assert finder.calls == []


def test_the_watcher_notes_a_write_until_its_close(tmp_path: Path, flights: DatasetSpec) -> None:
    (tmp_path / "flights").mkdir()
    scanner = NasScanner(tmp_path, {"flights": flights})
    check = WriterCheck(None)
    watcher = NasWatcher(scanner, lambda: None, writers=check)
    watcher.start()
    try:
        path = tmp_path / "flights" / "flights_1.csv"
        with path.open("wb") as f:
            f.write(HEADER)
            f.flush()
            wait_for(lambda: check.is_written(path), "the write noted", 10)
        wait_for(lambda: not check.is_written(path), "the close noted", 10)
        assert scanner.is_marked(path)
    finally:
        watcher.stop()


def test_the_service_waits_for_a_paused_writer_past_the_stable_window(
    tmp_path: Path, flights: DatasetSpec, codec: EventCodec, holders: list[Holder]
) -> None:
    """Issue 33: 10 s pause, 4 s stable window, here scaled down: the file stays open and
    unchanged over many stable windows; it is taken whole once its writer closed it."""
    spec = with_(flights, finished=FinishedPolicy(stable_polls=1, poll_interval_s=0.01))
    producer = FakeProducer()
    svc, hdfs = service(tmp_path, spec, producer, codec)
    svc.writers = WriterCheck()
    path = drop(svc.settings.paths.nas_dir, "flights_1.csv", b"")
    holder = Holder(path, "wb", HEADER, DATA[len(HEADER) :])
    holders.append(holder)
    done = threading.Event()
    for _ in range(20):  # every scan: stable, but open for writing
        svc.run_once()
        done.wait(0.02)
    assert (svc.stats.extracted, svc.stats.failed, hdfs.files) == (0, 0, {})
    holder.finish()
    wait_for(lambda: svc.run_once() or svc.stats.extracted == 1, "the closed file taken", 10)
    assert list(hdfs.files.values()) == [DATA]
