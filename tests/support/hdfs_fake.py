"""In-memory :class:`~ferry.clusters.hdfs.HdfsPort` for unit tests of handlers.

Same interface and the same safe-write code as the real port (``upload_stream`` lives in the base
class), so a handler tested against :class:`FakeHdfs` follows the same temp-then-rename rules.
Failures are injected with :meth:`FakeHdfs.fail`; every primitive call is recorded in
:attr:`FakeHdfs.calls` so a test can assert exactly what was created and deleted.
"""

from __future__ import annotations

import posixpath
import threading
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass

from ferry.clusters.hdfs.paths import FileStatus, normalize_path
from ferry.clusters.hdfs.port import HdfsPort
from ferry.errors import (
    FerryError,
    HdfsPathExists,
    HdfsPathNotFound,
    HdfsRequestRejected,
)

#: Operation names accepted by :meth:`FakeHdfs.fail`.
OPS = ("status", "list", "mkdirs", "rename", "delete", "open", "create")


@dataclass
class _Fault:
    op: str
    error: FerryError
    after_bytes: int | None
    path_contains: str | None
    times: int


class FakeHdfs(HdfsPort):
    """A file tree in memory: ``files`` maps absolute NFC paths to bytes, ``dirs`` holds
    directories. Thread-safe. ``mtime_ms`` is a counter, not wall time, unless set with
    :meth:`set_mtime`."""

    def __init__(self, name: str = "fake") -> None:
        self.name = name
        self.files: dict[str, bytes] = {}
        self.dirs: set[str] = {"/"}
        self.calls: list[tuple[str, str]] = []
        self._mtimes: dict[str, int] = {}
        self._clock = 0
        self._faults: list[_Fault] = []
        self._lock = threading.RLock()

    # -- fault injection -------------------------------------------------------------------

    def fail(
        self,
        op: str,
        error: FerryError,
        *,
        after_bytes: int | None = None,
        path_contains: str | None = None,
        times: int = 1,
    ) -> None:
        """Make the next ``times`` calls of ``op`` (one of :data:`OPS`) on a path containing
        ``path_contains`` raise ``error``. For ``create``/``open`` with ``after_bytes``, the
        error is raised once that many bytes were written/read (calls that stay below do not use
        up ``times``), leaving a partial file behind on ``create`` (as a DataNode does)."""
        if op not in OPS:
            raise ValueError(f"unknown op {op!r}; one of {OPS}")
        with self._lock:
            self._faults.append(_Fault(op, error, after_bytes, path_contains, times))

    def _fault(self, op: str, path: str) -> _Fault | None:
        with self._lock:
            for fault in self._faults:
                if fault.op == op and (fault.path_contains is None or fault.path_contains in path):
                    return fault
        return None

    def _fire(self, fault: _Fault) -> FerryError:
        """Use up one of ``fault``'s ``times``; return its error for the caller to raise."""
        with self._lock:
            fault.times -= 1
            if fault.times <= 0 and fault in self._faults:
                self._faults.remove(fault)
        return fault.error

    def _call(self, op: str, path: str) -> _Fault | None:
        """Record the call; raise an immediate fault, or return a byte-count fault to watch."""
        with self._lock:
            self.calls.append((op, path))
        fault = self._fault(op, path)
        if fault is not None and fault.after_bytes is None:
            raise self._fire(fault)
        return fault

    def set_mtime(self, path: str, mtime_ms: int) -> None:
        """Give ``path`` (a file or directory) the modification time ``mtime_ms`` (epoch ms), as
        if written then (tests of rules that compare ages)."""
        p = normalize_path(path)
        with self._lock:
            if p not in self.files and p not in self.dirs:
                raise HdfsPathNotFound(f"cluster {self.name!r}: {p!r}: no such path")
            self._mtimes[p] = mtime_ms

    # -- helpers ---------------------------------------------------------------------------

    def _tick(self, path: str) -> None:
        self._clock += 1
        self._mtimes[path] = self._clock

    def _require_parent_dir(self, path: str, op: str) -> None:
        parent = posixpath.dirname(path)
        if parent not in self.dirs:
            raise HdfsPathNotFound(
                f"cluster {self.name!r}: {op} {path!r}: parent {parent!r} missing"
            )

    def _make_dirs(self, path: str) -> None:
        parts = [p for p in path.split("/") if p]
        current = "/"
        for part in parts:
            current = posixpath.join(current, part)
            if current in self.files:
                raise HdfsRequestRejected(
                    f"cluster {self.name!r}: {current!r} is a file, cannot make directory {path!r}"
                )
            if current not in self.dirs:
                self.dirs.add(current)
                self._tick(current)

    def _children(self, path: str) -> list[str]:
        prefix = path.rstrip("/") + "/"
        return sorted(
            p
            for p in (*self.files, *self.dirs)
            if p != path and p.startswith(prefix) and "/" not in p[len(prefix) :]
        )

    def _status(self, path: str) -> FileStatus:
        name = posixpath.basename(path)
        if path in self.files:
            return FileStatus(path, name, "FILE", len(self.files[path]), self._mtimes.get(path, 0))
        if path in self.dirs:
            return FileStatus(path, name, "DIRECTORY", 0, self._mtimes.get(path, 0))
        raise HdfsPathNotFound(f"cluster {self.name!r}: GETFILESTATUS {path!r}: no such path")

    # -- primitives ------------------------------------------------------------------------

    def status(self, path: str) -> FileStatus:
        p = normalize_path(path)
        self._call("status", p)
        with self._lock:
            return self._status(p)

    def list(self, path: str) -> list[FileStatus]:
        p = normalize_path(path)
        self._call("list", p)
        with self._lock:
            if p in self.files:
                raise HdfsRequestRejected(
                    f"cluster {self.name!r}: LISTSTATUS {p!r}: not a directory"
                )
            if p not in self.dirs:
                raise HdfsPathNotFound(
                    f"cluster {self.name!r}: LISTSTATUS {p!r}: no such directory"
                )
            return [self._status(c) for c in self._children(p)]

    def mkdirs(self, path: str) -> None:
        p = normalize_path(path)
        self._call("mkdirs", p)
        with self._lock:
            self._make_dirs(p)

    def rename(self, src: str, dst: str, *, overwrite: bool = False) -> None:
        s, d = normalize_path(src), normalize_path(dst)
        self._call("rename", s)
        with self._lock:
            if s not in self.files and s not in self.dirs:
                raise HdfsPathNotFound(f"cluster {self.name!r}: RENAME {s!r}: source missing")
            self._require_parent_dir(d, "RENAME")
            if d in self.files or d in self.dirs:
                if not overwrite:
                    raise HdfsPathExists(f"cluster {self.name!r}: RENAME {s!r} to {d!r}: exists")
                if d in self.dirs and self._children(d):
                    raise HdfsRequestRejected(
                        f"cluster {self.name!r}: RENAME {s!r} onto non-empty directory {d!r}"
                    )
                self.files.pop(d, None)
                self.dirs.discard(d)
            if s in self.files:
                self.files[d] = self.files.pop(s)
            else:
                prefix = s + "/"
                for old in [p for p in self.files if p.startswith(prefix)]:
                    self.files[d + old[len(s) :]] = self.files.pop(old)
                for old in sorted(p for p in self.dirs if p == s or p.startswith(prefix)):
                    self.dirs.discard(old)
                    self.dirs.add(d + old[len(s) :])
            self._tick(d)

    def delete(self, path: str, *, recursive: bool = False) -> bool:
        p = normalize_path(path)
        self._call("delete", p)
        with self._lock:
            if p == "/":
                raise HdfsRequestRejected(f"cluster {self.name!r}: refusing to delete '/'")
            if p in self.files:
                del self.files[p]
                return True
            if p not in self.dirs:
                return False
            if self._children(p) and not recursive:
                raise HdfsRequestRejected(
                    f"cluster {self.name!r}: DELETE {p!r}: directory is not empty"
                )
            prefix = p + "/"
            for f in [f for f in self.files if f.startswith(prefix)]:
                del self.files[f]
            self.dirs -= {d for d in self.dirs if d == p or d.startswith(prefix)}
            return True

    def _open(self, p: str, chunk_size: int, offset: int) -> Iterator[bytes]:
        fault = self._call("open", p)
        with self._lock:
            if p not in self.files:
                raise HdfsPathNotFound(f"cluster {self.name!r}: OPEN {p!r}: no such file")
            data = self.files[p]
        sent = 0
        for start in range(offset, len(data), chunk_size):
            chunk = data[start : start + chunk_size]
            limit = fault.after_bytes if fault is not None else None
            if fault is not None and limit is not None and sent + len(chunk) > limit:
                if limit > sent:
                    yield chunk[: limit - sent]
                raise self._fire(fault)
            sent += len(chunk)
            yield chunk

    def _create(self, path: str, chunks: Iterable[bytes], on_started: Callable[[], None]) -> None:
        p = normalize_path(path)
        fault = self._call("create", p)  # an immediate fault: nothing created (NameNode step)
        on_started()
        with self._lock:
            if p in self.files or p in self.dirs:
                raise HdfsPathExists(f"cluster {self.name!r}: CREATE {p!r}: exists")
            self._make_dirs(posixpath.dirname(p))
            self.files[p] = b""
            self._tick(p)
        written = bytearray()
        for chunk in chunks:
            written += chunk
            if (
                fault is not None
                and fault.after_bytes is not None
                and len(written) >= fault.after_bytes
            ):
                with self._lock:
                    self.files[p] = bytes(written[: fault.after_bytes])
                raise self._fire(fault)
            with self._lock:
                if p not in self.files:
                    raise HdfsPathNotFound(
                        f"cluster {self.name!r}: CREATE {p!r}: deleted meanwhile"
                    )
                self.files[p] = bytes(written)
