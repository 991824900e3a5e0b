"""Load job (cluster A, Hive-enabled session): each file's staged data files moved into the
dataset's Hive table (docs/hive-layout.md). A load costs what it brings, not the size of the
partitions it lands in.

Order of calls (what :func:`load_files` does)::

    staged = read_markers + with_footers      (markers and Parquet footers of the new data
                                               files: rows and schema; driver threads, no Spark)
    with the table's lock:
        ensure_table(spark, spec)             (CREATE … IF NOT EXISTS, columns checked: C12)
        adopt(…)                              (a table of the earlier layout, once)
        roll_forward(index, catalog)          (finish what a crashed load left: redo journal)
        entries = index.entries(files)        (where each file's rows are now)
        per file: unchanged (same generation, its data files there) → nothing to do;
                  else → its new data files: footers checked against the table by name (C12)
        reshape(…)                            (staged by an earlier Ferry: Spark, only then)
        plan_shared(…)                        (a transform batch's shared files: moved in
                                               whole, or rewritten for the files loaded now)
        plan(…) → commit(…)                   (ONE journal: old data files of each file deleted
                                               wherever they lie, new ones moved in, ONE
                                               ADD PARTITION call, index records written)
    rows per file = rows of the data files it moved (footers), reconciled with rows_out

Loading a file again (retry, replay, redelivery, a new transform output after the dataset's
definition changed) removes every data file of its ``file_id`` first, also when the new output
is empty or lands in other partitions (case C19). Other files' data files are not touched
(case C13), except a compacted file holding rows of this file too, which is rewritten without
them. Staged directories are consumed: their data files move into the table.
"""

from __future__ import annotations

import contextlib
import dataclasses
import logging
import threading
from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING

from ferry.clusters.spark_jobs import HadoopFileSystem, struct_for
from ferry.datasets.registry import definition_version
from ferry.datasets.spec import FILE_ID_COLUMN, DatasetSpec
from ferry.errors import PermanentError
from ferry.stages.load.shared import LoadedFiles, other_generations, plan_shared
from ferry.stages.load.staged import (
    Staged,
    check_schema,
    read_legacy,
    read_markers,
    reshape,
    with_footers,
)
from ferry.tables.adopt import adopt
from ferry.tables.hive import catalog, create_table_sql, table_fingerprint, table_location
from ferry.tables.index import TableIndex, parallel
from ferry.tables.journal import commit, roll_forward
from ferry.tables.model import FileEntry
from ferry.tables.replace import NewFiles, plan

if TYPE_CHECKING:
    from pyspark.sql import DataFrame, SparkSession
    from pyspark.sql.types import StructType

    from ferry.tables.locks import TableLocks

log = logging.getLogger(__name__)

#: Default size compaction's merged files aim at (``load.target_file_mb``), MiB.
DEFAULT_TARGET_FILE_MB = 128

#: Called after a batch committed: (spec, table location, partition directories that received
#: data files) — the load service's compactor looks at those partitions.
OnLoaded = Callable[[DatasetSpec, str, tuple[str, ...]], None]


def table_schema(spec: DatasetSpec) -> StructType:
    """Expected schema of the Hive table: :attr:`DatasetSpec.table_columns` in table order."""
    return struct_for(spec.table_columns)


def schema_differences(actual: StructType, expected: StructType) -> list[str]:
    """Differences between two schemas matched BY NAME (case-insensitive, as Hive), ignoring
    nullability; empty if they match. Each item names the column."""
    from ferry.tables.footers import schema_problems

    return schema_problems(actual, {f.name: f.dataType.simpleString() for f in expected.fields})


