"""Compaction (``ferry compact`` and the load service's compactor), ``migrate-layout`` and
``unload`` against a real Hive-enabled local session, on the per-file layout."""

from __future__ import annotations

import contextlib
import datetime as dt

import pytest
from pyspark.sql import Row
from pyspark.testing import assertDataFrameEqual
from tests.unit.test_hive_layout import data_files, entry, partitions
from tests.unit.test_jobs_load import row, stage_files, table_rows, tiny_spec

from ferry.clusters.spark_jobs import HadoopFileSystem
from ferry.ops.compact import LayoutError, compact, migrate_layout, parse_partition, unload
from ferry.stages.load.compactor import Compactor
from ferry.stages.load.job import ensure_table, load_files
from ferry.tables.hive import (
    LAYOUT_PROPERTY,
    count_by,
    partition_columns,
    table_location,
    table_property,
)
from ferry.tables.model import CompactedFile
from ferry.tables.paths import sidecar_path

D1, D2 = dt.date(2013, 1, 1), dt.date(2013, 1, 2)
MB = 1024 * 1024


def sidecar(spark, spec, path: str) -> CompactedFile:
    loc = table_location(spark, spec.hive.full_name)
    data = HadoopFileSystem(spark).read_bytes(f"{loc}/{sidecar_path(path)}")
    assert data is not None
    return CompactedFile.from_json(data)


def five_small_files(spark, spec, tmp_path) -> list[Row]:
    """Files f0..f4 loaded one by one into day 1 (five data files there), g into day 2."""
    for i in range(5):
        load_files(spark, spec, stage_files(spark, tmp_path, spec, {f"f{i}": [(i, "k", D1)]}))
    load_files(spark, spec, stage_files(spark, tmp_path, spec, {"g": [(9, "g", D2)]}))
    return [row(i, "k", f"f{i}", D1) for i in range(5)] + [row(9, "g", "g", D2)]


def test_compaction_merges_the_smallest_files_and_records_their_file_ids(
    spark, unique_db, tmp_path
):
    """Over ``max_files`` (4) in day 1: the 4 smallest of its 5 files are merged into one file
    whose sidecar names their file ids and rows; the rows are unchanged; replaying one of those
    files rewrites that compacted file only, without its rows; unloading another does too."""
    spec = tiny_spec(unique_db)
    rows = five_small_files(spark, spec, tmp_path)
    before = data_files(spark, spec)
    report = compact(spark, spec, max_files=4, target_file_bytes=128 * MB)
    assert (report.before, report.after, report.skipped) == (
        {"day=2013-01-01": 5},
        {"day=2013-01-01": 2},
        None,
    )
    assertDataFrameEqual(table_rows(spark, spec), rows)
    [merged] = [p for p in data_files(spark, spec) if "/compact-" in p]
    members = sidecar(spark, spec, merged).members
    assert len(members) == 4 and set(members.values()) == {1}
    for fid in members:
        assert (entry(spark, spec, fid).files, entry(spark, spec, fid).compacted) == (
            {},
            {merged: 1},
        )
    after = data_files(spark, spec)
    untouched = {p: m for p, m in after.items() if p in before}
    assert len(untouched) == 2 and untouched == {p: before[p] for p in untouched}  # day 1's
    assert sorted(p.split("/")[0] for p in after) == ["day=2013-01-01"] * 2 + ["day=2013-01-02"]
    assert compact(spark, spec, max_files=4, target_file_bytes=128 * MB).before == {}

    # Replay one member: the compacted file is rewritten without its rows and replaces itself
    # under its own name (one rename: readers never miss the others' rows); the others' entries
    # stay as they were.
    fid = sorted(members)[0]
    assert load_files(spark, spec, stage_files(spark, tmp_path, spec, {fid: [(70, "n", D2)]})) == {
        fid: 1
    }
    [merged2] = [p for p in data_files(spark, spec) if "/compact-" in p]
    assert merged2 == merged and set(sidecar(spark, spec, merged2).members) == set(members) - {fid}
    others = sorted(set(members) - {fid})
    assert all(entry(spark, spec, f).compacted == {merged2: 1} for f in others)
    want = [r for r in rows if r.ferry_file_id != fid] + [row(70, "n", fid, D2)]
    assertDataFrameEqual(table_rows(spark, spec), want)

    # Unload another member: rewritten again; the last-but-one member's rows stay exact.
    assert unload(spark, spec, [others[0], "zz"], target_file_bytes=MB) == {others[0]: 1, "zz": 0}
    assertDataFrameEqual(table_rows(spark, spec), [r for r in want if r.ferry_file_id != others[0]])


