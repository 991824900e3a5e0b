"""Event-driven finished-file detection (case C09, docs/field-cases.md), beside the polling scan.

Where the OS reports file events for the NAS directory (inotify on a local Linux file system),
a file is complete as soon as:

* its writer closed it after writing (``IN_CLOSE_WRITE``, watchdog's ``FileClosedEvent``) and
  ``extract.close_settle_s`` passed without a further write (a writer that reopens the file at
  once, ``cat a > x; cat b >> x``, is not cut between its rounds), or
* it appeared by a rename from a hidden name (``.x.csv.tmp`` → ``x.csv``; watchdog's
  ``FileMovedEvent``): the upstream wrote it whole under the hidden name first.

Either marks the file complete in :class:`~ferry.stages.extract.scanner.NasScanner` with its
size and mtime at that moment, and wakes the extract loop, which scans when the mark is due:
the file is taken on that scan, without the stable-size wait. A later write to it
(``FileModifiedEvent``) withdraws the mark, so a writer that reopens the file is waited for
again. Every write and close-after-write is also told to the
:class:`~ferry.stages.extract.writers.WriterCheck`, which holds a file back from a write until
its close, whatever the stable window says (a writer pausing with its file open, issue 33).
Polling stays as the safety net (files present at start, an event queue overflow): every
``poll_interval_s`` the scan runs anyway, with the stable-size check for files no event marked.

NFS and SMB mounts do not raise inotify events for writes made on another host, so under
``detection: auto`` (the default) such mounts are polled; ``inotify`` and ``poll`` force one way.
"""

from __future__ import annotations

import logging
import os
import sys
import threading
from collections.abc import Callable
from pathlib import Path
from typing import Literal

import psutil
from watchdog.events import (
    FileClosedEvent,
    FileModifiedEvent,
    FileMovedEvent,
    FileSystemEvent,
    FileSystemEventHandler,
)

from ferry.errors import ConfigError
from ferry.settings import Settings
from ferry.stages.extract.scanner import NasScanner
from ferry.stages.extract.writers import WriterCheck

log = logging.getLogger(__name__)

Detection = Literal["auto", "inotify", "poll"]

#: File system types whose remote writes raise no inotify event on this host: polled under
#: ``auto`` (``nfs``/``nfs4``, SMB's ``cifs``/``smb3``, 9p, FUSE mounts such as sshfs, and the
#: cluster file systems).
POLLED_FS_TYPES = frozenset(
    {"nfs", "nfs4", "cifs", "smb3", "smbfs", "9p", "afs", "ceph", "glusterfs", "lustre", "gpfs"}
)


def fs_type(path: Path) -> str:
    """The file system type (``ext4``, ``nfs4``, …) of the mount holding ``path``: the mount
    point that is the longest prefix of its real path, from ``psutil.disk_partitions(all=True)``
    (``/proc/mounts`` on Linux); ``""`` when no mount point matches."""
    real = os.path.realpath(path)
    best, kind = "", ""
    for part in psutil.disk_partitions(all=True):
        mount = part.mountpoint.rstrip("/") or "/"
        inside = real == mount or real.startswith(mount.rstrip("/") + "/")
        if inside and len(mount) >= len(best):
            best, kind = mount, part.fstype
    return kind


def mount_note(nas_dir: Path, fstype: str | None = None) -> str:
    """For extract's start-up log: on a network mount (:data:`POLLED_FS_TYPES`, ``fuse.*``), a
    note that writers on other hosts are invisible there, so the dataset's stable window or
    marker policy decides when a file is finished (issue 33); else ``""``."""
    kind = fs_type(nas_dir) if fstype is None else fstype
    if kind in POLLED_FS_TYPES or kind.startswith("fuse"):
        return (
            f" (a {kind} mount: a writer on another host is not seen, so each dataset's stable "
            "window or marker policy decides when a file is finished)"
        )
    return ""


def choose_detection(setting: Detection, nas_dir: Path, fstype: str | None = None) -> str:
    """``"inotify"`` or ``"poll"`` for the NAS directory under ``setting``.

    ``auto``: ``poll`` when the platform is not Linux or the mount's type (``fstype``, else
    :func:`fs_type`) is remote (:data:`POLLED_FS_TYPES` or ``fuse.*``), else ``inotify``.
    """
    if setting != "auto":
        return setting
    if not sys.platform.startswith("linux"):
        return "poll"
    kind = fs_type(nas_dir) if fstype is None else fstype
    return "poll" if kind in POLLED_FS_TYPES or kind.startswith("fuse") else "inotify"