def table_evolution(
    actual: StructType, partitions: list[str], spec: DatasetSpec
) -> tuple[list[tuple[str, str]], list[str]]:
    """Compare an existing table (its schema and partition column names) with the definition.

    Returns ``(additions, problems)``: ``additions`` are the definition's non-partition columns
    the table lacks, ``(name, type)`` in definition order (``ALTER TABLE … ADD COLUMNS``: earlier
    rows read NULL there); ``problems`` name each column the table has and the definition does
    not (a column removed), each column whose type changed, and a change of the partition
    columns: a definition with problems is refused, since loading would need the table
    rewritten (docs/datasets.md, "Changing a dataset")."""
    have = {f.name.lower(): f.dataType.simpleString() for f in actual.fields}
    want = {f.name: f.dataType.simpleString() for f in table_schema(spec).fields}
    part_names = {c.name for c in spec.table_partition_columns}
    additions = [(n, t) for n, t in want.items() if n not in have and n not in part_names]
    problems = [
        f"column {n!r} ({t}) of the table is not in the definition (a column cannot be removed)"
        for n, t in have.items()
        if n not in want
    ]
    problems += [
        f"column {n!r} has type {have[n]} in the table, the definition says {t} "
        "(a type cannot change)"
        for n, t in want.items()
        if n in have and have[n] != t
    ]
    want_parts = [c.name for c in spec.table_partition_columns]
    if [p.lower() for p in partitions] != want_parts:
        problems.append(f"partition columns are {partitions}, the definition says {want_parts}")
        if partitions[-1:] == [FILE_ID_COLUMN]:
            problems.append(
                f"the table has the old per-file layout: run `ferry migrate-layout "
                f"{spec.hive.full_name}`"
            )
    return additions, problems


def ensure_table(spark: SparkSession, spec: DatasetSpec) -> StructType:
    """Create the database and table if missing; return the table's schema. Columns the
    definition added (and ``ferry_source_path`` on a table made before it existed) are added
    to the table (``ALTER TABLE … ADD COLUMNS``: earlier rows read NULL there); a column removed
    or retyped, or other partition columns, are refused (:func:`table_evolution`).

    Raises:
        PermanentError(reason="schema_mismatch"): the existing table's columns differ from the
            definition in a way it cannot grow into (message names table and columns).
    """
    spark.sql(f"CREATE DATABASE IF NOT EXISTS `{spec.hive.database}`")
    spark.sql(create_table_sql(spec))
    name = spec.hive.full_name
    parts = [c.name for c in spark.catalog.listColumns(name) if c.isPartition]
    additions, problems = table_evolution(spark.table(name).schema, parts, spec)
    if problems:
        raise PermanentError(
            f"table {name} does not match dataset {spec.name!r}: " + "; ".join(problems),
            reason="schema_mismatch",
        )
    if additions:
        cols = ", ".join(f"`{n}` {t.upper()}" for n, t in additions)
        spark.sql(f"ALTER TABLE {name} ADD COLUMNS ({cols})")
        spark.catalog.refreshTable(name)
    return spark.table(name).schema


def align_to_table(df: DataFrame, schema: StructType, *, table: str = "the table") -> DataFrame:
    """``df`` with its columns matched BY NAME to ``schema`` and selected in ``schema``'s order,
    renamed to the table's spelling (case C12, docs/field-cases.md). Types must be equal (no
    implicit cast); nullability is ignored. Nothing is written.

    Raises:
        PermanentError(reason="schema_mismatch"): a column is missing, extra, or of another type;
            the message names every such column and ``table``.
    """
    from pyspark.sql import functions as F

    problems = schema_differences(df.schema, schema)
    if problems:
        raise PermanentError(
            f"cannot load into {table}: " + "; ".join(problems), reason="schema_mismatch"
        )
    by_lower = {f.name.lower(): f.name for f in df.schema.fields}
    return df.select(*[F.col(f"`{by_lower[f.name.lower()]}`").alias(f.name) for f in schema.fields])


@dataclasses.dataclass(frozen=True)
class KnownTable:
    """A table as a load found it: the metastore's ``fingerprint`` of it
    (:func:`~ferry.tables.hive.table_fingerprint`), its ``schema`` and ``location``."""

    fingerprint: str
    schema: StructType
    location: str