def test_the_load_services_compactor_keeps_partitions_at_or_below_the_setting(
    spark, unique_db, tmp_path
):
    """The compactor (the service's background thread) after each batch: a partition that got
    over ``max_files`` is brought back below it, rows exact."""
    spec = tiny_spec(unique_db)
    comp = Compactor(lambda: spark, None, max_files=4, target_bytes=128 * MB)
    try:
        want = []
        for b in range(4):  # 4 batches of 3 files, all in day 1
            files = {f"b{b}f{i}": [(b * 10 + i, "k", D1)] for i in range(3)}
            load_files(
                spark, spec, stage_files(spark, tmp_path, spec, files), on_loaded=comp.submit
            )
            want += [row(b * 10 + i, "k", f"b{b}f{i}", D1) for i in range(3)]
            assert comp.drain(120)
            assert len(data_files(spark, spec)) <= 4
        assertDataFrameEqual(table_rows(spark, spec), want)
        assert any(r.before for _, r in comp.reports)
    finally:
        comp.close()


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
    assert (report.partitions_before, report.partitions_after, report.in_place) == (4, 2, False)
    assert partition_columns(spark, table) == ["day"]
    assert count_by(spark.table(table), "ferry_file_id") == {"fa": 2, "fb": 2, "fc": 1}
    assert count_by(spark.table(f"{table}__ferry_old"), "ferry_file_id") == report.rows
    assert table_property(spark, table, LAYOUT_PROPERTY) == "files-1"
    ensure_table(spark, spec)  # the load accepts it now, and loads into it
    staged = stage_files(spark, tmp_path, spec, {"d": [(6, "d", D2)], "fb": [(3, "b", D1)]})
    assert load_files(spark, spec, staged) == {"d": 1, "fb": 1}
    spark.catalog.refreshTable(table)
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
    with pytest.raises(LayoutError, match="is in the per-file layout already"):
        migrate_layout(spark, current, target_file_bytes=MB)


def copy_on_write_table(spark, spec) -> str:
    """A table of the copy-on-write layout (before this one): partitioned by the dataset's key,
    several files' rows in one part file, no layout property, no index."""
    table = spec.hive.full_name
    spark.sql(f"CREATE DATABASE IF NOT EXISTS {spec.hive.database}")
    spark.sql(
        f"CREATE TABLE {table} (id INT, kind STRING, ferry_file_id STRING, "
        f"ferry_source_path STRING) PARTITIONED BY (day DATE) STORED AS PARQUET"
    )
    spark.sql(
        f"INSERT INTO {table} VALUES (1, 'a', 'fa', NULL, DATE'2013-01-01'), "
        f"(2, 'a', 'fa', NULL, DATE'2013-01-02'), (3, 'b', 'fb', NULL, DATE'2013-01-01'), "
        f"(4, 'b', 'fb', NULL, DATE'2013-01-01'), (5, 'c', 'fc', NULL, DATE'2013-01-02')"
    )
    return table


@pytest.mark.parametrize("how", ["load", "migrate-layout"])
def test_a_copy_on_write_table_is_adopted_in_place(spark, unique_db, tmp_path, how):
    """The layout before this one: its first load (or ``ferry migrate-layout``) indexes it in
    place, no row rewritten; replaying one of its files then rewrites only the data files that
    hold that file's rows, and leaves exactly its new rows."""
    spec = tiny_spec(unique_db)
    table = copy_on_write_table(spark, spec)
    before = data_files(spark, spec)
    old = [
        row(1, "a", "fa", D1),
        row(2, "a", "fa", D2),
        row(3, "b", "fb", D1),
        row(4, "b", "fb", D1),
        row(5, "c", "fc", D2),
    ]
    if how == "migrate-layout":
        report = migrate_layout(spark, spec, target_file_bytes=MB)
        assert (report.rows, report.in_place) == ({"fa": 2, "fb": 2, "fc": 1}, True)
        assert data_files(spark, spec) == before  # not a byte rewritten
    staged = stage_files(spark, tmp_path, spec, {"fb": [(30, "B", D2)]})
    assert load_files(spark, spec, staged) == {"fb": 1}
    assert table_property(spark, table, LAYOUT_PROPERTY) == "files-1"
    assertDataFrameEqual(
        table_rows(spark, spec),
        [r for r in old if r.ferry_file_id != "fb"] + [row(30, "B", "fb", D2)],
    )
    assert entry(spark, spec, "fa").generation == "adopted"
    assert entry(spark, spec, "fa").rows == 2


def test_unload_removes_only_that_files_rows_and_empty_partitions(spark, unique_db, tmp_path):
    spec = tiny_spec(unique_db)
    load_files(
        spark,
        spec,
        stage_files(
            spark, tmp_path, spec, {"a": [(1, "a", D1), (2, "a", D2)], "b": [(3, "b", D1)]}
        ),
    )
    assert unload(spark, spec, ["a", "zz"], target_file_bytes=MB) == {"a": 2, "zz": 0}
    assertDataFrameEqual(table_rows(spark, spec), [row(3, "b", "b", D1)])
    assert partitions(spark, spec) == ["day=2013-01-01"]


