"""Hive tables partitioned by business keys: DDL, partition filters, and the one safe way Ferry
rewrites partitions (used by the load job and by ``ferry compact`` / ``migrate-layout`` /
``unload`` in :mod:`ferry.ops.compact`).

Rewriting partitions (:func:`rewrite_partitions`): the complete new contents of every partition
to replace are first MATERIALIZED as Parquet in a scratch directory next to the table
(``<parent of the table location>/_ferry_rewrite/<db>.<table>/``), then the scratch is renamed
``ready-…`` (the commit point of the intent), then ONE ``INSERT OVERWRITE`` with dynamic partition
overwrite replaces exactly the partitions present in the scratch, then the scratch is deleted.

- Reading a table and overwriting it in the same query fails in Spark ("Cannot overwrite a path
  that is also being read from"); reading the scratch instead does not.
- A failure before the rename leaves the table untouched (only an unfinished ``_tmp-…`` scratch,
  deleted by the next rewrite). A failure after it (also a crash while Spark moves the new
  partition directories in: Spark deletes a partition's old directory, then renames the new one
  in, see ``HadoopMapReduceCommitProtocol.commitJob``) is repaired by the next rewrite of the same
  table, which first re-applies every ``ready-…`` scratch it finds (:func:`recover_rewrites`): the
  scratch holds the partitions' complete contents, so re-applying it is idempotent.
- One writer per table at a time: two rewrites of the same partition running concurrently would
  each keep only their own view of the other rows (a lost update). Callers that may run beside
  another writer pass ``locks`` (:class:`ferry.clusters.locks.TableLocks`, a ZooKeeper lock per
  table), held from the read of the current rows to the end of the overwrite.
"""

from __future__ import annotations

import contextlib
import math
import uuid
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from ferry.datasets.spec import DatasetSpec

if TYPE_CHECKING:
    from pyspark.sql import Column, DataFrame, SparkSession

    from ferry.clusters.locks import TableLocks

#: Session settings a dynamic-partition overwrite needs; :func:`rewrite_partitions` sets them.
#: Sources: Spark SQL "Configuration" (spark.sql.sources.partitionOverwriteMode) and Hive's
#: HiveConf (hive.exec.dynamic.partition, hive.exec.dynamic.partition.mode).
OVERWRITE_SESSION_CONF: Mapping[str, str] = {
    "spark.sql.sources.partitionOverwriteMode": "dynamic",
    "hive.exec.dynamic.partition": "true",
    "hive.exec.dynamic.partition.mode": "nonstrict",
}

#: Name of the scratch directory (a sibling of the table directories of its database).
REWRITE_DIR = "_ferry_rewrite"

#: One partition: its values in partition-column order.
PartitionValues = tuple[Any, ...]


def create_table_sql(spec: DatasetSpec) -> str:
    """Hive DDL of the dataset's table: Parquet, partitioned by ``hive.partition_by`` only (none:
    an unpartitioned table); ``ferry_file_id`` is the last data column."""
    data = ", ".join(f"`{c.name}` {c.type.upper()}" for c in spec.table_data_columns)
    parts = ", ".join(f"`{c.name}` {c.type.upper()}" for c in spec.table_partition_columns)
    partitioned = f"PARTITIONED BY ({parts}) " if parts else ""
    return (
        f"CREATE TABLE IF NOT EXISTS `{spec.hive.database}`.`{spec.hive.table}` ({data}) "
        f"{partitioned}STORED AS PARQUET "
        f"TBLPROPERTIES ('ferry.dataset'='{spec.name}')"
    )


def partition_columns(spark: SparkSession, table: str) -> list[str]:
    """The table's partition columns, in order (empty: unpartitioned)."""
    return [c.name for c in spark.catalog.listColumns(table) if c.isPartition]


def partition_filter(columns: Sequence[str], partitions: Sequence[PartitionValues]) -> Column:
    """Spark predicate selecting exactly ``partitions`` (values in ``columns`` order), written so
    Spark prunes partitions: ``c IN (…)`` for one column, an OR of ANDs for several; ``false``
    for no partition. ``columns`` empty: ``true`` (an unpartitioned table is one partition)."""
    from functools import reduce

    from pyspark.sql import functions as F

    if not columns:
        return F.lit(True)
    if not partitions:
        return F.lit(False)
    if len(columns) == 1:
        return F.col(f"`{columns[0]}`").isin([p[0] for p in partitions])

    def one(p: PartitionValues) -> Column:
        eqs = [F.col(f"`{c}`") == F.lit(v) for c, v in zip(columns, p, strict=True)]
        return reduce(lambda a, b: a & b, eqs)

    terms = [one(p) for p in partitions]
    return reduce(lambda a, b: a | b, terms)