class KnownTables:
    """Tables a load service has created or checked, per definition version (issue 45: the
    checks cost about 30 metastore calls a batch, what a batch of one file paid as well).

    :meth:`get` answers from what it knows only while the metastore's entry of the table is
    unchanged (one ``get_table``): a table dropped, altered (columns, location, layout) or
    changed by a new definition version is checked again in full. Thread-safe."""

    def __init__(self) -> None:
        self._known: dict[tuple[str, str], KnownTable] = {}
        self._lock = threading.Lock()

    def get(self, spark: SparkSession, spec: DatasetSpec) -> KnownTable | None:
        key = (spec.hive.full_name, definition_version(spec))
        with self._lock:
            known = self._known.get(key)
        if known is None:
            return None
        if table_fingerprint(spark, spec.hive.full_name) != known.fingerprint:
            self.forget(spec.hive.full_name)
            return None
        return known

    def put(
        self, spark: SparkSession, spec: DatasetSpec, schema: StructType, location: str
    ) -> None:
        fingerprint = table_fingerprint(spark, spec.hive.full_name)
        if fingerprint is None:
            return
        with self._lock:
            self._known[(spec.hive.full_name, definition_version(spec))] = KnownTable(
                fingerprint, schema, location
            )

    def forget(self, table: str) -> None:
        with self._lock:
            for key in [k for k in self._known if k[0] == table]:
                del self._known[key]


def load_files(
    spark: SparkSession,
    spec: DatasetSpec,
    files: Mapping[str, str],
    *,
    known: KnownTables | None = None,
    loaded: LoadedFiles | None = None,
    locks: TableLocks | None = None,
    sources: Mapping[str, str] | None = None,
    target_file_mb: float = DEFAULT_TARGET_FILE_MB,
    on_loaded: OnLoaded | None = None,
) -> dict[str, int | PermanentError]:
    """Load staged files (``{file_id: incoming directory URI on cluster A}``) into the dataset's
    Hive table, holding the table's lock (``locks``) while it changes; the load service's one
    call. With ``known`` (:class:`KnownTables`), a table already created and checked for this
    definition version, and unchanged in the metastore since, is not created, checked and
    adopted again (one metastore call instead of about 30); with ``loaded``
    (:class:`LoadedFiles`), the files it loads are remembered and the other members of their
    transform batches are read from the index only when not remembered
    (:func:`other_generations`). ``sources`` (``{file_id: the manifest's source_path}``) fills
    ``ferry_source_path`` of files staged by an earlier Ferry (transform writes it into the data
    files now); ``target_file_mb`` sizes the files of an adopted table's unfinished rewrite.

    Returns ``{file_id: rows of the file now in the table}`` (from the footers of the data files
    it moved, or of its entry when it was loaded already), or the file's
    :class:`PermanentError`: ``schema_mismatch`` (a data file's columns differ from the table's:
    nothing of that file written, C12), ``hdfs_not_found`` (nothing staged and nothing loaded).

    Raises:
        PermanentError(reason="schema_mismatch"): the table does not match the definition, or
            an earlier Ferry's staged rows do not (nothing written).
        ValueError: empty ``files`` or a bad ``file_id``.
        TransientError, pyspark errors: HDFS or Spark failed; retry (a change half applied is
            finished by the next load of the table before anything else).
    """
    from pyspark.sql.types import StructType

    if not files:
        raise ValueError("load_files needs at least one file")
    table = spec.hive.full_name
    fs = HadoopFileSystem(spark)
    staged = with_footers(spark, read_markers(fs, files))
    with locks.hold(table) if locks is not None else contextlib.nullcontext():
        pcols = tuple(spec.hive.partition_by)
        cat = catalog(spark, table, pcols)
        checked = known.get(spark, spec) if known is not None else None
        if checked is not None:
            schema, location = checked.schema, checked.location
            index = TableIndex(fs, location)
        else:
            schema = ensure_table(spark, spec)
            location = table_location(spark, table)
            index = TableIndex(fs, location)
            adopt(spark, table, index, cat, target_file_bytes=int(target_file_mb * 1024 * 1024))
            if known is not None:
                known.put(spark, spec, schema, location)
        data = [f for f in schema.fields if f.name not in pcols]
        if roll_forward(index, cat) or any(s.unreadable for s in staged.values()):
            # a load that crashed was just finished (it may have moved these files' data files
            # in and consumed their staged directories): look at what is staged again
            staged = with_footers(spark, read_markers(fs, files))
        entries = index.entries(files)
        out: dict[str, int | PermanentError] = {}
        changes: dict[str, NewFiles] = {}
        legacy: dict[str, str] = {}
        expected = {f.name: f.dataType.simpleString() for f in data}
        for fid, s in staged.items():
            entry = entries[fid]
            if (
                s.marker is not None
                and entry is not None
                and (entry.generation == s.marker.generation and _present(index, entry.paths))
            ):
                out[fid] = entry.rows  # loaded already (a redelivery): nothing to do
                fs.delete_quiet(s.directory)
            elif not s.exists:
                out[fid] = _nothing_staged(fid, s, entry, index)
            elif s.unreadable is not None:
                out[fid] = s.unreadable
            elif s.legacy:
                legacy[fid] = s.directory
            elif (err := check_schema(s, expected, table)) is not None:
                out[fid] = err
            else:
                changes[fid] = s.new_files((sources or {}).get(fid))
        sharing = {
            fid: staged[fid]
            for fid in changes
            if (m := staged[fid].marker) is not None and m.shared and staged[fid].batch
        }
        shared = None
        if sharing:
            known_gen = other_generations(index, sharing, loaded, table)
            sp = plan_shared(spark, index, StructType(data), sharing, generation_of=known_gen)
            shared = sp.shared
            for fid, held in sp.compacted.items():
                changes[fid] = staged[fid].new_files((sources or {}).get(fid), held)
        extra: list[str] = []
        if legacy:
            scratch = index.new_scratch()
            changes |= _reshaped(spark, spec, schema, scratch, legacy, sources)
            extra = [*legacy.values(), scratch]
        if not changes:
            return out
        p = plan(spark, index, pcols, StructType(data), changes, entries, op="load", shared=shared)
        journal = dataclasses.replace(p.journal, cleanup=(*p.journal.cleanup, *extra))
        applied = commit(index, journal, cat)
    if loaded is not None:
        loaded.note(table, {fid: new.generation for fid, new in changes.items()})
    lost = set(applied.lost)
    for fid, new in changes.items():
        gone = [n for rel, n in (*new.files.items(), *new.compacted.items()) if rel in lost]
        out[fid] = new.rows - sum(gone)
    if on_loaded is not None and p.touched:
        on_loaded(spec, location, p.touched)
    return out