class RecordingLocks:
    """Stands in for ferry.tables.locks.TableLocks: records when each table's lock is held."""

    def __init__(self, spark, table: str) -> None:  # type: ignore[no-untyped-def]
        self.spark, self.table, self.log = spark, table, []  # type: ignore[var-annotated]

    @contextlib.contextmanager
    def hold(self, table: str):  # type: ignore[no-untyped-def]
        self.log.append(("enter", table, self.rows()))
        yield
        self.log.append(("exit", table, self.rows()))

    def rows(self) -> int:
        self.spark.catalog.refreshTable(self.table)
        return int(self.spark.table(self.table).count())


def test_load_and_unload_hold_the_tables_lock_around_their_whole_change(spark, unique_db, tmp_path):
    spec = tiny_spec(unique_db)
    table = spec.hive.full_name
    ensure_table(spark, spec)
    locks = RecordingLocks(spark, table)
    a = stage_files(spark, tmp_path, spec, {"a": [(1, "a", D1), (2, "a", D2)]})
    assert load_files(spark, spec, a, locks=locks) == {"a": 2}  # type: ignore[arg-type]
    assert unload(spark, spec, ["a"], target_file_bytes=MB, locks=locks) == {"a": 2}  # type: ignore[arg-type]
    # Rows change only while the lock is held: 0 → 2 inside the load, 2 → 0 inside the unload.
    assert locks.log == [
        ("enter", table, 0),
        ("exit", table, 2),
        ("enter", table, 2),
        ("exit", table, 0),
    ]


def test_adoption_first_finishes_a_rewrite_the_earlier_layout_left_half_done(
    spark, unique_db, tmp_path
):
    """A load of the copy-on-write layout crashed inside its INSERT OVERWRITE: day 1's directory
    is gone, its complete new contents wait in ``_ferry_rewrite/<table>/ready-…``. Adoption
    applies that first, so no row of day 1 is lost."""
    import shutil
    from pathlib import Path

    from ferry.tables.legacy import rewrite_root

    spec = tiny_spec(unique_db)
    table = copy_on_write_table(spark, spec)
    ready = f"{rewrite_root(spark, table)}/ready-0001"
    spark.table(table).where("day = DATE'2013-01-01'").write.parquet(ready)
    loc = Path(table_location(spark, table).removeprefix("file:"))
    shutil.rmtree(loc / "day=2013-01-01")
    spark.catalog.refreshTable(table)
    assert sorted(r.id for r in spark.table(table).collect()) == [2, 5]
    staged = stage_files(spark, tmp_path, spec, {"fc": [(50, "C", D2)]})
    assert load_files(spark, spec, staged) == {"fc": 1}
    assertDataFrameEqual(
        table_rows(spark, spec),
        [row(1, "a", "fa", D1), row(2, "a", "fa", D2), row(3, "b", "fb", D1)]
        + [row(4, "b", "fb", D1), row(50, "C", "fc", D2)],
    )
    assert not Path(ready.removeprefix("file:")).exists()


@pytest.mark.parametrize("groups", [2, 6])
def test_a_merge_writes_one_file_per_group_without_the_dropped_files_rows(spark, tmp_path, groups):
    """Few groups: a job each, no shuffle; many: one shuffled job. Either way one output file
    per group, rows of ``drop_ids`` left out, rows without a file id kept."""
    from ferry.tables.merge import merge_groups

    schema = "id int, ferry_file_id string"
    paths: dict[int, list[str]] = {}
    for g in range(groups):
        for i in range(3):
            out = tmp_path / f"in-{g}-{i}"
            fid = None if i == 2 else f"f{g}{i}"
            spark.createDataFrame([(g * 10 + i, fid)], schema).coalesce(1).write.parquet(str(out))
            part = next(p for p in out.iterdir() if p.name.endswith(".parquet"))
            paths.setdefault(g, []).append(str(part))
    from pyspark.sql.types import StructType

    merged = merge_groups(
        spark,
        StructType.fromDDL(schema),
        paths,
        str(tmp_path / "out"),
        drop_ids={"f00", "f11"},
    )
    assert {g: m.rows for g, m in merged.items()} == {g: 3 - (g in (0, 1)) for g in range(groups)}
    got = {tuple(r) for r in spark.read.parquet(*[m.path for m in merged.values()]).collect()}
    want = {(g * 10 + i, None if i == 2 else f"f{g}{i}") for g in range(groups) for i in range(3)}
    assert got == want - {(0, "f00"), (11, "f11")}
