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

A directory without a marker (staged by an earlier Ferry: flat ``part-*`` files) is copied flat
as before, with its stale parts on A deleted last.

Errors come from the HDFS ports, already classified: connection resets, timeouts and refused
connections are :class:`TransientError` (retried by the runner up to the ceiling); a DataNode
address that cannot be reached (C06) is permanent. A staging copy that is gone (no directory, no
data file though the manifest counts rows, or a part removed mid-copy: its retention expired
before a replay or a release) is :class:`~ferry.errors.InputExpired`: quarantined at once.
"""

from __future__ import annotations

import hashlib
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from urllib.parse import urlsplit

from ferry.clusters.hdfs.port import HdfsPort
from ferry.core.events import FileTransferred, FileTransformed
from ferry.errors import HdfsPathNotFound, InputExpired, PermanentError
from ferry.settings.retry import RetrySettings
from ferry.stages.transfer.copy import copy_between
from ferry.tables.model import IndexFormatError, StagedMarker
from ferry.tables.paths import MARKER_NAME, parent


@dataclass(frozen=True)
class TransferDeps:
    hdfs_b: HdfsPort
    hdfs_a: HdfsPort
    incoming_path: str  #: directory on A, e.g. /ferry/incoming
    fs_url_a: str
    retry: RetrySettings
    threads: int = 4  #: data files copied at once (each a few WebHDFS round trips)


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
        _copy_tree(deps, src_dir, dst_dir, marker, data, expired)
    return [FileTransferred(m.advance(uris={"incoming": f"{deps.fs_url_a}{dst_dir}"}))]


def _copy_one(
    deps: TransferDeps, src: str, dst: str, expired: Callable[[str], InputExpired]
) -> None:
    """Copy one data file B → A; its disappearance from B mid-copy is ``expired``."""
    try:
        copy_between(deps.hdfs_b, src, deps.hdfs_a, dst, overwrite=True, retry=deps.retry)
    except HdfsPathNotFound:
        if deps.hdfs_b.exists(src):
            raise  # something else is missing (cluster A's side)
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
    there = _marker(a, dst_dir) if a.status_or_none(dst_dir) is not None else None
    if there is None or there[0].generation != marker.generation:
        a.delete(dst_dir, recursive=True)  # another output of this file (or none): start clean
    a.mkdirs(dst_dir)
    for d in sorted({parent(rel) for rel in marker.files} - {""}):
        a.mkdirs(f"{dst_dir}/{d}")

    def one(rel: str) -> None:
        _copy_one(deps, f"{src_dir}/{rel}", f"{dst_dir}/{rel}", expired)

    files = sorted(marker.files)
    if deps.threads > 1 and len(files) > 1:
        with ThreadPoolExecutor(min(deps.threads, len(files)), "ferry-copy") as pool:
            list(pool.map(one, files))
    else:
        for rel in files:
            one(rel)
    digest = hashlib.sha256(data).hexdigest()  # the same marker there already: nothing written
    a.upload_stream(
        f"{dst_dir}/{MARKER_NAME}", [data], overwrite=True, expected_sha256=digest, verify=True
    )


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
