"""Hive table maintenance (``ferry compact``, ``ferry migrate-layout``, ``ferry unload``): the
Spark side, over the per-file layout (:mod:`ferry.tables`, docs/hive-layout.md).

Each command holds the table's ZooKeeper lock (:mod:`ferry.tables.locks`) while it changes
the table when given ``locks`` (the CLI always gives it), so it can run while the load service
runs: the load waits for it, and it waits for the load. Every change goes through the table's
journal, like a load's, so a crash of a command is finished by the next change of the table.
"""

from __future__ import annotations

import contextlib
import dataclasses
from collections.abc import Callable, Mapping, Sequence
from contextlib import AbstractContextManager
from dataclasses import dataclass
from typing import TYPE_CHECKING

from ferry.clusters.spark_jobs import HadoopFileSystem
from ferry.datasets.spec import FILE_ID_COLUMN, DatasetSpec
from ferry.errors import FerryError
from ferry.tables.adopt import adopt
from ferry.tables.compaction import CompactReport
from ferry.tables.compaction import compact as compact_partitions
from ferry.tables.footers import read_footers
from ferry.tables.hive import (
    LAYOUT_PROPERTY,
    catalog,
    count_by,
    create_table_sql,
    has_per_file_layout,
    partition_columns,
    table_location,
    table_property,
)
from ferry.tables.index import TableIndex, parallel
from ferry.tables.journal import Catalog, commit, roll_forward
from ferry.tables.paths import join, new_generation, partition_dir
from ferry.tables.replace import NewFiles, plan
from ferry.tables.staging import file_dir, name_files, write_files

if TYPE_CHECKING:
    from pyspark.sql import DataFrame, SparkSession
    from pyspark.sql.types import StructType

    from ferry.tables.locks import TableLocks


class LayoutError(FerryError):
    """The table is not in the layout the command expects, or a migration was refused."""


def resolve(specs: Mapping[str, DatasetSpec], name: str) -> DatasetSpec:
    """The dataset whose table is ``name`` (``db.table``) or whose dataset name is ``name``.

    Raises:
        LayoutError: no dataset matches (the message lists the known tables).
    """
    for spec in specs.values():
        if name in (spec.name, spec.hive.full_name):
            return spec
    known = sorted(s.hive.full_name for s in specs.values())
    raise LayoutError(f"no dataset loads a table {name!r}; known tables: {known}")


def parse_partition(spec: DatasetSpec, text: str) -> dict[str, str]:
    """``"flight_date=2013-01-01"`` (several ``k=v`` joined by ``/`` or ``,``) → ``{k: v}``; every
    partition column of the dataset must be given.

    Raises:
        LayoutError: a malformed item, an unknown column, or a missing one.
    """
    out: dict[str, str] = {}
    for item in text.replace(",", "/").split("/"):
        key, sep, value = item.partition("=")
        if not sep or key.strip() not in spec.hive.partition_by:
            raise LayoutError(
                f"partition {text!r}: expected k=v with k in {list(spec.hive.partition_by)}"
            )
        out[key.strip()] = value.strip()
    if sorted(out) != sorted(spec.hive.partition_by):
        raise LayoutError(f"partition {text!r} must name {list(spec.hive.partition_by)}")
    return out


@dataclass(frozen=True)
class Table:
    """A per-file table ready to change: its index, metastore catalog and data columns."""

    name: str
    index: TableIndex
    catalog: Catalog
    data: StructType


def _open(spark: SparkSession, spec: DatasetSpec, target_file_bytes: int) -> Table:
    """The table of ``spec`` (adopted if it has the copy-on-write layout). Under the lock."""
    from pyspark.sql.types import StructType

    name = spec.hive.full_name
    pcols = tuple(spec.hive.partition_by)
    if partition_columns(spark, name) != list(pcols):
        raise LayoutError(
            f"{name} has partition columns {partition_columns(spark, name)}, the dataset "
            f"{list(pcols)}: run `ferry migrate-layout {name}`"
        )
    index = TableIndex(HadoopFileSystem(spark), table_location(spark, name))
    cat = catalog(spark, name, pcols)
    adopt(spark, name, index, cat, target_file_bytes=target_file_bytes)
    roll_forward(index, cat)
    data = StructType([f for f in spark.table(name).schema.fields if f.name not in pcols])
    return Table(name, index, cat, data)


