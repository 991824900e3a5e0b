"""Remove NAS files extract moved under ``<nas_dir>/.ferry/`` (:mod:`ferry.nas`).

- ``.ferry/archive/<dataset>/``: one file per event, found without listing the directory: the
  names :func:`ferry.nas.moved_names` hands out for the file's NAS name and file id, and
  of those only a regular file with the manifest's size and modification time (a move keeps
  it; ``source_mtime`` is milliseconds) — so another file archived under the same name (other
  bytes: another file id and tag) is never taken. Its marker file (``<name><marker_suffix>``,
  datasets with ``finished: {policy: marker}``) goes with it.
- ``.ferry/empty/<dataset>/`` and ``.ferry/failed/<dataset>/``: by age, the time the file was
  moved there (``st_ctime``: a rename sets it), since most of these files never had a manifest.
  These hold only the exceptions, so listing them costs little (one ``scandir`` per dataset).

Only the sub-directories of the datasets this pipeline defines are looked at.
"""

from __future__ import annotations

import logging
import os
import stat
from dataclasses import dataclass
from pathlib import Path

from ferry.core.events import FileManifest
from ferry.gc.hdfs_copies import Removal
from ferry.nas import moved_names, outcome_dir

log = logging.getLogger(__name__)


def _mtime_ms(manifest: FileManifest) -> int | None:
    m = manifest.source_mtime
    return None if m is None else int(m.timestamp() * 1000)


def is_archived_copy(path: Path, manifest: FileManifest) -> bool:
    """``path`` is a regular file (not a link) with the manifest's size and, when the manifest
    has one, its modification time to the millisecond."""
    try:
        st = path.lstat()
    except FileNotFoundError:
        return False
    if not stat.S_ISREG(st.st_mode) or st.st_size != manifest.size_bytes:
        return False
    want = _mtime_ms(manifest)
    return want is None or abs(st.st_mtime_ns // 1_000_000 - want) <= 1


def remove_archived(nas_dir: Path, manifest: FileManifest, marker_suffix: str | None) -> Removal:
    """Remove the archived NAS file of ``manifest`` (and its marker), if it is still there.

    Outcomes: ``removed``; ``gone`` (no file under any name it may have); ``mismatch`` (files
    under its names, none with its size and time: other files, left alone).

    Raises:
        OSError: the file cannot be removed (permissions, a vanished share).
    """
    directory = outcome_dir(nas_dir, "archive", manifest.dataset)
    name = Path(manifest.source_path).name
    seen = False
    for path in moved_names(directory, name, manifest.file_id[:12]):
        seen = True
        if not is_archived_copy(path, manifest):
            continue
        size = path.lstat().st_size
        path.unlink()
        files = 1
        if marker_suffix:
            marker = path.with_name(path.name + marker_suffix)
            if os.path.lexists(marker):
                marker.unlink()
                files += 1
        return Removal("archive", "removed", str(path), files, size)
    return Removal("archive", "mismatch" if seen else "gone", str(directory / name))


@dataclass(frozen=True)
class AgedFile:
    """A file removed by :func:`sweep_by_age`: its path, size in bytes and when it was moved
    under ``.ferry/`` (``st_ctime``, epoch seconds)."""

    path: Path
    size: int
    moved_s: float


def sweep_by_age(nas_dir: Path, outcome: str, dataset: str, before_s: float) -> list[AgedFile]:
    """Remove the files (and links, never followed) of ``.ferry/<outcome>/<dataset>/`` moved
    there before ``before_s`` (epoch seconds, compared with ``st_ctime``); sub-directories are
    left. Returns what was removed; a file that cannot be removed is logged and left.

    Raises:
        OSError: the directory cannot be read (other than missing).
    """
    directory = outcome_dir(nas_dir, outcome, dataset)
    out: list[AgedFile] = []
    try:
        entries = list(os.scandir(directory))
    except FileNotFoundError:
        return out
    for entry in entries:
        try:
            st = entry.stat(follow_symlinks=False)
            if stat.S_ISDIR(st.st_mode) or st.st_ctime >= before_s:
                continue
            os.unlink(entry.path)
        except FileNotFoundError:
            continue
        except OSError as exc:
            log.error("gc: cannot remove %s: %s", entry.path, exc)
            continue
        out.append(AgedFile(Path(entry.path), st.st_size, st.st_ctime))
    return out


__all__ = ["AgedFile", "is_archived_copy", "remove_archived", "sweep_by_age"]
