"""Hive tables partitioned by business keys: DDL, the layout property, table metadata and
the metastore calls of a per-file table (:mod:`ferry.tables`): registering and
dropping partitions, each as ONE statement for any number of partitions.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING

from ferry.datasets.spec import DatasetSpec
from ferry.errors import PermanentError
from ferry.tables.journal import Catalog, Values
from ferry.tables.paths import partition_spec_sql

if TYPE_CHECKING:
    from pyspark.sql import DataFrame, SparkSession

#: Table property naming the layout of a table Ferry loads (docs/hive-layout.md); a table
#: without it is of an earlier layout and is adopted on its first load.
LAYOUT_PROPERTY = "ferry.layout"
#: Its value for the per-file layout (:mod:`ferry.tables`).
LAYOUT_FILES = "files-1"
#: Most partitions in one ``ALTER TABLE … ADD/DROP PARTITION`` statement.
PARTITIONS_PER_STATEMENT = 1000


def create_table_sql(spec: DatasetSpec) -> str:
    """Hive DDL of the dataset's table: Parquet, partitioned by ``hive.partition_by`` only (none:
    an unpartitioned table); ``ferry_file_id`` and ``ferry_source_path`` are the last data
    columns; the table properties name the dataset and the per-file layout."""
    data = ", ".join(f"`{c.name}` {c.type.upper()}" for c in spec.table_data_columns)
    parts = ", ".join(f"`{c.name}` {c.type.upper()}" for c in spec.table_partition_columns)
    partitioned = f"PARTITIONED BY ({parts}) " if parts else ""
    return (
        f"CREATE TABLE IF NOT EXISTS `{spec.hive.database}`.`{spec.hive.table}` ({data}) "
        f"{partitioned}STORED AS PARQUET "
        f"TBLPROPERTIES ('ferry.dataset'='{spec.name}', '{LAYOUT_PROPERTY}'='{LAYOUT_FILES}')"
    )


def partition_columns(spark: SparkSession, table: str) -> list[str]:
    """The table's partition columns, in order (empty: unpartitioned)."""
    return [c.name for c in spark.catalog.listColumns(table) if c.isPartition]


def table_location(spark: SparkSession, table: str) -> str:
    """The table's directory URI (``hdfs://…/ferry.db/flights``, ``file:/…``)."""
    rows = spark.sql(f"DESCRIBE TABLE EXTENDED {table}").collect()
    for r in rows:
        if r["col_name"] == "Location":
            return str(r["data_type"])
    raise LookupError(f"table {table} has no Location in DESCRIBE TABLE EXTENDED")


def count_by(df: DataFrame, column: str) -> dict[str, int]:
    """``{value: rows}`` of ``df`` grouped by ``column`` (one Spark job)."""
    rows = df.groupBy(f"`{column}`").count().collect()
    return {r[0]: int(r["count"]) for r in rows}


def has_per_file_layout(table: str, layout: str | None) -> bool:
    """Whether ``table``, whose ``ferry.layout`` property is ``layout``, has the per-file layout
    (``True``) or an earlier one with no property (``False``: adopt it).

    Raises:
        PermanentError(reason="schema_mismatch"): any other value: a layout this Ferry does not
            know, written by a newer one; adopting or rewriting it would corrupt the table, so
            nothing is done to it.
    """
    if layout is None:
        return False
    if layout == LAYOUT_FILES:
        return True
    raise PermanentError(
        f"{table}: table property {LAYOUT_PROPERTY}={layout!r} is a layout this Ferry does not "
        f"know (it writes {LAYOUT_FILES!r}): a newer Ferry wrote it; load it with that version",
        reason="schema_mismatch",
    )


def table_fingerprint(spark: SparkSession, table: str) -> str | None:
    """What the metastore holds of ``table`` (``db.table``) that a load depends on, as one
    string: its location, its schema (partition columns included, in order) and its layout
    property (``ferry.layout``);
    ``None`` when the table does not exist. ONE metastore call (``get_table``), through the
    session's external catalog: no statement is parsed or planned."""
    from pyspark.errors import AnalysisException

    db, name = table.split(".", 1)
    ext = spark._jsparkSession.sharedState().externalCatalog()
    try:
        t = ext.getTable(db.strip("`"), name.strip("`"))
    except AnalysisException as exc:  # pyspark's converted NoSuchTable/DatabaseException
        if exc.getCondition() in ("TABLE_OR_VIEW_NOT_FOUND", "SCHEMA_NOT_FOUND"):
            return None
        raise
    location = t.storage().locationUri()
    layout = t.properties().get(LAYOUT_PROPERTY)
    return "\n".join(
        (
            location.get().toString() if location.isDefined() else "",
            t.schema().json(),
            t.partitionColumnNames().mkString(","),
            layout.get() if layout.isDefined() else "",
        )
    )


def table_property(spark: SparkSession, table: str, key: str) -> str | None:
    """One table property (``SHOW TBLPROPERTIES``), ``None`` when the table does not have it."""
    for r in spark.sql(f"SHOW TBLPROPERTIES {table}").collect():
        if r["key"] == key:
            return str(r["value"])
    return None


def add_partitions(
    spark: SparkSession, table: str, columns: Sequence[str], partitions: Sequence[Values]
) -> None:
    """Register ``partitions`` (string values, ``None``: the default partition) in ONE
    ``ALTER TABLE … ADD IF NOT EXISTS PARTITION (…) PARTITION (…)`` (per
    :data:`PARTITIONS_PER_STATEMENT`). The metastore names each partition's directory as Spark's
    ``partitionBy`` does (:mod:`ferry.tables.paths`)."""
    unique = list(dict.fromkeys(tuple(p) for p in partitions))
    for i in range(0, len(unique), PARTITIONS_PER_STATEMENT):
        specs = " ".join(
            partition_spec_sql(columns, p) for p in unique[i : i + PARTITIONS_PER_STATEMENT]
        )
        spark.sql(f"ALTER TABLE {table} ADD IF NOT EXISTS {specs}")


def drop_partitions(
    spark: SparkSession, table: str, columns: Sequence[str], partitions: Sequence[Values]
) -> None:
    """Drop ``partitions`` in ONE ``ALTER TABLE … DROP IF EXISTS PARTITION (…), …``."""
    unique = list(dict.fromkeys(tuple(p) for p in partitions))
    for i in range(0, len(unique), PARTITIONS_PER_STATEMENT):
        specs = ", ".join(
            partition_spec_sql(columns, p) for p in unique[i : i + PARTITIONS_PER_STATEMENT]
        )
        spark.sql(f"ALTER TABLE {table} DROP IF EXISTS {specs}")


def catalog(spark: SparkSession, table: str, columns: Sequence[str]) -> Catalog:
    """The :class:`~ferry.tables.journal.Catalog` of ``table``."""
    cols = tuple(columns)
    add: Callable[[Sequence[Values]], None] = lambda ps: add_partitions(spark, table, cols, ps)  # noqa: E731
    drop: Callable[[Sequence[Values]], None] = lambda ps: drop_partitions(spark, table, cols, ps)  # noqa: E731
    return Catalog(cols, add, drop)
