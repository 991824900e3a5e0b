"""Load job against a real Hive-enabled local session (Derby metastore): C12 and C13."""

from __future__ import annotations

import datetime as dt

import pytest
from pyspark.sql import Row
from pyspark.sql import types as T
from pyspark.testing import assertDataFrameEqual
from tests.factories import dataset_spec

from ferry.clusters.hive import create_table_sql
from ferry.core.errors import PermanentError
from ferry.datasets.spec import DatasetSpec
from ferry.stages.load.job import (
    align_to_table,
    ensure_table,
    load_files,
    read_staged,
    rows_loaded,
    table_schema,
)

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
    spark.createDataFrame(rows, STAGED).coalesce(1).write.parquet(str(path))
    return str(path)


def test_create_table_sql_partitions_by_the_dataset_columns_only(specs):
    sql = create_table_sql(specs["flights"])
    data = ", ".join(f"`{c.name}` {c.type.upper()}" for c in specs["flights"].columns)
    assert sql == (
        f"CREATE TABLE IF NOT EXISTS `ferry`.`flights` ({data}, `ferry_file_id` STRING, "
        "`ferry_source_path` STRING) "
        "PARTITIONED BY (`flight_date` DATE) STORED AS PARQUET "
        "TBLPROPERTIES ('ferry.dataset'='flights')"
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
        "TBLPROPERTIES ('ferry.dataset'='weather')"
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
    """C13: same file loaded 3 times (retry, replay, re-drop) = one load; neighbour file intact."""
    spec = tiny_spec(unique_db)
    f1 = stage(spark, tmp_path / "f1", [(1, "a", D1), (2, "b", D1), (3, "c", D2)])
    f2 = stage(spark, tmp_path / "f2", [(10, "z", D1)])
    assert load_files(spark, spec, {"f1": f1, "f2": f2}) == {"f1": 3, "f2": 1}
    for _ in range(3):
        assert load_files(spark, spec, {"f1": f1}) == {"f1": 3}
    assertDataFrameEqual(
        spark.table(spec.hive.full_name),
        [
            Row(id=1, kind="a", ferry_file_id="f1", ferry_source_path=None, day=D1),
            Row(id=2, kind="b", ferry_file_id="f1", ferry_source_path=None, day=D1),
            Row(id=3, kind="c", ferry_file_id="f1", ferry_source_path=None, day=D2),
            Row(id=10, kind="z", ferry_file_id="f2", ferry_source_path=None, day=D1),
        ],
    )
    parts = [r.partition for r in spark.sql(f"SHOW PARTITIONS {spec.hive.full_name}").collect()]
    assert sorted(parts) == ["day=2013-01-01", "day=2013-01-02"]
    assert rows_loaded(spark, spec, ["f1", "f2", "f9"]) == {"f1": 3, "f2": 1, "f9": 0}


def test_load_even_when_session_is_in_static_overwrite_mode(spark, unique_db, tmp_path):
    """The load sets dynamic overwrite itself: a static-mode session would wipe other files."""
    spec = tiny_spec(unique_db)
    spark.conf.set("spark.sql.sources.partitionOverwriteMode", "static")
    f1 = stage(spark, tmp_path / "f1", [(1, "a", D1)])
    f2 = stage(spark, tmp_path / "f2", [(2, "b", D1)])
    load_files(spark, spec, {"f1": f1})
    spark.conf.set("spark.sql.sources.partitionOverwriteMode", "static")
    load_files(spark, spec, {"f2": f2})
    assert spark.table(spec.hive.full_name).count() == 2


def test_staged_with_other_column_order_loads_by_name(spark, unique_db, tmp_path):
    """C12 end to end: staged Parquet with columns (day, kind, id) lands in the right columns."""
    spec = tiny_spec(unique_db)
    p = str(tmp_path / "f3")
    spark.createDataFrame([(D2, "q", 7)], "day date, kind string, id int").write.parquet(p)
    assert load_files(spark, spec, {"f3": p}) == {"f3": 1}
    assertDataFrameEqual(
        spark.table(spec.hive.full_name),
        [Row(id=7, kind="q", ferry_file_id="f3", ferry_source_path=None, day=D2)],
    )


def test_staged_type_mismatch_fails_before_writing(spark, unique_db, tmp_path):
    spec = tiny_spec(unique_db)
    p = str(tmp_path / "f4")
    spark.createDataFrame(
        [(1, "a", "2013-01-01")], "id int, kind string, day string"
    ).write.parquet(p)
    with pytest.raises(PermanentError, match="column 'day' has type string, table expects date"):
        load_files(spark, spec, {"f4": p})
    assert spark.table(spec.hive.full_name).count() == 0


def test_read_staged_empty_directory_gives_no_rows(spark, unique_db, tmp_path):
    spec = tiny_spec(unique_db)
    (tmp_path / "empty").mkdir()
    df = read_staged(spark, spec, {"f5": str(tmp_path / "empty")})
    assert df.columns == ["id", "kind", "day", "ferry_file_id", "ferry_source_path"]
    assert df.count() == 0
    assert load_files(spark, spec, {"f5": str(tmp_path / "empty")}) == {"f5": 0}
