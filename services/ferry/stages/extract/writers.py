"""Open writers: a NAS file some process still holds open for writing is not finished (issue 33).

A writer that pauses longer than a dataset's stable window (``stable_polls`` x ``poll_interval_s``)
with its file open left the file's size and mtime stable, so the stable policy alone took it
early and lost what the writer wrote afterwards. Whatever the stable window or a close event
says, a candidate is held back while extract sees a writer, by either of:

- **inotify** (:mod:`ferry.stages.extract.watcher`, local file systems): a write
  (``IN_MODIFY``) with no close-after-write (``IN_CLOSE_WRITE``) since; this sees the writes of
  every process, whichever user it runs as, but only those made while extract runs;
- **/proc** (Linux): a process with a descriptor on the file's inode opened ``O_WRONLY`` or
  ``O_RDWR`` (the ``flags`` line of ``/proc/<pid>/fdinfo/<fd>``); this sees writers that opened the
  file before extract started, but only processes extract may inspect (its own user's, or all
  of them with root or ``CAP_SYS_PTRACE``).

An inotify "written, not closed" note is dropped when /proc saw every process and none writes
the file (the close event was lost, e.g. to an inotify queue overflow). /proc is read only for
files no inotify event vouches for (closed after writing, or renamed into place, and not written
since): those found by the stable window alone — present when extract started, on a polled
mount, or left open by a writer that paused. On a network mount
(NFS, SMB) a writer on another host is visible to neither: there the stable window and the
marker policy stay the rule (docs/operations.md, "Writers and the stable window"), and a file
changed after it was taken is caught by :mod:`ferry.stages.extract.afterwards`.
"""

from __future__ import annotations

import logging
import os
import sys
import threading
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path

from ferry.settings.stages import ExtractSettings
from ferry.stages.extract.scanner import Candidate, display_name

log = logging.getLogger(__name__)

PROC = Path("/proc")


@dataclass(frozen=True)
class Writer:
    """A process holding a file open for writing: its pid, command name and descriptor."""

    pid: int
    command: str
    fd: int

    def __str__(self) -> str:
        return f"pid {self.pid} ({self.command}) fd {self.fd}"


@dataclass(frozen=True)
class ProcScan:
    """What :func:`open_writers` found: writers per ``(st_dev, st_ino)``, and how many processes'
    descriptors could not be read (another user's, without the privilege to look)."""

    writers: Mapping[tuple[int, int], tuple[Writer, ...]]
    hidden: int = 0


def _flags(fdinfo: Path) -> int | None:
    """The open flags (octal in ``fdinfo``'s ``flags:`` line) of one descriptor, or None."""
    try:
        text = fdinfo.read_text(encoding="ascii", errors="replace")
    except OSError:
        return None
    for line in text.splitlines():
        if line.startswith("flags:"):
            try:
                return int(line.split(":", 1)[1].strip(), 8)
            except ValueError:
                return None
    return None


def _command(pid_dir: Path) -> str:
    try:
        return (pid_dir / "comm").read_text(encoding="utf-8", errors="replace").strip()
    except OSError:
        return "?"


def open_writers(files: Mapping[tuple[int, int], str], proc: Path = PROC) -> ProcScan:
    """Processes (other than this one) with a write descriptor on any of ``files``.

    Args:
        files: ``(st_dev, st_ino)`` → the file's current base name. Only descriptors whose link
            text ends with one of these names are ``stat``-ed (so a descriptor on a hung
            network mount elsewhere is never touched), then matched by device and inode.
        proc: the proc file system's mount point.

    Returns:
        The writers found and the count of processes whose descriptors could not be listed.
        Never raises for a process that exits or hides its descriptors during the scan.
    """
    if not files:
        return ProcScan({})
    names = set(files.values())
    me = str(os.getpid())
    found: dict[tuple[int, int], list[Writer]] = {}
    hidden = 0
    try:
        pids = [e.name for e in os.scandir(proc) if e.name.isdigit() and e.name != me]
    except OSError:
        return ProcScan({}, hidden=1)  # no /proc: nothing can be said
    for pid in pids:
        fd_dir = proc / pid / "fd"
        try:
            fds = os.listdir(fd_dir)
        except PermissionError:
            hidden += 1
            continue
        except OSError:
            continue  # exited
        for fd in fds:
            try:
                target = os.readlink(fd_dir / fd)
            except OSError:
                continue
            if os.path.basename(target.removesuffix(" (deleted)")) not in names:
                continue
            try:
                st = os.stat(fd_dir / fd)
            except OSError:
                continue
            key = (st.st_dev, st.st_ino)
            if key not in files:
                continue
            flags = _flags(proc / pid / "fdinfo" / fd)
            if flags is None or flags & os.O_ACCMODE == os.O_RDONLY:
                continue
            found.setdefault(key, []).append(Writer(int(pid), _command(proc / pid), int(fd)))
    return ProcScan({k: tuple(v) for k, v in found.items()}, hidden)


