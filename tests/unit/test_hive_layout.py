"""The business-key layout against a real Hive-enabled local session: only touched partitions are
rewritten, one copy per file after re-loads, few files per partition, and what a failure between
materializing and overwriting leaves (docs/hive-layout.md)."""

from __future__ import annotations

import datetime as dt

import pytest
from pyspark.sql import Row
from pyspark.sql import functions as F
from pyspark.testing import assertDataFrameEqual
from tests.unit.test_jobs_load import stage, tiny_spec

from ferry.clusters import hive
from ferry.clusters.spark import session_conf
from ferry.settings import Settings
from ferry.stages.load.job import load_files, rows_loaded

D1, D2, D3 = dt.date(2013, 1, 1), dt.date(2013, 1, 2), dt.date(2013, 1, 3)


def files_by_day(spark, table) -> dict[dt.date, list[str]]:
    rows = spark.table(table).select("day", F.input_file_name().alias("f")).distinct().collect()
    out: dict[dt.date, list[str]] = {}
    for r in rows:
        out.setdefault(r.day, []).append(r.f)
    return {k: sorted(v) for k, v in out.items()}


def loaded(file_id: str, rows: list[tuple[int, str, dt.date]]) -> list[Row]:
    """The table rows of file ``file_id`` staged with ``rows`` (id, kind, day): its id attached,
    no source path."""
    return [
        Row(id=i, kind=k, ferry_file_id=file_id, ferry_source_path=None, day=d) for i, k, d in rows
    ]


def test_batch_touching_two_of_three_partitions_leaves_the_third_untouched(
    spark, unique_db, tmp_path
):
    spec = tiny_spec(unique_db)
    table = spec.hive.full_name
    rows_a, rows_b = [(1, "a", D1), (2, "a", D2), (3, "a", D3)], [(4, "b", D3)]
    a, b = stage(spark, tmp_path / "a", rows_a), stage(spark, tmp_path / "b", rows_b)
    assert load_files(spark, spec, {"a": a, "b": b}) == {"a": 3, "b": 1}
    before = files_by_day(spark, table)
    rows_c = [(5, "c", D1), (6, "c", D2), (7, "c", D2)]
    c = stage(spark, tmp_path / "c", rows_c)
    assert load_files(spark, spec, {"c": c}) == {"c": 3}
    after = files_by_day(spark, table)
    assert after[D3] == before[D3]  # same Parquet file: the partition was not rewritten
    assert after[D1] != before[D1] and after[D2] != before[D2]
    assert [len(after[d]) for d in (D1, D2, D3)] == [1, 1, 1]
    assertDataFrameEqual(
        spark.table(table), loaded("a", rows_a) + loaded("b", rows_b) + loaded("c", rows_c)
    )
    parts = [r.partition for r in spark.sql(f"SHOW PARTITIONS {table}").collect()]
    assert sorted(parts) == ["day=2013-01-01", "day=2013-01-02", "day=2013-01-03"]


def test_reloads_leave_one_copy_and_replace_a_file_in_every_partition(spark, unique_db, tmp_path):
    """C13 on the new layout: a batch of 3 files re-loaded thrice, then file x re-staged with
    other rows (a re-processed staging): x's rows are replaced in all its partitions."""
    spec = tiny_spec(unique_db)
    table = spec.hive.full_name
    x = stage(spark, tmp_path / "x", [(1, "x", D1), (2, "x", D2), (3, "x", D3)])
    rows_y, rows_z = [(10, "y", D1), (11, "y", D1)], [(20, "z", D2)]
    y, z = stage(spark, tmp_path / "y", rows_y), stage(spark, tmp_path / "z", rows_z)
    for _ in range(3):
        assert load_files(spark, spec, {"x": x, "y": y, "z": z}) == {"x": 3, "y": 2, "z": 1}
    assert rows_loaded(spark, spec, ["x", "y", "z"]) == {"x": 3, "y": 2, "z": 1}
    rows_x2 = [(7, "X", D1), (8, "X", D2), (9, "X", D3), (6, "X", D3)]
    x2 = stage(spark, tmp_path / "x2", rows_x2)
    assert load_files(spark, spec, {"x": x2}) == {"x": 4}
    assertDataFrameEqual(
        spark.table(table), loaded("x", rows_x2) + loaded("y", rows_y) + loaded("z", rows_z)
    )


