"""Recovery in bulk (issue 47): release the quarantine entries an incident made, chosen by reason,
stage, dataset and time window, in one command (``ferry quarantine release --reason R --stage S
--dataset D --since T --until T [--dry-run]``).

What releasing an entry does depends on the stage that gave up on it:

- ``transform``, ``transfer``, ``load``: its input event is re-emitted (:func:`plan_release`);
  a stranger's bytes (no manifest) only with ``force``, else skipped with the reason.
- ``extract`` (reads the NAS, not a topic): the NAS file is moved back from
  ``<nas>/.ferry/failed/<dataset>/`` to where it was dropped (:func:`move_back`), and extract takes
  it again on its next scans.

:func:`select` is pure (the unit tests' way in); :func:`plan_bulk` looks at the NAS but moves
nothing (the dry run's table); :func:`run_bulk` produces the re-emitted events, then moves the
NAS files back, one by one.
"""

from __future__ import annotations

import ctypes
import errno
import os
import re
from dataclasses import dataclass
from datetime import datetime, timedelta
from pathlib import Path

from ferry.core.events import FileFailed
from ferry.core.kafka.admin import OpsError
from ferry.core.kafka.clients import build_producer
from ferry.core.kafka.publish import publish
from ferry.core.wire.avro import EventCodec
from ferry.nas import moved_names, outcome_dir
from ferry.ops.quarantine import QuarantineEntry, QuarantineRead, Release, dismiss, plan_release
from ferry.settings import Settings


@dataclass(frozen=True)
class Selection:
    """Which open entries to release; an empty tuple or ``None`` does not filter.

    ``since``/``until``: the entry's latest failure time (``FileFailed.failed_at``, timezone-aware),
    ``since <= failed_at < until``.
    """

    reasons: tuple[str, ...] = ()
    stages: tuple[str, ...] = ()
    datasets: tuple[str, ...] = ()
    since: datetime | None = None
    until: datetime | None = None

    @property
    def empty(self) -> bool:
        """No filter at all (the CLI refuses to release the whole quarantine by accident)."""
        return not (self.reasons or self.stages or self.datasets or self.since or self.until)

    def matches(self, entry: QuarantineEntry) -> bool:
        f = entry.failed
        return (
            (not self.reasons or f.reason in self.reasons)
            and (not self.stages or f.stage in self.stages)
            and (not self.datasets or f.nas_dataset in self.datasets)
            and (self.since is None or f.failed_at >= self.since)
            and (self.until is None or f.failed_at < self.until)
        )


def select(read: QuarantineRead, selection: Selection) -> list[QuarantineEntry]:
    """The entries still quarantined (state ``quarantined``: not loaded since, superseded,
    dismissed, nor an empty file) that ``selection`` matches, in order of their latest failure."""
    return [e for e in read.entries if e.state == "quarantined" and selection.matches(e)]


@dataclass(frozen=True)
class BulkItem:
    """What happens (or would) to one selected entry.

    ``action``: ``re-emit`` (``release`` holds the record), ``move back`` (``source`` → ``dest``)
    or ``skip``; ``outcome``: ``would``/``done`` for the first two, else why not (``skip``).
    """

    entry: QuarantineEntry
    action: str
    outcome: str
    release: Release | None = None
    source: Path | None = None
    dest: Path | None = None
    #: the file's marker (``finished.policy: marker``): (under ``.ferry/failed/``, back), moved
    #: after the file, so extract sees the whole file before its marker
    marker: tuple[Path, Path] | None = None


#: A tag extract gives a file moved without a file id (``extract.moves``: UTC time of the move).
_TIME_TAG = re.compile(r"\.(\d{8}T\d{12}Z)(?:\.\d+)?$")


def failed_copy(nas_dir: Path, failed: FileFailed) -> Path | None:
    """Where extract moved the NAS file of ``failed`` under ``.ferry/failed/<dataset>/``: the
    first of its possible names (``ferry.nas.moved_names``) whose size and mtime are the
    manifest's (a hashed file), else its NAS name or, for a file refused before it had an id,
    the time-tagged name closest to the failure (within 5 minutes); ``None`` when none is there.
    """
    dataset, rel = failed.nas_dataset, failed.nas_path
    if not dataset or not rel:
        return None
    folder = outcome_dir(nas_dir, "failed", dataset)
    name = os.path.basename(rel)
    m = failed.manifest
    if m is not None:
        for path in moved_names(folder, name, m.file_id[:12]):
            st = path.lstat()
            mtime_ok = m.source_mtime is None or abs(st.st_mtime - m.source_mtime.timestamp()) < 1
            if st.st_size == m.size_bytes and mtime_ok:
                return path
        return None
    if os.path.lexists(folder / name):
        return folder / name
    stem, suffix = os.path.splitext(name)
    best: tuple[float, Path] | None = None
    for path in folder.glob(f"{glob_escape(stem)}.*{glob_escape(suffix)}"):
        tag = _TIME_TAG.search(path.name[: len(path.name) - len(suffix)] if suffix else path.name)
        if tag is None:
            continue
        at = datetime.strptime(tag.group(1), "%Y%m%dT%H%M%S%fZ").replace(
            tzinfo=failed.failed_at.tzinfo
        )
        gap = abs((at - failed.failed_at).total_seconds())
        if gap <= timedelta(minutes=5).total_seconds() and (best is None or gap < best[0]):
            best = (gap, path)
    return best[1] if best else None


