"""Loading, replacing and removing files' rows in a per-file table: the plan of one change as a
:class:`~ferry.tables.model.Journal` (applied by :mod:`.journal`).

For each file of the change (:func:`plan`):

- every data file its index entry names is removed, wherever it lies: its own files are
  deleted; a compacted file holding some of its rows is rewritten without them (one Spark job
  for all such files, :mod:`.merge`) and the rewrite replaces it under its own name in one
  rename (readers see the other files' rows throughout; their entries stay), or it is deleted
  when no other file's rows are in it, and the sidecar follows;
- its new data files (:class:`NewFiles`; none for a file whose rows were all rejected, or for
  ``ferry unload``) are moved into their partition directories, keeping their relative path
  (``c=v/ferry-<id>-<generation>-<n>.parquet``), and the partitions they need are registered.

Groups are ordered so that a reader never sees a row twice: compacted files are rewritten
first (old rows out), then each file's own old files are deleted and its new ones moved in.
Partitions left without data files are dropped. Costs: a metastore call, a rename per new data
file and a delete per old one, plus a Spark job only when compacted files hold the old rows.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from ferry.tables.index import TableIndex
from ferry.tables.merge import merge_groups
from ferry.tables.model import CompactedFile, FileEntry, Group, Journal
from ferry.tables.paths import (
    join,
    parent,
    parse_partition_dir,
)

if TYPE_CHECKING:
    from pyspark.sql import SparkSession
    from pyspark.sql.types import StructType


@dataclass(frozen=True)
class NewFiles:
    """One file's output ready to move in: ``files`` ``{path relative to source_dir: rows}``,
    each moved to the same path relative to the table. ``source_dir`` is deleted once the change
    is applied (an incoming directory, or a scratch directory of a reshape)."""

    file_id: str
    generation: str
    source_dir: str
    files: Mapping[str, int] = field(default_factory=dict)
    source_path: str | None = None
    #: rows of the file in shared data files moved in by the same change (:class:`Shared`),
    #: ``{path relative to the table: rows}``
    compacted: Mapping[str, int] = field(default_factory=dict)

    @property
    def rows(self) -> int:
        return sum(self.files.values()) + sum(self.compacted.values())


@dataclass(frozen=True)
class Shared:
    """Data files holding rows of several files of the change (a transform batch's shared
    files, issue 45), moved in after every file's old rows are out: ``moves`` ``(absolute
    source, path relative to the table)``, ``sidecars`` their members ``{relative path:
    CompactedFile}``, ``cleanup`` absolute directories deleted once applied."""

    moves: tuple[tuple[str, str], ...] = ()
    sidecars: Mapping[str, CompactedFile] = field(default_factory=dict)
    cleanup: tuple[str, ...] = ()


@dataclass(frozen=True)
class Plan:
    """A change ready to commit, and what it will leave per file (``{file_id: rows}``)."""

    journal: Journal
    rows: dict[str, int]
    touched: tuple[str, ...]  #: partition directories receiving data files


def plan(
    spark: SparkSession,
    index: TableIndex,
    columns: tuple[str, ...],
    schema: StructType,
    changes: Mapping[str, NewFiles | None],
    entries: Mapping[str, FileEntry | None],
    *,
    op: str,
    shared: Shared | None = None,
) -> Plan:
    """The journal replacing each file of ``changes`` (``None``: removing it) given its current
    ``entries``; ``columns`` are the table's partition columns, ``schema`` its data columns (to
    rewrite compacted files); ``shared``: data files several files of ``changes`` share (their
    entries name them in :attr:`NewFiles.compacted`), moved in last. Call under the table's
    lock, after
    :func:`~ferry.tables.journal.roll_forward`.

    Raises:
        ferry.tables.model.IndexFormatError: a record of the index is unreadable.
        RuntimeError: a compacted file's rows after the rewrite differ from its sidecar.
        pyspark errors: the rewrite of compacted files failed (nothing changed).
    """
    ids = set(changes)
    compacted = sorted({p for e in entries.values() if e is not None for p in e.compacted})
    sidecars = index.sidecars(compacted)
    entries_out: dict[str, FileEntry | None] = {}
    sidecars_out: dict[str, CompactedFile | None] = {}
    first: list[Group] = []
    cleanup: list[str] = []
    rewrite: dict[int, list[str]] = {}
    keep: dict[int, tuple[str, dict[str, int]]] = {}
    for k, path in enumerate(compacted):
        sc = sidecars[path] or CompactedFile(path, {})
        rest = {fid: n for fid, n in sc.members.items() if fid not in ids}
        sidecars_out[path] = None
        if rest:
            rewrite[k] = [index.abs(path)]
            keep[k] = (path, rest)
        else:
            first.append(Group(deletes=(path,)))
    if rewrite:
        scratch = index.new_scratch()
        cleanup.append(scratch)
        merged = merge_groups(
            spark, schema, rewrite, scratch, drop_ids=ids, description=f"ferry {op}: compacted"
        )
        for k, (path, rest) in keep.items():
            out = merged.get(k)
            if out is None or out.rows != sum(rest.values()):
                raise RuntimeError(
                    f"{index.location}: compacted file {path} rewritten without {len(ids)} "
                    f"file(s) holds {out.rows if out else 0} rows, its sidecar says "
                    f"{sum(rest.values())}"
                )
            # the rewrite replaces it under its own name in one rename: a reader sees the other
            # files' rows throughout, and their entries and its sidecar's path stay as they are
            first.append(Group(replaces=((out.path, path),)))
            sidecars_out[path] = CompactedFile(path, rest)
    groups: list[Group] = []
    rows: dict[str, int] = {}
    added: set[str] = set()
    removed_dirs: set[str] = {parent(p) for p in compacted}
    for fid, change in changes.items():
        old = entries.get(fid)
        deletes = tuple(sorted(old.files)) if old is not None else ()
        removed_dirs |= {parent(p) for p in deletes}
        if change is None:
            groups.append(Group(deletes=deletes))
            entries_out[fid] = None
            rows[fid] = 0
            continue
        moves = tuple((join(change.source_dir, rel), rel) for rel in sorted(change.files))
        added |= {parent(rel) for rel in change.files}
        groups.append(Group(deletes=deletes, moves=moves))
        entries_out[fid] = FileEntry(
            fid, change.generation, dict(change.files), dict(change.compacted), change.source_path
        )
        rows[fid] = change.rows
        cleanup.append(change.source_dir)
    if shared is not None and shared.moves:
        groups.append(Group(moves=shared.moves))
        added |= {parent(rel) for _, rel in shared.moves}
        sidecars_out.update(shared.sidecars)
        cleanup += shared.cleanup
    journal = Journal(
        op,
        groups=tuple(g for g in (*first, *groups) if g.deletes or g.moves or g.replaces),
        add_partitions=tuple(parse_partition_dir(columns, d) for d in sorted(added) if columns),
        entries=entries_out,
        sidecars=sidecars_out,
        drop_if_empty=tuple(sorted(removed_dirs - added - {""})) if columns else (),
        cleanup=tuple(cleanup),
    )
    return Plan(journal, rows, tuple(sorted(added)))
