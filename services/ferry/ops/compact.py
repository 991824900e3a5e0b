"""Hive table maintenance (``ferry compact``, ``ferry migrate-layout``, ``ferry unload``): the
Spark side. Every rewrite goes through :func:`ferry.clusters.hive.rewrite_partitions`
(materialize first, then one dynamic-partition ``INSERT OVERWRITE``), like the load itself.

Each command holds the table's ZooKeeper lock (:mod:`ferry.clusters.locks`) from its first read to
its last write when given ``locks`` (the CLI always gives it), so it can run while the load service
runs: the load's rewrites of the table wait for it, and it waits for them.
"""

from __future__ import annotations

import contextlib
import math
from collections.abc import Callable, Mapping, Sequence
from contextlib import AbstractContextManager
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from ferry.clusters.hive import (
    PartitionValues,
    count_by,
    create_table_sql,
    distinct_partitions,
    partition_columns,
    partition_filter,
    rewrite_partitions,
    without,
)
from ferry.core.errors import FerryError
from ferry.datasets.spec import FILE_ID_COLUMN, DatasetSpec

if TYPE_CHECKING:
    from pyspark.sql import Column, DataFrame, SparkSession

    from ferry.clusters.locks import TableLocks

#: Partitions rewritten by one ``INSERT OVERWRITE`` of a compaction.
COMPACT_CHUNK = 50


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
class PartitionFiles:
    """One partition's data files: how many, their total bytes."""

    files: int
    bytes: int


def partition_files(
    spark: SparkSession, table: str, where: Column | None = None
) -> dict[PartitionValues, PartitionFiles]:
    """Data files per partition (values in partition-column order; ``()`` unpartitioned) among
    the partitions ``where`` selects (all when ``None``). One Spark job reading no column data."""
    from pyspark.sql import functions as F

    cols = partition_columns(spark, table)
    df = spark.table(table)
    if where is not None:
        df = df.where(where)
    files = (
        df.select(
            *[F.col(f"`{c}`") for c in cols],
            F.col("_metadata.file_path").alias("_f"),
            F.col("_metadata.file_size").alias("_s"),
        )
        .distinct()
        .groupBy(*[f"`{c}`" for c in cols])
        .agg(F.count("_f").alias("n"), F.sum("_s").alias("b"))
        .collect()
    )
    return {tuple(r[c] for c in cols): PartitionFiles(int(r["n"]), int(r["b"])) for r in files}


@dataclass(frozen=True)
class CompactReport:
    """Per rewritten partition: files before → after; rows before = after is checked."""

    before: dict[PartitionValues, PartitionFiles] = field(default_factory=dict)
    after: dict[PartitionValues, PartitionFiles] = field(default_factory=dict)
    rows: int = 0


def compact(
    spark: SparkSession,
    spec: DatasetSpec,
    partitions: Sequence[Mapping[str, str]] = (),
    *,
    target_file_bytes: int,
    locks: TableLocks | None = None,
) -> CompactReport:
    """Rewrite the partitions ``partitions`` (all when empty) whose file count exceeds
    ``ceil(bytes / target_file_bytes)`` into about that many files, :data:`COMPACT_CHUNK`
    partitions per ``INSERT OVERWRITE``. Rows are unchanged (counted per file id before and
    after).

    Raises:
        LayoutError: the rows per file id of a rewritten chunk differ afterwards (cannot happen
            unless something else wrote the table meanwhile: pass ``locks`` when a load may run).
    """
    with _held(locks, spec):
        return _compact(spark, spec, partitions, target_file_bytes)


def _compact(
    spark: SparkSession,
    spec: DatasetSpec,
    partitions: Sequence[Mapping[str, str]],
    target_file_bytes: int,
) -> CompactReport:
    table = spec.hive.full_name
    spark.catalog.refreshTable(table)
    cols = list(spec.hive.partition_by)
    chosen = [tuple(p[c] for c in cols) for p in partitions]
    where = partition_filter(cols, chosen) if chosen else None
    stats = partition_files(spark, table, where)
    todo = sorted(
        (p for p, s in stats.items() if s.files > max(1, math.ceil(s.bytes / target_file_bytes))),
        key=lambda t: tuple(str(v) for v in t),
    )
    rows = 0
    for i in range(0, len(todo), COMPACT_CHUNK):
        chunk = todo[i : i + COMPACT_CHUNK]
        sel = partition_filter(cols, chunk)
        before = count_by(spark.table(table).where(sel), FILE_ID_COLUMN)
        rewrite_partitions(
            spark,
            table,
            spark.table(table).where(sel),
            target_file_bytes=target_file_bytes,
            description=f"ferry compact {table}: {len(chunk)} partition(s)",
        )
        after = count_by(spark.table(table).where(sel), FILE_ID_COLUMN)
        if before != after:
            raise LayoutError(f"compact {table}: rows per file id changed: {before} → {after}")
        rows += sum(after.values())
    done = partition_files(spark, table, partition_filter(cols, todo)) if todo else {}
    return CompactReport({p: stats[p] for p in todo}, done, rows)


def _renamed(spec: DatasetSpec, table: str) -> DatasetSpec:
    return spec.model_copy(update={"hive": spec.hive.model_copy(update={"table": table})})


@dataclass(frozen=True)
class MigrationReport:
    """Rows per file id in the old table and in the migrated one (equal, or nothing swapped),
    the partitions before → after, and the name the old table was kept under (``None``: dropped)."""

    rows: dict[str, int]
    partitions_before: int
    partitions_after: int
    old_table: str | None