def test_unpartitioned_table_reload_keeps_other_files(spark, unique_db, tmp_path):
    spec = tiny_spec(unique_db)
    spec = spec.model_copy(update={"hive": spec.hive.model_copy(update={"partition_by": ()})})
    p = stage(spark, tmp_path / "p", [(1, "p", D1), (2, "p", D2)])
    q = stage(spark, tmp_path / "q", [(3, "q", D1)])
    assert load_files(spark, spec, {"p": p}) == {"p": 2}
    assert load_files(spark, spec, {"q": q}) == {"q": 1}
    assert load_files(spark, spec, {"p": p}) == {"p": 2}
    assert rows_loaded(spark, spec, ["p", "q"]) == {"p": 2, "q": 1}
    assert spark.table(spec.hive.full_name).count() == 3


def test_rows_of_one_partition_go_into_as_few_files_as_the_target_size_allows(
    spark, unique_db, tmp_path
):
    spec = tiny_spec(unique_db)
    table = spec.hive.full_name
    staged = {
        f"f{i}": stage(spark, tmp_path / f"f{i}", [(i * 100 + j, "k" * 50, D1) for j in range(40)])
        for i in range(5)
    }
    assert load_files(spark, spec, staged) == {f"f{i}": 40 for i in range(5)}
    assert {d: len(f) for d, f in files_by_day(spark, table).items()} == {D1: 1}
    # A target far below the partition's size: several files, each about the target.
    more = stage(spark, tmp_path / "g", [(900 + j, "g" * 50, D1) for j in range(40)])
    assert load_files(spark, spec, {"g": more}, target_file_mb=1 / 1024) == {"g": 40}
    per_file = sorted(
        (r["count"] for r in spark.table(table).groupBy(F.input_file_name()).count().collect()),
        reverse=True,
    )
    k = per_file[0]  # rows per file from the scratch's bytes per row: all files but one hold k
    assert len(per_file) > 1 and per_file == [k] * (240 // k) + ([240 % k] if 240 % k else [])
    assert spark.table(table).count() == 240


def test_failure_between_materialize_and_overwrite_leaves_previous_contents(
    spark, unique_db, tmp_path, monkeypatch
):
    """What a reader sees during a load, and after a crash: the scratch holding the rewritten
    partitions' complete contents is written before any partition is replaced; a failure there
    leaves the previous contents exactly; the next load re-applies the scratch first."""
    spec = tiny_spec(unique_db)
    table = spec.hive.full_name
    old = [
        Row(id=1, kind="a", ferry_file_id="a", ferry_source_path=None, day=D1),
        Row(id=2, kind="a", ferry_file_id="a", ferry_source_path=None, day=D2),
    ]
    a = stage(spark, tmp_path / "a", [(1, "a", D1), (2, "a", D2)])
    assert load_files(spark, spec, {"a": a}) == {"a": 2}
    seen: dict[str, object] = {}
    real = hive._overwrite_from

    def crash(session, name, scratch, *, target_file_bytes, stats=None):
        seen["scratch"] = sorted(map(tuple, session.read.parquet(scratch).collect()))
        seen["reader"] = session.table(name).collect()  # a reader during the load
        raise RuntimeError("injected: the driver died before INSERT OVERWRITE")

    monkeypatch.setattr(hive, "_overwrite_from", crash)
    b = stage(spark, tmp_path / "b", [(3, "b", D1)])
    with pytest.raises(RuntimeError, match="injected"):
        load_files(spark, spec, {"b": b})
    assert seen["scratch"] == [
        (1, "a", "a", None, D1),
        (3, "b", "b", None, D1),
    ]  # kept + new of day 1 only
    assertDataFrameEqual(seen["reader"], old)
    assertDataFrameEqual(spark.table(table), old)
    root = hive.rewrite_root(spark, table)
    assert [n[:6] for n in hive._Fs(spark).children(root)] == ["ready-"]

    # Worst case, the crash hit while Spark moved partitions in: day 1's directory is gone.
    monkeypatch.setattr(hive, "_overwrite_from", real)
    location = hive.table_location(spark, table)
    hive._Fs(spark).delete(f"{location}/day=2013-01-01")
    spark.catalog.refreshTable(table)
    assertDataFrameEqual(spark.table(table), old[1:])
    # The redelivered batch: its rewrite first re-applies the scratch, then loads b again.
    assert load_files(spark, spec, {"b": b}) == {"b": 1}
    assert hive._Fs(spark).children(root) == []
    assertDataFrameEqual(
        spark.table(table),
        [*old, Row(id=3, kind="b", ferry_file_id="b", ferry_source_path=None, day=D1)],
    )


def test_every_row_carries_its_exact_nas_name_and_an_older_table_gains_the_column(
    spark, unique_db, tmp_path
):
    """``ferry_source_path`` is the manifest's NAS name byte for byte (``:`` and non-ASCII kept,
    not the HDFS-safe name); a table made before the column existed gets it (earlier rows NULL)
    and keeps its rows."""
    spec = tiny_spec(unique_db)
    table = spec.hive.full_name
    spark.sql(f"CREATE DATABASE IF NOT EXISTS {unique_db}")
    spark.sql(
        f"CREATE TABLE {table} (id INT, kind STRING, ferry_file_id STRING) "
        f"PARTITIONED BY (day DATE) STORED AS PARQUET"
    )
    spark.sql(f"INSERT INTO {table} PARTITION (day='2013-01-01') VALUES (1, 'old', 'o')")
    a = stage(spark, tmp_path / "a", [(2, "a", D1), (3, "a", D2)])
    b = stage(spark, tmp_path / "b", [(4, "b", D2)])
    names = {"a": "tiny/orders_2024-05-01T12:30.csv", "b": "tiny/été [1].csv"}
    assert load_files(spark, spec, {"a": a, "b": b}, sources=names) == {"a": 2, "b": 1}
    assert spark.table(table).columns == ["id", "kind", "ferry_file_id", "ferry_source_path", "day"]
    assertDataFrameEqual(
        spark.table(table),
        [
            Row(id=1, kind="old", ferry_file_id="o", ferry_source_path=None, day=D1),
            Row(id=2, kind="a", ferry_file_id="a", ferry_source_path=names["a"], day=D1),
            Row(id=3, kind="a", ferry_file_id="a", ferry_source_path=names["a"], day=D2),
            Row(id=4, kind="b", ferry_file_id="b", ferry_source_path=names["b"], day=D2),
        ],
    )


def test_a_hive_session_sends_the_metastore_a_range_for_long_partition_lists() -> None:
    """Spark turns a partition IN-list longer than ``metastore.filter_max_values`` into a range
    the metastore can take, and prunes from partition names when the metastore still refuses a
    filter (docs/hive-layout.md, "Partition filters")."""
    conf = session_conf(Settings(metastore={"filter_max_values": 40}), "ferry-load", "a", hive=True)
    assert {k: v for k, v in conf.items() if "metastorePartitionPruning" in k} == {
        "spark.sql.hive.metastorePartitionPruningInSetThreshold": "40",
        "spark.sql.hive.metastorePartitionPruningFallbackOnException": "true",
        "spark.sql.hive.metastorePartitionPruningFastFallback": "true",
    }
    assert "spark.sql.hive.metastorePartitionPruningInSetThreshold" not in session_conf(
        Settings(), "ferry-transform", "b"
    )
