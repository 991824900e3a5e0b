"""extract's handler: one finished NAS file → HDFS B landing → ``FileExtracted``.

``extract_file`` is a plain function of (candidate, dependencies) and is unit-tested with
:class:`tests.support.hdfs_fake.FakeHdfs`. Rules:

- ``file_id`` = f(dataset, sha256 of the bytes) (:func:`ferry.core.events.derive_file_id`): the
  same bytes dropped twice, or renamed, get the same ``file_id``; every later stage is idempotent
  on it, so a re-drop changes nothing in Hive. The landing path is
  ``<landing>/<dataset>/<file_id>/<original name, NFC>`` (docs/field-cases.md, C07); a name
  holding a character the NameNode refuses (``:``, common in time-stamped exports) lands
  percent-encoded (:func:`ferry.clusters.hdfs.hdfs_name`), and the manifest keeps the exact name.
- 0-byte, blank and header-only files (case C11) are not landed: they produce a ``FileFailed``
  with reason ``empty_zero_bytes`` / ``empty_blank`` / ``empty_header_only`` — recorded, not
  loaded, and the stage goes on.
- Names HDFS cannot hold are refused up front, before any byte is read or any HDFS call:
  ``bad_file_name`` (not valid UTF-8, e.g. Latin-1 bytes on the share, which Python shows as
  surrogate escapes) and ``name_too_long`` (the final HDFS name or its temp upload name,
  :func:`~ferry.clusters.hdfs.temp_path_for`, is over
  :data:`~ferry.clusters.hdfs.MAX_COMPONENT_BYTES` bytes of UTF-8). Retrying cannot fix either.
- Bytes that are not valid in the dataset's CSV encoding (``csv.encoding``, UTF-8: the only one
  the definitions allow, and what Spark's reader is given) give ``not_utf8`` with the byte offset,
  and nothing is landed; Spark would otherwise load them as U+FFFD. A UTF-8 BOM is valid (C10).
  The check runs on the same read pass as the sha256.
- The upload streams the file through a temp name and a rename (case C02); the NAS file is read
  twice (hash + encoding check, then upload with the hash checked) and never held in memory.
- Confinement (case C15): an entry the scanner refused (``candidate.refusal``) gives a
  ``FileFailed`` with its reason code (``symlink_outside_nas``, ``symlink_loop``,
  ``symlink_refused``, ``hardlink_refused``) and is never opened; any other is opened once by
  :func:`ferry.stages.extract.confine.open_confined`, which checks the descriptor (same inode
  as scanned, regular, inside the NAS root) before the first byte is read, and every read pass
  uses that one descriptor.
"""

from __future__ import annotations

import codecs
import hashlib
import os
import posixpath
import unicodedata
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, BinaryIO

from ferry.clusters.hdfs.errors import NAME_TOO_LONG
from ferry.clusters.hdfs.paths import MAX_COMPONENT_BYTES, hdfs_name, temp_path_for
from ferry.clusters.hdfs.port import HdfsPort
from ferry.core.events import FileExtracted, FileFailed, FileManifest, failed, utc_now
from ferry.core.identity import derive_file_id, new_trace_id
from ferry.datasets.compression import Codec, CorruptArchive, codec_of, decompress
from ferry.datasets.precheck import HEAD_BYTES, classify_empty
from ferry.stages.extract.confine import ChangedSince, Refused, open_confined
from ferry.stages.extract.scanner import Candidate, display_name


@dataclass(frozen=True)
class ExtractDeps:
    """What :func:`extract_file` needs: cluster B's HDFS port and where landing is (path, URL)."""

    hdfs_b: HdfsPort
    landing_path: str
    fs_url_b: str
    chunk_bytes: int = 1 << 20
    #: refuse a file with several hard links (``extract.refuse_hardlinks``, case C15)
    refuse_hardlinks: bool = False
    #: dataset name → version of its definition now (``FileManifest.definition_version``)
    version_of: Callable[[str], str | None] = lambda _name: None
    #: called with the candidate and its manifest once the file is hashed (its file id known),
    #: before landing: a landing that fails is quarantined under that file id
    on_hashed: Callable[[Candidate, FileManifest], None] = lambda _cand, _manifest: None


