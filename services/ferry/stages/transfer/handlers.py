"""transfer's handler: a staged file's Parquet tree, B → A, verified, then ``FileTransferred``.

The staged directory ``<staging>/<dataset>/<file_id>/`` on B holds the file's data files in
partition directories (``flight_date=2013-01-01/ferry-<file_id>-<generation>-<n>.parquet``) and
the marker ``_ferry.json`` naming them (:mod:`ferry.tables.staging`). Each data file
is copied by :func:`ferry.stages.transfer.copy.copy_between` to the same relative path under
``<incoming>/<dataset>/<file_id>/`` on A: streamed (never whole in memory), written to a hidden
temp name, re-read and compared by size and sha256, then renamed — so a reader on A never sees a
partial file (Spark ignores ``.``/``_`` names) and a retry or replay re-copies nothing that is
already right (cases C01, C02). Partition directory names keep Hive's escaping byte for byte
(``note=a%2Fb``, ``k=v%3Dw``, spaces; C07). The marker is copied last. Stale files: when A holds
another generation's output of the file (an earlier transform run), A's directory is deleted
first, so A ends with exactly B's set. Data files are copied on :attr:`TransferDeps.threads`
threads (a file of a year's rows is 365 data files).

A file staged in a batch with others (``transform.share_files``, case C23) has its rows in the
batch's shared data files ``<staging>/<dataset>/_shared/<generation>/`` (its marker names them):
each shared file and the batch marker are copied ONCE per process to the same place under
``<incoming>/<dataset>/``, however many of the batch's files name them (:class:`SharedCopies`:
one lock per shared file, so two transfers of the same batch do not copy it twice; the next files
of the batch make one status call, of the batch marker), before the file's own marker; a
restarted transfer finds a shared file there already by size and sha256. The load deletes a
batch directory once every file of the batch is loaded: a replay of transfer then copies it
again. (A file loaded from a batch that is not complete, then removed by ``ferry unload``, is
brought back by a replay of transform, not of transfer: its shared files may be in the table.)

A directory without a marker (staged by an earlier Ferry: flat ``part-*`` files) is copied flat
as before, with its stale parts on A deleted last.

Errors come from the HDFS ports, already classified: connection resets, timeouts, refused
connections and a DataNode address that cannot be reached (C06) say that cluster B or A is out of
reach, and the runner holds the file as a condition of that cluster, quarantining it only after
``retry.condition_window_s`` (:func:`ferry.errors.outage_condition`); a checksum mismatch is
retried up to the ceiling. A staging copy that is gone (no directory, no
data file though the manifest counts rows, or a part removed mid-copy: its retention expired
before a replay or a release) is :class:`~ferry.errors.InputExpired`: quarantined at once.
"""

from __future__ import annotations

import hashlib
import threading
from collections import OrderedDict
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from dataclasses import dataclass, field
from urllib.parse import urlsplit

from ferry.clusters.hdfs.port import HdfsPort
from ferry.core.events import FileTransferred, FileTransformed
from ferry.errors import HdfsPathNotFound, InputExpired, PermanentError, TransientError
from ferry.settings.retry import RetrySettings
from ferry.stages.transfer.copy import copy_between
from ferry.tables.model import IndexFormatError, StagedMarker
from ferry.tables.paths import MARKER_NAME, parent, shared_dir

#: Shared files a transfer process remembers as copied (oldest forgotten first): a batch of 256
#: files over 365 days names 365; the memory stays flat however long the process lives.
SHARED_REMEMBERED = 20_000


class SharedCopies:
    """The shared files (paths on A) this process has copied and verified, and a lock per
    shared file being copied: each is copied and verified once, however many files of its batch
    name it. Thread-safe; at most :data:`SHARED_REMEMBERED` paths are remembered."""

    def __init__(self, limit: int = SHARED_REMEMBERED) -> None:
        self._done: OrderedDict[str, None] = OrderedDict()
        self._locks: dict[str, threading.Lock] = {}
        self._guard = threading.Lock()
        self._limit = limit

    def done(self, path: str) -> bool:
        with self._guard:
            return path in self._done

    def mark(self, path: str) -> None:
        with self._guard:
            self._done[path] = None
            while len(self._done) > self._limit:
                self._done.popitem(last=False)

    def forget(self, directory: str) -> None:
        """Forget every path under ``directory`` (its copies on A are gone)."""
        prefix = directory.rstrip("/") + "/"
        with self._guard:
            for path in [p for p in self._done if p.startswith(prefix)]:
                del self._done[path]

    @contextmanager
    def holding(self, path: str) -> Iterator[None]:
        """Hold ``path``'s lock (other threads copying the same shared file wait)."""
        with self._guard:
            lock = self._locks.setdefault(path, threading.Lock())
        with lock:
            yield
        with self._guard:
            if not lock.locked():
                self._locks.pop(path, None)


