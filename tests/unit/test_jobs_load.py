"""Load job against a real Hive-enabled local session (Derby metastore): C12, C13, staged output
of an earlier Ferry; the per-file layout itself is in test_hive_layout.py."""

from __future__ import annotations

import datetime as dt
import uuid
from collections.abc import Mapping, Sequence

import pytest
from pyspark.sql import Row
from pyspark.sql import types as T
from pyspark.testing import assertDataFrameEqual
from tests.support.factories import dataset_spec

from ferry.clusters.spark_jobs import HadoopFileSystem
from ferry.datasets.spec import DatasetSpec
from ferry.errors import PermanentError
from ferry.stages.load.job import (
    align_to_table,
    ensure_table,
    load_files,
    table_schema,
)
from ferry.tables.hive import create_table_sql
from ferry.tables.paths import new_generation
from ferry.tables.staging import file_dir, name_files, write_files

D1, D2 = dt.date(2013, 1, 1), dt.date(2013, 1, 2)


def tiny_spec(database: str) -> DatasetSpec:
    return dataset_spec(
        "tiny",
        {"id": "int", "kind": "string", "day": "date"},
        hive={"database": database, "table": "tiny", "partition_by": ["day"]},
    )


STAGED = T.StructType(
    [
        T.StructField("id", T.IntegerType()),
        T.StructField("kind", T.StringType()),
        T.StructField("day", T.DateType()),
    ]
)


def stage(spark, path, rows) -> str:
    """A flat staged directory as a Ferry of the copy-on-write layout left it (no file id)."""
    spark.createDataFrame(rows, STAGED).coalesce(1).write.parquet(str(path))
    return str(path)


def stage_files(
    spark,
    root,
    spec: DatasetSpec,
    rows: Mapping[str, Sequence[tuple]],
    sources: Mapping[str, str] | None = None,
) -> dict[str, str]:
    """Staged directories of the per-file layout, as transform writes them and transfer copies
    them: ``rows`` ``{file_id: [(id, kind, day), …]}`` → ``{file_id: directory}`` (one new
    generation per call)."""
    names = sources or {}
    data = [(*r, fid, names.get(fid)) for fid, rs in rows.items() for r in rs]
    schema = T.StructType(
        [
            *STAGED.fields,
            T.StructField("ferry_file_id", T.StringType()),
            T.StructField("ferry_source_path", T.StringType()),
        ]
    )
    out = f"{root}/stage-{uuid.uuid4().hex[:8]}"
    write_files(
        spark.createDataFrame(data, schema),
        [c.name for c in spec.table_data_columns],
        spec.hive.partition_by,
        out,
    )
    fs, gen = HadoopFileSystem(spark), new_generation()
    for fid in rows:
        name_files(fs, file_dir(out, fid), fid, gen)
    return {fid: file_dir(out, fid) for fid in rows}


def table_rows(spark, spec: DatasetSpec) -> list[Row]:
    spark.catalog.refreshTable(spec.hive.full_name)
    return spark.table(spec.hive.full_name).collect()


def row(i: int, kind: str, fid: str, day: dt.date, source: str | None = None) -> Row:
    return Row(id=i, kind=kind, ferry_file_id=fid, ferry_source_path=source, day=day)


def test_create_table_sql_partitions_by_the_dataset_columns_only(specs):
    sql = create_table_sql(specs["flights"])
    data = ", ".join(f"`{c.name}` {c.type.upper()}" for c in specs["flights"].columns)
    assert sql == (
        f"CREATE TABLE IF NOT EXISTS `ferry`.`flights` ({data}, `ferry_file_id` STRING, "
        "`ferry_source_path` STRING) "
        "PARTITIONED BY (`flight_date` DATE) STORED AS PARQUET "
        "TBLPROPERTIES ('ferry.dataset'='flights', 'ferry.layout'='files-1')"
    )
    assert data.startswith("`year` INT, ") and data.endswith("`time_hour` TIMESTAMP")


