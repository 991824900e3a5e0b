"""Finished-file detection on the NAS drop directory (case C09).

A file is taken only once it is complete: under the ``stable`` policy its size and mtime were
unchanged over ``stable_polls`` consecutive scans at least ``poll_interval_s`` apart; under the
``marker`` policy a sibling ``<name><marker_suffix>`` exists (the upstream writes it last).
Hidden names (starting with ``.``) and in-flight temp names are never candidates, so a
write-then-rename upstream is seen only at its final name.

The scanner is pure bookkeeping over ``os.stat`` results; it keeps its observations in memory,
so after a restart a file needs ``stable_polls`` new scans before it is taken again. Under the
``stable`` policy a file that :meth:`NasScanner.mark_complete` marked (the OS reported it closed
after writing, or renamed into place from a hidden name: :mod:`ferry.stages.extract.watcher`) is
taken without the stable wait (after the mark's settle time), while its size and mtime are those
it had when marked.

Confinement (case C15, :mod:`ferry.stages.extract.confine`): entries are judged with ``lstat``,
never opened here. A symbolic link or a shared hard link extract refuses is not a candidate: it is
queued once as a refused :class:`Candidate` (``refusal`` set) that :meth:`NasScanner.take_refusals`
hands to the service, which records it (``FileFailed``) and moves it away; it is warned about like
an unreadable path. A dataset directory whose real path leaves the NAS root is skipped (warned).

A file-system error on one path (a symlink loop, a plain file where a dataset sub-directory
should be, a permission error, a stale NFS handle) never ends a scan: the path is skipped and
logged as a warning once, not on every poll (again only after it was fine in between). Also
warned once: a visible entry of a dataset directory that its pattern does not match, and a
visible entry of the NAS root that no dataset defines (``Flights/`` typed for ``flights/``); when
a definition that does not say its NAS sub-directory is invalid (its YAML does not parse), such an
entry may be that dataset's, and the warning says its files wait for that definition.
"""

from __future__ import annotations

import fnmatch
import logging
import os
import stat
import threading
import time
import unicodedata
from dataclasses import dataclass, field
from functools import partial
from pathlib import Path, PurePosixPath

from ferry.datasets.spec import DatasetSpec
from ferry.stages.extract.confine import Refused, inside, inspect

log = logging.getLogger(__name__)


def display_name(name: str | Path) -> str:
    """``name`` safe to print, log and encode as UTF-8: undecodable bytes of a non-UTF-8 file
    system name (surrogate escapes in Python) shown as ``\\xNN``; valid names unchanged."""
    return os.fsencode(name).decode("utf-8", "backslashreplace")


@dataclass(frozen=True)
class Candidate:
    """A finished NAS file: absolute path, its dataset, its path relative to the NAS root (NFC).

    ``source`` is what the handler opens (the real path of a followed link, else ``path``) and
    ``identity`` its ``(st_dev, st_ino)`` at the scan; ``refusal`` is ``(reason, message)`` of an
    entry extract refuses to read (:mod:`ferry.stages.extract.confine`). These three do not take
    part in equality.

    A new version of a file already taken (:mod:`ferry.stages.extract.afterwards`) has ``path``
    in ``.ferry/``, ``relative`` the NAS name it was taken under, ``version_of`` the earlier
    version's file id and, when only appended bytes flow, ``splice`` = ``(head, start)``: the
    bytes ``[0, head)`` (the header line) then ``[start, size)`` are the new version.
    """

    path: Path
    dataset: DatasetSpec
    relative: str
    size: int
    mtime_ns: int
    marker: Path | None = None
    source: Path | None = field(default=None, compare=False)
    identity: tuple[int, int] | None = field(default=None, compare=False)
    refusal: tuple[str, str] | None = field(default=None, compare=False)
    version_of: str | None = field(default=None, compare=False)
    splice: tuple[int, int] | None = field(default=None, compare=False)

    @property
    def name(self) -> str:
        """The file's NAS name (its moved copy's may carry a tag)."""
        return self.path.name if self.version_of is None else PurePosixPath(self.relative).name

    @property
    def content_size(self) -> int:
        """Bytes of the version this candidate is: ``size``, less a splice's skipped bytes."""
        return self.size if self.splice is None else self.size - (self.splice[1] - self.splice[0])