class Spliced:
    """Bytes ``[0, head)`` then ``[start, EOF)`` of the open file ``fh``, read as one stream
    (what :func:`_chunks` and the head check read): the appended bytes of a file behind its
    header line (:mod:`ferry.stages.extract.afterwards`). ``seek`` goes back to the start
    only."""

    def __init__(self, fh: BinaryIO, head: int, start: int) -> None:
        self.fh, self.head, self.start = fh, head, start
        self._pos = 0

    def fileno(self) -> int:
        return self.fh.fileno()

    def seek(self, pos: int) -> None:
        if pos != 0:
            raise ValueError("a spliced stream seeks back to its start only")
        self._pos = 0
        self.fh.seek(0 if self.head else self.start)

    def read(self, n: int = -1) -> bytes:
        out = b""
        if self._pos < self.head:
            want = self.head - self._pos if n < 0 else min(n, self.head - self._pos)
            out = self.fh.read(want)
            self._pos += len(out)
            if self._pos < self.head:
                return out  # the file ended inside the head
            self.fh.seek(self.start)
            if n >= 0:
                n -= len(out)
                if n == 0:
                    return out
        more = self.fh.read(n)
        self._pos += len(more)
        return out + more


def _chunks(fh: BinaryIO | Spliced, size: int) -> Iterator[bytes]:
    """``fh`` from its first byte, ``size`` bytes at a time."""
    fh.seek(0)
    while chunk := fh.read(size):
        yield chunk


def nas_root(cand: Candidate) -> Path:
    """Real path of the NAS root ``cand`` was found under (its path minus the dataset's
    sub-directory and its name)."""
    depth = len(Path(cand.dataset.nas.subdir).parts)
    return Path(os.path.realpath(cand.path.parents[depth]))


class SourceChanged(Exception):
    """The NAS file's size or mtime differ from when the scanner judged it finished: it is
    still being written (case C09). Not an error: the caller forgets it and the scanner waits
    for it to be stable again."""


#: ``FileFailed.reason`` codes set by :func:`extract_file` (besides ``empty_*``).
BAD_FILE_NAME = "bad_file_name"
NOT_UTF8 = "not_utf8"

#: ``FileFailed.reason`` of a ``.gz``/``.bz2`` file that is not a complete archive of its codec
#: (truncated, or not that format at all: field case C21); the message names the compressed
#: byte offset. Nothing of it is landed.
CORRUPT_ARCHIVE = "corrupt_archive"


@dataclass(frozen=True)
class _Scan:
    """One read pass: byte count, sha256 (of the bytes as dropped), the first undecodable byte
    (offset, message; offsets in the decompressed text of a compressed file), the decompressed
    head of a compressed file, and why its archive is broken (``None``: intact)."""

    size: int
    sha256: str
    bad_offset: int | None = None
    bad_reason: str = ""
    head: bytes | None = None
    corrupt: CorruptArchive | None = None


def _scan(fh: BinaryIO | Spliced, size: int, encoding: str, codec: Codec | None = None) -> _Scan:
    """Hash the open file ``fh`` and check it decodes as ``encoding`` in the same single pass,
    ``size`` bytes at a time (never the whole file in memory). Hashing goes on past a bad byte,
    so the sha256 is always the file's. A compressed file (``codec``) is decompressed on the
    way (:func:`ferry.datasets.compression.decompress`): its text is what must decode, its
    first :data:`HEAD_BYTES` decompressed bytes are kept, and a broken archive is recorded."""
    digest = hashlib.sha256()
    decoder = codecs.getincrementaldecoder(encoding)(errors="strict")
    count = 0
    bad: tuple[int, str] | None = None
    raw = _hashed(_chunks(fh, size), digest)
    if codec is None:
        for chunk in raw:
            if bad is None:
                bad = _decode(decoder, chunk, count, final=False)
            count += len(chunk)
        if bad is None:
            bad = _decode(decoder, b"", count, final=True)  # a sequence cut off at the end
        offset, reason = bad or (None, "")
        return _Scan(count, digest.hexdigest(), offset, reason)
    text_at, head = 0, b""
    corrupt: CorruptArchive | None = None
    try:
        for text in decompress(raw, codec):
            if len(head) < HEAD_BYTES:
                head += text[: HEAD_BYTES - len(head)]
            if bad is None:
                bad = _decode(decoder, text, text_at, final=False)
            text_at += len(text)
        if bad is None:
            bad = _decode(decoder, b"", text_at, final=True)
    except CorruptArchive as exc:
        corrupt = exc
        for _ in raw:  # hash the rest: the manifest's sha256 is the whole file's
            pass
    offset, reason = bad or (None, "")
    return _Scan(raw.count, digest.hexdigest(), offset, reason, head, corrupt)


