"""Per-file counts of the transform: ``rows_in = rows_out + rows_rejected`` and the rejected rows
per reason code (:mod:`ferry.stages.transform.rows` gives each row its reasons).

:func:`ferry.stages.transform.job.write_batch` counts what it wrote: the valid rows from the
staged Parquet (:func:`staged_counts`), the rejected ones and their reasons from the rejects'
Parquet (:func:`file_counts`)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from ferry.clusters.spark_jobs import path_key
from ferry.stages.transform.rows import REASON_SEPARATOR, REJECT_REASON_COLUMN, SOURCE_COLUMN

if TYPE_CHECKING:
    from pyspark.sql import DataFrame, SparkSession


def reason_code(reason: str) -> str:
    """The code of one reason: its text before ``=`` (``type:y=abc`` → ``type:y``)."""
    return reason.split("=", 1)[0]


@dataclass(frozen=True)
class FileCounts:
    """Rows of one source file: ``rows_in = rows_out + rows_rejected``.

    ``reject_reasons``: rejected rows per reason code (:func:`reason_code`); a row with several
    reasons counts once under each, so the values may sum to more than ``rows_rejected``.
    """

    rows_in: int = 0
    rows_out: int = 0
    rows_rejected: int = 0
    reject_reasons: Mapping[str, int] = field(default_factory=dict)


def file_counts(df: DataFrame, paths: Sequence[str]) -> dict[str, FileCounts]:
    """Per-file counts from a frame with :data:`SOURCE_COLUMN` and :data:`REJECT_REASON_COLUMN`
    (a :func:`classify` output, or ``valid.unionByName(rejects, allowMissingColumns=True)``).

    Keyed by the exact strings of ``paths``; a path with no row (header-only file) maps to all
    zeros. One Spark job (one aggregation over the files and the reason codes of each row).

    Raises:
        ValueError: the frame holds rows of a file not in ``paths`` (attribution failed).
    """
    from pyspark.sql import functions as F

    by_key = {path_key(p): p for p in paths}
    codes = F.transform(
        F.split(F.col(REJECT_REASON_COLUMN), REASON_SEPARATOR),
        lambda r: F.regexp_extract(r, "^[^=]*", 0),
    )
    rows = (
        df.groupBy(F.col(SOURCE_COLUMN), codes.alias("codes"))
        .agg(F.count(F.lit(1)).alias("n"))
        .collect()
    )
    acc: dict[str, dict[str, int]] = {p: {} for p in paths}
    rows_in = dict.fromkeys(paths, 0)
    rejected = dict.fromkeys(paths, 0)
    for r in rows:
        key = r[SOURCE_COLUMN]
        if key not in by_key:
            raise ValueError(f"rows attributed to {key!r}, which is none of the batch's paths")
        p, n = by_key[key], int(r["n"])
        rows_in[p] += n
        if r["codes"] is None:
            continue
        rejected[p] += n
        for code in r["codes"]:
            acc[p][code] = acc[p].get(code, 0) + n
    return {
        p: FileCounts(
            rows_in=rows_in[p],
            rows_out=rows_in[p] - rejected[p],
            rows_rejected=rejected[p],
            reject_reasons=acc[p],
        )
        for p in paths
    }


def batch_counts(
    files: Mapping[str, str], valid: Mapping[str, int], rejected: Mapping[str, FileCounts]
) -> dict[str, FileCounts]:
    """Each file's counts from what a batch wrote: ``files`` ``{path: file_id}``, ``valid``
    ``{file_id: rows staged}`` (:func:`staged_counts`), ``rejected`` ``{path: FileCounts}`` of
    the rejects (:func:`file_counts` over the rejects' Parquet). ``rows_in = rows_out +
    rows_rejected``; a file in neither maps to all zeros. Keyed by ``files``' paths.

    Raises:
        ValueError: ``valid`` names a file id not in ``files`` (attribution failed).
    """
    unknown = set(valid) - set(files.values())
    if unknown:
        raise ValueError(f"rows staged under {sorted(unknown)}, none of the batch's file ids")
    counts = {}
    for path, fid in files.items():
        r = rejected.get(path, FileCounts())
        out = valid.get(fid, 0)
        counts[path] = FileCounts(
            rows_in=out + r.rows_rejected,
            rows_out=out,
            rows_rejected=r.rows_rejected,
            reject_reasons=r.reject_reasons,
        )
    return counts


def staged_counts(spark: SparkSession, root: str) -> dict[str, int]:
    """Rows per file id of a staging write's ``root`` (the layout of
    :func:`ferry.tables.staging.write_files`: ``ferry_stage_file=<file id>/…``).

    Read with the stage column as the only column, so Spark takes each data file's row count
    from its Parquet footer and decodes no page. A file id without rows is absent; a ``root``
    holding no data file gives ``{}``. One Spark job.

    Raises:
        pyspark.errors.AnalysisException: ``root`` does not exist.
    """
    from ferry.tables.staging import STAGE_COLUMN

    rows = spark.read.schema(f"`{STAGE_COLUMN}` STRING").parquet(root).groupBy(STAGE_COLUMN)
    return {r[0]: int(r[1]) for r in rows.count().collect()}


def shared_counts(spark: SparkSession, root: str) -> dict[str, dict[str, int]]:
    """Rows per data file and file id of a shared write's ``root`` (the layout of
    :func:`ferry.tables.staging.write_shared`): ``{path relative to root: {file_id: rows}}``.

    Reads only ``ferry_file_id`` (dictionary-encoded: a batch's few ids) and each row's file
    path (``_metadata.file_path``), one Spark job; a ``root`` holding no data file gives ``{}``.

    Raises:
        pyspark.errors.AnalysisException: ``root`` does not exist.
        ValueError: a row without a file id (attribution failed).
    """
    from pyspark.sql import functions as F

    from ferry.clusters.spark_jobs import source_key_column
    from ferry.datasets.spec import FILE_ID_COLUMN

    prefix = path_key(root).rstrip("/") + "/"
    df = spark.read.schema(f"`{FILE_ID_COLUMN}` STRING").parquet(root)
    rows = (
        df.select(
            source_key_column(F.col("_metadata.file_path")).alias("path"), F.col(FILE_ID_COLUMN)
        )
        .groupBy("path", FILE_ID_COLUMN)
        .count()
        .collect()
    )
    out: dict[str, dict[str, int]] = {}
    for path, fid, n in rows:
        if fid is None or not path.startswith(prefix):
            raise ValueError(f"{path}: {n} staged row(s) without a file id of the batch")
        out.setdefault(path[len(prefix) :], {})[fid] = int(n)
    return out