def distinct_partitions(df: DataFrame, columns: Sequence[str]) -> list[PartitionValues]:
    """The partitions ``df``'s rows fall in, sorted (one Spark job; ``[()]`` for an unpartitioned
    table with rows, ``[]`` without)."""
    if not columns:
        return [()] if not df.isEmpty() else []
    rows = df.select(*[f"`{c}`" for c in columns]).distinct().collect()
    return sorted((tuple(r) for r in rows), key=lambda t: tuple(str(v) for v in t))


def table_location(spark: SparkSession, table: str) -> str:
    """The table's directory URI (``hdfs://…/ferry.db/flights``, ``file:/…``)."""
    rows = spark.sql(f"DESCRIBE TABLE EXTENDED {table}").collect()
    for r in rows:
        if r["col_name"] == "Location":
            return str(r["data_type"])
    raise LookupError(f"table {table} has no Location in DESCRIBE TABLE EXTENDED")


def rewrite_root(spark: SparkSession, table: str) -> str:
    """The table's scratch directory: ``<parent of its location>/_ferry_rewrite/<table>``."""
    loc = table_location(spark, table).rstrip("/")
    return f"{loc.rsplit('/', 1)[0]}/{REWRITE_DIR}/{table}"


class _Fs:
    """The few Hadoop FileSystem calls the rewrite needs, over the session's JVM."""

    def __init__(self, spark: SparkSession) -> None:
        self._jvm: Any = spark._jvm
        self._conf = spark._jsc.hadoopConfiguration()

    def _p(self, path: str) -> tuple[Any, Any]:
        p = self._jvm.org.apache.hadoop.fs.Path(path)
        return p.getFileSystem(self._conf), p

    def children(self, path: str) -> list[str]:
        fs, p = self._p(path)
        if not fs.exists(p):
            return []
        return sorted(str(st.getPath().getName()) for st in fs.listStatus(p))

    def size(self, path: str) -> int:
        fs, p = self._p(path)
        return int(fs.getContentSummary(p).getLength())

    def rename(self, src: str, dst: str) -> None:
        fs, s = self._p(src)
        if not fs.rename(s, self._p(dst)[1]):
            raise OSError(f"rename {src} -> {dst} failed")

    def delete(self, path: str) -> None:
        fs, p = self._p(path)
        if fs.exists(p) and not fs.delete(p, True):
            raise OSError(f"delete {path} failed")


@dataclass(frozen=True)
class RewriteResult:
    """What one rewrite replaced: ``partitions`` (count), ``rows`` written, the scratch used."""

    partitions: int
    rows: int
    scratch: str


def recover_rewrites(spark: SparkSession, table: str, *, target_file_bytes: int) -> int:
    """Re-apply every committed (``ready-…``) scratch of ``table`` left by a rewrite that failed
    or crashed after materializing, oldest first, and delete unfinished (``_tmp-…``) ones.
    Returns how many were re-applied. Call only while no other rewrite of the table runs."""
    fs = _Fs(spark)
    root = rewrite_root(spark, table)
    done = 0
    for name in fs.children(root):
        if name.startswith("ready-"):
            _overwrite_from(spark, table, f"{root}/{name}", target_file_bytes=target_file_bytes)
            fs.delete(f"{root}/{name}")
            done += 1
        elif name.startswith("_tmp-"):
            fs.delete(f"{root}/{name}")
    return done


def rewrite_partitions(
    spark: SparkSession,
    table: str,
    contents: DataFrame,
    *,
    target_file_bytes: int,
    description: str | None = None,
    locks: TableLocks | None = None,
) -> RewriteResult:
    """Replace the partitions that ``contents`` has rows in with exactly those rows (in the
    table's column order), leaving every other partition untouched; see the module docstring for
    the steps and what a failure leaves. ``contents`` may read ``table`` itself. A partition's
    rows go into ``ceil(its bytes / target_file_bytes)`` Parquet files or about that.

    Returns the :class:`RewriteResult`; ``partitions == 0`` and nothing written when ``contents``
    is empty (an unpartitioned table is then NOT emptied).

    Raises:
        pyspark errors, OSError: the write or a rename failed; a ``ready-…`` scratch may remain,
            which the next rewrite of the table applies first.
        ferry.clusters.locks.TableLocked: ``locks`` given and the table stayed locked.
    """
    with locks.hold(table) if locks is not None else contextlib.nullcontext():
        return _rewrite(spark, table, contents, target_file_bytes, description)