def test_create_table_sql_without_partition_columns_is_unpartitioned(specs):
    spec = specs["weather"].model_copy(
        update={"hive": specs["weather"].hive.model_copy(update={"partition_by": ()})}
    )
    sql = create_table_sql(spec)
    assert "PARTITIONED BY" not in sql
    assert sql.endswith(
        "`obs_date` DATE, `ferry_file_id` STRING, `ferry_source_path` STRING) STORED AS PARQUET "
        "TBLPROPERTIES ('ferry.dataset'='weather', 'ferry.layout'='files-1')"
    )


def test_align_to_table_matches_by_name_in_table_order(spark):
    """C12: a frame whose column order differs from the table's is reordered by name."""
    table = T.StructType(
        [
            T.StructField("id", T.IntegerType()),
            T.StructField("kind", T.StringType()),
            T.StructField("ferry_file_id", T.StringType()),
        ]
    )
    df = spark.createDataFrame([("f1", "a", 1)], "ferry_file_id string, KIND string, id int")
    out = align_to_table(df, table)
    assert out.columns == ["id", "kind", "ferry_file_id"]
    assertDataFrameEqual(out, [Row(id=1, kind="a", ferry_file_id="f1")], checkRowOrder=True)


@pytest.mark.parametrize(
    ("ddl", "message"),
    [
        ("id int, ferry_file_id string", "missing column 'kind' (string)"),
        (
            "id int, kind string, ferry_file_id string, extra double",
            "unexpected column 'extra' (double)",
        ),
        (
            "id bigint, kind string, ferry_file_id string",
            "column 'id' has type bigint, table expects int",
        ),
    ],
)
def test_align_to_table_fails_before_writing_naming_the_column(spark, ddl, message):
    table = T.StructType(
        [
            T.StructField("id", T.IntegerType()),
            T.StructField("kind", T.StringType()),
            T.StructField("ferry_file_id", T.StringType()),
        ]
    )
    df = spark.createDataFrame([], ddl)
    with pytest.raises(PermanentError) as err:
        align_to_table(df, table, table="db.t")
    assert err.value.reason == "schema_mismatch"
    assert message in str(err.value) and "db.t" in str(err.value)


def test_ensure_table_creates_then_detects_a_drifted_table(spark, unique_db):
    spec = tiny_spec(unique_db)
    schema = ensure_table(spark, spec)
    assert [(f.name, f.dataType.simpleString()) for f in schema.fields] == [
        ("id", "int"),
        ("kind", "string"),
        ("ferry_file_id", "string"),
        ("ferry_source_path", "string"),
        ("day", "date"),
    ]
    assert [f.name for f in schema] == [f.name for f in table_schema(spec)]
    spark.sql(
        f"CREATE TABLE {unique_db}.drift (id BIGINT, kind STRING, ferry_file_id STRING) "
        f"PARTITIONED BY (day DATE) STORED AS PARQUET"
    )
    drifted = spec.model_copy(update={"hive": spec.hive.model_copy(update={"table": "drift"})})
    with pytest.raises(
        PermanentError, match="column 'id' has type bigint in the table, the definition says int"
    ) as err:
        ensure_table(spark, drifted)
    assert err.value.reason == "schema_mismatch"


def test_load_three_times_leaves_one_copy_and_other_files_untouched(spark, unique_db, tmp_path):
    """C13: the same file loaded 3 times (a new transform output each time, and a redelivery of
    the last, whose staged directory the load consumed) = one load; the neighbour file intact."""
    spec = tiny_spec(unique_db)
    f1_rows = [(1, "a", D1), (2, "b", D1), (3, "c", D2)]
    first = stage_files(spark, tmp_path, spec, {"f1": f1_rows, "f2": [(10, "z", D1)]})
    assert load_files(spark, spec, first) == {"f1": 3, "f2": 1}
    for _ in range(3):
        again = stage_files(spark, tmp_path, spec, {"f1": f1_rows})
        assert load_files(spark, spec, again) == {"f1": 3}
    assert load_files(spark, spec, again) == {"f1": 3}  # redelivered: nothing staged any more
    assertDataFrameEqual(
        table_rows(spark, spec),
        [
            row(1, "a", "f1", D1),
            row(2, "b", "f1", D1),
            row(3, "c", "f1", D2),
            row(10, "z", "f2", D1),
        ],
    )
    parts = [r.partition for r in spark.sql(f"SHOW PARTITIONS {spec.hive.full_name}").collect()]
    assert sorted(parts) == ["day=2013-01-01", "day=2013-01-02"]


