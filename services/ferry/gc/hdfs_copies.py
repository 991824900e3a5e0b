"""Remove one file's copy in an HDFS zone, exactly what the event names and nothing else.

A copy is named by its manifest URI and must sit where Ferry writes it: landing
``<landing>/<dataset>/<file_id>/<name>`` (one file; the directory may hold other names of the same
content, each with its own events), staging, rejects and incoming ``<zone>/<dataset>/<file_id>``
(a directory of parts). Anything else (another root, dataset or file id: another pipeline's or a
hand-made path) is left alone and reported as ``foreign``.

Rules, so the sweep never takes what it must not:

- A copy written after the event (``mtime`` later than the event's time plus
  ``retention.clock_skew_s``) was rewritten by a later run of the file; it is ``rewritten`` and
  left for that run's own ``FileLoaded`` or ``FileFailed``.
- Temporary files (``.<name>.ferry-tmp-<hex>``) may belong to a running attempt: they are removed
  only once older than ``retention.orphans``, and a directory holding one stays.
- The directory is removed last, non-recursively, only when empty.

Costs: one LISTSTATUS (or GETFILESTATUS for landing) per copy and one DELETE per file removed,
whatever the size of the zone: the zone is never listed.
"""

from __future__ import annotations

import logging
import posixpath
from dataclasses import dataclass
from typing import Literal
from urllib.parse import urlsplit

from ferry.clusters.hdfs.paths import FileStatus, is_temp_path, normalize_path
from ferry.clusters.hdfs.port import HdfsPort
from ferry.core.events import FileManifest
from ferry.errors import HdfsPathNotFound, HdfsRequestRejected
from ferry.tables.model import BatchMarker, IndexFormatError, StagedMarker
from ferry.tables.paths import MARKER_NAME

log = logging.getLogger(__name__)

Outcome = Literal["removed", "gone", "rewritten", "foreign", "mismatch"]


@dataclass(frozen=True)
class Removal:
    """What happened to one copy: ``outcome``, files and bytes removed, the path looked at, and
    temporary files of dead attempts removed with it (``orphans``)."""

    zone: str
    outcome: Outcome
    path: str
    files: int = 0
    bytes: int = 0
    orphans: int = 0


def copy_dir(root: str, manifest: FileManifest) -> str:
    """``<root>/<dataset>/<file_id>``: the directory of one file's copy in a zone."""
    return f"{normalize_path(root)}/{manifest.dataset}/{manifest.file_id}"


def remove_hdfs_copy(
    port: HdfsPort,
    zone: str,
    root: str,
    manifest: FileManifest,
    *,
    written_before_ms: int,
    orphans_before_ms: int,
) -> Removal:
    """Remove ``manifest``'s copy in ``zone`` (rooted at ``root`` on ``port``'s cluster).

    Args:
        written_before_ms: files modified later (epoch ms) were rewritten after the event.
        orphans_before_ms: temporary files modified earlier (epoch ms) belong to dead attempts.

    Raises:
        TransientError: the cluster did not answer (nothing counted; the sweep tries again).
        HdfsRequestRejected: the NameNode refused (permissions).
    """
    uri = manifest.uris[zone]
    path = normalize_path(urlsplit(uri).path)
    directory = copy_dir(root, manifest)
    if zone == "landing":
        if posixpath.dirname(path) != directory or is_temp_path(path):
            return _foreign(zone, uri, directory)
        return _remove_landing(port, path, directory, written_before_ms, orphans_before_ms)
    if path != directory:
        return _foreign(zone, uri, directory)
    try:
        entries = port.list(directory)
    except HdfsPathNotFound:
        return Removal(zone, "gone", directory)
    data = [e for e in entries if not is_temp_path(e.path)]
    if any(e.mtime_ms > written_before_ms for e in data):
        return Removal(zone, "rewritten", directory)
    files = size = 0
    for e in data:
        if port.delete(e.path, recursive=e.is_dir):
            files, size = files + 1, size + e.size
    orphans, emptied = _remove_dir_if_done(port, directory, orphans_before_ms)
    outcome: Outcome = "removed" if files or emptied else "gone"
    return Removal(zone, outcome, directory, files, size, orphans)


