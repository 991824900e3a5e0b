"""transfer's handler: a staged file's Parquet parts, B → A, verified, then ``FileTransferred``.

The staged directory ``<staging>/<dataset>/<file_id>/`` on B holds the file's Parquet part(s).
Each part is copied by :func:`ferry.stages.transfer.copy.copy_between` to
``<incoming>/<dataset>/<file_id>/<part>`` on A: streamed (never whole in memory), written to a
hidden temp name, re-read and compared by size and sha256, then renamed — so a reader on A never
sees a partial part (Spark ignores ``.``/``_`` names) and a retry or replay re-copies nothing that
is already right (cases C01, C02). Parts on A that are no longer in B's staging (an earlier
transform of the same file) are deleted last, so A ends with exactly B's set.

Errors come from the HDFS ports, already classified: connection resets, timeouts and refused
connections are :class:`TransientError` (retried by the runner up to the ceiling); a DataNode
address that cannot be reached (C06) is permanent. A staging copy that is gone (no directory, no
data file though the manifest counts rows, or a part removed mid-copy: its retention expired
before a replay or a release) is :class:`~ferry.core.errors.InputExpired`: quarantined at once.
"""

from __future__ import annotations

from dataclasses import dataclass
from urllib.parse import urlsplit

from ferry.clusters.hdfs.port import HdfsPort
from ferry.core.errors import HdfsPathNotFound, InputExpired, PermanentError
from ferry.core.events import FileTransferred, FileTransformed
from ferry.settings.retry import RetrySettings
from ferry.stages.transfer.copy import copy_between


@dataclass(frozen=True)
class TransferDeps:
    hdfs_b: HdfsPort
    hdfs_a: HdfsPort
    incoming_path: str  #: directory on A, e.g. /ferry/incoming
    fs_url_a: str
    retry: RetrySettings


def _data_files(port: HdfsPort, directory: str) -> dict[str, int]:
    """Visible data files of ``directory``: name → size (skips ``.``/``_`` names: temp, markers)."""
    return {
        st.name: st.size
        for st in port.list(directory)
        if st.is_file and not st.name.startswith((".", "_"))
    }


def transfer_file(event: FileTransformed, deps: TransferDeps) -> list[FileTransferred]:
    """Copy one file's staged parts to A. Idempotent on ``file_id``.

    Raises:
        PermanentError(reason="bad_manifest"): no staging URI in the manifest.
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

    try:
        parts = _data_files(deps.hdfs_b, src_dir)
    except HdfsPathNotFound:
        raise expired("no such directory") from None
    if not parts and (m.rows_out or 0) > 0:  # an empty directory is right only for 0 rows
        raise expired(f"no data file, {m.rows_out} row(s) expected")
    deps.hdfs_a.mkdirs(dst_dir)
    for name in sorted(parts):
        try:
            copy_between(
                deps.hdfs_b,
                f"{src_dir}/{name}",
                deps.hdfs_a,
                f"{dst_dir}/{name}",
                overwrite=True,
                retry=deps.retry,
            )
        except HdfsPathNotFound:
            if deps.hdfs_b.exists(f"{src_dir}/{name}"):
                raise  # something else is missing (cluster A's side)
            raise expired(f"{name} removed while it was copied") from None
    for stale in sorted(set(_data_files(deps.hdfs_a, dst_dir)) - set(parts)):
        deps.hdfs_a.delete(f"{dst_dir}/{stale}")
    return [FileTransferred(m.advance(uris={"incoming": f"{deps.fs_url_a}{dst_dir}"}))]
