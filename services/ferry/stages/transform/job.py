"""Transform job (Spark on cluster B): landed CSV files → per-file Parquet in staging + rejects.

One Spark application serves many batches; one batch of files of ONE dataset is read by one CSV
scan (no JVM and no job per file). Order of calls (what :func:`run_batch` does)::

    heads  → classify_empty / check_header      (pure Python, per file, on the first 64 KiB)
    df     = read_csv(spark, paths, spec)         (PERMISSIVE, corrupt-record column, source path)
    c      = classify(df, spec)                   (derived columns + reject_reason; pure)
    valid, rejects = split(c)                     (transform(df, spec) = split(classify(df, spec)))
    counts = file_counts(c, paths)                (rows_in = rows_out + rows_rejected per file)
    write_batch(c, …)                             (temp dir, then one rename per file)

Rows are never dropped silently: every parsed record is either valid or a reject with a
``reject_reason`` (see :class:`ferry.datasets.ValidationRules`). Blank lines are not records
(Spark's CSV reader skips them) and the header line of each file is not a record.
"""

from __future__ import annotations

import uuid
from collections.abc import Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Literal

from ferry.clusters.spark_jobs import (
    FileSystemOps,
    HadoopFileSystem,
    check_file_id,
    commit_dir,
    escape_glob,
    join_path,
    path_key,
    source_key_column,
    spark_type,
    struct_for,
)
from ferry.datasets import FILE_ID_COLUMN, DatasetSpec
from ferry.datasets.precheck import HEAD_BYTES, check_header, classify_empty

if TYPE_CHECKING:
    from pyspark.sql import Column, DataFrame, SparkSession
    from pyspark.sql.types import StructType

#: Raw text of a record Spark could not parse into the schema (wrong token count, bad value).
CORRUPT_COLUMN = "_corrupt_record"
#: Source file of each row: the decoded path component
#: (see :func:`ferry.clusters.spark_jobs.path_key`).
SOURCE_COLUMN = "ferry_source_path"
#: Why a row was rejected; NULL for a valid row.
REJECT_REASON_COLUMN = "reject_reason"
#: Driver threads for the per-file HDFS calls of a batch (head reads, commits). Each call is a
#: few py4j and NameNode round trips (~40 ms a file measured by bench/bench_transform.py on the
#: local stack), latency, not CPU, so they overlap well; 4 keeps the NameNode's 8 handlers free
#: for the other services.
DRIVER_THREADS = 4


def csv_schema(spec: DatasetSpec) -> StructType:
    """Parse schema: the definition's columns in order, then :data:`CORRUPT_COLUMN` (string)."""
    from pyspark.sql import types as T

    schema = struct_for(spec.columns)
    return schema.add(T.StructField(CORRUPT_COLUMN, T.StringType(), True))


def read_csv(spark: SparkSession, paths: Sequence[str], spec: DatasetSpec) -> DataFrame:
    """Read many CSV files of one dataset in one scan.

    ``paths`` are absolute, raw (not percent-encoded) paths or URIs (``hdfs://nn/ferry/landing/…``);
    any character is allowed in a file name (glob characters are escaped, C07). Columns of the
    result: the definition's columns, :data:`CORRUPT_COLUMN`, :data:`SOURCE_COLUMN` (equal to
    ``path_key(p)`` of the path ``p`` the row came from). Mode PERMISSIVE: a malformed record
    becomes a row with :data:`CORRUPT_COLUMN` set. A UTF-8 BOM is skipped by Spark's parser (C10;
    asserted by ``tests/unit/test_jobs_transform.py``). The header line is not checked here (see
    :func:`ferry.datasets.precheck.check_header`); columns are taken by position.

    Raises:
        ValueError: ``paths`` is empty or holds a relative path.
        pyspark.errors.AnalysisException: a path does not exist (when the plan is built).
    """
    from pyspark.sql import functions as F

    if not paths:
        raise ValueError("read_csv needs at least one path")
    for p in paths:
        if not path_key(p).startswith("/"):
            raise ValueError(f"path {p!r} must be absolute")
    o = spec.csv
    df = (
        spark.read.schema(csv_schema(spec))
        .option("header", str(o.header).lower())
        .option("enforceSchema", "true")
        .option("sep", o.delimiter)
        .option("quote", o.quote)
        .option("escape", o.escape)
        .option("nullValue", o.null_value)
        .option("encoding", o.encoding)
        .option("mode", "PERMISSIVE")
        .option("columnNameOfCorruptRecord", CORRUPT_COLUMN)
        .csv([escape_glob(p) for p in paths])
    )
    return df.select("*", source_key_column(F.col("_metadata.file_path")).alias(SOURCE_COLUMN))