def _held(locks: TableLocks | None, spec: DatasetSpec) -> AbstractContextManager[None]:
    """The table's lock for the command, or nothing when ``locks`` is None."""
    return locks.hold(spec.hive.full_name) if locks is not None else contextlib.nullcontext()


def compact(
    spark: SparkSession,
    spec: DatasetSpec,
    partitions: Sequence[Mapping[str, str]] = (),
    *,
    max_files: int,
    target_file_bytes: int,
    locks: TableLocks | None = None,
) -> CompactReport:
    """Merge the smallest data files of each partition (the given ones, or all) holding more
    than ``max_files`` into files of at most ``target_file_bytes`` (``max_files=1``: every
    partition's small files), as the load service's compactor does; rows are unchanged and
    every file id's entry follows (:mod:`ferry.tables.compaction`)."""
    with _held(locks, spec):
        t = _open(spark, spec, target_file_bytes)
    cols = list(spec.hive.partition_by)
    if partitions:
        dirs = [partition_dir(cols, [p[c] for c in cols]) for p in partitions]
    elif cols:
        dirs = [r[0] for r in spark.sql(f"SHOW PARTITIONS {t.name}").collect()]
    else:
        dirs = [""]
    return compact_partitions(
        spark,
        t.index,
        t.catalog,
        t.data,
        dirs,
        max_files=max_files,
        target_bytes=target_file_bytes,
        lock=lambda: _held(locks, spec),
    )


def unload(
    spark: SparkSession,
    spec: DatasetSpec,
    file_ids: Sequence[str],
    *,
    target_file_bytes: int,
    locks: TableLocks | None = None,
) -> dict[str, int]:
    """Remove every row of ``file_ids`` from the dataset's table, found through the index (no
    scan): their own data files are deleted, compacted files holding their rows rewritten
    without them; partitions left empty are dropped. Returns ``{file_id: rows removed}``."""
    with _held(locks, spec):
        t = _open(spark, spec, target_file_bytes)
        entries = t.index.entries(file_ids)
        removed = {fid: (e.rows if e is not None else 0) for fid, e in entries.items()}
        known = {fid: None for fid, e in entries.items() if e is not None}
        if known:
            p = plan(spark, t.index, t.catalog.columns, t.data, known, entries, op="unload")
            commit(t.index, p.journal, t.catalog)
    return removed


def _renamed(spec: DatasetSpec, table: str) -> DatasetSpec:
    return spec.model_copy(update={"hive": spec.hive.model_copy(update={"table": table})})


@dataclass(frozen=True)
class MigrationReport:
    """Rows per file id before and after (equal, or nothing swapped), partitions before →
    after, the name the old table was kept under (``None``: dropped or migrated in place), and
    ``in_place`` (a copy-on-write table adopted without rewriting a row)."""

    rows: dict[str, int]
    partitions_before: int
    partitions_after: int
    old_table: str | None
    in_place: bool = False


def migrate_layout(
    spark: SparkSession,
    spec: DatasetSpec,
    *,
    target_file_bytes: int,
    drop_old: bool = False,
    check: Callable[[dict[str, int]], dict[str, int]] | None = None,
    locks: TableLocks | None = None,
) -> MigrationReport:
    """Bring the dataset's table into the per-file layout (docs/hive-layout.md, "Migration"):

    - copy-on-write layout (partitioned by the dataset's keys, no layout property): adopted in
      place, no row rewritten (:mod:`ferry.tables.adopt`; a load does it too);
    - per-file-partition layout (``ferry_file_id`` its last partition column): a new table
      ``<table>__ferry_new`` is filled in the per-file layout (one Spark job, then each file's
      data files moved in); if its rows per file id equal the old table's, the old table is
      renamed ``<table>__ferry_old`` (dropped with ``drop_old``) and the new one takes the name.
      ``check`` (tests only) may replace the after-counts before the comparison.

    Raises:
        LayoutError: the table is in neither layout (or already migrated), ``<table>__ferry_old``
            exists, or the counts differ (then the new table is dropped, the old one untouched).
    """
    with _held(locks, spec):
        return _migrate(spark, spec, target_file_bytes, drop_old, check)