class StagedAnew(TransientError):
    """The file was transformed again while its staged tree was being copied: a redelivered
    FileTransformed (transform's offset not committed before a rebalance or a crash) made a new
    generation, which replaced the one this copy had read. Not an expired input: the next
    attempt copies the new generation (compose nemesis seed 4711: quarantined as
    ``input_expired``, then loaded from the newer event)."""

    reason = "staged_anew"


class TargetVanished(TransientError):
    """A file's target on A vanished while it was written (its temporary file or its directory
    deleted under the copy): another copy of the same file ran at once and started clean (a
    batch of two events of one file, or two transfer instances across a rebalance). Not a path
    that is missing for good: the next attempt copies it again, whole (compose nemesis seed
    4711, 2026-12-07: quarantined as ``hdfs_not_found``, then loaded from the other event)."""

    reason = "target_vanished"


@dataclass(frozen=True)
class TransferDeps:
    hdfs_b: HdfsPort
    hdfs_a: HdfsPort
    incoming_path: str  #: directory on A, e.g. /ferry/incoming
    fs_url_a: str
    retry: RetrySettings
    threads: int = 4  #: data files copied at once (each a few WebHDFS round trips)
    shared: SharedCopies = field(default_factory=SharedCopies)


def _data_files(port: HdfsPort, directory: str) -> dict[str, int]:
    """Visible data files of ``directory``: name → size (skips ``.``/``_`` names: temp, markers)."""
    return {
        st.name: st.size
        for st in port.list(directory)
        if st.is_file and not st.name.startswith((".", "_"))
    }


def _marker(port: HdfsPort, directory: str) -> tuple[StagedMarker, bytes] | None:
    """The staging marker of ``directory`` and its bytes, ``None`` when it has none."""
    path = f"{directory}/{MARKER_NAME}"
    if port.status_or_none(path) is None:
        return None
    data = b"".join(port.open_stream(path))
    try:
        return StagedMarker.from_json(data, path), data
    except IndexFormatError as exc:
        raise PermanentError(f"{port.name}:{path}: {exc}", reason="bad_manifest") from exc


def transfer_file(event: FileTransformed, deps: TransferDeps) -> list[FileTransferred]:
    """Copy one file's staged tree to A. Idempotent on ``file_id``.

    Raises:
        PermanentError(reason="bad_manifest"): no staging URI in the manifest, or its marker is
            unreadable or names another file.
        InputExpired: the staged copy is gone (reason ``input_expired``).
        StagedAnew: a data file vanished because the file was staged anew meanwhile (a newer
            generation's marker is there now): retried, and the next attempt copies that one.
        TargetVanished: a target on A was deleted while it was written (another copy of the
            same file at once): retried.
        TransientError / PermanentError subclasses from the HDFS ports and copy_between.
    """
    m = event.manifest
    staging = m.uris.get("staging")
    if not staging:
        raise PermanentError(f"{m.file_id}: manifest has no staging URI", reason="bad_manifest")
    src_dir = urlsplit(staging).path
    dst_dir = f"{deps.incoming_path.rstrip('/')}/{m.dataset}/{m.file_id}"

    def expired(why: str) -> InputExpired:
        return InputExpired(
            "staging",
            staging,
            file_id=m.file_id,
            source_path=m.source_path,
            dataset=m.dataset,
            why=why,
        )

    found = _marker(deps.hdfs_b, src_dir)
    if found is None:
        _copy_flat(deps, src_dir, dst_dir, m.rows_out, expired)
    else:
        marker, data = found
        if marker.file_id != m.file_id:
            raise PermanentError(
                f"{src_dir}/{MARKER_NAME} names file {marker.file_id}, not {m.file_id}",
                reason="bad_manifest",
            )
        try:
            _copy_tree(deps, src_dir, dst_dir, marker, data, expired)
        except InputExpired as exc:
            now = _marker(deps.hdfs_b, src_dir)
            if now is None or now[0].generation == marker.generation:
                raise
            raise StagedAnew(
                f"{src_dir}: staged anew while it was copied (generation {marker.generation} -> "
                f"{now[0].generation}: the file was transformed again); copied again: {exc}"
            ) from exc
    return [FileTransferred(m.advance(uris={"incoming": f"{deps.fs_url_a}{dst_dir}"}))]


def _copy_one(
    deps: TransferDeps,
    src: str,
    dst: str,
    expired: Callable[[str], InputExpired],
    *,
    target_absent: bool = False,
) -> int:
    """Copy one data file B → A; its size. Its disappearance from B mid-copy is ``expired``.
    ``target_absent``: see :func:`~ferry.stages.transfer.copy.copy_between`."""
    try:
        size, _ = copy_between(
            deps.hdfs_b,
            src,
            deps.hdfs_a,
            dst,
            overwrite=True,
            target_absent=target_absent,
            retry=deps.retry,
        )
        return size
    except HdfsPathNotFound as exc:
        if deps.hdfs_b.exists(src):
            # the source is there: what went missing is the target's side on A, deleted under
            # this copy by another copy of the file (CREATE makes missing parents itself)
            raise TargetVanished(f"{dst}: deleted on A while it was written: {exc}") from exc
        raise expired(f"{src.rsplit('/', 1)[-1]} removed while it was copied") from None