def test_staged_with_other_column_order_loads_by_name(spark, unique_db, tmp_path):
    """C12 on the per-file shape: a data file whose columns are in another order (and another
    case) lands in the right columns: readers match Parquet columns by name."""
    spec = tiny_spec(unique_db)
    d = tmp_path / "f3"
    spark.createDataFrame(
        [("f3", 7, "n", "q")], "ferry_file_id string, ID int, ferry_source_path string, kind string"
    ).coalesce(1).write.parquet(str(d / "day=2013-01-02"))
    name_files(HadoopFileSystem(spark), str(d), "f3", new_generation())
    assert load_files(spark, spec, {"f3": str(d)}) == {"f3": 1}
    assertDataFrameEqual(table_rows(spark, spec), [row(7, "q", "f3", D2, "n")])


def test_staged_type_mismatch_fails_that_file_before_writing(spark, unique_db, tmp_path):
    """C12: a data file whose column has another type than the table's: that file is refused
    (schema_mismatch naming the file and column), nothing of it written; the others load."""
    spec = tiny_spec(unique_db)
    d = tmp_path / "f4"
    spark.createDataFrame(
        [(1, "a", "f4", None)],
        "id bigint, kind string, ferry_file_id string, ferry_source_path string",
    ).write.parquet(str(d / "day=2013-01-01"))
    name_files(HadoopFileSystem(spark), str(d), "f4", new_generation())
    ok = stage_files(spark, tmp_path, spec, {"f5": [(5, "e", D1)]})
    got = load_files(spark, spec, {"f4": str(d), **ok})
    err = got["f4"]
    assert isinstance(err, PermanentError) and err.reason == "schema_mismatch"
    assert "column 'id' has type bigint, table expects int" in str(err)
    assert f"{d}/day=2013-01-01/ferry-f4-" in str(err)
    assert got["f5"] == 1
    assertDataFrameEqual(table_rows(spark, spec), [row(5, "e", "f5", D1)])


def test_staged_by_an_earlier_ferry_is_reshaped_and_loaded(spark, unique_db, tmp_path):
    """Flat ``part-*`` staged directories without a file id (a Ferry before the per-file
    layout, staged before the upgrade): read by Spark, reshaped, loaded with their NAS names;
    a later new-shape output of the same file replaces them exactly."""
    spec = tiny_spec(unique_db)
    old = stage(spark, tmp_path / "old", [(1, "a", D1), (2, "a", D2)])
    (tmp_path / "empty").mkdir()
    names = {"old": "tiny/old.csv"}
    got = load_files(spark, spec, {"old": old, "none": str(tmp_path / "empty")}, sources=names)
    assert got == {"old": 2, "none": 0}
    assertDataFrameEqual(
        table_rows(spark, spec),
        [row(1, "a", "old", D1, names["old"]), row(2, "a", "old", D2, names["old"])],
    )
    new = stage_files(spark, tmp_path, spec, {"old": [(3, "b", D2)]})
    assert load_files(spark, spec, new) == {"old": 1}
    assertDataFrameEqual(table_rows(spark, spec), [row(3, "b", "old", D2)])


def test_staged_type_mismatch_of_an_earlier_ferry_fails_before_writing(spark, unique_db, tmp_path):
    spec = tiny_spec(unique_db)
    p = str(tmp_path / "f4")
    spark.createDataFrame(
        [(1, "a", "2013-01-01")], "id int, kind string, day string"
    ).write.parquet(p)
    with pytest.raises(PermanentError, match="column 'day' has type string, table expects date"):
        load_files(spark, spec, {"f4": p})
    assert spark.table(spec.hive.full_name).count() == 0


def test_nothing_staged_and_nothing_loaded_is_hdfs_not_found(spark, unique_db, tmp_path):
    spec = tiny_spec(unique_db)
    got = load_files(spark, spec, {"gone": str(tmp_path / "nowhere")})
    assert isinstance(got["gone"], PermanentError) and got["gone"].reason == "hdfs_not_found"
    assert "replay transfer" in str(got["gone"])
