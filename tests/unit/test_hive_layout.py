"""The per-file layout against a real Hive-enabled local session (docs/hive-layout.md): a load
moves files and touches no other file, a replay leaves exactly the new output (C19), what a
reader sees while a file is replaced, and crashes repaired by the redelivered batch."""

from __future__ import annotations

import datetime as dt
from pathlib import Path

import pytest
from pyspark.testing import assertDataFrameEqual
from tests.unit.test_jobs_load import row, stage_files, table_rows, tiny_spec

from ferry.clusters.spark import session_conf
from ferry.clusters.spark_jobs import HadoopFileSystem
from ferry.core import failpoints
from ferry.errors import PermanentError
from ferry.settings import Settings
from ferry.stages.load.job import load_files
from ferry.tables.hive import table_location
from ferry.tables.model import FileEntry
from ferry.tables.paths import entry_path

D1, D2, D3 = dt.date(2013, 1, 1), dt.date(2013, 1, 2), dt.date(2013, 1, 3)


def data_files(spark, spec) -> dict[str, float]:
    """``{path relative to the table: mtime}`` of every data file (the index excluded)."""
    root = Path(table_location(spark, spec.hive.full_name).removeprefix("file:"))
    return {
        str(p.relative_to(root)): p.stat().st_mtime
        for p in root.rglob("*.parquet")
        if not str(p.relative_to(root)).startswith("_ferry")
    }


def partitions(spark, spec) -> list[str]:
    return sorted(r[0] for r in spark.sql(f"SHOW PARTITIONS {spec.hive.full_name}").collect())


def entry(spark, spec, fid: str) -> FileEntry:
    loc = table_location(spark, spec.hive.full_name)
    data = HadoopFileSystem(spark).read_bytes(f"{loc}/{entry_path(fid)}")
    assert data is not None
    return FileEntry.from_json(data)


def test_a_load_moves_its_files_in_and_touches_no_other_data_file(
    spark, unique_db, tmp_path, monkeypatch
):
    """A load costs what it brings: its files are renamed into their partitions; no other data
    file is rewritten, and no partition directory (nor the table) is listed."""
    spec = tiny_spec(unique_db)
    first = stage_files(
        spark,
        tmp_path,
        spec,
        {"a": [(1, "a", D1), (2, "a", D2), (3, "a", D3)], "b": [(4, "b", D3)]},
    )
    assert load_files(spark, spec, first) == {"a": 3, "b": 1}
    before = data_files(spark, spec)
    listed: list[str] = []
    real = HadoopFileSystem.list_dir

    def spy(self, path):  # type: ignore[no-untyped-def]
        listed.append(path)
        return real(self, path)

    monkeypatch.setattr(HadoopFileSystem, "list_dir", spy)
    c = stage_files(spark, tmp_path, spec, {"c": [(5, "c", D1), (6, "c", D2), (7, "c", D2)]})
    assert load_files(spark, spec, c) == {"c": 3}
    after = data_files(spark, spec)
    assert {k: v for k, v in after.items() if k in before} == before  # untouched, same mtime
    gen = entry(spark, spec, "c").generation
    assert sorted(set(after) - set(before)) == [
        f"day=2013-01-01/ferry-c-{gen}-00000.parquet",
        f"day=2013-01-02/ferry-c-{gen}-00001.parquet",
    ]
    loc = table_location(spark, spec.hive.full_name)
    assert [p for p in listed if p.startswith(loc)] == [
        f"{loc}/_ferry/journal",
        f"{loc}/_ferry/scratch",
        f"{loc}/_ferry/journal",
    ]
    assertDataFrameEqual(
        table_rows(spark, spec),
        [row(1, "a", "a", D1), row(2, "a", "a", D2), row(3, "a", "a", D3), row(4, "b", "b", D3)]
        + [row(5, "c", "c", D1), row(6, "c", "c", D2), row(7, "c", "c", D2)],
    )
    assert not Path(c["c"]).exists()  # the staged directory was consumed


