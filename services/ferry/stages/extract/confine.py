"""NAS confinement (docs/field-cases.md, C15): extract reads only regular files inside the NAS root.

Anyone who can write to the NAS share can drop a symbolic link named like a data file; followed
blindly, it makes Ferry read (and land on HDFS) any file the service account can read. So:

- :func:`inspect` (the scanner, every scan) looks at a NAS entry with ``lstat`` and never opens
  it. A symbolic link is refused with :data:`SYMLINK_LOOP` when resolving it loops,
  :data:`SYMLINK_OUTSIDE_NAS` when its real path leaves the NAS root (a dangling one judged by
  where it points), and :data:`SYMLINK_REFUSED` when it stays inside but
  ``extract.follow_symlinks`` is off (the default). A regular file with more than one hard link
  is refused with :data:`HARDLINK_REFUSED` when ``extract.refuse_hardlinks`` is on (its content
  is shared with a path that may be outside the share).
- :func:`open_confined` (the handler, once per file) opens what the scanner judged with
  ``O_NOFOLLOW | O_NONBLOCK`` and checks the *opened* descriptor before a byte is read: same
  device and inode as scanned (else :class:`ferry.stages.extract.handlers.SourceChanged`: the
  entry was swapped after the scan and the next scan judges it again), a regular file, real path
  (``/proc/self/fd``) inside the NAS root, link count when hard links are refused. That closes the
  race between the scan's ``lstat`` and the read.

A refusal is a :class:`Refused` (reason code, message); the message never names the target of a
link (it may be a path the share's users must not learn) and never quotes its content.
"""

from __future__ import annotations

import errno
import os
import stat
from dataclasses import dataclass
from pathlib import Path
from typing import BinaryIO

#: ``FileFailed.reason`` codes of a refused NAS entry.
SYMLINK_OUTSIDE_NAS = "symlink_outside_nas"
SYMLINK_LOOP = "symlink_loop"
SYMLINK_REFUSED = "symlink_refused"
HARDLINK_REFUSED = "hardlink_refused"
#: What was opened is not a regular file (an entry replaced by a FIFO or device after the scan).
NOT_REGULAR_FILE = "not_regular_file"

REFUSAL_REASONS = frozenset(
    {SYMLINK_OUTSIDE_NAS, SYMLINK_LOOP, SYMLINK_REFUSED, HARDLINK_REFUSED, NOT_REGULAR_FILE}
)


class Refused(Exception):
    """A NAS entry extract will not read: ``reason`` (one of :data:`REFUSAL_REASONS`) and a
    message that names neither a link's target nor any content."""

    def __init__(self, reason: str, message: str) -> None:
        super().__init__(message)
        self.reason = reason
        self.message = message


@dataclass(frozen=True)
class Inspected:
    """A NAS entry that may be read: the path to open (the entry itself, or the real path of a
    followed link) and its ``stat`` (of the target when a link was followed)."""

    open_path: Path
    st: os.stat_result


def inside(real: str | Path, root: str | Path) -> bool:
    """Whether the resolved path ``real`` is ``root`` or below it (both already real paths)."""
    r, base = os.fspath(real), os.fspath(root)
    return r == base or r.startswith(base.rstrip(os.sep) + os.sep)


def inspect(
    path: Path, root: Path, *, follow_symlinks: bool = False, refuse_hardlinks: bool = False
) -> Inspected | None:
    """Judge the NAS entry ``path`` without opening it; ``root`` is the NAS root's real path.

    Returns ``None`` for a link inside the root whose target does not exist (yet), else what to
    open. A non-regular entry (directory, FIFO) is returned as is: the caller skips it.

    Raises:
        Refused: see the module docstring for the reason codes.
        FileNotFoundError: the entry vanished.
        OSError: ``lstat`` failed otherwise (permissions, stale NFS handle).
    """
    lst = os.lstat(path)
    target, st = path, lst
    if stat.S_ISLNK(lst.st_mode):
        dangling = False
        try:
            real = os.path.realpath(path, strict=True)
        except FileNotFoundError:
            real, dangling = os.path.realpath(path), True
        except OSError as exc:
            if exc.errno == errno.ELOOP:
                raise Refused(SYMLINK_LOOP, f"cannot be read ({_why(exc)})") from None
            raise
        if not inside(real, root):
            raise Refused(
                SYMLINK_OUTSIDE_NAS,
                f"is a symbolic link leading outside the NAS root ({SYMLINK_OUTSIDE_NAS})",
            )
        if not follow_symlinks:
            raise Refused(
                SYMLINK_REFUSED,
                "is a symbolic link (inside the NAS root) and extract.follow_symlinks is off "
                f"({SYMLINK_REFUSED})",
            )
        if dangling:
            return None
        target = Path(real)
        st = os.lstat(target)  # realpath resolved every link: this is the file itself
    if stat.S_ISREG(st.st_mode) and refuse_hardlinks and st.st_nlink > 1:
        raise Refused(HARDLINK_REFUSED, _hardlinks(st.st_nlink))
    return Inspected(target, st)


def open_confined(
    path: Path,
    root: Path,
    *,
    identity: tuple[int, int] | None,
    refuse_hardlinks: bool = False,
) -> BinaryIO:
    """Open ``path`` (a regular file or a link's resolved target) for reading, checked on the
    descriptor before any byte is read; the caller closes it.

    Args:
        root: the NAS root's real path.
        identity: ``(st_dev, st_ino)`` the scanner saw, or ``None`` to skip that check.

    Raises:
        Refused: the descriptor is not a regular file, its real path is outside ``root``, or it
            has several hard links and ``refuse_hardlinks`` is on.
        ChangedSince: the entry is now a link (``ELOOP`` under ``O_NOFOLLOW``) or another inode.
        FileNotFoundError, OSError: it cannot be opened.
    """
    flags = os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC
    try:
        fd = os.open(path, flags)
    except OSError as exc:
        if exc.errno == errno.ELOOP:
            raise ChangedSince("became a symbolic link after the scan") from None
        raise
    try:
        st = os.fstat(fd)
        if identity is not None and (st.st_dev, st.st_ino) != identity:
            raise ChangedSince("was replaced by another file after the scan")
        if not stat.S_ISREG(st.st_mode):
            raise Refused(NOT_REGULAR_FILE, f"is not a regular file ({NOT_REGULAR_FILE})")
        if not inside(_fd_path(fd, path), root):
            raise Refused(
                SYMLINK_OUTSIDE_NAS,
                f"resolves to a path outside the NAS root ({SYMLINK_OUTSIDE_NAS})",
            )
        if refuse_hardlinks and st.st_nlink > 1:
            raise Refused(HARDLINK_REFUSED, _hardlinks(st.st_nlink))
        os.set_blocking(fd, True)
        return os.fdopen(fd, "rb")
    except BaseException:
        os.close(fd)
        raise


class ChangedSince(Exception):
    """The entry is not the one the scanner judged; the next scan judges it again."""


def _fd_path(fd: int, fallback: Path) -> str:
    """Real path of the open descriptor ``fd`` (Linux ``/proc/self/fd``); without ``/proc``, the
    real path of ``fallback`` (racy, the best a system without it allows)."""
    try:
        return os.readlink(f"/proc/self/fd/{fd}")
    except OSError:
        return os.path.realpath(fallback)


def _hardlinks(n: int) -> str:
    return (
        f"has {n} hard links (its content is shared with another path) and "
        f"extract.refuse_hardlinks is on ({HARDLINK_REFUSED})"
    )


def _why(exc: OSError) -> str:
    return f"[Errno {exc.errno}] {exc.strerror or os.strerror(exc.errno or 0)}"
