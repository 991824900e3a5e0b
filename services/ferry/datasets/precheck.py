"""Cheap, pure-Python checks on the first bytes of a file: no Spark, no JVM.

Extract calls :func:`classify_empty` on NAS files (case C11) and transform calls both on the head
of each landed file before the batch's Spark job, so an empty file is recorded as ``empty`` and a
file whose header does not match the definition is quarantined (``header_mismatch``) without
failing the other files of the batch.
"""

from __future__ import annotations

import csv
import io
from pathlib import Path
from typing import Literal

from ferry.datasets.spec import DatasetSpec

#: UTF-8 byte order mark; Spark's CSV reader (univocity) skips it, and so do these checks (C10).
UTF8_BOM = b"\xef\xbb\xbf"

#: Bytes read from the start of a file by default: a header longer than this is not supported.
HEAD_BYTES = 64 * 1024

EmptyKind = Literal["zero_bytes", "blank", "header_only"]

#: Most characters of a file's own text a quarantine reason quotes (docs/field-cases.md, C17):
#: a reason names what is wrong, it never carries the data. Longer text is cut and ends in ``…``;
#: the same bound as a rejected row's value (:data:`ferry.stages.transform.rows.VALUE_CHARS`).
QUOTE_CHARS = 40


def quoted(text: str, limit: int = QUOTE_CHARS) -> str:
    """``repr`` of ``text`` cut to its first ``limit`` characters (then ``…`` appended), control
    characters shown as ``?``: the only form in which file content enters a reason."""
    clean = "".join("?" if not ch.isprintable() else ch for ch in text)
    return repr(clean[:limit] + "…") if len(clean) > limit else repr(clean)


def read_head(path: str | Path, nbytes: int = HEAD_BYTES) -> bytes:
    """The first ``nbytes`` bytes of a local file (fewer if the file is shorter)."""
    with open(path, "rb") as fh:
        return fh.read(nbytes)


def classify_empty(
    source: str | Path | bytes, *, header: bool = True, head_bytes: int = HEAD_BYTES
) -> EmptyKind | None:
    """Whether a CSV file holds no data row, and why; ``None`` if it may hold rows.

    ``source`` is a local path (its first ``head_bytes`` bytes are read) or the head of a file as
    bytes; a head of ``head_bytes`` bytes or more is taken to be truncated (so never header-only).
    Kinds: ``zero_bytes`` (0 bytes), ``blank`` (only a BOM and/or whitespace), ``header_only``
    (one non-blank line and ``header`` is true). Lines may end in LF or CRLF (case C11). A record
    whose quoted field spans lines (C14) only adds lines, so it never makes a file with data look
    empty; a header never holds a line break (column names match ``[a-z][a-z0-9_]*``).

    Raises:
        OSError: the path cannot be read.
    """
    head = source if isinstance(source, bytes) else read_head(source, head_bytes)
    if not head:
        return "zero_bytes"
    truncated = len(head) >= head_bytes
    body = head[len(UTF8_BOM) :] if head.startswith(UTF8_BOM) else head
    lines = [ln for ln in body.splitlines() if ln.strip()]
    if not lines and not truncated:
        return "blank"
    if header and len(lines) == 1 and not truncated:
        return "header_only"
    return None


def header_names(head: bytes, spec: DatasetSpec) -> list[str]:
    """Column names in the first line of ``head`` (BOM stripped), per the CSV options.

    Raises:
        UnicodeDecodeError: the first line is not UTF-8.
    """
    body = head[len(UTF8_BOM) :] if head.startswith(UTF8_BOM) else head
    first = body.split(b"\n", 1)[0].rstrip(b"\r").decode("utf-8")
    reader = csv.reader(io.StringIO(first), delimiter=spec.csv.delimiter, quotechar=spec.csv.quote)
    return [c.strip() for c in next(reader, [])]


def check_header(head: bytes, spec: DatasetSpec) -> str | None:
    """``None`` if the header matches the definition's columns (same names, same order, BOM and
    surrounding spaces ignored, case-insensitive as Hive is); else a message naming the first
    difference. Always ``None`` when the definition says the files have no header. Text of the
    file enters the message only through :func:`quoted` (at most :data:`QUOTE_CHARS` characters
    per value, and at most :data:`QUOTE_CHARS` of the extra columns together).
    """
    if not spec.csv.header:
        return None
    expected = [c.name for c in spec.columns]
    try:
        got = header_names(head[:HEAD_BYTES], spec)
    except UnicodeDecodeError as exc:
        return f"header is not UTF-8: {exc}"
    got_l = [g.lower() for g in got]
    if got_l == expected:
        return None
    for i, (e, g) in enumerate(zip(expected, got_l, strict=False)):
        if e != g:
            return f"header column {i + 1} is {quoted(g)}, definition {spec.name!r} expects {e!r}"
    if len(got_l) < len(expected):
        return f"header lacks column(s) {expected[len(got_l) :]} of definition {spec.name!r}"
    extra = got_l[len(expected) :]
    if len(repr(extra)) <= QUOTE_CHARS:
        return f"header has extra column(s) {extra} not in definition {spec.name!r}"
    return (
        f"header has {len(extra)} extra column(s) ({quoted(','.join(extra))}) not in "
        f"definition {spec.name!r}"
    )
