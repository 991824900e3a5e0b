"""Compressed drops: a file named ``*.gz`` or ``*.bz2`` is a compressed CSV (issue 29, field case
C21), recognised by its name's last suffix the way Hadoop's codec factory and Spark's CSV reader
recognise it (``CompressionCodecFactory``: ``.gz`` → ``GzipCodec``, ``.bz2`` → ``BZip2Codec``).

Which files a dataset takes is its ``nas.pattern``'s business (``flights_*.csv.gz``); the bytes
as dropped are what Ferry hashes and lands (the manifest's ``sha256`` and ``size_bytes``), and
the checks that read a file's first bytes (empty files, the header) read the decompressed ones.
Extract decompresses every compressed file once, in the pass that hashes it, so a file truncated
in the middle or not in its codec's format at all is quarantined as ``corrupt_archive`` before a
row of it reaches Spark; transform then reads it through Hadoop's codecs (bzip2 splits across
cores, gzip cannot: docs/datasets.md).

``.zst`` is not supported: Hadoop's ``ZStandardCodec`` needs the native hadoop library, which
the pyspark distribution's Hadoop client does not ship.

Decompression is bounded: at most ``max_out`` bytes leave one call, so a small file that expands
enormously never sits whole in memory.
"""

from __future__ import annotations

import bz2
import zlib
from collections.abc import Callable, Iterable, Iterator
from typing import Literal, Protocol

Codec = Literal["gzip", "bzip2"]

#: Last name suffix → codec (Hadoop's default codecs that need no native library).
SUFFIXES: dict[str, Codec] = {".gz": "gzip", ".bz2": "bzip2"}

#: Most decompressed bytes one step hands on.
CHUNK_OUT = 1 << 20


class CorruptArchive(ValueError):
    """The bytes are not a complete archive of their codec: ``offset`` is the compressed byte
    offset where that became clear (the end, for a truncated file)."""

    def __init__(self, codec: Codec, offset: int, why: str) -> None:
        super().__init__(f"not a complete {codec} archive at compressed byte {offset}: {why}")
        self.codec, self.offset, self.why = codec, offset, why


def codec_of(name: str) -> Codec | None:
    """The codec of a file named ``name`` (by its last suffix, case-insensitive), or ``None``."""
    dot = name.rfind(".")
    return SUFFIXES.get(name[dot:].lower()) if dot > 0 else None


class _Decompressor(Protocol):
    eof: bool
    unused_data: bytes

    def decompress(self, data: bytes, max_length: int = ...) -> bytes: ...


def _new(codec: Codec) -> _Decompressor:
    # wbits 16 + MAX_WBITS: a gzip header and trailer (RFC 1952), checked with its CRC-32.
    return (
        zlib.decompressobj(16 + zlib.MAX_WBITS)  # type: ignore[return-value]
        if codec == "gzip"
        else bz2.BZ2Decompressor()
    )


def decompress(chunks: Iterable[bytes], codec: Codec, max_out: int = CHUNK_OUT) -> Iterator[bytes]:
    """The decompressed bytes of the archive whose compressed bytes are ``chunks``, in pieces of
    at most ``max_out`` bytes. Concatenated members (``cat a.gz b.gz``, pbzip2's streams) are one
    archive, as for gzip(1), bzip2(1) and Hadoop's codecs.

    Raises:
        CorruptArchive: a byte that is not of the codec's format, a checksum that does not match,
            or the compressed bytes end before the last member does (a truncated file).
    """
    d = _new(codec)
    seen = 0  # compressed bytes fed so far
    started = False  # a member began and has not ended
    for chunk in chunks:
        data = chunk
        while data:
            try:
                if isinstance(d, bz2.BZ2Decompressor):
                    out = d.decompress(data, max_out)
                    while out:
                        yield out
                        if d.eof or d.needs_input:
                            break
                        out = d.decompress(b"", max_out)
                    used = len(data) - len(d.unused_data) if d.eof else len(data)
                else:
                    out = d.decompress(data, max_out)
                    while out:
                        yield out
                        tail = d.unconsumed_tail  # type: ignore[attr-defined]
                        if not tail:
                            break
                        out = d.decompress(tail, max_out)
                    used = len(data) - len(d.unused_data) if d.eof else len(data)
            except (zlib.error, OSError, EOFError, ValueError) as exc:
                raise CorruptArchive(codec, seen, str(exc)) from exc
            started = not d.eof
            seen += used
            data = d.unused_data if d.eof else b""
            if d.eof:
                d = _new(codec)
                started = bool(data)
    if started or not seen:
        raise CorruptArchive(
            codec, seen, "no compressed data" if not seen else "the archive ends before its end"
        )


def head(read: Callable[[int], bytes], codec: Codec, nbytes: int, *, raw_cap: int) -> bytes:
    """The first ``nbytes`` decompressed bytes of an archive whose compressed bytes ``read(n)``
    returns piece by piece (``b""`` at the end), reading at most ``raw_cap`` compressed bytes (a
    bzip2 block is up to 900 kB compressed, and nothing comes out before a whole block did).
    A file shorter than ``nbytes`` decompressed gives all of it.

    Raises:
        CorruptArchive: as :func:`decompress`, for what was read.
    """
    pieces: list[bytes] = []
    got = 0
    budget = [raw_cap]

    def chunks() -> Iterator[bytes]:
        while budget[0] > 0:
            piece = read(min(64 * 1024, budget[0]))
            if not piece:
                return
            budget[0] -= len(piece)
            yield piece

    try:
        for out in decompress(chunks(), codec, max_out=nbytes):
            pieces.append(out)
            got += len(out)
            if got >= nbytes:
                break
    except CorruptArchive:
        if not got:
            raise
        # else cut at raw_cap, or a damaged tail past the head: what came out is the head
    return b"".join(pieces)[:nbytes]
