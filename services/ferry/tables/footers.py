"""Parquet footers read from the driver: a data file's row count and Spark schema without a
Spark job (parquet-hadoop's ``ParquetFileReader``, in pyspark's jars).

The schema is the one Spark wrote into the footer's key-value metadata
(``org.apache.spark.sql.parquet.row.metadata``: a ``StructType`` as JSON); a file written by
another tool is converted from its Parquet schema by Spark's own converter.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import TYPE_CHECKING

from ferry.clusters.hdfs.errors import outage_marker
from ferry.clusters.spark_jobs import java_class
from ferry.errors import HdfsUnavailable, PermanentError

if TYPE_CHECKING:
    from pyspark.sql import SparkSession
    from pyspark.sql.types import StructType

#: Footer key under which Spark writes the row schema (Spark's ``ParquetReadSupport``).
SPARK_SCHEMA_KEY = "org.apache.spark.sql.parquet.row.metadata"

#: Driver threads reading footers: each read is a NameNode and a DataNode round trip (latency,
#: not CPU), so they overlap well.
FOOTER_THREADS = 8


@dataclass(frozen=True)
class Footer:
    """One data file: its rows and its schema (Spark types, file column order)."""

    path: str
    rows: int
    schema: StructType


class FooterReader:
    """Reads footers through one session's JVM: the classes, the Hadoop configuration and
    parquet-hadoop's read options are looked up once (make one per batch of reads).

    The options matter: ``ParquetFileReader.open(file)`` without them builds a new Hadoop
    ``Configuration`` for every file, which parses every ``*-default.xml`` and ``*-site.xml``
    again (issue 45: 46% of the load driver's CPU in a run of 300 small files, sampled by JDK
    Flight Recorder; 24 → 3.4 ms a footer measured on a local file). Thread-safe (py4j calls)."""

    def __init__(self, spark: SparkSession) -> None:
        self._spark = spark
        self._conf = spark._jsc.hadoopConfiguration()
        self._path = java_class(spark, "org.apache.hadoop.fs.Path")
        self._input_file = java_class(spark, "org.apache.parquet.hadoop.util.HadoopInputFile")
        self._reader = java_class(spark, "org.apache.parquet.hadoop.ParquetFileReader")
        self._options = (
            java_class(spark, "org.apache.parquet.HadoopReadOptions").builder(self._conf).build()
        )

    def read(self, path: str) -> Footer:
        """Rows and schema of Parquet file ``path`` (any URI the session's Hadoop can read).

        Raises:
            PermanentError(reason="hdfs_not_found"): the file does not exist.
            HdfsUnavailable: the file could not be read for the cluster's sake (an
                :data:`ferry.clusters.hdfs.errors.OUTAGE_MARKERS` text in the Java exception): a
                later attempt can read it.
            PermanentError(reason="schema_mismatch"): not a Parquet file.
        """
        from pyspark.sql.types import StructType

        try:
            reader = self._reader.open(
                self._input_file.fromPath(self._path(path), self._conf), self._options
            )
        except Exception as exc:  # noqa: BLE001 - py4j wraps the Java exception
            text = str(exc)
            if "FileNotFoundException" in text:
                raise PermanentError(
                    f"staged data file {path} does not exist (replay transfer for this file)",
                    reason="hdfs_not_found",
                ) from exc
            marker = outage_marker(text)
            if marker is not None:
                raise HdfsUnavailable(
                    f"footer of {path} could not be read ({marker}): {text.splitlines()[0][:300]}"
                ) from exc
            raise PermanentError(
                f"{path} is not a readable Parquet file: {text.splitlines()[0][:300]}",
                reason="schema_mismatch",
            ) from exc
        try:
            meta = reader.getFooter().getFileMetaData()
            rows = int(reader.getRecordCount())
            text = meta.getKeyValueMetaData().get(SPARK_SCHEMA_KEY)
            if text is None:
                sql_conf = self._spark._jsparkSession.sessionState().conf()
                converter = java_class(
                    self._spark,
                    "org.apache.spark.sql.execution.datasources.parquet.ParquetToSparkSchemaConverter",
                )
                text = converter(sql_conf).convert(meta.getSchema()).json()
        finally:
            reader.close()
        return Footer(path, rows, StructType.fromJson(json.loads(str(text))))


def read_footer(spark: SparkSession, path: str) -> Footer:
    """:meth:`FooterReader.read` of one file (its errors)."""
    return FooterReader(spark).read(path)


def read_footers(spark: SparkSession, paths: Sequence[str]) -> dict[str, Footer]:
    """:func:`read_footer` of each path, :data:`FOOTER_THREADS` at a time: ``{path: Footer}``.

    Raises:
        PermanentError: as :func:`read_footer`, for the first path that failed.
        HdfsUnavailable: as :func:`read_footer`.
    """
    got = read_footers_or_errors(spark, paths)
    for value in got.values():
        if isinstance(value, PermanentError):
            raise value
    return {p: f for p, f in got.items() if isinstance(f, Footer)}


def read_footers_or_errors(
    spark: SparkSession, paths: Sequence[str]
) -> dict[str, Footer | PermanentError]:
    """:func:`read_footers`, with each path's :class:`PermanentError` in place of its footer.

    Raises:
        HdfsUnavailable: a footer could not be read for the cluster's sake (the whole call is
            retried: the files are fine).
    """

    if not paths:
        return {}
    reader = FooterReader(spark)

    def one(path: str) -> Footer | PermanentError:
        try:
            return reader.read(path)
        except PermanentError as exc:
            return exc

    with ThreadPoolExecutor(min(FOOTER_THREADS, len(paths)), "ferry-footer") as pool:
        return dict(zip(paths, pool.map(one, paths), strict=True))


def schema_problems(schema: StructType, expected: Mapping[str, str]) -> list[str]:
    """How a data file's columns differ from ``expected`` (``{name: type}``, the table's data
    columns), matched BY NAME, case-insensitive as Hive, nullability ignored (case C12). Each
    problem names the column; empty when they match."""
    have = {f.name.lower(): f.dataType.simpleString() for f in schema.fields}
    want = {k.lower(): v for k, v in expected.items()}
    out = [f"missing column {n!r} ({t})" for n, t in want.items() if n not in have]
    out += [f"unexpected column {n!r} ({t})" for n, t in have.items() if n not in want]
    out += [
        f"column {n!r} has type {have[n]}, table expects {t}"
        for n, t in want.items()
        if n in have and have[n] != t
    ]
    return out
