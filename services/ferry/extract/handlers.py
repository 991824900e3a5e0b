"""extract's handler: one finished NAS file → HDFS B landing → ``FileExtracted``.

``extract_file`` is a plain function of (candidate, dependencies) and is unit-tested with
:class:`ferry.core.hdfs_fake.FakeHdfs`. Rules:

- ``file_id`` = f(dataset, sha256 of the bytes) (:func:`ferry.core.events.derive_file_id`): the
  same bytes dropped twice, or renamed, get the same ``file_id``; every later stage is idempotent
  on it, so a re-drop changes nothing in Hive. The landing path is
  ``<landing>/<dataset>/<file_id>/<original name, NFC>`` (case C07).
- 0-byte, blank and header-only files (case C11) are not landed: they produce a ``FileFailed``
  with reason ``empty_zero_bytes`` / ``empty_blank`` / ``empty_header_only`` — recorded, not
  loaded, and the stage goes on.
- The upload streams the file through a temp name and a rename (case C02); the NAS file is read
  twice (hash, then upload with the hash checked) and never held in memory.
"""

from __future__ import annotations

import hashlib
import unicodedata
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path

from ferry.core.events import (
    FileExtracted,
    FileFailed,
    FileManifest,
    derive_file_id,
    new_trace_id,
    utc_now,
)
from ferry.core.hdfs import HdfsPort
from ferry.extract.scanner import Candidate
from ferry.jobs.precheck import HEAD_BYTES, classify_empty


@dataclass(frozen=True)
class ExtractDeps:
    """What :func:`extract_file` needs: cluster B's HDFS port and where landing is (path, URL)."""

    hdfs_b: HdfsPort
    landing_path: str
    fs_url_b: str
    chunk_bytes: int = 1 << 20


def _chunks(path: Path, size: int) -> Iterator[bytes]:
    with path.open("rb") as fh:
        while chunk := fh.read(size):
            yield chunk


class SourceChanged(Exception):
    """The NAS file's size or mtime differ from when the scanner judged it finished: it is
    still being written (case C09). Not an error: the caller forgets it and the scanner waits
    for it to be stable again."""


def _sha256(path: Path, size: int) -> tuple[int, str]:
    digest = hashlib.sha256()
    count = 0
    for chunk in _chunks(path, size):
        digest.update(chunk)
        count += len(chunk)
    return count, digest.hexdigest()


def landing_path(landing_root: str, dataset: str, file_id: str, name: str) -> str:
    """``<landing_root>/<dataset>/<file_id>/<name in NFC>``."""
    return f"{landing_root.rstrip('/')}/{dataset}/{file_id}/{unicodedata.normalize('NFC', name)}"


def extract_file(cand: Candidate, deps: ExtractDeps) -> list[FileExtracted | FileFailed]:
    """Land one finished NAS file on HDFS B. Returns ``[FileExtracted]`` or ``[FileFailed]``
    (empty file).

    Raises:
        FileNotFoundError: the NAS file vanished (the caller forgets it).
        SourceChanged: the NAS file changed since the scan (the caller forgets it).
        TransientError / PermanentError: from the HDFS port (timeouts, resets, DataNode
            unreachable).
    """
    hashed, sha = _sha256(cand.path, deps.chunk_bytes)
    st = cand.path.stat()
    if (hashed, st.st_size, st.st_mtime_ns) != (cand.size, cand.size, cand.mtime_ns):
        raise SourceChanged(
            f"{cand.relative}: {hashed} bytes hashed, now {st.st_size} bytes mtime_ns "
            f"{st.st_mtime_ns}; scanned as {cand.size} bytes mtime_ns {cand.mtime_ns}"
        )
    file_id = derive_file_id(cand.dataset.name, sha)
    now = utc_now()
    manifest = FileManifest(
        file_id=file_id,
        dataset=cand.dataset.name,
        source_path=cand.relative,
        size_bytes=cand.size,
        sha256=sha,
        created_at=now,
        updated_at=now,
        trace_id=new_trace_id(),
        source_mtime=datetime.fromtimestamp(cand.mtime_ns / 1e9, tz=UTC),
    )
    with cand.path.open("rb") as fh:
        head = fh.read(HEAD_BYTES)
    empty = classify_empty(head, header=cand.dataset.csv.header)
    if empty is not None:
        return [
            FileFailed(
                stage="extract",
                reason=f"empty_{empty}",
                error=(
                    f"{cand.relative}: no data rows ({empty.replace('_', ' ')}); "
                    "recorded, not loaded"
                ),
                attempt=1,
                failed_at=now,
                manifest=manifest,
            )
        ]
    dest = landing_path(deps.landing_path, cand.dataset.name, file_id, cand.path.name)
    deps.hdfs_b.upload_stream(
        dest,
        _chunks(cand.path, deps.chunk_bytes),
        expected_size=cand.size,
        expected_sha256=sha,
        overwrite=True,
    )
    return [FileExtracted(manifest.advance(uris={"landing": f"{deps.fs_url_b}{dest}"}))]
