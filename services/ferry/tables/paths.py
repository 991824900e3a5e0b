"""Names in a per-file table: Hive's partition directory escaping, data file names, and the
places of the index under the table (pure Python, no JVM).

Partition directories are ``<col>=<escaped value>`` joined by ``/``, escaped exactly as Hive's
``FileUtils.escapePathName`` and Spark's ``ExternalCatalogUtils.escapePathName`` do (the same
list of characters: controls, ``" # % ' * / : = ? \\ { [ ] ^`` and DEL become ``%XX``; a space
does not), and a NULL or empty value is ``__HIVE_DEFAULT_PARTITION__``: so a directory Spark's
``partitionBy`` wrote in transform is the one the metastore names for that partition
(``ALTER TABLE … ADD PARTITION`` computes it the same way).
"""

from __future__ import annotations

import hashlib
import re
import time
import uuid
from collections.abc import Sequence

#: Hive's directory name of a NULL (or empty) partition value.
DEFAULT_PARTITION_NAME = "__HIVE_DEFAULT_PARTITION__"

_ESCAPED = frozenset([chr(c) for c in range(0x01, 0x20)] + list("\"#%'*/:=?\\{[]^") + [chr(0x7F)])

#: The staged directory's marker: which data files a transform wrote, under which generation.
MARKER_NAME = "_ferry.json"
#: A dataset's directory of transform batches' shared data files (staging on B, incoming on A):
#: ``<root>/<dataset>/_shared/<generation>/`` holds a batch's files and its batch marker.
SHARED_DIR = "_shared"
#: The table's index directory (hidden from Hive and Spark readers by its leading ``_``).
INDEX_DIR = "_ferry"

_DATA_FILE = re.compile(r"^ferry-(?P<fid>.+)-(?P<gen>[0-9a-f]{16})-(?P<n>[0-9]{5})\.parquet$")
_COMPACTED = re.compile(r"^compact-(?P<gen>[0-9a-f]{16})-(?P<n>[0-9]{5})\.parquet$")


def escape_path_name(value: str) -> str:
    """``value`` escaped as Hive and Spark escape a partition value (or column) in a path."""
    return "".join(f"%{ord(c):02X}" if c in _ESCAPED else c for c in value)


def unescape_path_name(text: str) -> str:
    """Inverse of :func:`escape_path_name` (``%XX`` with two hex digits decoded, else kept)."""
    return re.sub(r"%([0-9A-Fa-f]{2})", lambda m: chr(int(m.group(1), 16)), text)


def partition_dir(columns: Sequence[str], values: Sequence[str | None]) -> str:
    """``c1=v1/c2=v2`` for partition values given as strings (``None`` or ``""``: the default
    partition); ``""`` for an unpartitioned table."""
    return "/".join(
        f"{escape_path_name(c)}={escape_path_name(v) if v else DEFAULT_PARTITION_NAME}"
        for c, v in zip(columns, values, strict=True)
    )


def parse_partition_dir(columns: Sequence[str], rel_dir: str) -> tuple[str | None, ...]:
    """The partition values (strings, ``None`` for the default partition) of a directory
    ``c1=v1/c2=v2`` relative to the table.

    Raises:
        ValueError: the directory does not name exactly ``columns`` in order.
    """
    parts = [p for p in rel_dir.split("/") if p] if rel_dir else []
    if len(parts) != len(columns):
        raise ValueError(f"{rel_dir!r} is not a partition directory of {list(columns)}")
    out: list[str | None] = []
    for col, part in zip(columns, parts, strict=True):
        name, sep, raw = part.partition("=")
        if not sep or unescape_path_name(name).lower() != col.lower():
            raise ValueError(f"{rel_dir!r}: {part!r} is not a directory of column {col!r}")
        out.append(None if raw == DEFAULT_PARTITION_NAME else unescape_path_name(raw))
    return tuple(out)


def sql_string(value: str) -> str:
    """``value`` as a Spark SQL string literal (backslash and quote escaped)."""
    return "'" + value.replace("\\", "\\\\").replace("'", "\\'") + "'"


def partition_spec_sql(columns: Sequence[str], values: Sequence[str | None]) -> str:
    """``PARTITION (`c1`='v1', `c2`=NULL)`` for ``ALTER TABLE … ADD/DROP``."""
    items = ", ".join(
        f"`{c}`={'NULL' if v is None else sql_string(v)}"
        for c, v in zip(columns, values, strict=True)
    )
    return f"PARTITION ({items})"


def data_file_name(file_id: str, generation: str, n: int) -> str:
    """``ferry-<file_id>-<generation>-<n>.parquet``: the n-th data file of one transform output
    (``generation``: 16 hex digits, new for every transform run of the file)."""
    return f"ferry-{file_id}-{generation}-{n:05d}.parquet"


def compacted_file_name(generation: str, n: int) -> str:
    """``compact-<generation>-<n>.parquet``: the n-th output of one compaction."""
    return f"compact-{generation}-{n:05d}.parquet"


def owner_of(name: str) -> str | None:
    """The ``file_id`` a data file is named after (:func:`data_file_name`), else ``None``."""
    m = _DATA_FILE.match(name)
    return m.group("fid") if m else None


def is_compacted(name: str) -> bool:
    """True for a name made by :func:`compacted_file_name`."""
    return _COMPACTED.match(name) is not None


def shared_dir(dataset_root: str, generation: str) -> str:
    """The directory of one transform batch's shared data files under a dataset's root in
    staging or incoming: ``<dataset_root>/_shared/<generation>``."""
    return join(dataset_root, f"{SHARED_DIR}/{generation}")


def new_generation() -> str:
    """16 hex digits, fresh per call: a transform output's or a compaction's generation."""
    return uuid.uuid4().hex[:16]


def stamp() -> str:
    """A name that sorts by creation time: ``<ms since the epoch, 13 digits>-<8 hex>``."""
    return f"{int(time.time() * 1000):013d}-{uuid.uuid4().hex[:8]}"


def stamp_age_s(name: str, now: float | None = None) -> float:
    """Seconds since a :func:`stamp` was made (0 for a name that is not one)."""
    head = name.split("-", 1)[0]
    if not (len(head) == 13 and head.isdigit()):
        return 0.0
    return max(0.0, (time.time() if now is None else now) - int(head) / 1000)


def entry_path(file_id: str) -> str:
    """Index entry of a file, relative to the table: ``_ferry/files/<id[:2]>/<id>.json``
    (sharded: HDFS caps a directory at about a million entries)."""
    return f"{INDEX_DIR}/files/{file_id[:2]}/{file_id}.json"


def sidecar_path(data_path: str) -> str:
    """Membership sidecar of a compacted data file (its path relative to the table)."""
    h = hashlib.sha256(data_path.encode("utf-8")).hexdigest()[:32]
    return f"{INDEX_DIR}/compacted/{h[:2]}/{h}.json"


def journal_dir() -> str:
    """Directory of pending journal records, relative to the table."""
    return f"{INDEX_DIR}/journal"


def scratch_dir() -> str:
    """Directory of Spark outputs waiting to be moved in, relative to the table."""
    return f"{INDEX_DIR}/scratch"


def join(root: str, rel: str) -> str:
    """``root`` and a relative path joined by one ``/`` (``rel`` empty: ``root``)."""
    root = root.rstrip("/")
    return f"{root}/{rel.strip('/')}" if rel.strip("/") else root


def parent(rel: str) -> str:
    """The directory part of a relative path (``""`` at the top)."""
    return rel.rsplit("/", 1)[0] if "/" in rel else ""
