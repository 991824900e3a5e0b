"""The one piece kept from the copy-on-write layout (Ferry before the per-file layout): finishing
a partition rewrite that a load of that version left half done, before such a table is adopted
(:mod:`.adopt`).

That version materialized a rewrite's complete new partition contents in
``<parent of the table location>/_ferry_rewrite/<db>.<table>/ready-…`` and then replaced those
partitions with ONE dynamic-partition ``INSERT OVERWRITE``; a crash in between left the
``ready-…`` directory, which its next rewrite applied first. :func:`recover_rewrites` does the
same once, so no partition of an upgraded table stays missing.
"""

from __future__ import annotations

import math
from typing import TYPE_CHECKING

from ferry.clusters.spark_jobs import HadoopFileSystem
from ferry.tables.hive import partition_columns, table_location

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

#: The earlier layout's scratch directory, a sibling of the table directories of its database.
REWRITE_DIR = "_ferry_rewrite"

#: Session settings of a dynamic-partition overwrite (Spark SQL "Configuration"; HiveConf).
_OVERWRITE_CONF = {
    "spark.sql.sources.partitionOverwriteMode": "dynamic",
    "hive.exec.dynamic.partition": "true",
    "hive.exec.dynamic.partition.mode": "nonstrict",
}


def rewrite_root(spark: SparkSession, table: str) -> str:
    """The earlier layout's scratch of ``table``: ``<parent of its location>/_ferry_rewrite/
    <table>``."""
    loc = table_location(spark, table).rstrip("/")
    return f"{loc.rsplit('/', 1)[0]}/{REWRITE_DIR}/{table}"


def recover_rewrites(spark: SparkSession, table: str, *, target_file_bytes: int) -> int:
    """Re-apply every ``ready-…`` scratch of ``table`` (oldest first) and delete unfinished
    ``_tmp-…`` ones; returns how many were re-applied. Call under the table's lock.

    Raises:
        pyspark errors: the overwrite failed (the scratch stays; call again).
    """
    fs = HadoopFileSystem(spark)
    root = rewrite_root(spark, table)
    done = 0
    for name, _, _ in fs.list_dir(root):
        if name.startswith("ready-"):
            _overwrite_from(spark, table, f"{root}/{name}", target_file_bytes)
            fs.delete_quiet(f"{root}/{name}")
            done += 1
        elif name.startswith("_tmp-"):
            fs.delete_quiet(f"{root}/{name}")
    return done


def _overwrite_from(spark: SparkSession, table: str, scratch: str, target_file_bytes: int) -> None:
    """ONE dynamic-partition ``INSERT OVERWRITE`` of ``table`` from a materialized scratch, in
    files of about ``target_file_bytes`` per partition."""
    from pyspark.sql import functions as F

    schema = spark.table(table).schema
    cols = partition_columns(spark, table)
    df = spark.read.schema(schema).parquet(scratch)
    rows = df.count()
    if rows == 0:
        return
    size = sum(HadoopFileSystem(spark).list_files(scratch).values())
    per_file = max(1, math.floor(rows * target_file_bytes / max(size, 1)))
    out = df.repartition(*[F.col(f"`{c}`") for c in cols]) if cols else df.coalesce(1)
    for key, value in _OVERWRITE_CONF.items():
        spark.conf.set(key, value)
    key = "spark.sql.files.maxRecordsPerFile"  # insertInto takes no writer options
    before = spark.conf.get(key)
    spark.conf.set(key, str(per_file))
    try:
        out.write.option("partitionOverwriteMode", "dynamic").insertInto(table, overwrite=True)
    finally:
        spark.conf.set(key, before or "0")
