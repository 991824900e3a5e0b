"""What the per-file layout records: the staging marker, index entries, compaction sidecars and
journal records (docs/hive-layout.md). Plain dataclasses with explicit JSON at the boundary.

Paths in entries, sidecars and journals are relative to the table's location (``c=v/name``),
so a table whose directory moves (``ALTER TABLE … RENAME`` of a managed table) keeps a valid
index. A journal's move sources are absolute (they lie outside the table: incoming, scratch).
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import asdict, dataclass, field
from typing import Any

#: Newest record format this code reads; a reader refuses a newer one.
FORMAT = 2
#: Format of a record an earlier Ferry reads as well. Records only this code reads right are
#: written as format 2: a staging marker naming shared files (issue 45: an earlier transfer or
#: load would take its empty ``files`` for a file whose rows were all rejected and remove the
#: file's rows) and a journal replacing files in place (an earlier load would drop the
#: replaces). An earlier Ferry refuses them loudly (``bad_manifest``, an unreadable journal)
#: instead of losing rows: upgrade load and transfer before transform.
FORMAT_COMPATIBLE = 1


class IndexFormatError(ValueError):
    """A record is not JSON of the expected shape or has a newer format (the path is named)."""


def _load(data: bytes, what: str) -> dict[str, Any]:
    try:
        obj = json.loads(data.decode("utf-8"))
    except (UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise IndexFormatError(f"{what}: not JSON: {exc}") from exc
    if not isinstance(obj, dict) or int(obj.get("format", 0)) > FORMAT:
        raise IndexFormatError(f"{what}: not a record of format <= {FORMAT}")
    return obj


def _dump(obj: Mapping[str, Any], fmt: int = FORMAT_COMPATIBLE) -> bytes:
    return json.dumps({"format": fmt, **obj}, sort_keys=True, ensure_ascii=False).encode()


@dataclass(frozen=True)
class StagedMarker:
    """``_ferry.json`` of a staged directory, written by transform after its data files:
    ``files`` are the data files relative to the directory (``c=v/ferry-<id>-<gen>-<n>.parquet``),
    ``generation`` is new for every transform run of the file. An empty ``files`` and ``shared``
    is a file whose rows were all rejected (its load removes the file's earlier rows).

    A file transformed in a batch with others (issue 45, case C23) has its rows in the batch's
    shared data files instead: ``shared`` ``{path relative to the batch directory
    <dataset>/_shared/<generation>: rows of this file in it}``, and ``files`` is empty; the
    batch's :class:`BatchMarker` names every file with rows in each shared file."""

    file_id: str
    generation: str
    files: tuple[str, ...] = ()
    shared: Mapping[str, int] = field(default_factory=dict)

    @property
    def rows_shared(self) -> int:
        """Rows of the file in shared data files."""
        return sum(self.shared.values())

    def to_json(self) -> bytes:
        o: dict[str, Any] = {**asdict(self), "files": list(self.files)}
        if not self.shared:
            del o["shared"]  # the record of a file with data files of its own, as before
            return _dump(o)
        o["shared"] = dict(self.shared)
        return _dump(o, FORMAT)

    @classmethod
    def from_json(cls, data: bytes, what: str = "staging marker") -> StagedMarker:
        o = _load(data, what)
        try:
            return cls(
                str(o["file_id"]),
                str(o["generation"]),
                tuple(map(str, o["files"])),
                {str(k): int(v) for k, v in (o.get("shared") or {}).items()},
            )
        except (KeyError, TypeError, AttributeError, ValueError) as exc:
            raise IndexFormatError(f"{what}: missing {exc}") from exc


@dataclass(frozen=True)
class BatchMarker:
    """``_ferry.json`` of a transform batch's shared directory ``<dataset>/_shared/<generation>``:
    ``members`` ``{shared data file relative to it (c=v/part-….parquet): {file_id: rows}}``.
    Written before the members' own markers, so a marker never names a shared file of a batch
    that is not complete."""

    generation: str
    members: Mapping[str, Mapping[str, int]] = field(default_factory=dict)

    def file_ids(self) -> set[str]:
        """Every file with rows in the batch's shared files."""
        return {fid for m in self.members.values() for fid in m}

    def to_json(self) -> bytes:
        return _dump(
            {
                "generation": self.generation,
                "members": {k: dict(v) for k, v in self.members.items()},
            }
        )

    @classmethod
    def from_json(cls, data: bytes, what: str = "batch marker") -> BatchMarker:
        o = _load(data, what)
        try:
            members = {
                str(rel): {str(f): int(n) for f, n in m.items()} for rel, m in o["members"].items()
            }
            return cls(str(o["generation"]), members)
        except (KeyError, TypeError, AttributeError, ValueError) as exc:
            raise IndexFormatError(f"{what}: bad batch marker: {exc}") from exc


@dataclass(frozen=True)
class FileEntry:
    """Where one file's rows are: its own data files and the compacted files holding some of
    them, each with the rows of this file in it. ``generation`` is the transform output loaded
    (``adopted`` for rows found in a table of the earlier layout)."""

    file_id: str
    generation: str
    files: Mapping[str, int] = field(default_factory=dict)
    compacted: Mapping[str, int] = field(default_factory=dict)
    source_path: str | None = None

    @property
    def rows(self) -> int:
        """Rows of the file in the table."""
        return sum(self.files.values()) + sum(self.compacted.values())

    @property
    def paths(self) -> set[str]:
        """Every data file holding rows of the file."""
        return {*self.files, *self.compacted}

    def to_json(self) -> bytes:
        return _dump({**asdict(self), "files": dict(self.files), "compacted": dict(self.compacted)})

    @classmethod
    def from_json(cls, data: bytes, what: str = "index entry") -> FileEntry:
        o = _load(data, what)
        try:
            return cls(
                str(o["file_id"]),
                str(o["generation"]),
                {str(k): int(v) for k, v in o["files"].items()},
                {str(k): int(v) for k, v in o["compacted"].items()},
                o.get("source_path"),
            )
        except (KeyError, TypeError, AttributeError, ValueError) as exc:
            raise IndexFormatError(f"{what}: bad entry: {exc}") from exc


@dataclass(frozen=True)
class CompactedFile:
    """Sidecar of a data file holding rows of several files: ``members`` ``{file_id: rows}``."""

    path: str
    members: Mapping[str, int]

    @property
    def rows(self) -> int:
        return sum(self.members.values())

    def to_json(self) -> bytes:
        return _dump({"path": self.path, "members": dict(self.members)})

    @classmethod
    def from_json(cls, data: bytes, what: str = "sidecar") -> CompactedFile:
        o = _load(data, what)
        try:
            return cls(str(o["path"]), {str(k): int(v) for k, v in o["members"].items()})
        except (KeyError, TypeError, AttributeError, ValueError) as exc:
            raise IndexFormatError(f"{what}: bad sidecar: {exc}") from exc


@dataclass(frozen=True)
class Group:
    """One step readers may see: ``deletes`` (data files, relative) go first, then ``moves``
    (``(absolute source, relative destination)``), then ``replaces`` (``(absolute source,
    relative data file it replaces in one rename)``: a compacted file rewritten without some
    files' rows, so a reader never misses the rows of the others). Old rows of a file are
    deleted in a group no later than the one moving its new rows in, so a reader never sees a
    row twice."""

    deletes: tuple[str, ...] = ()
    moves: tuple[tuple[str, str], ...] = ()
    replaces: tuple[tuple[str, str], ...] = ()


@dataclass(frozen=True)
class Journal:
    """A change of the table, written before any of it is done and deleted after all of it is:
    applying it again from the start finishes what a crash interrupted (every step is
    idempotent). ``entries``/``sidecars``: the index records to write (``None``: to remove),
    keyed by file id / compacted data path; ``add_partitions``: partition values to register
    (one metastore call) before anything moves; ``drop_if_empty``: partition directories whose
    partition is dropped when no data file is left in them; ``cleanup``: absolute directories
    deleted at the end (scratch outputs, emptied staged directories)."""

    op: str
    groups: tuple[Group, ...] = ()
    add_partitions: tuple[tuple[str | None, ...], ...] = ()
    entries: Mapping[str, FileEntry | None] = field(default_factory=dict)
    sidecars: Mapping[str, CompactedFile | None] = field(default_factory=dict)
    drop_if_empty: tuple[str, ...] = ()
    cleanup: tuple[str, ...] = ()

    def to_json(self) -> bytes:
        return _dump(
            {
                "op": self.op,
                "groups": [
                    {
                        "deletes": list(g.deletes),
                        "moves": [list(m) for m in g.moves],
                        **({"replaces": [list(m) for m in g.replaces]} if g.replaces else {}),
                    }
                    for g in self.groups
                ],
                "add_partitions": [list(p) for p in self.add_partitions],
                "entries": {
                    k: None if v is None else json.loads(v.to_json())
                    for k, v in self.entries.items()
                },
                "sidecars": {
                    k: None if v is None else json.loads(v.to_json())
                    for k, v in self.sidecars.items()
                },
                "drop_if_empty": list(self.drop_if_empty),
                "cleanup": list(self.cleanup),
            },
            FORMAT if any(g.replaces for g in self.groups) else FORMAT_COMPATIBLE,
        )

    @classmethod
    def from_json(cls, data: bytes, what: str = "journal") -> Journal:
        o = _load(data, what)

        def sub(v: Any, kind: type[FileEntry] | type[CompactedFile]) -> Any:
            return None if v is None else kind.from_json(json.dumps(v).encode(), what)

        try:
            return cls(
                str(o["op"]),
                tuple(
                    Group(
                        tuple(g["deletes"]),
                        tuple((str(s), str(d)) for s, d in g["moves"]),
                        tuple((str(s), str(d)) for s, d in g.get("replaces", ())),
                    )
                    for g in o["groups"]
                ),
                tuple(tuple(p) for p in o["add_partitions"]),
                {k: sub(v, FileEntry) for k, v in o["entries"].items()},
                {k: sub(v, CompactedFile) for k, v in o["sidecars"].items()},
                tuple(o["drop_if_empty"]),
                tuple(o["cleanup"]),
            )
        except (KeyError, TypeError, ValueError) as exc:
            raise IndexFormatError(f"{what}: bad journal: {exc}") from exc
