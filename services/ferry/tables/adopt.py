"""Adopting a table of the copy-on-write layout (partitioned by the dataset's keys, ``part-*``
files each holding the rows of many files, no index) into the per-file layout, in place.

No row is rewritten: one Spark job reads the ``ferry_file_id`` column of the table with each
row's data file (Parquet column pruning: the other columns are not read) and counts rows per
(data file, file id); every existing data file becomes a compacted file with a sidecar naming
its members, every file id an entry pointing at them. Loading such a file again rewrites only
the data files holding its rows (deleted outright when they hold no other file's rows). A
half-done rewrite of that layout is finished first (:mod:`.legacy`). Last, the table gets the
layout property, so this runs once; a crash before that runs it again (it only writes records).
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from typing import TYPE_CHECKING

from ferry.clusters.spark_jobs import path_key, source_key_column
from ferry.datasets.spec import FILE_ID_COLUMN
from ferry.errors import PermanentError
from ferry.tables.hive import (
    LAYOUT_FILES,
    LAYOUT_PROPERTY,
    has_per_file_layout,
    table_property,
)
from ferry.tables.index import TableIndex
from ferry.tables.journal import Catalog, commit, roll_forward
from ferry.tables.legacy import recover_rewrites
from ferry.tables.model import CompactedFile, FileEntry, Journal

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

log = logging.getLogger(__name__)

#: The generation recorded for rows found in a table of the earlier layout.
ADOPTED = "adopted"


@dataclass(frozen=True)
class Adopted:
    """What adoption found: data files, file ids, rows, ``ready-…`` rewrites finished."""

    data_files: int
    file_ids: int
    rows: int
    recovered: int


def adopt(
    spark: SparkSession,
    table: str,
    index: TableIndex,
    catalog: Catalog,
    *,
    target_file_bytes: int,
) -> Adopted | None:
    """Adopt ``table`` if it does not have the layout property yet (see the module docstring);
    ``None`` when it has. Call under the table's lock.

    Raises:
        PermanentError(reason="schema_mismatch"): the table has a layout this Ferry does not
            know (:func:`~ferry.tables.hive.has_per_file_layout`), or a data file lies outside
            the table's directory (a partition with its own location): it could not be indexed.
        pyspark errors: a Spark job failed (nothing is marked adopted; call again).
    """
    if has_per_file_layout(table, table_property(spark, table, LAYOUT_PROPERTY)):
        return None
    from pyspark.sql import functions as F

    recovered = recover_rewrites(spark, table, target_file_bytes=target_file_bytes)
    roll_forward(index, catalog)
    spark.catalog.refreshTable(table)
    root = path_key(index.location).rstrip("/") + "/"
    spark.sparkContext.setJobDescription(f"ferry adopt {table}: rows per data file and file id")
    try:
        counts = (
            spark.table(table)
            .select(
                source_key_column(F.col("_metadata.file_path")).alias("p"), F.col(FILE_ID_COLUMN)
            )
            .groupBy("p", FILE_ID_COLUMN)
            .count()
            .collect()
        )
    finally:
        spark.sparkContext.setJobDescription(None)  # type: ignore[arg-type]
    members: dict[str, dict[str, int]] = {}
    for r in counts:
        if not str(r["p"]).startswith(root):
            raise PermanentError(
                f"{table}: data file {r['p']} is outside the table's directory {root}; move it "
                "in (or drop its partition) before Ferry loads this table",
                reason="schema_mismatch",
            )
        rel = str(r["p"])[len(root) :]
        fid = r[FILE_ID_COLUMN] or ""
        members.setdefault(rel, {})[fid] = members.setdefault(rel, {}).get(fid, 0) + int(r["count"])
    held: dict[str, dict[str, int]] = {}
    for rel, m in members.items():
        for fid, n in m.items():
            if fid:
                held.setdefault(fid, {})[rel] = n
    journal = Journal(
        "adopt",
        entries={fid: FileEntry(fid, ADOPTED, {}, files) for fid, files in held.items()},
        sidecars={rel: CompactedFile(rel, m) for rel, m in members.items()},
    )
    commit(index, journal, catalog)
    spark.sql(f"ALTER TABLE {table} SET TBLPROPERTIES ('{LAYOUT_PROPERTY}'='{LAYOUT_FILES}')")
    done = Adopted(
        len(members), len(held), sum(sum(m.values()) for m in members.values()), recovered
    )
    log.warning(
        "%s adopted into the per-file layout: %d data files, %d file ids, %d rows (%d unfinished "
        "rewrite(s) of the earlier layout applied first)",
        table,
        done.data_files,
        done.file_ids,
        done.rows,
        done.recovered,
    )
    return done