Finder = Callable[[Mapping[tuple[int, int], str]], ProcScan]


class WriterCheck:
    """Holds back candidates that still have a writer (see the module docstring).

    The watcher calls :meth:`written` and :meth:`closed` from its thread; the extract loop
    calls :meth:`split` on each scan's candidates.

    Args:
        finder: :func:`open_writers` (or a fake); ``None``: inotify notes only.
    """

    def __init__(self, finder: Finder | None = open_writers) -> None:
        self.finder = finder
        self._written: set[Path] = set()
        self._lock = threading.Lock()
        #: paths held and not taken since, and why (logged once while the reason lasts)
        self._held: dict[Path, str] = {}

    def written(self, path: Path) -> None:
        """inotify saw a write to ``path`` (``IN_MODIFY``)."""
        with self._lock:
            self._written.add(path)

    def closed(self, path: Path) -> None:
        """inotify saw ``path`` closed after writing (``IN_CLOSE_WRITE``)."""
        with self._lock:
            self._written.discard(path)

    def is_written(self, path: Path) -> bool:
        """True while a write to ``path`` was seen and no close after it."""
        with self._lock:
            return path in self._written

    def split(
        self, cands: Iterable[Candidate], closed: Callable[[Path], bool] | None = None
    ) -> tuple[list[Candidate], list[Candidate]]:
        """(the candidates to take, those held back because a writer still has them open).

        ``closed(path)``: inotify vouches that the file's writer closed it (or renamed it into
        place) and nothing wrote to it since (the scanner's mark); such files are not looked
        up in /proc, which costs a pass over every process's descriptors. Refused candidates
        (``refusal`` set) are never held: nothing of them is read. Logs each held file once
        (info) while it stays held for the same reason."""
        cands = list(cands)
        with self._lock:
            written = {p for p in self._written if os.path.lexists(p)}
            self._written = written
        judged = [
            c
            for c in cands
            if c.refusal is None and not (closed and closed(c.path) and c.path not in written)
        ]
        scan = None
        if self.finder is not None and judged:
            scan = self.finder({c.identity: c.path.name for c in judged if c.identity})
        take: list[Candidate] = []
        held: list[Candidate] = []
        for c in cands:
            why = self._why(c, written, scan) if c.refusal is None else None
            if why is None:
                take.append(c)
                self._held.pop(c.path, None)
                continue
            held.append(c)
            if self._held.get(c.path) != why:
                log.info(
                    "extract: %s is %s; not taken until its writer closes it",
                    display_name(c.relative),
                    why,
                )
            self._held[c.path] = why
        self._held = {p: w for p, w in self._held.items() if os.path.lexists(p)}
        return take, held

    def _why(self, c: Candidate, written: set[Path], scan: ProcScan | None) -> str | None:
        procs = scan.writers.get(c.identity, ()) if scan and c.identity else ()
        if procs:
            return "open for writing by " + ", ".join(str(w) for w in procs)
        if c.path not in written:
            return None
        if scan is not None and scan.hidden == 0 and c.identity is not None:
            # /proc saw every process and none writes it: the close event was lost
            log.info(
                "extract: %s was written and no close was seen, but no process has it open "
                "for writing; taken",
                display_name(c.relative),
            )
            self.closed(c.path)
            return None
        return "written (inotify) and not closed since"


def writer_check(extract: ExtractSettings) -> WriterCheck | None:
    """The check ``extract.hold_open_files`` asks for (with /proc on Linux), or None."""
    if not extract.hold_open_files:
        return None
    return WriterCheck(open_writers if sys.platform.startswith("linux") else None)