def _copy_tree(
    deps: TransferDeps,
    src_dir: str,
    dst_dir: str,
    marker: StagedMarker,
    data: bytes,
    expired: Callable[[str], InputExpired],
) -> None:
    a = deps.hdfs_a
    # No mkdirs: WebHDFS CREATE makes a file's missing parents (``createparent`` defaults to
    # true), and each copy's temporary file sits beside its target (issue 45's cost table: a
    # NameNode call per partition directory per file, and a delete of nothing per new file).
    fresh = a.status_or_none(dst_dir) is None  # then no target of it is asked for first
    if not fresh:
        there = _marker(a, dst_dir)
        if there is None or there[0].generation != marker.generation:
            a.delete(dst_dir, recursive=True)  # another output of this file: start clean
            fresh = True

    def one(rel: str) -> None:
        _copy_one(deps, f"{src_dir}/{rel}", f"{dst_dir}/{rel}", expired, target_absent=fresh)

    _each(deps, one, sorted(marker.files))
    if marker.shared:
        _copy_shared(deps, parent(src_dir), parent(dst_dir), marker, expired)
    digest = hashlib.sha256(data).hexdigest()  # the same marker there already: nothing written
    a.upload_stream(
        f"{dst_dir}/{MARKER_NAME}", [data], overwrite=True, expected_sha256=digest, verify=True
    )


def _copy_shared(
    deps: TransferDeps,
    src_root: str,
    dst_root: str,
    marker: StagedMarker,
    expired: Callable[[str], InputExpired],
) -> None:
    """Copy the batch's shared files ``marker`` names, then its batch marker, from
    ``<src_root>/_shared/<generation>`` to the same place under ``dst_root`` (the dataset's
    directories on B and A), each once per process (:class:`SharedCopies`)."""
    src_batch = shared_dir(src_root, marker.generation)
    dst_batch = shared_dir(dst_root, marker.generation)
    batch_marker = f"{dst_batch}/{MARKER_NAME}"
    names = sorted(marker.shared)
    if all(deps.shared.done(f"{dst_batch}/{rel}") for rel in [*names, MARKER_NAME]):
        # copied by this process: one status call says the batch directory is still there (the
        # load deletes it once every file of the batch is loaded; a replay then copies again)
        if deps.hdfs_a.status_or_none(batch_marker) is not None:
            return
        deps.shared.forget(dst_batch)
    # A batch directory not on A yet (the usual case: the first of the batch's files here) holds
    # no target to ask for before each copy: one call instead of one per shared file. Only a copy
    # holding the file's lock writes it, and overwrites whatever another process put there.
    fresh = deps.hdfs_a.status_or_none(dst_batch) is None

    def one(rel: str) -> None:  # its directories are made by the copy's CREATE
        dst = f"{dst_batch}/{rel}"
        if deps.shared.done(dst):
            return
        with deps.shared.holding(dst):
            if deps.shared.done(dst):  # copied by another thread meanwhile
                return
            _copy_one(deps, f"{src_batch}/{rel}", dst, expired, target_absent=fresh)
            deps.shared.mark(dst)

    _each(deps, one, names)
    one(MARKER_NAME)  # the batch marker, after the files it names


def _each(deps: TransferDeps, one: Callable[[str], None], rels: list[str]) -> None:
    """``one(rel)`` for each of ``rels``, on up to :attr:`TransferDeps.threads` threads."""
    if deps.threads > 1 and len(rels) > 1:
        with ThreadPoolExecutor(min(deps.threads, len(rels)), "ferry-copy") as pool:
            list(pool.map(one, rels))
    else:
        for rel in rels:
            one(rel)


def _copy_flat(
    deps: TransferDeps,
    src_dir: str,
    dst_dir: str,
    rows_out: int | None,
    expired: Callable[[str], InputExpired],
) -> None:
    try:
        parts = _data_files(deps.hdfs_b, src_dir)
    except HdfsPathNotFound:
        raise expired("no such directory") from None
    if not parts and (rows_out or 0) > 0:  # an empty directory is right only for 0 rows
        raise expired(f"no data file, {rows_out} row(s) expected")
    deps.hdfs_a.mkdirs(dst_dir)
    for name in sorted(parts):
        _copy_one(deps, f"{src_dir}/{name}", f"{dst_dir}/{name}", expired)
    for stale in sorted(set(_data_files(deps.hdfs_a, dst_dir)) - set(parts)):
        deps.hdfs_a.delete(f"{dst_dir}/{stale}")