def _rewrite(
    spark: SparkSession,
    table: str,
    contents: DataFrame,
    target_file_bytes: int,
    description: str | None,
) -> RewriteResult:
    recover_rewrites(spark, table, target_file_bytes=target_file_bytes)
    fs = _Fs(spark)
    root = rewrite_root(spark, table)
    stamp = f"{uuid.uuid1().int >> 64:016x}-{uuid.uuid4().hex[:8]}"
    tmp, ready = f"{root}/_tmp-{stamp}", f"{root}/ready-{stamp}"
    sc = spark.sparkContext
    sc.setJobDescription(description or f"ferry rewrite {table}: materialize")
    names = [f.name for f in spark.table(table).schema.fields]
    try:
        contents.select(*[f"`{n}`" for n in names]).write.mode("errorifexists").parquet(tmp)
        rows, parts = _scratch_stats(spark, table, tmp)
        if rows == 0:
            fs.delete(tmp)
            return RewriteResult(0, 0, ready)
        fs.rename(tmp, ready)
        sc.setJobDescription(description or f"ferry rewrite {table}: overwrite")
        _overwrite_from(
            spark, table, ready, target_file_bytes=target_file_bytes, stats=(rows, parts)
        )
    finally:
        sc.setJobDescription(None)  # type: ignore[arg-type]
    fs.delete(ready)
    return RewriteResult(parts, rows, ready)


def _scratch_stats(spark: SparkSession, table: str, scratch: str) -> tuple[int, int]:
    """``(rows, partitions)`` of a materialized scratch of ``table``, in ONE Spark job (a count
    per partition; an unpartitioned table with rows is one partition). The rewrite used to run
    a count after materializing, and the overwrite a count and a distinct of the same files."""
    cols = partition_columns(spark, table)
    df = spark.read.schema(spark.table(table).schema).parquet(scratch)
    if not cols:
        rows = df.count()
        return rows, 1 if rows else 0
    counts = df.groupBy(*[f"`{c}`" for c in cols]).count().collect()
    return sum(int(r["count"]) for r in counts), len(counts)


def _overwrite_from(
    spark: SparkSession,
    table: str,
    scratch: str,
    *,
    target_file_bytes: int,
    stats: tuple[int, int] | None = None,
) -> int:
    """ONE dynamic-partition ``INSERT OVERWRITE`` of ``table`` from a materialized scratch;
    returns the number of partitions it replaced. ``stats``: the scratch's ``(rows,
    partitions)`` when the caller already has them (:func:`_scratch_stats` otherwise)."""
    from pyspark.sql import functions as F

    schema = spark.table(table).schema
    cols = partition_columns(spark, table)
    df = spark.read.schema(schema).parquet(scratch)
    rows, parts = stats if stats is not None else _scratch_stats(spark, table, scratch)
    size = _Fs(spark).size(scratch)
    per_file = max(1, math.floor(rows * target_file_bytes / max(size, 1)))
    out = df.repartition(*[F.col(f"`{c}`") for c in cols]) if cols else df.coalesce(1)
    for key, value in OVERWRITE_SESSION_CONF.items():
        spark.conf.set(key, value)
    key = "spark.sql.files.maxRecordsPerFile"
    before = spark.conf.get(key)
    spark.conf.set(key, str(per_file))
    try:
        out.write.option("partitionOverwriteMode", "dynamic").insertInto(table, overwrite=True)
    finally:
        spark.conf.set(key, before or "0")
    return parts


def count_by(df: DataFrame, column: str) -> dict[str, int]:
    """``{value: rows}`` of ``df`` grouped by ``column`` (one Spark job)."""
    rows = df.groupBy(f"`{column}`").count().collect()
    return {r[0]: int(r["count"]) for r in rows}


def without(column: str, values: Sequence[str]) -> Callable[[DataFrame], DataFrame]:
    """A frame transform dropping the rows whose ``column`` is in ``values``."""
    from pyspark.sql import functions as F

    def apply(df: DataFrame) -> DataFrame:
        return df.where(~F.col(f"`{column}`").isin(list(values)) | F.col(f"`{column}`").isNull())

    return apply