def _remove_landing(
    port: HdfsPort, path: str, directory: str, written_before_ms: int, orphans_before_ms: int
) -> Removal:
    st = port.status_or_none(path)
    if st is not None and st.mtime_ms > written_before_ms:
        return Removal("landing", "rewritten", path)
    removed = st is not None and st.is_file and port.delete(path)
    orphans, _ = _remove_dir_if_done(port, directory, orphans_before_ms)
    if not removed:
        return Removal("landing", "gone", path, orphans=orphans)
    assert st is not None
    return Removal("landing", "removed", path, 1, st.size, orphans)


def _remove_dir_if_done(port: HdfsPort, directory: str, orphans_before_ms: int) -> tuple[int, bool]:
    """Remove the temporary files of dead attempts in ``directory``, then the directory if it is
    empty. Returns (temporary files removed, whether the directory was removed)."""
    try:
        entries = port.list(directory)
    except HdfsPathNotFound:
        return 0, False
    dead = [e for e in entries if is_temp_path(e.path) and e.mtime_ms < orphans_before_ms]
    removed = sum(bool(port.delete(e.path, recursive=e.is_dir)) for e in dead)
    if len(entries) != len(dead):
        return removed, False
    try:
        return removed, port.delete(directory)
    except HdfsRequestRejected:  # a new entry appeared meanwhile (a re-run): it stays
        log.info("gc: %s is in use again; left", directory)
        return removed, False


def _foreign(zone: str, uri: str, directory: str) -> Removal:
    log.warning(
        "gc: %s copy %s is not under %s, where Ferry writes this file's copy; left alone",
        zone,
        uri,
        directory,
    )
    return Removal(zone, "foreign", uri)


def orphan_batches(
    port: HdfsPort, root: str, dataset: str, before_ms: int, sub: str = "_tmp"
) -> list[FileStatus]:
    """The entries of ``<root>/<dataset>/<sub>`` last modified before ``before_ms``: of ``_tmp``
    (the batch directories a transform writes before its per-file renames) those left by a
    transform that died; of ``_shared`` (a transform batch's shared data files, issue 45) those
    past the zone's retention."""
    try:
        entries = port.list(f"{normalize_path(root)}/{dataset}/{sub}")
    except HdfsPathNotFound:
        return []
    return [e for e in entries if e.mtime_ms < before_ms]


def shared_in_use(port: HdfsPort, root: str, dataset: str, batch: str) -> bool:
    """True when a file of the shared batch directory ``batch`` (``<root>/<dataset>/_shared/
    <generation>``, issue 45) still has its own directory in the zone naming that generation:
    its transfer or its load may still need the batch (its directory goes by the file's own
    retention, counted from its load). One read of the batch marker, then a marker read per
    file of the batch until one is found. An unreadable batch marker: not in use.

    Raises:
        FerryError: the cluster did not answer (the sweep tries again next turn).
    """
    generation = batch.rstrip("/").rsplit("/", 1)[-1]
    try:
        members = BatchMarker.from_json(
            b"".join(port.open_stream(f"{batch}/{MARKER_NAME}"))
        ).file_ids()
    except (HdfsPathNotFound, IndexFormatError):
        return False
    for fid in sorted(members):
        path = f"{normalize_path(root)}/{dataset}/{fid}/{MARKER_NAME}"
        try:
            marker = StagedMarker.from_json(b"".join(port.open_stream(path)))
        except (HdfsPathNotFound, IndexFormatError):
            continue
        if marker.generation == generation:
            return True
    return False


__all__ = ["Removal", "copy_dir", "orphan_batches", "remove_hdfs_copy", "shared_in_use"]