def _present(index: TableIndex, paths: set[str]) -> bool:
    """True when every data file in ``paths`` (relative) exists."""
    return all(parallel(lambda p: index.fs.exists(index.abs(p)), sorted(paths)))


def _nothing_staged(
    fid: str, s: Staged, entry: FileEntry | None, index: TableIndex
) -> int | PermanentError:
    """A file whose incoming directory is gone: loaded already (its directory was consumed),
    or lost."""
    if entry is not None and _present(index, entry.paths):
        return entry.rows
    what = "its data files are missing from the table and " if entry is not None else ""
    return PermanentError(
        f"{fid}: {what}nothing is staged at {s.directory}: replay transfer for this file",
        reason="hdfs_not_found",
    )


def _reshaped(
    spark: SparkSession,
    spec: DatasetSpec,
    schema: StructType,
    scratch: str,
    legacy: Mapping[str, str],
    sources: Mapping[str, str] | None,
) -> dict[str, NewFiles]:
    """Staged directories of an earlier Ferry, rewritten into the per-file shape in the
    table's scratch (one Spark job); raises ``schema_mismatch`` before writing (C12)."""
    aligned = align_to_table(
        read_legacy(spark, spec, legacy, sources), schema, table=spec.hive.full_name
    )
    log.info("load %s: reshaping %d file(s) staged by an earlier Ferry", spec.name, len(legacy))
    done = reshape(spark, spec, aligned, list(legacy), scratch)
    return {fid: s.new_files((sources or {}).get(fid)) for fid, s in done.items()}