@dataclass
class _Seen:
    size: int
    mtime_ns: int
    first_mono: float
    polls: int


class NasScanner:
    """Scans ``nas_dir/<dataset subdir>`` for files matching each dataset's pattern."""

    def __init__(
        self,
        nas_dir: Path,
        datasets: dict[str, DatasetSpec],
        *,
        follow_symlinks: bool = False,
        refuse_hardlinks: bool = False,
    ) -> None:
        self.nas_dir = nas_dir
        self.datasets = datasets
        #: NAS sub-directory of an invalid definition → why its files wait (set on reload)
        self.waiting: dict[str, str] = {}
        #: the invalid definitions whose NAS sub-directory is unknown (the YAML does not parse
        #: or does not say it), as ``"<file>, which is invalid (<error>)"``: a root entry no
        #: valid dataset defines may be theirs, so its files wait (set on reload)
        self.unplaced: list[str] = []
        self.follow_symlinks = follow_symlinks
        self.refuse_hardlinks = refuse_hardlinks
        #: refused entries not yet taken (:meth:`take_refusals`), and the (lstat) identity of
        #: those already queued, so one is queued once while unchanged
        self._refusals: list[Candidate] = []
        self._refused: dict[Path, tuple[int, int, int]] = {}
        self._seen: dict[Path, _Seen] = {}
        #: files already handled and left in place (``after_extract: keep``): (size, mtime_ns)
        self._done: dict[Path, tuple[int, int]] = {}
        #: (path, message) already warned about, and those seen in the current scan
        self._warned: set[tuple[Path, str]] = set()
        self._notes: set[tuple[Path, str]] = set()
        #: files an OS event showed complete: (size, mtime_ns) when marked; set from the
        #: watcher's thread, hence the lock
        self._complete: dict[Path, tuple[int, int, float]] = {}
        self._complete_lock = threading.Lock()

    def mark_complete(self, path: Path, settle_s: float = 0.0) -> bool:
        """Mark ``path`` complete (its writer closed it, or it was renamed into place): a scan
        from ``settle_s`` seconds on (monotonic clock; 0: the next scan) takes it without the
        stable wait if its size and mtime are still those read now. Returns False (nothing
        marked) when it is not a regular file of a dataset's pattern under the ``stable``
        policy, or cannot be read."""
        spec = self._spec_of(path)
        if spec is None or spec.finished.policy != "stable":
            return False
        try:
            st = path.stat()
        except OSError:
            return False
        if not stat.S_ISREG(st.st_mode):
            return False
        due = time.monotonic() + settle_s if settle_s > 0 else float("-inf")
        with self._complete_lock:
            self._complete[path] = (st.st_size, st.st_mtime_ns, due)
        return True

    def next_due(self, now_mono: float) -> float | None:
        """The earliest monotonic time after ``now_mono`` at which a mark becomes due, or None
        (no mark still settling)."""
        with self._complete_lock:
            return min((d for _, _, d in self._complete.values() if d > now_mono), default=None)

    def unmark(self, path: Path) -> bool:
        """Withdraw ``path``'s complete mark (it was written again); True if it had one."""
        with self._complete_lock:
            return self._complete.pop(path, None) is not None

    def is_marked(self, path: Path) -> bool:
        """True while ``path`` carries a complete mark."""
        with self._complete_lock:
            return path in self._complete

    def _spec_of(self, path: Path) -> DatasetSpec | None:
        for spec in self.datasets.values():
            if path.parent == self.nas_dir / spec.nas.subdir and fnmatch.fnmatchcase(
                unicodedata.normalize("NFC", path.name),
                unicodedata.normalize("NFC", spec.nas.pattern),
            ):
                return spec
        return None

    def _marked_as(self, path: Path, size: int, mtime_ns: int, now_mono: float) -> bool:
        with self._complete_lock:
            mark = self._complete.get(path)
        return mark is not None and mark[:2] == (size, mtime_ns) and now_mono >= mark[2]

    def scan(self, now_mono: float) -> list[Candidate]:
        """One scan at monotonic time ``now_mono`` (s). Returns files finished by their policy,
        in name order per dataset. Never raises for a file-system error on one path: that path
        is skipped (warned once)."""
        out: list[Candidate] = []
        present: set[Path] = set()
        self._notes = set()
        self._check_root()
        real_root = Path(os.path.realpath(self.nas_dir))
        refused: set[Path] = set()
        for spec in self.datasets.values():
            root = self.nas_dir / spec.nas.subdir
            if not inside(os.path.realpath(root), real_root):
                self._warn(root, "leads outside the NAS root (a symbolic link); skipped")
                continue
            names = self._listdir(root, f"directory of dataset {spec.name!r}")
            policy = spec.finished
            pattern = unicodedata.normalize("NFC", spec.nas.pattern)
            for name in names:
                nfc = unicodedata.normalize("NFC", name)
                if name.startswith("."):
                    continue
                if policy.policy == "marker" and name.endswith(policy.marker_suffix):
                    continue
                path = root / name
                if not fnmatch.fnmatchcase(nfc, pattern):
                    self._warn(
                        path,
                        f"does not match dataset {spec.name!r}'s pattern {spec.nas.pattern!r}; "
                        "ignored",
                    )
                    continue
                relative = unicodedata.normalize("NFC", f"{spec.nas.subdir}/{name}")
                try:
                    seen_as = inspect(
                        path,
                        real_root,
                        follow_symlinks=self.follow_symlinks,
                        refuse_hardlinks=self.refuse_hardlinks,
                    )
                except FileNotFoundError:
                    continue  # renamed or removed between listdir and stat
                except Refused as exc:
                    self._warn(path, f"{exc.message}; skipped")
                    refused.add(path)
                    self._refuse(path, spec, relative, exc)
                    continue
                except OSError as exc:  # EACCES, ESTALE, ...
                    self._warn(path, f"cannot be read ({_why(exc)}); skipped")
                    continue
                if seen_as is None:
                    continue  # a followed link whose target does not exist (yet)
                st = seen_as.st
                if not stat.S_ISREG(st.st_mode):
                    self._warn(path, "is not a regular file; skipped")
                    continue
                present.add(path)
                if self._done.get(path) == (st.st_size, st.st_mtime_ns):
                    continue  # handled and kept; taken again only once it changes
                self._done.pop(path, None)
                src, ident = seen_as.open_path, (st.st_dev, st.st_ino)
                # the candidate this entry is, as it stands now
                found = partial(Candidate, path, spec, relative, st.st_size, st.st_mtime_ns)
                if policy.policy == "marker":
                    marker = root / f"{name}{policy.marker_suffix}"
                    if self._exists(marker):
                        out.append(found(marker, source=src, identity=ident))
                    continue
                if self._marked_as(path, st.st_size, st.st_mtime_ns, now_mono):
                    out.append(found(source=src, identity=ident))
                    continue
                seen = self._seen.get(path)
                if seen is None or (seen.size, seen.mtime_ns) != (st.st_size, st.st_mtime_ns):
                    self._seen[path] = _Seen(st.st_size, st.st_mtime_ns, now_mono, 1)
                    continue
                seen.polls += 1
                waited = now_mono - seen.first_mono
                if (
                    seen.polls > policy.stable_polls
                    and waited >= policy.stable_polls * policy.poll_interval_s
                ):
                    out.append(found(source=src, identity=ident))
        for gone in set(self._refused) - refused:
            del self._refused[gone]
        for gone in set(self._seen) - present:
            del self._seen[gone]
        for gone in set(self._done) - present:
            del self._done[gone]
        with self._complete_lock:  # a mark set after the listing is kept while the file exists
            for gone in set(self._complete) - present:
                if not os.path.lexists(gone):
                    del self._complete[gone]
        self._warned &= self._notes  # a path that is fine again is warned about anew next time
        return out

    def _refuse(self, path: Path, spec: DatasetSpec, relative: str, exc: Refused) -> None:
        """Queue ``path`` as a refused candidate, once while its ``lstat`` is unchanged."""
        try:
            lst = os.lstat(path)
        except OSError:
            return  # vanished: nothing to record or move
        key = (lst.st_dev, lst.st_ino, lst.st_mtime_ns)
        if self._refused.get(path) == key:
            return
        self._refused[path] = key
        refusal = (exc.reason, exc.message)
        self._refusals.append(
            Candidate(path, spec, relative, lst.st_size, lst.st_mtime_ns, refusal=refusal)
        )

    def take_refusals(self) -> list[Candidate]:
        """The refused entries found since the last call (each once while unchanged), for the
        service to record and move away; nothing of them was opened or read."""
        out, self._refusals = self._refusals, []
        return out

    def _check_root(self) -> None:
        """Warn (once) about visible entries of the NAS root that no dataset defines."""
        defined = {Path(spec.nas.subdir).parts[0] for spec in self.datasets.values()}
        for name in self._listdir(self.nas_dir, "NAS directory"):
            if name.startswith(".") or name in defined:
                continue
            if name in self.waiting:
                self._warn(self.nas_dir / name, f"waits: {self.waiting[name]}; files left in place")
                continue
            if self.unplaced:
                self._warn(
                    self.nas_dir / name,
                    f"is not the sub-directory of a valid dataset ({', '.join(sorted(defined))}) "
                    f"but may be that of the definition in {', or '.join(self.unplaced)}: its "
                    "files are left in place and taken once that definition is fixed",
                )
                continue
            self._warn(
                self.nas_dir / name,
                f"is not a sub-directory any dataset defines ({', '.join(sorted(defined))}); "
                "ignored",
            )

    def _listdir(self, root: Path, what: str) -> list[str]:
        """Sorted names in ``root``; ``[]`` if it is missing (silently) or unreadable (warned)."""
        try:
            return sorted(os.listdir(root))
        except FileNotFoundError:
            return []
        except NotADirectoryError:
            self._warn(root, f"should be the {what} but is not a directory; skipped")
        except OSError as exc:
            self._warn(root, f"{what} cannot be listed ({_why(exc)}); skipped")
        return []

    def _exists(self, path: Path) -> bool:
        try:
            os.stat(path)
        except FileNotFoundError:
            return False
        except OSError as exc:
            self._warn(path, f"cannot be read ({_why(exc)}); taken as absent")
            return False
        return True

    def _warn(self, path: Path, what: str) -> None:
        """Log ``path`` ``what`` as a warning, once while the condition lasts."""
        key = (path, what)
        self._notes.add(key)
        if key not in self._warned:
            self._warned.add(key)
            log.warning("extract: NAS path %s %s", display_name(path), what)

    def forget(self, path: Path) -> None:
        """Drop what is known of ``path`` (after it was extracted and moved away)."""
        self._seen.pop(path, None)
        self._done.pop(path, None)
        self.unmark(path)

    def done(self, cand: Candidate) -> None:
        """Remember that ``cand`` was handled but stays in the drop directory (``keep``): it is
        not returned again while its size and mtime are unchanged (until a restart)."""
        self._seen.pop(cand.path, None)
        self.unmark(cand.path)
        self._done[cand.path] = (cand.size, cand.mtime_ns)


def _why(exc: OSError) -> str:
    """``[Errno 40] Too many levels of symbolic links``, without the path (named by the caller)."""
    if exc.errno is not None:
        return f"[Errno {exc.errno}] {exc.strerror or os.strerror(exc.errno)}"
    return display_name(f"{type(exc).__name__}: {exc}")
