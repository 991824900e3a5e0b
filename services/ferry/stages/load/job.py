"""Load job (Spark on cluster A, Hive-enabled session): staged Parquet of files → Hive table.

Order of calls (what :func:`load_files` does)::

    ensure_table(spark, spec)                    (CREATE DATABASE/TABLE IF NOT EXISTS, then check)
    df = read_staged(spark, spec, files)         (one scan; adds ferry_file_id per file)
    aligned = align_to_table(df, table_schema)   (by name, table order; C12: fail before writing)
    insert_overwrite(aligned, table)             (dynamic partition overwrite: C13)
    rows_loaded(spark, spec, file_ids)           (reconcile from the table itself)

Idempotency per file (case C13): ``ferry_file_id`` is the table's LAST partition column, so every
file owns its own partitions (``flight_date=…/ferry_file_id=…``); an ``INSERT OVERWRITE`` with
dynamic partition overwrite replaces exactly the partitions present in the new data, each one
atomically, and leaves other files' partitions in the same date untouched. Loading a file N times
leaves one copy. Limitation: if a re-load of the same ``file_id`` produces rows in FEWER partitions
than before (not possible for unchanged content and definition), the old extra partitions stay.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import TYPE_CHECKING

from ferry.clusters.spark_jobs import (
    check_file_id,
    escape_glob,
    path_key,
    source_key_column,
    struct_for,
)
from ferry.core.errors import PermanentError
from ferry.datasets import FILE_ID_COLUMN, DatasetSpec

if TYPE_CHECKING:
    from pyspark.sql import DataFrame, SparkSession
    from pyspark.sql.types import StructType

#: Session settings the load needs; :func:`insert_overwrite` sets them on the session itself.
#: Sources: Spark SQL "Configuration" (spark.sql.sources.partitionOverwriteMode) and Hive's
#: HiveConf (hive.exec.dynamic.partition, hive.exec.dynamic.partition.mode).
LOAD_SESSION_CONF: Mapping[str, str] = {
    "spark.sql.sources.partitionOverwriteMode": "dynamic",
    "hive.exec.dynamic.partition": "true",
    "hive.exec.dynamic.partition.mode": "nonstrict",
}


def staged_schema(spec: DatasetSpec) -> StructType:
    """Schema of a staged Parquet file: :attr:`DatasetSpec.all_columns` in order."""
    return struct_for(spec.all_columns)


def table_schema(spec: DatasetSpec) -> StructType:
    """Expected schema of the Hive table: :attr:`DatasetSpec.table_columns` in table order."""
    return struct_for(spec.table_columns)


def create_table_sql(spec: DatasetSpec) -> str:
    """Hive DDL of the dataset's table: Parquet, partitioned by the partition columns and then
    ``ferry_file_id``."""
    data = ", ".join(f"`{c.name}` {c.type.upper()}" for c in spec.table_data_columns)
    parts = ", ".join(f"`{c.name}` {c.type.upper()}" for c in spec.table_partition_columns)
    return (
        f"CREATE TABLE IF NOT EXISTS `{spec.hive.database}`.`{spec.hive.table}` ({data}) "
        f"PARTITIONED BY ({parts}) STORED AS PARQUET "
        f"TBLPROPERTIES ('ferry.dataset'='{spec.name}')"
    )


def schema_differences(actual: StructType, expected: StructType) -> list[str]:
    """Differences between two schemas matched BY NAME (case-insensitive, as Hive), ignoring
    nullability; empty if they match. Each item names the column."""
    have = {f.name.lower(): f for f in actual.fields}
    want = {f.name.lower(): f for f in expected.fields}
    out = [
        f"missing column {n!r} ({f.dataType.simpleString()})"
        for n, f in want.items()
        if n not in have
    ]
    out += [
        f"unexpected column {n!r} ({f.dataType.simpleString()})"
        for n, f in have.items()
        if n not in want
    ]
    for n, f in want.items():
        if n in have and have[n].dataType.simpleString() != f.dataType.simpleString():
            out.append(
                f"column {n!r} has type {have[n].dataType.simpleString()}, "
                f"table expects {f.dataType.simpleString()}"
            )
    return out


def ensure_table(spark: SparkSession, spec: DatasetSpec) -> StructType:
    """Create the database and table if missing; return the table's schema.

    Raises:
        PermanentError(reason="schema_mismatch"): the existing table's columns differ from the
            definition (message names table and columns) or its partition columns differ.
    """
    spark.sql(f"CREATE DATABASE IF NOT EXISTS `{spec.hive.database}`")
    spark.sql(create_table_sql(spec))
    name = spec.hive.full_name
    schema = spark.table(name).schema
    problems = schema_differences(schema, table_schema(spec))
    parts = [c.name for c in spark.catalog.listColumns(name) if c.isPartition]
    want_parts = [c.name for c in spec.table_partition_columns]
    if parts != want_parts:
        problems.append(f"partition columns are {parts}, definition expects {want_parts}")
    if problems:
        raise PermanentError(
            f"table {name} does not match dataset {spec.name!r}: " + "; ".join(problems),
            reason="schema_mismatch",
        )
    return schema


def align_to_table(df: DataFrame, schema: StructType, *, table: str = "the table") -> DataFrame:
    """``df`` with its columns matched BY NAME to ``schema`` and selected in ``schema``'s order,
    renamed to the table's spelling (case C12; house style rule 5: ``insertInto`` is positional).

    Types must be equal (no implicit cast); nullability is ignored. Nothing is written.

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