class _hashed:  # noqa: N801 - an iterator used like a function
    """``chunks`` passed on unchanged, each one hashed into ``digest`` and counted."""

    def __init__(self, chunks: Iterator[bytes], digest: Any) -> None:
        self._chunks, self._digest, self.count = chunks, digest, 0

    def __iter__(self) -> Iterator[bytes]:
        for chunk in self._chunks:
            self._digest.update(chunk)
            self.count += len(chunk)
            yield chunk


def _decode(
    decoder: codecs.IncrementalDecoder, chunk: bytes, at: int, *, final: bool
) -> tuple[int, str] | None:
    """Feed ``chunk`` (file offset ``at``) to ``decoder``; the file offset and reason of the
    first invalid byte, or ``None``."""
    pending = len(decoder.getstate()[0])  # bytes of an unfinished sequence from the last chunk
    try:
        decoder.decode(chunk, final=final)
    except UnicodeDecodeError as exc:
        data = exc.object
        return at - pending + exc.start, f"byte 0x{data[exc.start]:02x}: {exc.reason}"
    return None


def _name_problem(name: str) -> tuple[str, str] | None:
    """Why HDFS cannot hold a file named ``name`` (reason, message), or ``None``."""
    try:
        nfc = unicodedata.normalize("NFC", name).encode("utf-8")
    except UnicodeEncodeError:
        return BAD_FILE_NAME, f"file name is not valid UTF-8 (bytes {os.fsencode(name)!r})"
    on_hdfs = hdfs_name(nfc.decode("utf-8")).encode("utf-8")
    temp = posixpath.basename(temp_path_for(f"/{on_hdfs.decode('utf-8')}")).encode("utf-8")
    longest = max(len(on_hdfs), len(temp))
    if longest > MAX_COMPONENT_BYTES:
        mapped = "" if on_hdfs == nfc else f" ({len(on_hdfs)} as its HDFS name)"
        return NAME_TOO_LONG, (
            f"file name is {len(nfc)} bytes of UTF-8{mapped}; with the upload's temp name "
            f"({len(temp) - len(on_hdfs)} bytes more) it is {len(temp)}, over HDFS's "
            f"{MAX_COMPONENT_BYTES}-byte limit on a path component"
        )
    return None


def landing_path(landing_root: str, dataset: str, file_id: str, name: str) -> str:
    """``<landing_root>/<dataset>/<file_id>/<hdfs_name(name in NFC)>``: the NAS name itself
    unless it holds a character HDFS refuses (``:``), then percent-encoded
    (:func:`ferry.clusters.hdfs.hdfs_name`)."""
    nfc = unicodedata.normalize("NFC", name)
    return f"{landing_root.rstrip('/')}/{dataset}/{file_id}/{hdfs_name(nfc)}"


def nas_failed(
    cand: Candidate,
    reason: str,
    error: str,
    attempt: int = 1,
    manifest: FileManifest | None = None,
) -> FileFailed:
    """Extract's quarantine of ``cand``: its NAS path (``source_path``; its bytes in
    ``raw_key``) and dataset, and its ``manifest`` when the file was hashed before it failed,
    so that the failure carries its file id as every other stage's does."""
    return failed(
        stage="extract",
        reason=reason,
        error=error,
        attempt=attempt,
        manifest=manifest,
        raw_key=os.fsencode(cand.relative),
        dataset=cand.dataset.name,
        source_path=display_name(cand.relative),
    )


