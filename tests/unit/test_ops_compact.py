"""``ferry compact`` / ``migrate-layout`` / ``unload`` against a real Hive-enabled local session."""

from __future__ import annotations

import contextlib
import datetime as dt

import pytest
from pyspark.sql import Row
from pyspark.testing import assertDataFrameEqual
from tests.unit.test_jobs_load import stage, tiny_spec

from ferry.clusters.hive import count_by, partition_columns
from ferry.ops.compact import LayoutError, compact, migrate_layout, parse_partition, unload
from ferry.stages.load.job import ensure_table, load_files

D1, D2 = dt.date(2013, 1, 1), dt.date(2013, 1, 2)
MB = 1024 * 1024


def test_compact_keeps_rows_exactly_and_reduces_files(spark, unique_db):
    spec = tiny_spec(unique_db)
    table = spec.hive.full_name
    ensure_table(spark, spec)
    for i in range(4):  # four appends: four small files in day 1, one in day 2
        spark.sql(
            f"INSERT INTO {table} PARTITION (day='2013-01-01') VALUES ({i}, 'k', 'f{i}', NULL)"
        )
    spark.sql(f"INSERT INTO {table} PARTITION (day='2013-01-02') VALUES (9, 'k', 'f9', NULL)")
    before = sorted(map(tuple, spark.table(table).collect()))
    report = compact(spark, spec, target_file_bytes=128 * MB)
    assert {p: (s.files, report.after[p].files) for p, s in report.before.items()} == {
        (D1,): (4, 1)
    }
    assert report.rows == 4
    assert sorted(map(tuple, spark.table(table).collect())) == before
    again = compact(spark, spec, [parse_partition(spec, "day=2013-01-01")], target_file_bytes=MB)
    assert again.before == {} and again.rows == 0  # nothing left to compact


def test_parse_partition_needs_every_partition_column(specs):
    assert parse_partition(specs["flights"], "flight_date=2013-01-01") == {
        "flight_date": "2013-01-01"
    }
    with pytest.raises(LayoutError, match="expected k=v"):
        parse_partition(specs["flights"], "day=1")


def old_layout_table(spark, spec) -> str:
    """The earlier layout: ferry_file_id the last partition column; 3 files over 2 days."""
    table = spec.hive.full_name
    spark.sql(f"CREATE DATABASE IF NOT EXISTS {spec.hive.database}")
    spark.sql(
        f"CREATE TABLE {table} (id INT, kind STRING) PARTITIONED BY (day DATE, "
        f"ferry_file_id STRING) STORED AS PARQUET"
    )
    spark.sql(
        f"INSERT INTO {table} VALUES (1, 'a', DATE'2013-01-01', 'fa'), "
        f"(2, 'a', DATE'2013-01-02', 'fa'), (3, 'b', DATE'2013-01-01', 'fb'), "
        f"(4, 'b', DATE'2013-01-01', 'fb'), (5, 'c', DATE'2013-01-02', 'fc')"
    )
    return table


def test_migrate_layout_keeps_rows_per_file_id_and_swaps(spark, unique_db, tmp_path):
    spec = tiny_spec(unique_db)
    table = old_layout_table(spark, spec)
    with pytest.raises(Exception, match="old per-file layout: run `ferry migrate-layout"):
        ensure_table(spark, spec)
    report = migrate_layout(spark, spec, target_file_bytes=128 * MB)
    assert report.rows == {"fa": 2, "fb": 2, "fc": 1}
    assert (report.partitions_before, report.partitions_after) == (4, 2)
    assert partition_columns(spark, table) == ["day"]
    assert count_by(spark.table(table), "ferry_file_id") == {"fa": 2, "fb": 2, "fc": 1}
    assert count_by(spark.table(f"{table}__ferry_old"), "ferry_file_id") == report.rows
    ensure_table(spark, spec)  # the load accepts it now, and loads into it
    d = stage(spark, tmp_path / "d", [(6, "d", D2)])
    assert load_files(spark, spec, {"d": d, "fb": stage(spark, tmp_path / "b", [(3, "b", D1)])})
    assert count_by(spark.table(table), "ferry_file_id") == {"fa": 2, "fb": 1, "fc": 1, "d": 1}


def test_migrate_layout_refuses_to_swap_when_counts_differ(spark, unique_db):
    spec = tiny_spec(unique_db)
    table = old_layout_table(spark, spec)
    with pytest.raises(LayoutError, match=r"refused: rows per file id differ \{'fc': \(1, 0\)\}"):
        migrate_layout(
            spark,
            spec,
            target_file_bytes=MB,
            check=lambda after: {k: v for k, v in after.items() if k != "fc"},
        )
    assert partition_columns(spark, table) == ["day", "ferry_file_id"]
    assert not spark.catalog.tableExists(f"{table}__ferry_new")
    assert not spark.catalog.tableExists(f"{table}__ferry_old")
    current = tiny_spec(unique_db + "x")
    ensure_table(spark, current)
    with pytest.raises(LayoutError, match="is not in the old layout"):
        migrate_layout(spark, current, target_file_bytes=MB)


def test_unload_removes_only_that_files_rows_and_empty_partitions(spark, unique_db, tmp_path):
    spec = tiny_spec(unique_db)
    table = spec.hive.full_name
    a = stage(spark, tmp_path / "a", [(1, "a", D1), (2, "a", D2)])
    b = stage(spark, tmp_path / "b", [(3, "b", D1)])
    load_files(spark, spec, {"a": a, "b": b})
    assert unload(spark, spec, ["a", "zz"], target_file_bytes=MB) == {"a": 2, "zz": 0}
    assertDataFrameEqual(
        spark.table(table), [Row(id=3, kind="b", ferry_file_id="b", ferry_source_path=None, day=D1)]
    )
    parts = [r.partition for r in spark.sql(f"SHOW PARTITIONS {table}").collect()]
    assert parts == ["day=2013-01-01"]


class RecordingLocks:
    """Stands in for ferry.clusters.locks.TableLocks: records when each table's lock is held."""

    def __init__(self, spark, table: str) -> None:  # type: ignore[no-untyped-def]
        self.spark, self.table, self.log = spark, table, []  # type: ignore[var-annotated]

    @contextlib.contextmanager
    def hold(self, table: str):  # type: ignore[no-untyped-def]
        self.log.append(("enter", table, self.rows()))
        yield
        self.log.append(("exit", table, self.rows()))

    def rows(self) -> int:
        return int(self.spark.table(self.table).count())


def test_load_and_unload_hold_the_tables_lock_around_their_whole_rewrite(
    spark, unique_db, tmp_path
):
    spec = tiny_spec(unique_db)
    table = spec.hive.full_name
    ensure_table(spark, spec)
    locks = RecordingLocks(spark, table)
    a = stage(spark, tmp_path / "a", [(1, "a", D1), (2, "a", D2)])
    assert load_files(spark, spec, {"a": a}, locks=locks) == {"a": 2}  # type: ignore[arg-type]
    assert unload(spark, spec, ["a"], target_file_bytes=MB, locks=locks) == {"a": 2}  # type: ignore[arg-type]
    # Rows change only while the lock is held: 0 → 2 inside the load, 2 → 0 inside the unload.
    assert locks.log == [
        ("enter", table, 0),
        ("exit", table, 2),
        ("enter", table, 2),
        ("exit", table, 0),
    ]