def glob_escape(text: str) -> str:
    """``text`` with glob's special characters escaped (``[*]``, ``[?]``, ``[[]``)."""
    return re.sub(r"([*?\[])", r"[\1]", text)


#: ``renameat2(2)`` flag: fail with ``EEXIST`` instead of replacing the target (Linux >= 3.15).
_RENAME_NOREPLACE = 1
_AT_FDCWD = -100
#: errno values saying a file system (or libc) cannot do what was asked: try the next way.
_UNSUPPORTED = frozenset({errno.EINVAL, errno.ENOSYS, errno.ENOTSUP, errno.EPERM, errno.EXDEV})


def rename_noreplace(source: Path, dest: Path) -> bool:
    """``rename(source, dest)`` that never replaces ``dest``, in one atomic step
    (``renameat2(RENAME_NOREPLACE)``, Linux; ext4, XFS, tmpfs, btrfs do it, NFS and SMB not).

    Returns:
        True when renamed; False when this system or file system cannot do it (nothing done).

    Raises:
        FileExistsError: ``dest`` exists (nothing done). OSError: another failure.
    """
    fn = getattr(ctypes.CDLL(None, use_errno=True), "renameat2", None)
    if fn is None:
        return False
    fn.argtypes = [ctypes.c_int, ctypes.c_char_p, ctypes.c_int, ctypes.c_char_p, ctypes.c_uint]
    src, dst = os.fsencode(source), os.fsencode(dest)
    if fn(_AT_FDCWD, src, _AT_FDCWD, dst, _RENAME_NOREPLACE) == 0:
        return True
    err = ctypes.get_errno()
    if err == errno.EEXIST:
        raise FileExistsError(err, os.strerror(err), os.fsdecode(dst))
    if err in _UNSUPPORTED:
        return False
    raise OSError(err, os.strerror(err), os.fsdecode(src))


def move_back(source: Path, dest: Path) -> str:
    """Move ``source`` (under ``.ferry/failed/``) to ``dest`` (its place in the drop directory):
    never over a file at ``dest``, never a half file at ``dest`` (``.ferry/`` is on the NAS's
    file system, so each way below is a rename or a link: the whole file appears at once).

    In order: :func:`rename_noreplace` (one atomic step); where the file system cannot, a hard
    link at ``dest`` (fails if the name is taken), then ``source`` unlinked (interrupted between
    the two, both names hold the same file: run again, the same inode is recognised and the
    move finished; with ``extract.refuse_hardlinks`` a scan in between would refuse it); where
    neither works, a rename once ``dest`` is seen free.

    Returns:
        ``moved``; ``name taken`` (another file is at ``dest`` now: a re-drop; nothing moved);
        ``gone`` (``source`` is no longer there).

    Raises:
        OSError: the move failed otherwise (permissions, a vanished share); nothing is lost:
            the file is at one of the two names.
    """
    if not os.path.lexists(source):
        return "gone"
    dest.parent.mkdir(parents=True, exist_ok=True)
    if os.path.lexists(dest):
        if not os.path.samefile(source, dest):
            return "name taken"
        os.unlink(source)  # a link-and-unlink move interrupted after the link
        return "moved"
    try:
        if rename_noreplace(source, dest):
            return "moved"
        os.link(source, dest, follow_symlinks=False)
    except FileExistsError:
        return "name taken"
    except OSError as exc:
        if exc.errno not in _UNSUPPORTED | {errno.EMLINK}:
            raise
        if os.path.lexists(dest):
            return "name taken"
        os.rename(source, dest)
        return "moved"
    os.unlink(source)
    return "moved"