def _reason(spec: DatasetSpec, df: DataFrame) -> Column:
    from pyspark.sql import functions as F

    rules = spec.validation
    checks: list[tuple[Column, str]] = [(F.col(CORRUPT_COLUMN).isNotNull(), "malformed")]
    checks += [(F.col(c).isNull(), f"null:{c}") for c in rules.not_null]
    for c, r in rules.ranges.items():
        cond = F.lit(False)
        if r.min is not None:
            cond = cond | (F.col(c) < F.lit(r.min))
        if r.max is not None:
            cond = cond | (F.col(c) > F.lit(r.max))
        checks.append((F.coalesce(cond, F.lit(False)), f"range:{c}"))
    for c, values in rules.allowed_values.items():
        checks.append((F.coalesce(~F.col(c).isin(list(values)), F.lit(False)), f"not_allowed:{c}"))
    checks += [(F.col(c).isNull(), f"invalid_partition_value:{c}") for c in spec.hive.partition_by]
    expr = None
    for cond, reason in checks:
        expr = F.when(cond, F.lit(reason)) if expr is None else expr.when(cond, F.lit(reason))
    assert expr is not None
    return expr.otherwise(F.lit(None).cast("string"))


def classify(df: DataFrame, spec: DatasetSpec) -> DataFrame:
    """Add the derived columns (``try_cast`` to their type) and :data:`REJECT_REASON_COLUMN`.

    Input: the frame of :func:`read_csv` (any frame with the definition's columns,
    :data:`CORRUPT_COLUMN` and :data:`SOURCE_COLUMN`). Output: the same rows, no row added or
    removed, columns = input + derived + reason. Pure: no action is run.
    """
    from pyspark.sql import functions as F

    out = df
    for d in spec.derived:
        out = out.withColumn(d.name, F.expr(d.expr).try_cast(spark_type(d.type)))
    return out.withColumn(REJECT_REASON_COLUMN, _reason(spec, out))


def split(classified: DataFrame, spec: DatasetSpec) -> tuple[DataFrame, DataFrame]:
    """``(valid, rejects)`` of a :func:`classify` output.

    valid: the staged columns (:attr:`DatasetSpec.all_columns`) then :data:`SOURCE_COLUMN`.
    rejects: the parse columns, :data:`CORRUPT_COLUMN`, :data:`SOURCE_COLUMN`,
    :data:`REJECT_REASON_COLUMN`.
    """
    from pyspark.sql import functions as F

    reason = F.col(REJECT_REASON_COLUMN)
    valid = classified.where(reason.isNull()).select(
        *[c.name for c in spec.all_columns], SOURCE_COLUMN
    )
    rejects = classified.where(reason.isNotNull()).select(
        *[c.name for c in spec.columns], CORRUPT_COLUMN, SOURCE_COLUMN, REJECT_REASON_COLUMN
    )
    return valid, rejects


def transform(df: DataFrame, spec: DatasetSpec) -> tuple[DataFrame, DataFrame]:
    """The pure transform, tested on a few rows: ``split(classify(df, spec), spec)``."""
    return split(classify(df, spec), spec)


@dataclass(frozen=True)
class FileCounts:
    """Rows of one source file: ``rows_in = rows_out + rows_rejected``; rejects by reason."""

    rows_in: int = 0
    rows_out: int = 0
    rows_rejected: int = 0
    reject_reasons: Mapping[str, int] = field(default_factory=dict)


