"""HDFS path rules and the value types of :class:`~ferry.clusters.hdfs.port.HdfsPort`.

Paths are absolute and NFC-normalised on the way in (:func:`normalize_path`); names then
round-trip byte for byte, spaces, ``%``, ``=``, ``#`` and non-ASCII letters included
(docs/field-cases.md, C07). A write goes to a temporary sibling named by :func:`temp_path_for`
(``<dir>/.<name>.ferry-tmp-<hex>``) that :func:`is_temp_path` recognises, so a sweep or a reader
can tell it from a finished file.
"""

from __future__ import annotations

import posixpath
import unicodedata
import uuid
from dataclasses import dataclass
from typing import Any, Literal

#: Bytes per chunk read from or written to WebHDFS (1 MiB): large enough to keep the HTTP
#: overhead small, small enough that a file is never held in memory.
DEFAULT_CHUNK_SIZE = 1 << 20

#: Marker in temporary file names; files starting with ``.`` are skipped by Hive and Spark.
TEMP_MARKER = ".ferry-tmp-"

#: HDFS's default limit on one path component, in bytes of UTF-8
#: (``dfs.namenode.fs-limits.max-component-length``, hdfs-default.xml). Longer names are refused
#: by the NameNode with ``PathComponentTooLongException`` (a permanent error here).
MAX_COMPONENT_BYTES = 255

#: Characters the NameNode refuses inside a path component (``DFSUtilClient.isValidName``: a
#: component may not contain ``:`` or ``/``; ``/`` cannot occur in a file name).
REFUSED_IN_NAME = frozenset(":")


def hdfs_name(name: str) -> str:
    """The name a file called ``name`` (NFC) gets on HDFS.

    ``name`` itself when the NameNode accepts it, so ordinary names round-trip byte for byte
    (``%``, ``=``, ``#``, spaces and non-ASCII letters included). A name holding a character in
    :data:`REFUSED_IN_NAME` is percent-encoded (RFC 3986): each ``%`` and each refused character
    becomes ``%XX`` (``orders_2024-05-01T12:30.csv`` → ``orders_2024-05-01T12%3A30.csv``), so
    ``urllib.parse.unquote`` of a mapped name gives the NAS name back exactly. Ferry's manifest
    always keeps the exact NAS name (``source_path``), so nothing downstream needs to reverse it.
    """
    if not any(c in REFUSED_IN_NAME for c in name):
        return name
    return "".join(f"%{ord(c):02X}" if c == "%" or c in REFUSED_IN_NAME else c for c in name)


FileKind = Literal["FILE", "DIRECTORY", "SYMLINK"]


@dataclass(frozen=True)
class FileStatus:
    """One entry of :meth:`~ferry.clusters.hdfs.port.HdfsPort.status` /
    :meth:`~ferry.clusters.hdfs.port.HdfsPort.list`.

    ``path`` is absolute and NFC; ``size`` is bytes (0 for a directory); ``mtime_ms`` is the
    modification time in milliseconds since the epoch.
    """

    path: str
    name: str
    kind: FileKind
    size: int
    mtime_ms: int

    @property
    def is_file(self) -> bool:
        return self.kind == "FILE"

    @property
    def is_dir(self) -> bool:
        return self.kind == "DIRECTORY"

    @classmethod
    def from_webhdfs(cls, path: str, raw: dict[str, Any]) -> FileStatus:
        """From a WebHDFS ``FileStatus`` JSON object (``type``, ``length``,
        ``modificationTime``, ``pathSuffix``) of ``path``."""
        return cls(
            path=path,
            name=raw.get("pathSuffix") or posixpath.basename(path),
            kind=raw["type"],
            size=int(raw.get("length", 0)),
            mtime_ms=int(raw.get("modificationTime", 0)),
        )


@dataclass(frozen=True)
class Written:
    """Result of :meth:`~ferry.clusters.hdfs.port.HdfsPort.upload_stream`: final path, size in
    bytes, sha256 (hex), and whether bytes were written (``False``: the same bytes were already
    there)."""

    path: str
    size: int
    sha256: str
    created: bool = True


def normalize_path(path: str) -> str:
    """Return ``path`` as Ferry sends it to HDFS: absolute, Unicode NFC, ``.``/``..``/``//``
    collapsed, no trailing slash.

    NFC is Ferry's one normalisation (docs/field-cases.md, C07): ``"é"`` typed as ``e`` + U+0301
    and as U+00E9 name the same file. Nothing else is changed: spaces, ``%``, ``=``, ``#``,
    ``+``, ``;`` stay.

    Raises:
        ValueError: ``path`` is not absolute.
    """
    if not isinstance(path, str) or not path.startswith("/"):
        raise ValueError(f"HDFS path must be absolute (start with '/'): {path!r}")
    path = unicodedata.normalize("NFC", path)
    path = posixpath.normpath(path)
    if path.startswith("//"):  # POSIX keeps a leading '//'; HDFS has no such thing
        path = "/" + path.lstrip("/")
    return path


def temp_path_for(path: str) -> str:
    """A fresh temporary sibling of ``path``: ``<dir>/.<name>.ferry-tmp-<32 hex>``.

    Same directory, so the final rename stays inside one directory (atomic on the NameNode);
    a fresh uuid per call, so concurrent attempts never share a temporary file.
    """
    parent, name = posixpath.split(normalize_path(path))
    return posixpath.join(parent, f".{name}{TEMP_MARKER}{uuid.uuid4().hex}")


def is_temp_path(path: str) -> bool:
    """True when ``path`` names a temporary file made by :func:`temp_path_for`."""
    name = posixpath.basename(path)
    return name.startswith(".") and TEMP_MARKER in name


__all__ = [
    "DEFAULT_CHUNK_SIZE",
    "MAX_COMPONENT_BYTES",
    "TEMP_MARKER",
    "FileKind",
    "FileStatus",
    "Written",
    "is_temp_path",
    "normalize_path",
    "temp_path_for",
]