def migrate_layout(
    spark: SparkSession,
    spec: DatasetSpec,
    *,
    target_file_bytes: int,
    drop_old: bool = False,
    check: Callable[[dict[str, int]], dict[str, int]] | None = None,
    locks: TableLocks | None = None,
) -> MigrationReport:
    """Rewrite the dataset's table from the old per-file layout (``ferry_file_id`` its last
    partition column) into the current one: a new table ``<table>__ferry_new`` is filled from the
    old one; if its rows per file id equal the old table's, the old table is renamed
    ``<table>__ferry_old`` (dropped with ``drop_old``) and the new one takes the table's name.
    ``check`` (tests only) may replace the after-counts before the comparison.

    Raises:
        LayoutError: the table is not in the old layout, ``<table>__ferry_old`` exists, or the
            counts differ (then the new table is dropped and the old one left as it was).
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
    old_parts = [*spec.hive.partition_by, FILE_ID_COLUMN]
    if partition_columns(spark, table) != old_parts:
        raise LayoutError(
            f"{table} is not in the old layout (partition columns "
            f"{partition_columns(spark, table)}, expected {old_parts})"
        )
    new, old = _renamed(spec, f"{name}__ferry_new"), _renamed(spec, f"{name}__ferry_old")
    if spark.catalog.tableExists(old.hive.full_name):
        raise LayoutError(f"{old.hive.full_name} exists: drop it or rename it first")
    spark.sql(f"DROP TABLE IF EXISTS {new.hive.full_name}")  # a refused earlier attempt
    spark.sql(create_table_sql(new))
    from pyspark.sql import functions as F

    source: DataFrame = spark.table(table)
    have = {f.name.lower() for f in source.schema.fields}
    # A column the old table never had (ferry_source_path, added later) migrates as NULL.
    columns = [
        F.col(f"`{c.name}`") if c.name.lower() in have else F.lit(None).cast(c.type).alias(c.name)
        for c in spec.table_columns
    ]
    before = count_by(source, FILE_ID_COLUMN)
    rewrite_partitions(
        spark,
        new.hive.full_name,
        source.select(*columns),
        target_file_bytes=target_file_bytes,
        description=f"ferry migrate-layout {table}",
    )
    after = count_by(spark.table(new.hive.full_name), FILE_ID_COLUMN)
    if check is not None:
        after = check(after)
    if before != after:
        spark.sql(f"DROP TABLE {new.hive.full_name}")
        diff = {k: (before.get(k, 0), after.get(k, 0)) for k in sorted({*before, *after})}
        diff = {k: v for k, v in diff.items() if v[0] != v[1]}
        raise LayoutError(f"migrate-layout {table} refused: rows per file id differ {diff}")
    n_before = spark.sql(f"SHOW PARTITIONS {table}").count()
    n_after = len(distinct_partitions(spark.table(new.hive.full_name), spec.hive.partition_by))
    spark.sql(f"ALTER TABLE {table} RENAME TO `{db}`.`{old.hive.table}`")
    spark.sql(f"ALTER TABLE {new.hive.full_name} RENAME TO `{db}`.`{name}`")
    if drop_old:
        spark.sql(f"DROP TABLE {old.hive.full_name}")
    return MigrationReport(after, n_before, n_after, None if drop_old else old.hive.full_name)


def unload(
    spark: SparkSession,
    spec: DatasetSpec,
    file_ids: Sequence[str],
    *,
    target_file_bytes: int,
    locks: TableLocks | None = None,
) -> dict[str, int]:
    """Remove every row of ``file_ids`` from the dataset's table (the new layout's replacement
    for dropping a file's partition): the partitions holding them are rewritten without them;
    partitions left empty are dropped. Returns ``{file_id: rows removed}``. ``locks``: hold the
    table's lock throughout (when a load may run)."""
    with _held(locks, spec):
        return _unload(spark, spec, file_ids, target_file_bytes)


def _held(locks: TableLocks | None, spec: DatasetSpec) -> AbstractContextManager[None]:
    """The table's lock for the whole maintenance command, or nothing when ``locks`` is None."""
    return locks.hold(spec.hive.full_name) if locks is not None else contextlib.nullcontext()


def _unload(
    spark: SparkSession, spec: DatasetSpec, file_ids: Sequence[str], target_file_bytes: int
) -> dict[str, int]:
    table = spec.hive.full_name
    spark.catalog.refreshTable(table)
    cols = list(spec.hive.partition_by)
    ids = list(file_ids)
    from pyspark.sql import functions as F

    mine = spark.table(table).where(F.col(FILE_ID_COLUMN).isin(ids))
    removed = {fid: 0 for fid in ids} | count_by(mine, FILE_ID_COLUMN)
    touched = distinct_partitions(mine, cols)
    if not touched:
        return removed
    rest = without(FILE_ID_COLUMN, ids)(spark.table(table).where(partition_filter(cols, touched)))
    left = set(distinct_partitions(rest, cols))
    rewrite_partitions(
        spark, table, rest, target_file_bytes=target_file_bytes, description=f"ferry unload {table}"
    )
    for p in touched:
        if p in left:
            continue
        if not cols:
            spark.sql(f"TRUNCATE TABLE {table}")
            continue
        spec_sql = ", ".join(f"`{c}`='{v}'" for c, v in zip(cols, p, strict=True))
        spark.sql(f"ALTER TABLE {table} DROP IF EXISTS PARTITION ({spec_sql})")
    return removed