def file_counts(df: DataFrame, paths: Sequence[str]) -> dict[str, FileCounts]:
    """Per-file counts from a frame with :data:`SOURCE_COLUMN` and :data:`REJECT_REASON_COLUMN`
    (a :func:`classify` output, or ``valid.unionByName(rejects, allowMissingColumns=True)``).

    Keyed by the exact strings of ``paths``; a path with no row (header-only file) maps to all
    zeros. One Spark job (one aggregation).

    Raises:
        ValueError: the frame holds rows of a file not in ``paths`` (attribution failed).
    """
    from pyspark.sql import functions as F

    by_key = {path_key(p): p for p in paths}
    rows = (
        df.groupBy(SOURCE_COLUMN, REJECT_REASON_COLUMN).agg(F.count(F.lit(1)).alias("n")).collect()
    )
    acc: dict[str, dict[str, int]] = {p: {} for p in paths}
    for r in rows:
        key = r[SOURCE_COLUMN]
        if key not in by_key:
            raise ValueError(f"rows attributed to {key!r}, which is none of the batch's paths")
        acc[by_key[key]][r[REJECT_REASON_COLUMN] or ""] = int(r["n"])
    out: dict[str, FileCounts] = {}
    for p, reasons in acc.items():
        ok = reasons.pop("", 0)
        rej = sum(reasons.values())
        out[p] = FileCounts(
            rows_in=ok + rej, rows_out=ok, rows_rejected=rej, reject_reasons=reasons
        )
    return out


@dataclass(frozen=True)
class FileResult:
    """Outcome of one file of a batch.

    status ``transformed``: ``staged_path`` holds its valid rows as Parquet (an empty directory
    when ``rows_out == 0``); ``rejects_path`` its rejected rows, or ``None`` if there are none.
    status ``empty``: no data row (``reason`` = ``zero_bytes``/``blank``/``header_only``, C11);
    nothing written. status ``failed``: quarantine with ``reason`` (``header_mismatch``) and
    ``message``; nothing written.
    """

    file_id: str
    source_path: str
    status: Literal["transformed", "empty", "failed"]
    counts: FileCounts = FileCounts()
    staged_path: str | None = None
    rejects_path: str | None = None
    reason: str | None = None
    message: str | None = None


def staged_path(staging_root: str, dataset: str, file_id: str) -> str:
    """Final staging directory of one file: ``<staging_root>/<dataset>/<file_id>``."""
    return join_path(staging_root, dataset, check_file_id(file_id))


def write_batch(
    classified: DataFrame,
    spec: DatasetSpec,
    files: Mapping[str, str],
    *,
    staging_root: str,
    rejects_root: str,
    fs: FileSystemOps,
    counts: Mapping[str, FileCounts],
    batch_id: str | None = None,
) -> dict[str, FileResult]:
    """Write a batch's valid rows and rejects, then commit each file by rename.

    ``files`` maps each source path (as given to :func:`read_csv`) to its ``file_id``. Valid rows
    are written once for the whole batch to ``<staging_root>/<dataset>/_tmp/<batch_id>``,
    partitioned by ``ferry_file_id`` (one Parquet part per file), and each partition directory is
    renamed to :func:`staged_path` (an existing one is replaced, see
    :func:`ferry.clusters.spark_jobs.commit_dir`). Rejects likewise to
    ``<rejects_root>/<dataset>/<file_id>``. Only the batch's own temp directories are deleted.
    Two Spark jobs. Returns ``{file_id: FileResult}``.

    Raises:
        ValueError: a bad ``file_id`` or a path missing from ``counts``.
        TransientError: a rename failed.
    """
    from pyspark.sql import functions as F

    batch_id = batch_id or uuid.uuid4().hex
    for fid in files.values():
        check_file_id(fid)
    pairs = [x for p, fid in files.items() for x in (F.lit(path_key(p)), F.lit(fid))]
    file_id = F.create_map(*pairs)[F.col(SOURCE_COLUMN)]
    valid, rejects = split(classified, spec)
    tmp_valid = join_path(staging_root, spec.name, "_tmp", batch_id)
    tmp_rej = join_path(rejects_root, spec.name, "_tmp", batch_id)
    sc = classified.sparkSession.sparkContext
    try:
        sc.setJobDescription(f"ferry transform {spec.name}: stage {len(files)} file(s)")
        (
            valid.withColumn(FILE_ID_COLUMN, file_id)
            .drop(SOURCE_COLUMN)
            .repartition(FILE_ID_COLUMN)
            .write.partitionBy(FILE_ID_COLUMN)
            .mode("errorifexists")
            .parquet(tmp_valid)
        )
        if any(c.rows_rejected for c in counts.values()):
            sc.setJobDescription(f"ferry transform {spec.name}: rejects of {len(files)} file(s)")
            (
                rejects.withColumn(FILE_ID_COLUMN, file_id)
                .repartition(FILE_ID_COLUMN)
                .write.partitionBy(FILE_ID_COLUMN)
                .mode("errorifexists")
                .parquet(tmp_rej)
            )

        def commit(path: str, fid: str) -> FileResult:
            c = counts[path]
            part = join_path(tmp_valid, f"{FILE_ID_COLUMN}={fid}")
            if not fs.exists(part):
                fs.mkdirs(part)
            final = staged_path(staging_root, spec.name, fid)
            commit_dir(fs, part, final)
            rej_final = join_path(rejects_root, spec.name, fid)
            if c.rows_rejected:
                commit_dir(fs, join_path(tmp_rej, f"{FILE_ID_COLUMN}={fid}"), rej_final)
            else:
                fs.delete(rej_final, recursive=True)  # stale rejects of an earlier attempt
            return FileResult(
                file_id=fid,
                source_path=path,
                status="transformed",
                counts=c,
                staged_path=final,
                rejects_path=rej_final if c.rows_rejected else None,
            )

        # Files commit independently; their NameNode round trips overlap (see DRIVER_THREADS).
        with ThreadPoolExecutor(DRIVER_THREADS, thread_name_prefix="ferry-commit") as pool:
            done = list(pool.map(commit, files.keys(), files.values()))
        return {r.file_id: r for r in done}
    finally:
        sc.setJobDescription(None)  # type: ignore[arg-type]
        fs.delete(tmp_valid, recursive=True)
        fs.delete(tmp_rej, recursive=True)