def plan_bulk(
    entries: list[QuarantineEntry], settings: Settings, codec: EventCodec, force: bool = False
) -> list[BulkItem]:
    """What releasing ``entries`` would do, entry by entry (encodes, looks at the NAS and the
    dataset definitions for marker files; moves and produces nothing)."""
    nas_dir = Path(settings.paths.nas_dir)
    suffixes: dict[str, str | None] | None = None
    out: list[BulkItem] = []
    for e in entries:
        f = e.failed
        if f.stage == "extract":
            src = failed_copy(nas_dir, f)
            rel = f.raw_key.decode("utf-8", "surrogateescape") if f.raw_key else f.nas_path
            if src is None or not rel:
                out.append(BulkItem(e, "skip", "no copy under .ferry/failed/ (removed by gc?)"))
                continue
            dest = nas_dir / rel
            if os.path.lexists(dest) and not os.path.samefile(src, dest):
                out.append(BulkItem(e, "skip", "name taken in the drop directory", None, src, dest))
                continue
            suffixes = suffixes if suffixes is not None else marker_suffixes(settings)
            suffix = suffixes.get(f.nas_dataset or "")
            marker = None
            if suffix and os.path.lexists(src.parent / (src.name + suffix)):
                marker = (src.parent / (src.name + suffix), dest.parent / (dest.name + suffix))
            out.append(BulkItem(e, "move back", "would", None, src, dest, marker))
            continue
        try:
            out.append(BulkItem(e, "re-emit", "would", plan_release(e, settings, codec, force)))
        except OpsError as exc:
            out.append(BulkItem(e, "skip", str(exc)))
    return out


def marker_suffixes(settings: Settings) -> dict[str, str | None]:
    """dataset → its marker file suffix (``finished.policy: marker``), else ``None``; from the
    valid definitions of ``paths.datasets_dir`` (an invalid one: no marker is looked for)."""
    from ferry.datasets.registry import load_definitions

    specs = load_definitions(settings.paths.datasets_dir).specs
    return {
        name: spec.finished.marker_suffix if spec.finished.policy == "marker" else None
        for name, spec in specs.items()
    }


#: The note of the dismissal that closes the entry of a stranger's bytes released raw.
RAW_NOTE = (
    "released raw to its source topic (--force): what the stage makes of these bytes now is a "
    "new entry, keyed by their new offset"
)


def close_raw(
    settings: Settings, codec: EventCodec, releases: list[Release], read: QuarantineRead
) -> None:
    """Dismiss (:data:`RAW_NOTE`) the entries of ``releases`` that were re-produced raw: a
    stranger's entry is keyed by its coordinates (case C24), which its re-produced copy does not
    share, so nothing else would ever close it.

    Raises:
        TransientError: the broker did not acknowledge the dismissals.
    """
    raw = [r.key for r in releases if r.event is None]
    if raw:
        dismiss(settings, codec, raw, RAW_NOTE, read=read)


def run_bulk(
    items: list[BulkItem], settings: Settings, codec: EventCodec | None = None
) -> list[BulkItem]:
    """Carry out ``items`` (from :func:`plan_bulk`): every re-emitted record produced and
    acknowledged first (one publish; the raw ones' entries then closed, :func:`close_raw`, which
    needs ``codec``), then each NAS file moved back (:func:`move_back`).

    Raises:
        TransientError: the broker did not acknowledge the records (nothing was moved then).
        OSError: a move failed for a reason other than the ones :func:`move_back` reports.
    """
    releases = [i.release for i in items if i.action == "re-emit" and i.release is not None]
    if releases:
        producer = build_producer(settings.kafka, "ferry-quarantine-release")
        publish(producer, [r.record for r in releases], settings)
        if codec is not None:
            entries = tuple(i.entry for i in items)
            close_raw(settings, codec, releases, QuarantineRead(entries, ()))
    done: list[BulkItem] = []
    for i in items:
        if i.action == "re-emit":
            done.append(BulkItem(i.entry, i.action, "done", i.release))
        elif i.action == "move back" and i.source is not None and i.dest is not None:
            got = move_back(i.source, i.dest)
            outcome = "done" if got == "moved" else got
            if got == "moved" and i.marker is not None:
                mark = move_back(*i.marker)
                outcome = "done" if mark == "moved" else f"done, its marker {mark}"
            done.append(BulkItem(i.entry, i.action, outcome, None, i.source, i.dest, i.marker))
        else:
            done.append(i)
    return done


__all__ = [
    "RAW_NOTE",
    "BulkItem",
    "Selection",
    "close_raw",
    "failed_copy",
    "marker_suffixes",
    "move_back",
    "rename_noreplace",
    "plan_bulk",
    "run_bulk",
    "select",
]
