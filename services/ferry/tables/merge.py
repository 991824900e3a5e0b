"""The Spark side of compaction and of removing a file's rows from a compacted file: data files
read by path, grouped, each group written as ONE new Parquet file into a scratch directory.

A few groups (the compaction of one partition, usually one group) are each written by a job of
their own, one task, no shuffle; many groups (``ferry compact`` over many partitions) by one job:
the rows of each input file carry the number of their group (from ``_metadata.file_path``), are
repartitioned by it and written ``partitionBy`` it, so each group becomes one task and one file.
Rows of ``drop_ids`` (files being replaced or removed) are left out; rows without a file id are
kept.
"""

from __future__ import annotations

from collections.abc import Collection, Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

from ferry.clusters.spark_jobs import HadoopFileSystem, escape_glob, path_key, source_key_column
from ferry.datasets.spec import FILE_ID_COLUMN
from ferry.tables.footers import read_footers
from ferry.tables.paths import join

if TYPE_CHECKING:
    from pyspark.sql import SparkSession
    from pyspark.sql.types import StructType

#: The column numbering the groups of a merge (it names the output directories, not stored).
GROUP_COLUMN = "ferry_merge_group"
#: Up to this many groups, each is merged by a job of its own that reads only its files and
#: writes them as one task (``coalesce(1)``: no shuffle); more groups share one shuffled job.
FEW_GROUPS = 4


@dataclass(frozen=True)
class Merged:
    """One group's output: its URI and rows (from its footer)."""

    path: str
    rows: int


def merge_groups(
    spark: SparkSession,
    schema: StructType,
    groups: Mapping[int, Sequence[str]],
    scratch: str,
    *,
    drop_ids: Collection[str] = (),
    description: str = "ferry merge",
) -> dict[int, Merged]:
    """Write each group of data files (``{group: [URI, …]}``, read with the table's data
    ``schema``) as one Parquet file under ``scratch`` (which must not exist), without the rows of
    ``drop_ids``. Returns ``{group: Merged}`` for the groups with rows left (a group whose rows
    were all dropped has no output). Reads the outputs' footers for their rows.

    Raises:
        pyspark errors: the job failed (``scratch`` may hold a partial output; delete it).
    """
    from pyspark.sql import functions as F

    wanted = {path_key(p): g for g, paths in groups.items() for p in paths}
    if not wanted:
        return {}
    pairs = [x for key, g in wanted.items() for x in (F.lit(key), F.lit(g))]
    df = spark.read.schema(schema).parquet(*[escape_glob(p) for ps in groups.values() for p in ps])
    group = F.create_map(*pairs)[source_key_column(F.col("_metadata.file_path"))]
    df = df.withColumn(GROUP_COLUMN, group)
    if drop_ids:
        fid = F.col(FILE_ID_COLUMN)
        df = df.where(fid.isNull() | ~fid.isin(list(drop_ids)))
    sc = spark.sparkContext
    sc.setJobDescription(description)
    try:
        if len(groups) <= FEW_GROUPS:  # a job per group, without a shuffle
            for g in groups:
                (
                    df.where(F.col(GROUP_COLUMN) == F.lit(g))
                    .drop(GROUP_COLUMN)
                    .coalesce(1)
                    .write.mode("errorifexists")
                    .parquet(f"{scratch}/{GROUP_COLUMN}={g}")
                )
        else:
            (
                df.repartition(F.col(GROUP_COLUMN))
                .write.partitionBy(GROUP_COLUMN)
                .mode("errorifexists")
                .parquet(scratch)
            )
    finally:
        sc.setJobDescription(None)  # type: ignore[arg-type]
    fs = HadoopFileSystem(spark)
    found: dict[int, str] = {}
    for rel in fs.list_files(scratch):
        head = rel.split("/", 1)[0]
        g = int(head.split("=", 1)[1])
        if g in found:
            raise RuntimeError(f"merge group {g} was written as more than one file in {scratch}")
        found[g] = join(scratch, rel)
    footers = read_footers(spark, list(found.values()))
    return {g: Merged(p, footers[p].rows) for g, p in found.items()}