def _migrate(
    spark: SparkSession,
    spec: DatasetSpec,
    target_file_bytes: int,
    drop_old: bool,
    check: Callable[[dict[str, int]], dict[str, int]] | None,
) -> MigrationReport:
    db, name = spec.hive.database, spec.hive.table
    table = spec.hive.full_name
    parts = partition_columns(spark, table)
    if parts == list(spec.hive.partition_by):
        if has_per_file_layout(table, table_property(spark, table, LAYOUT_PROPERTY)):
            raise LayoutError(f"{table} is in the per-file layout already")
        t = _open(spark, spec, target_file_bytes)
        n = spark.sql(f"SHOW PARTITIONS {table}").count() if parts else 0
        ids = count_by(spark.table(table), FILE_ID_COLUMN)
        got = {fid: e.rows for fid, e in t.index.entries(ids).items() if e is not None}
        return MigrationReport(got, n, n, None, in_place=True)
    old_parts = [*spec.hive.partition_by, FILE_ID_COLUMN]
    if parts != old_parts:
        raise LayoutError(
            f"{table} is not in the old layout (partition columns {parts}, expected {old_parts})"
        )
    new, old = _renamed(spec, f"{name}__ferry_new"), _renamed(spec, f"{name}__ferry_old")
    if spark.catalog.tableExists(old.hive.full_name):
        raise LayoutError(f"{old.hive.full_name} exists: drop it or rename it first")
    spark.sql(f"DROP TABLE IF EXISTS {new.hive.full_name}")  # a refused earlier attempt
    spark.sql(create_table_sql(new))
    from pyspark.sql import functions as F

    source = spark.table(table)
    have = {f.name.lower() for f in source.schema.fields}
    # A column the old table never had (ferry_source_path, added later) migrates as NULL.
    columns = [
        F.col(f"`{c.name}`") if c.name.lower() in have else F.lit(None).cast(c.type).alias(c.name)
        for c in spec.table_columns
    ]
    before = count_by(source, FILE_ID_COLUMN)
    after = _fill(spark, new, source.select(*columns), list(before))
    if check is not None:
        after = check(after)
    if before != after:
        spark.sql(f"DROP TABLE {new.hive.full_name}")
        diff = {k: (before.get(k, 0), after.get(k, 0)) for k in sorted({*before, *after})}
        diff = {k: v for k, v in diff.items() if v[0] != v[1]}
        raise LayoutError(f"migrate-layout {table} refused: rows per file id differ {diff}")
    n_before = spark.sql(f"SHOW PARTITIONS {table}").count()
    n_after = spark.sql(f"SHOW PARTITIONS {new.hive.full_name}").count() if parts[:-1] else 1
    spark.sql(f"ALTER TABLE {table} RENAME TO `{db}`.`{old.hive.table}`")
    spark.sql(f"ALTER TABLE {new.hive.full_name} RENAME TO `{db}`.`{name}`")
    if drop_old:
        spark.sql(f"DROP TABLE {old.hive.full_name}")
    return MigrationReport(after, n_before, n_after, None if drop_old else old.hive.full_name)


def _fill(
    spark: SparkSession, spec: DatasetSpec, rows: DataFrame, file_ids: list[str]
) -> dict[str, int]:
    """Fill the (new, empty) table of ``spec`` with ``rows`` (a frame of its columns) in the
    per-file layout; returns the rows per file id its index records."""
    from pyspark.sql.types import StructType

    name = spec.hive.full_name
    pcols = tuple(spec.hive.partition_by)
    fs = HadoopFileSystem(spark)
    index = TableIndex(fs, table_location(spark, name))
    cat = catalog(spark, name, pcols)
    scratch = index.new_scratch()
    write_files(rows, [c.name for c in spec.table_data_columns], pcols, scratch)
    gen = new_generation()
    markers = parallel(lambda f: name_files(fs, file_dir(scratch, f), f, gen), file_ids)
    paths = [join(file_dir(scratch, m.file_id), rel) for m in markers for rel in m.files]
    footers = read_footers(spark, paths)
    changes: dict[str, NewFiles | None] = {
        m.file_id: NewFiles(
            m.file_id,
            gen,
            file_dir(scratch, m.file_id),
            {rel: footers[join(file_dir(scratch, m.file_id), rel)].rows for rel in m.files},
        )
        for m in markers
    }
    data = StructType([f for f in spark.table(name).schema.fields if f.name not in pcols])
    p = plan(spark, index, pcols, data, changes, dict.fromkeys(file_ids), op="migrate")
    commit(index, dataclasses.replace(p.journal, cleanup=(*p.journal.cleanup, scratch)), cat)
    return {fid: e.rows for fid, e in index.entries(file_ids).items() if e is not None}