def run_batch(
    spark: SparkSession,
    spec: DatasetSpec,
    files: Mapping[str, str],
    *,
    staging_root: str,
    rejects_root: str,
    fs: FileSystemOps | None = None,
) -> dict[str, FileResult]:
    """Transform one batch of landed files of one dataset; the transform service's one call.

    ``files``: ``{landing path: file_id}`` (raw absolute paths or URIs, see :func:`read_csv`).
    Empty files (C11) and files with a wrong header are classified without Spark and not read;
    the rest are read by one scan, classified, cached while the per-file counts and the two
    writes run, and committed per file. Returns ``{file_id: FileResult}`` for every file.

    Raises:
        ValueError: bad ``file_id``.
        TransientError: a rename failed (the whole batch can be retried: commits replace).
        py4j.protocol.Py4JJavaError / pyspark errors: the Spark job failed (retry the batch).
    """
    from pyspark import StorageLevel

    fs = fs or HadoopFileSystem(spark)
    results: dict[str, FileResult] = {}
    to_read: dict[str, str] = {}
    for fid in files.values():
        check_file_id(fid)
    reader = fs

    def precheck(path: str) -> tuple[str | None, str | None]:
        """(empty kind, header problem) from the file's first HEAD_BYTES (only these in memory)."""
        head = reader.read_head(path, HEAD_BYTES)
        kind = classify_empty(head, header=spec.csv.header)
        return kind, None if kind is not None else check_header(head, spec)

    with ThreadPoolExecutor(DRIVER_THREADS, thread_name_prefix="ferry-head") as pool:
        checks = list(pool.map(precheck, files))
    for (path, fid), (kind, problem) in zip(files.items(), checks, strict=True):
        if kind is not None:
            results[fid] = FileResult(file_id=fid, source_path=path, status="empty", reason=kind)
            continue
        if problem is not None:
            results[fid] = FileResult(
                file_id=fid,
                source_path=path,
                status="failed",
                reason="header_mismatch",
                message=f"{path}: {problem}",
            )
            continue
        to_read[path] = fid
    if not to_read:
        return results
    classified = classify(read_csv(spark, list(to_read), spec), spec).persist(
        StorageLevel.MEMORY_AND_DISK
    )
    try:
        counts = file_counts(classified, list(to_read))
        results |= write_batch(
            classified,
            spec,
            to_read,
            staging_root=staging_root,
            rejects_root=rejects_root,
            fs=fs,
            counts=counts,
        )
    finally:
        classified.unpersist()
    return results