def test_a_replay_whose_output_is_empty_removes_every_row_of_the_file(spark, unique_db, tmp_path):
    """C19: the file's new output is empty (a tightened rule rejects every record): none of its
    earlier rows is left in any partition; partitions left empty are dropped; others untouched."""
    spec = tiny_spec(unique_db)
    load_files(
        spark,
        spec,
        stage_files(
            spark,
            tmp_path,
            spec,
            {"x": [(1, "x", D1), (2, "x", D2), (3, "x", D3)], "y": [(9, "y", D1)]},
        ),
    )
    assert load_files(spark, spec, stage_files(spark, tmp_path, spec, {"x": []})) == {"x": 0}
    assertDataFrameEqual(table_rows(spark, spec), [row(9, "y", "y", D1)])
    assert partitions(spark, spec) == ["day=2013-01-01"]
    assert (entry(spark, spec, "x").rows, entry(spark, spec, "x").files) == (0, {})


def test_a_replay_after_a_definition_change_leaves_no_row_in_the_old_partition(
    spark, unique_db, tmp_path
):
    """C19: the file's rows now fall in another partition (a derived partition column computed
    differently): its old partition keeps none of them."""
    spec = tiny_spec(unique_db)
    load_files(
        spark,
        spec,
        stage_files(
            spark, tmp_path, spec, {"x": [(1, "x", D1), (2, "x", D1)], "y": [(9, "y", D2)]}
        ),
    )
    moved = stage_files(spark, tmp_path, spec, {"x": [(1, "x", D3), (2, "x", D3)]})
    assert load_files(spark, spec, moved) == {"x": 2}
    assertDataFrameEqual(
        table_rows(spark, spec), [row(1, "x", "x", D3), row(2, "x", "x", D3), row(9, "y", "y", D2)]
    )
    assert partitions(spark, spec) == ["day=2013-01-02", "day=2013-01-03"]
    assert not any(p.startswith("day=2013-01-01") for p in data_files(spark, spec))


@pytest.mark.parametrize(
    ("point", "seen"),
    [
        # old data files gone, the new ones not yet there: the reader sees none of x's rows
        ("filetable.removed", []),
        # the first new data file moved in (day 1), the second not yet
        ("filetable.moving", [(1, "X", D1)]),
        # every data file in place, the index not yet written
        ("filetable.applied", [(1, "X", D1), (2, "X", D2)]),
    ],
)
def test_a_crash_while_a_file_is_replaced_is_repaired_by_the_redelivered_batch(
    spark, unique_db, tmp_path, monkeypatch, point, seen
):
    """What a reader sees at each point of a replacement (never a row of x twice, never old and
    new rows of x together), and the redelivered batch (offset not committed) repairing the crash
    with exact rows: the journal written before anything was removed is applied again first."""
    spec = tiny_spec(unique_db)
    load_files(
        spark,
        spec,
        stage_files(
            spark,
            tmp_path,
            spec,
            {"x": [(1, "x", D1), (2, "x", D2), (3, "x", D3)], "y": [(9, "y", D1)]},
        ),
    )
    new = stage_files(spark, tmp_path, spec, {"x": [(1, "X", D1), (2, "X", D2)]})
    monkeypatch.setenv(failpoints.ENV, f"{point}=raise")
    with pytest.raises(failpoints.FailpointHit):
        load_files(spark, spec, new)
    assertDataFrameEqual(
        table_rows(spark, spec), [row(9, "y", "y", D1)] + [row(*r[:2], "x", r[2]) for r in seen]
    )
    monkeypatch.delenv(failpoints.ENV)
    assert load_files(spark, spec, new) == {"x": 2}  # the redelivered batch
    assertDataFrameEqual(
        table_rows(spark, spec), [row(1, "X", "x", D1), row(2, "X", "x", D2), row(9, "y", "y", D1)]
    )
    loc = Path(table_location(spark, spec.hive.full_name).removeprefix("file:"))
    assert sorted(p.name for p in (loc / "_ferry" / "journal").iterdir()) == []
    assert partitions(spark, spec) == ["day=2013-01-01", "day=2013-01-02"]
    assert entry(spark, spec, "x").rows == 2