def extract_file(cand: Candidate, deps: ExtractDeps) -> list[FileExtracted | FileFailed]:
    """Land one finished NAS file on HDFS B. Returns ``[FileExtracted]``, or ``[FileFailed]``
    when retrying cannot help: an entry refused by confinement (reason codes of
    :mod:`ferry.stages.extract.confine`; nothing of it read), a name HDFS cannot hold
    (``bad_file_name``, ``name_too_long``; ``manifest`` is ``None``, ``raw_key`` holds the
    name's bytes), bytes not valid in the dataset's encoding (``not_utf8``, offset in ``error``)
    or an empty file (``empty_*``). Nothing is written to HDFS in those cases.

    Raises:
        FileNotFoundError: the NAS file vanished (the caller forgets it).
        SourceChanged: the NAS file changed since the scan (the caller forgets it).
        TransientError / PermanentError: from the HDFS port (timeouts, resets, DataNode
            unreachable).
        OSError: the NAS file cannot be read.
    """
    problem = cand.refusal or _name_problem(cand.name)
    if problem is not None:
        reason, why = problem
        return [nas_failed(cand, reason, f"{display_name(cand.relative)}: {why}; not landed")]
    try:
        fh = open_confined(
            cand.source or cand.path,
            nas_root(cand),
            identity=cand.identity,
            refuse_hardlinks=deps.refuse_hardlinks,
        )
    except ChangedSince as exc:
        raise SourceChanged(f"{display_name(cand.relative)}: {exc}") from None
    except Refused as exc:
        error = f"{display_name(cand.relative)}: {exc.message}; not landed"
        return [nas_failed(cand, exc.reason, error)]
    with fh:
        stream = fh if cand.splice is None else Spliced(fh, *cand.splice)
        return _extract_open(cand, deps, stream)


def _extract_open(
    cand: Candidate, deps: ExtractDeps, fh: BinaryIO | Spliced
) -> list[FileExtracted | FileFailed]:
    """:func:`extract_file` once the NAS file is open (and confined) as ``fh`` (a
    :class:`Spliced` view of it for a splice candidate)."""
    codec = codec_of(cand.name)
    scan = _scan(fh, deps.chunk_bytes, cand.dataset.csv.encoding, codec)
    hashed, sha = scan.size, scan.sha256
    st = os.fstat(fh.fileno())
    if (hashed, st.st_size, st.st_mtime_ns) != (cand.content_size, cand.size, cand.mtime_ns):
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
        size_bytes=hashed,
        sha256=sha,
        created_at=now,
        updated_at=now,
        trace_id=new_trace_id(),
        source_mtime=datetime.fromtimestamp(cand.mtime_ns / 1e9, tz=UTC),
        definition_version=deps.version_of(cand.dataset.name),
    )
    deps.on_hashed(cand, manifest)
    if scan.corrupt is not None and hashed > 0:
        return [
            failed(
                stage="extract",
                reason=CORRUPT_ARCHIVE,
                error=f"{cand.relative}: {scan.corrupt}; not landed",
                manifest=manifest,
                failed_at=now,
            )
        ]
    if scan.bad_offset is not None:
        where = "decompressed byte offset" if codec else "byte offset"
        return [
            failed(
                stage="extract",
                reason=NOT_UTF8,
                error=(
                    f"{cand.relative}: not valid {cand.dataset.csv.encoding} at {where} "
                    f"{scan.bad_offset} ({scan.bad_reason}); not landed"
                ),
                manifest=manifest,
                failed_at=now,
            )
        ]
    fh.seek(0)
    head = fh.read(HEAD_BYTES) if codec is None or hashed == 0 else (scan.head or b"")
    empty = classify_empty(head, header=cand.dataset.csv.header)
    if empty is not None:
        return [
            failed(
                stage="extract",
                reason=f"empty_{empty}",
                error=(
                    f"{cand.relative}: no data rows ({empty.replace('_', ' ')}); "
                    "recorded, not loaded"
                ),
                manifest=manifest,
                failed_at=now,
            )
        ]
    dest = landing_path(deps.landing_path, cand.dataset.name, file_id, cand.name)
    deps.hdfs_b.upload_stream(
        dest,
        _chunks(fh, deps.chunk_bytes),
        expected_size=hashed,
        expected_sha256=sha,
        overwrite=True,
    )
    return [FileExtracted(manifest.advance(uris={"landing": f"{deps.fs_url_b}{dest}"}))]