def read_staged(spark: SparkSession, spec: DatasetSpec, files: Mapping[str, str]) -> DataFrame:
    """Rows of several staged files (``{file_id: staged directory}``) in one scan, with a
    ``ferry_file_id`` column (string) last. The Parquet schema is read from the files (merged), so
    :func:`align_to_table` sees what was really staged; a batch of only empty directories (files
    whose rows were all rejected) yields an empty frame of :func:`staged_schema`.

    Raises:
        ValueError: no files, or a bad ``file_id``.
        pyspark.errors.AnalysisException: a directory does not exist.
    """
    from pyspark.errors import AnalysisException
    from pyspark.sql import functions as F

    if not files:
        raise ValueError("read_staged needs at least one file")
    for fid in files:
        check_file_id(fid)
    dirs = [p.rstrip("/") for p in files.values()]
    try:
        df = spark.read.option("mergeSchema", "true").parquet(*[escape_glob(d) for d in dirs])
    except AnalysisException as exc:
        if "UNABLE_TO_INFER_SCHEMA" not in str(exc):
            raise
        empty = spark.createDataFrame([], staged_schema(spec))
        return empty.withColumn(FILE_ID_COLUMN, F.lit(None).cast("string"))
    pairs = [x for fid, d in files.items() for x in (F.lit(path_key(d)), F.lit(fid))]
    parent = F.regexp_replace(source_key_column(F.col("_metadata.file_path")), "/[^/]*$", "")
    return df.withColumn(FILE_ID_COLUMN, F.create_map(*pairs)[parent])


def insert_overwrite(df: DataFrame, table: str) -> None:
    """``INSERT OVERWRITE`` ``df`` (already aligned) into the partitioned ``table``, replacing only
    the partitions present in ``df`` (sets :data:`LOAD_SESSION_CONF` on the session first)."""
    spark = df.sparkSession
    for key, value in LOAD_SESSION_CONF.items():
        spark.conf.set(key, value)
    df.write.option("partitionOverwriteMode", "dynamic").insertInto(table, overwrite=True)


def rows_loaded(spark: SparkSession, spec: DatasetSpec, file_ids: Iterable[str]) -> dict[str, int]:
    """Rows of each file now in the Hive table (partition-pruned on ``ferry_file_id``)."""
    from pyspark.sql import functions as F

    ids = list(file_ids)
    out = dict.fromkeys(ids, 0)
    rows = (
        spark.table(spec.hive.full_name)
        .where(F.col(FILE_ID_COLUMN).isin(ids))
        .groupBy(FILE_ID_COLUMN)
        .count()
        .collect()
    )
    out |= {r[FILE_ID_COLUMN]: int(r["count"]) for r in rows}
    return out


def load_files(spark: SparkSession, spec: DatasetSpec, files: Mapping[str, str]) -> dict[str, int]:
    """Load staged files (``{file_id: directory on cluster A}``) into the dataset's Hive table;
    the load service's one call. Idempotent per file (C13). Returns ``{file_id: rows in the table}``
    read back from the table after the write.

    Raises:
        PermanentError(reason="schema_mismatch"): staged columns or the table do not match the
            definition (nothing written).
        ValueError: empty ``files`` or a bad ``file_id``.
        pyspark errors: the Spark job failed (retry: the load is idempotent).
    """
    schema = ensure_table(spark, spec)
    aligned = align_to_table(read_staged(spark, spec, files), schema, table=spec.hive.full_name)
    sc = spark.sparkContext
    sc.setJobDescription(f"ferry load {spec.name}: {len(files)} file(s) into {spec.hive.full_name}")
    try:
        insert_overwrite(aligned, spec.hive.full_name)
    finally:
        sc.setJobDescription(None)  # type: ignore[arg-type]
    return rows_loaded(spark, spec, files)
