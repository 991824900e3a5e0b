"""A file's identity: its content's SHA-256 and the ``file_id`` derived from it and its dataset.

The same bytes dropped twice, or renamed, are the same file; different bytes under a reused
name are a new one (docs/architecture.md, "Events").
"""

from __future__ import annotations

import hashlib
import re
import uuid
from pathlib import Path

_SHA256_RE = re.compile(r"^[0-9a-f]{64}$")


def derive_file_id(dataset: str, sha256: str) -> str:
    """The stable id of a file: 32 lowercase hex digits from its dataset and content hash.

    The same bytes dropped twice, or renamed, get the same id; different bytes under a reused
    name get a new one. The id is ``sha256("ferry.file_id.v1\\0" + dataset + "\\0" + sha256)``
    truncated to 128 bits (collision odds ~2^-64 at 2^32 files).

    Args:
        dataset: dataset name, non-empty.
        sha256: SHA-256 of the file's bytes, 64 hex digits (case-insensitive).

    Raises:
        ValueError: empty dataset or malformed sha256.
    """
    if not dataset:
        raise ValueError("dataset must be non-empty to derive a file_id")
    digest = sha256.lower()
    if not _SHA256_RE.match(digest):
        raise ValueError(f"sha256 must be 64 hex digits, got {sha256!r}")
    material = b"ferry.file_id.v1\0" + dataset.encode("utf-8") + b"\0" + digest.encode("ascii")
    return hashlib.sha256(material).hexdigest()[:32]


def sha256_file(path: Path, chunk_bytes: int = 1 << 20) -> str:
    """SHA-256 of a file's bytes as 64 lowercase hex digits, read in ``chunk_bytes`` chunks.

    Raises:
        OSError: the file cannot be read.
    """
    h = hashlib.sha256()
    with open(path, "rb") as fh:
        while chunk := fh.read(chunk_bytes):
            h.update(chunk)
    return h.hexdigest()


def new_trace_id() -> str:
    """A fresh trace id: 32 lowercase hex digits (a random UUID4)."""
    return uuid.uuid4().hex
