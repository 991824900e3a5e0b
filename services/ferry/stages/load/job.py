"""Load job (Spark on cluster A, Hive-enabled session): staged Parquet of files → Hive table.

Order of calls (what :func:`load_files` does)::

    ensure_table(spark, spec)                    (CREATE DATABASE/TABLE IF NOT EXISTS, then check)
    df = read_staged(spark, spec, files, sources) (one scan; adds ferry_file_id and
                                                  ferry_source_path per file)
    aligned = align_to_table(df, table_schema)   (by name, table order; C12: fail before writing)
    touched = partitions of the new rows         (one small job)
    rewrite_partitions(table, kept ∪ new)        (ferry.clusters.hive: materialize, then ONE
                                                  dynamic-partition INSERT OVERWRITE: C13)
    rows_loaded(spark, spec, file_ids, touched)  (reconcile from the table itself)

Layout and idempotency per file (case C13, docs/field-cases.md; docs/hive-layout.md): the table is
partitioned by the dataset's own partition columns only, ``ferry_file_id`` is an ordinary column.
A batch rewrites only the partitions its new rows fall in; each becomes its current rows minus the
rows of the batch's file ids, plus the batch's rows. Loading a file N times leaves one copy; other
files' rows and other partitions stay as they were. Limitation (as with the earlier
partition-per-file layout): rows of a re-loaded ``file_id`` in a partition its new rows do not
reach (impossible for unchanged content and definition) stay; ``ferry unload`` removes them.
One load per table at a time (see :mod:`ferry.clusters.hive`).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from typing import TYPE_CHECKING

from ferry.clusters.hive import (
    PartitionValues,
    create_table_sql,
    distinct_partitions,
    partition_filter,
    rewrite_partitions,
    without,
)
from ferry.clusters.spark_jobs import (
    check_file_id,
    escape_glob,
    path_key,
    source_key_column,
    struct_for,
)
from ferry.core.errors import PermanentError
from ferry.datasets.spec import FILE_ID_COLUMN, SOURCE_PATH_COLUMN, DatasetSpec

if TYPE_CHECKING:
    from pyspark.sql import DataFrame, SparkSession
    from pyspark.sql.types import StructType

    from ferry.clusters.locks import TableLocks

#: Default size a Parquet file written by the load aims at (``load.target_file_mb``), MiB.
DEFAULT_TARGET_FILE_MB = 128


def staged_schema(spec: DatasetSpec) -> StructType:
    """Schema of a staged Parquet file: :attr:`DatasetSpec.all_columns` in order."""
    return struct_for(spec.all_columns)


def table_schema(spec: DatasetSpec) -> StructType:
    """Expected schema of the Hive table: :attr:`DatasetSpec.table_columns` in table order."""
    return struct_for(spec.table_columns)


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
    renamed to the table's spelling (case C12, docs/field-cases.md: ``insertInto`` matches by
    position).

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


def read_staged(
    spark: SparkSession,
    spec: DatasetSpec,
    files: Mapping[str, str],
    sources: Mapping[str, str] | None = None,
) -> DataFrame:
    """Rows of several staged files (``{file_id: staged directory}``) in one scan, with the
    columns ``ferry_file_id`` and ``ferry_source_path`` (strings) last: the file id, and its NAS
    name from ``sources`` (``{file_id: manifest source_path}``; NULL for a file not in it). The
    Parquet schema is read from the files (merged), so
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
        return empty.withColumn(FILE_ID_COLUMN, F.lit(None).cast("string")).withColumn(
            SOURCE_PATH_COLUMN, F.lit(None).cast("string")
        )
    pairs = [x for fid, d in files.items() for x in (F.lit(path_key(d)), F.lit(fid))]
    parent = F.regexp_replace(source_key_column(F.col("_metadata.file_path")), "/[^/]*$", "")
    df = df.withColumn(FILE_ID_COLUMN, F.create_map(*pairs)[parent])
    known = {fid: path for fid, path in (sources or {}).items() if fid in files}
    if not known:
        return df.withColumn(SOURCE_PATH_COLUMN, F.lit(None).cast("string"))
    names = [x for fid, path in known.items() for x in (F.lit(fid), F.lit(path))]
    return df.withColumn(SOURCE_PATH_COLUMN, F.create_map(*names)[F.col(FILE_ID_COLUMN)])


def rows_loaded(
    spark: SparkSession,
    spec: DatasetSpec,
    file_ids: Iterable[str],
    partitions: Sequence[PartitionValues] | None = None,
) -> dict[str, int]:
    """Rows of each file now in the Hive table, ``{file_id: rows}`` (0 for a file without rows),
    counted by a filter on the ``ferry_file_id`` column; ``partitions`` (values in
    ``hive.partition_by`` order) restricts the scan to those partitions (pruned), ``None`` scans
    the whole table."""
    from pyspark.sql import functions as F

    ids = list(file_ids)
    out = dict.fromkeys(ids, 0)
    df = spark.table(spec.hive.full_name).where(F.col(FILE_ID_COLUMN).isin(ids))
    if partitions is not None:
        df = df.where(partition_filter(spec.hive.partition_by, partitions))
    rows = df.groupBy(FILE_ID_COLUMN).count().collect()
    out |= {r[FILE_ID_COLUMN]: int(r["count"]) for r in rows}
    return out


def load_files(
    spark: SparkSession,
    spec: DatasetSpec,
    files: Mapping[str, str],
    *,
    target_file_mb: float = DEFAULT_TARGET_FILE_MB,
    locks: TableLocks | None = None,
    sources: Mapping[str, str] | None = None,
) -> dict[str, int]:
    """Load staged files (``{file_id: directory on cluster A}``) into the dataset's Hive table,
    each row carrying its ``ferry_file_id`` and ``ferry_source_path`` (``sources``: ``{file_id:
    the manifest's source_path}``, the exact NAS name; NULL without it);
    the load service's one call. Idempotent per file (C13): the partitions the files' rows fall in
    are rewritten as (their rows minus these files' rows) plus these files' rows, in files of about
    ``target_file_mb`` MiB, holding the table's lock (``locks``) while rewriting. Returns
    ``{file_id: rows in the table}`` read back from the rewritten partitions after the write.

    Raises:
        PermanentError(reason="schema_mismatch"): staged columns or the table do not match the
            definition, or the table has the old per-file layout (nothing written).
        ValueError: empty ``files`` or a bad ``file_id``.
        pyspark errors, OSError: the Spark job failed (retry: the load is idempotent, and the
            next load of the table first completes a rewrite this one left half done).
    """
    schema = ensure_table(spark, spec)
    table = spec.hive.full_name
    spark.catalog.refreshTable(table)  # the session's file listing may predate other writers
    new = align_to_table(read_staged(spark, spec, files, sources), schema, table=table)
    pcols = list(spec.hive.partition_by)
    touched = distinct_partitions(new, pcols)
    if touched:
        kept = without(FILE_ID_COLUMN, list(files))(
            spark.table(table).where(partition_filter(pcols, touched))
        )
        rewrite_partitions(
            spark,
            table,
            kept.unionByName(new),
            target_file_bytes=int(target_file_mb * 1024 * 1024),
            description=f"ferry load {spec.name}: {len(files)} file(s), "
            f"{len(touched)} partition(s) of {table}",
            locks=locks,
        )
    return rows_loaded(spark, spec, files, touched)