class CompletionHandler(FileSystemEventHandler):
    """Turns watchdog events in the watched dataset directories into scanner marks.

    ``decisions`` lists what it did, in order: ``("complete", name)`` for a file closed after
    writing or renamed from a hidden name, ``("changed", name)`` when a write withdrew a mark.
    Hidden names are never marked (they are not candidates).
    """

    def __init__(
        self,
        scanner: NasScanner,
        dirs: set[Path],
        wake: Callable[[], None],
        close_settle_s: float = 0.0,
        writers: WriterCheck | None = None,
    ) -> None:
        self.scanner = scanner
        self.close_settle_s = close_settle_s
        self.dirs = dirs
        self.wake = wake
        self.writers = writers
        self.decisions: list[tuple[str, str]] = []
        self._lock = threading.Lock()

    def _watched(self, raw: bytes | str) -> Path | None:
        path = Path(os.fsdecode(raw))
        if path.parent not in self.dirs or path.name.startswith("."):
            return None
        return path

    def _note(self, what: str, path: Path) -> None:
        with self._lock:
            self.decisions.append((what, path.name))

    def on_closed(self, event: FileSystemEvent) -> None:
        path = self._watched(event.src_path)
        if not isinstance(event, FileClosedEvent) or path is None:
            return
        if self.writers is not None:
            self.writers.closed(path)
        if self.scanner.mark_complete(path, self.close_settle_s):
            self._note("complete", path)
            self.wake()

    def on_moved(self, event: FileSystemEvent) -> None:
        if not isinstance(event, FileMovedEvent):
            return
        path = self._watched(event.dest_path)
        hidden = Path(os.fsdecode(event.src_path)).name.startswith(".")
        if path and hidden and self.scanner.mark_complete(path):
            self._note("complete", path)
            self.wake()

    def on_modified(self, event: FileSystemEvent) -> None:
        path = self._watched(event.src_path)
        if not isinstance(event, FileModifiedEvent) or path is None:
            return
        if self.writers is not None:
            self.writers.written(path)
        if self.scanner.unmark(path):
            self._note("changed", path)


class NasWatcher:
    """Runs watchdog's inotify observer on each dataset directory of ``scanner``.

    :meth:`start` schedules the directories that exist (not recursive: ``.ferry/`` is not
    watched); a directory created later is only polled until the next restart.

    Raises (from :meth:`start`):
        ConfigError: the OS refused the watches (e.g. ``fs.inotify.max_user_watches``
            reached); under ``auto`` the caller polls instead.
    """

    def __init__(
        self,
        scanner: NasScanner,
        wake: Callable[[], None],
        close_settle_s: float = 0.0,
        writers: WriterCheck | None = None,
    ) -> None:
        self.scanner = scanner
        dirs = {scanner.nas_dir / s.nas.subdir for s in scanner.datasets.values()}
        self.dirs = {d for d in dirs if d.is_dir()}
        self.handler = CompletionHandler(scanner, self.dirs, wake, close_settle_s, writers)
        self._observer: object | None = None

    def start(self) -> None:
        from watchdog.observers.inotify import InotifyObserver

        try:
            observer = InotifyObserver()
            for d in sorted(self.dirs):
                observer.schedule(self.handler, str(d), recursive=False)
            observer.start()
        except OSError as exc:
            raise ConfigError(f"extract: inotify watches on the NAS refused: {exc}") from exc
        self._observer = observer
        log.info("extract: inotify on %s", ", ".join(str(d) for d in sorted(self.dirs)))

    def stop(self, timeout_s: float = 5.0) -> None:
        observer = self._observer
        if observer is None:
            return
        from watchdog.observers.inotify import InotifyObserver

        assert isinstance(observer, InotifyObserver)
        observer.stop()
        observer.join(timeout_s)
        self._observer = None


def start_watcher(
    settings: Settings,
    scanner: NasScanner,
    wake: Callable[[], None],
    writers: WriterCheck | None,
) -> NasWatcher | None:
    """Extract's started inotify watcher per ``settings.extract.detection``, or None (polling
    alone: the setting, the mount, or inotify refused under ``auto``).

    Raises:
        ConfigError: ``detection: inotify`` and the OS refused the watches.
    """
    setting = settings.extract.detection
    if choose_detection(setting, settings.paths.nas_dir) != "inotify":
        log.info(
            "extract: polling the NAS every %ss%s",
            settings.extract.poll_interval_s,
            mount_note(settings.paths.nas_dir),
        )
        return None
    watcher = NasWatcher(scanner, wake, settings.extract.close_settle_s, writers)
    try:
        watcher.start()
    except ConfigError:
        if setting == "inotify":
            raise
        log.warning("extract: inotify unavailable; polling the NAS instead", exc_info=True)
        return None
    return watcher