def test_string_partition_values_are_escaped_as_hive_names_them(spark, unique_db, tmp_path):
    """A string partition column with ``/``, ``%``, a space, ``=`` and NULL: transform's
    ``partitionBy`` directories are the ones the metastore names (``__HIVE_DEFAULT_PARTITION__``
    for NULL); the rows read back exactly, and a replay removes them exactly."""
    from tests.support.factories import dataset_spec

    spec = dataset_spec(
        "notes",
        {"id": "int", "note": "string"},
        hive={"database": unique_db, "table": "notes", "partition_by": ["note"]},
    )
    from pyspark.sql import types as T

    from ferry.tables.paths import new_generation
    from ferry.tables.staging import file_dir, name_files, write_files

    values = ["a/b", "c%d", "e f", "g=h", None]
    df = spark.createDataFrame(
        [(i, "n", None, v) for i, v in enumerate(values)],
        T.StructType(
            [
                T.StructField("id", T.IntegerType()),
                T.StructField("ferry_file_id", T.StringType()),
                T.StructField("ferry_source_path", T.StringType()),
                T.StructField("note", T.StringType()),
            ]
        ),
    )
    out = str(tmp_path / "notes")
    write_files(df, ["id", "ferry_file_id", "ferry_source_path"], ["note"], out)
    marker = name_files(HadoopFileSystem(spark), file_dir(out, "n"), "n", new_generation())
    assert sorted(m.split("/")[0] for m in marker.files) == [
        "note=__HIVE_DEFAULT_PARTITION__",
        "note=a%2Fb",
        "note=c%25d",
        "note=e f",
        "note=g%3Dh",
    ]
    assert load_files(spark, spec, {"n": file_dir(out, "n")}) == {"n": 5}
    assert partitions(spark, spec) == sorted(m.split("/")[0] for m in marker.files)
    got = {(r.id, r.note) for r in table_rows(spark, spec)}
    assert got == set(enumerate(values))
    assert load_files(spark, spec, stage_files_notes(spark, tmp_path)) == {"n": 0}
    assert table_rows(spark, spec) == [] and partitions(spark, spec) == []


def stage_files_notes(spark, tmp_path) -> dict[str, str]:
    """An empty new output of file ``n`` (a marker listing no data file)."""
    from ferry.tables.paths import new_generation
    from ferry.tables.staging import name_files

    d = str(tmp_path / "notes-empty")
    name_files(HadoopFileSystem(spark), d, "n", new_generation())
    return {"n": d}


def test_unpartitioned_table_reload_keeps_other_files(spark, unique_db, tmp_path):
    spec = tiny_spec(unique_db)
    spec = spec.model_copy(update={"hive": spec.hive.model_copy(update={"partition_by": ()})})
    assert load_files(spark, spec, stage_files(spark, tmp_path, spec, {"p": [(1, "p", D1)]})) == {
        "p": 1
    }
    assert load_files(spark, spec, stage_files(spark, tmp_path, spec, {"q": [(3, "q", D1)]})) == {
        "q": 1
    }
    again = stage_files(spark, tmp_path, spec, {"p": [(1, "p", D1), (2, "p", D2)]})
    assert load_files(spark, spec, again) == {"p": 2}
    assert sorted((r.id, r.ferry_file_id) for r in table_rows(spark, spec)) == [
        (1, "p"),
        (2, "p"),
        (3, "q"),
    ]


def test_a_hive_session_sends_the_metastore_a_range_for_long_partition_lists() -> None:
    """Spark turns a partition IN-list longer than ``metastore.filter_max_values`` into a range
    the metastore can take, and prunes from partition names when the metastore still refuses a
    filter (docs/hive-layout.md, "Partition filters": readers of a table with many partitions)."""
    conf = session_conf(Settings(metastore={"filter_max_values": 40}), "ferry-load", "a", hive=True)
    assert {k: v for k, v in conf.items() if "metastorePartitionPruning" in k} == {
        "spark.sql.hive.metastorePartitionPruningInSetThreshold": "40",
        "spark.sql.hive.metastorePartitionPruningFallbackOnException": "true",
        "spark.sql.hive.metastorePartitionPruningFastFallback": "true",
    }
    assert "spark.sql.hive.metastorePartitionPruningInSetThreshold" not in session_conf(
        Settings(), "ferry-transform", "b"
    )


