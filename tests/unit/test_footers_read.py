"""Footers read from the driver on a real local session (issue 45: one ``FooterReader`` a batch,
its classes looked up by name and parquet-hadoop's read options built once): rows and the
schema Spark wrote, a file written by another Parquet writer (its schema converted by Spark),
a missing file and a file that is not Parquet."""

from __future__ import annotations

from pathlib import Path

import pytest
from pyspark.sql import types as T

from ferry.clusters.spark_jobs import java_class
from ferry.errors import PermanentError
from ferry.tables.footers import FooterReader, read_footer, read_footers_or_errors


def _spark_file(spark, tmp_path: Path, name: str, rows: int) -> str:
    out = tmp_path / name
    df = spark.range(rows).selectExpr("cast(id as int) AS id", "cast(id as string) AS kind")
    df.coalesce(1).write.parquet(str(out))
    return f"file://{next(out.glob('part-*.parquet'))}"


def _other_writer_file(spark, tmp_path: Path) -> str:
    """3 rows written by parquet-hadoop's example writer: no Spark schema in the footer."""
    path = f"file://{tmp_path}/other.parquet"
    schema = java_class(spark, "org.apache.parquet.schema.MessageTypeParser").parseMessageType(
        "message m { required int32 id; optional binary kind (STRING); }"
    )
    builder = java_class(spark, "org.apache.parquet.hadoop.example.ExampleParquetWriter").builder(
        java_class(spark, "org.apache.hadoop.fs.Path")(path)
    )
    writer = builder.withType(schema).withConf(spark._jsc.hadoopConfiguration()).build()
    groups = java_class(spark, "org.apache.parquet.example.data.simple.SimpleGroupFactory")(schema)
    for i in range(3):
        writer.write(groups.newGroup().append("id", i).append("kind", f"k{i}"))
    writer.close()
    return path


def test_rows_and_schema_of_spark_files_with_one_reader(spark, tmp_path: Path) -> None:
    a = _spark_file(spark, tmp_path, "a", 7)
    b = _spark_file(spark, tmp_path, "b", 0)
    reader = FooterReader(spark)
    # as Spark wrote them: range() has no nulls
    want = T.StructType(
        [T.StructField("id", T.IntegerType(), False), T.StructField("kind", T.StringType(), False)]
    )
    got = [reader.read(a), reader.read(b), reader.read(a)]
    assert [(f.path, f.rows, f.schema) for f in got] == [(a, 7, want), (b, 0, want), (a, 7, want)]


def test_a_file_of_another_writer_gets_its_schema_from_sparks_converter(
    spark, tmp_path: Path
) -> None:
    path = _other_writer_file(spark, tmp_path)
    footer = read_footer(spark, path)
    assert footer.rows == 3
    assert [(f.name, f.dataType.simpleString()) for f in footer.schema.fields] == [
        ("id", "int"),
        ("kind", "string"),
    ]


def test_missing_and_not_parquet_files_are_told_apart(spark, tmp_path: Path) -> None:
    good = _spark_file(spark, tmp_path, "good", 2)
    junk = tmp_path / "junk.parquet"
    junk.write_bytes(b"not parquet at all")
    missing = f"file://{tmp_path}/missing.parquet"
    got = read_footers_or_errors(spark, [good, f"file://{junk}", missing])
    assert got[good].rows == 2  # type: ignore[union-attr]
    assert isinstance(got[f"file://{junk}"], PermanentError)
    assert got[f"file://{junk}"].reason == "schema_mismatch"  # type: ignore[union-attr]
    assert isinstance(got[missing], PermanentError)
    assert got[missing].reason == "hdfs_not_found"  # type: ignore[union-attr]
    with pytest.raises(PermanentError, match="does not exist"):
        read_footer(spark, missing)