def test_entries_name_every_data_file_with_its_rows(spark, unique_db, tmp_path):
    spec = tiny_spec(unique_db)
    got = load_files(
        spark,
        spec,
        stage_files(
            spark,
            tmp_path,
            spec,
            {"e": [(1, "e", D1), (2, "e", D1), (3, "e", D2)]},
            sources={"e": "tiny/e.csv"},
        ),
    )
    assert got == {"e": 3}
    e = entry(spark, spec, "e")
    assert e == FileEntry(
        "e",
        e.generation,
        {
            f"day=2013-01-01/ferry-e-{e.generation}-00000.parquet": 2,
            f"day=2013-01-02/ferry-e-{e.generation}-00001.parquet": 1,
        },
        {},
        None,
    )
    assert [r.ferry_source_path for r in table_rows(spark, spec)] == ["tiny/e.csv"] * 3


def test_every_row_carries_its_exact_nas_name_and_an_older_table_gains_the_column(
    spark, unique_db, tmp_path
):
    """``ferry_source_path`` is the manifest's NAS name byte for byte (``:`` and non-ASCII kept,
    not the HDFS-safe name), written by transform into the data files; a table made before the
    column existed gets it (its earlier rows NULL there), is adopted, and keeps its rows."""
    spec = tiny_spec(unique_db)
    table = spec.hive.full_name
    spark.sql(f"CREATE DATABASE IF NOT EXISTS {unique_db}")
    spark.sql(
        f"CREATE TABLE {table} (id INT, kind STRING, ferry_file_id STRING) "
        f"PARTITIONED BY (day DATE) STORED AS PARQUET"
    )
    spark.sql(f"INSERT INTO {table} PARTITION (day='2013-01-01') VALUES (1, 'old', 'o')")
    names = {"a": "tiny/orders_2024-05-01T12:30.csv", "b": "tiny/été [1].csv"}
    staged = stage_files(
        spark, tmp_path, spec, {"a": [(2, "a", D1), (3, "a", D2)], "b": [(4, "b", D2)]}, names
    )
    assert load_files(spark, spec, staged) == {"a": 2, "b": 1}
    assert spark.table(table).columns == ["id", "kind", "ferry_file_id", "ferry_source_path", "day"]
    assertDataFrameEqual(
        table_rows(spark, spec),
        [
            row(1, "old", "o", D1),
            row(2, "a", "a", D1, names["a"]),
            row(3, "a", "a", D2, names["a"]),
            row(4, "b", "b", D2, names["b"]),
        ],
    )


def test_a_table_of_a_layout_this_ferry_does_not_know_is_refused_and_left_as_it_is(
    spark, unique_db, tmp_path
):
    """A table a newer Ferry wrote (``ferry.layout`` another value than files-1) is neither
    adopted nor loaded into: the batch fails as schema_mismatch and no data file changes."""
    spec = tiny_spec(unique_db)
    load_files(spark, spec, stage_files(spark, tmp_path, spec, {"a": [(1, "a", D1)]}))
    table = spec.hive.full_name
    spark.sql(f"ALTER TABLE {table} SET TBLPROPERTIES ('ferry.layout'='files-9')")
    before = data_files(spark, spec)
    staged = stage_files(spark, tmp_path, spec, {"b": [(2, "b", D1)]})
    with pytest.raises(PermanentError, match=r"ferry.layout='files-9' is a layout") as err:
        load_files(spark, spec, staged)
    assert err.value.reason == "schema_mismatch"
    assert data_files(spark, spec) == before
    assertDataFrameEqual(table_rows(spark, spec), [row(1, "a", "a", D1)])
