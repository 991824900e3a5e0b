"""Compile a dataset definition with Spark's analyzer before any file of it is read.

A derived column's ``expr`` and the validation rules become Spark SQL expressions only in the
transform job; a typo there (``to_dat(order_ts)``, a column ``amont``) used to fail every batch
of the dataset, so every file was quarantined ``spark_job_failed`` after the retries, naming
neither the dataset nor the field (issue 33). :func:`definition_problems` builds the same plan
the job builds (:func:`ferry.stages.transform.rows.classify`) over an empty frame of the parse
schema and asks Spark for its schema: analysis only, no job, no file. The transform service runs
it on every new definition version (a definition that fails is not run: its files wait), and
``ferry datasets check`` runs it in CI.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from typing import TYPE_CHECKING

from ferry.clusters.spark_jobs import spark_type, struct_for
from ferry.datasets.spec import DatasetSpec
from ferry.stages.transform.rows import SOURCE_COLUMN, classify, csv_schema

if TYPE_CHECKING:
    from pyspark.sql import SparkSession


_QUERY_LOGGERS = ("SQLQueryContextLogger", "DataFrameQueryContextLogger")


def _first_line(exc: BaseException) -> str:
    for raw in str(exc).splitlines():
        line = raw.strip()
        if line:
            return line[:400]
    return type(exc).__name__


def definition_problems(spark: SparkSession, spec: DatasetSpec) -> list[str]:
    """What Spark's analyzer refuses in ``spec``, one line each naming the field; ``[]`` if none.

    Each derived column is analysed alone first (``derived.<i> (<name>): expr '<expr>':
    <Spark's first line>``), then the whole classification with the validation rules
    (``validation: …``). Parse errors (``to_dat(``) are reported the same way.

    Raises:
        whatever building a DataFrame raises when the session itself is broken (not a problem
        of the definition).
    """
    with _quiet_query_context():
        return _problems(spark, spec)


@contextmanager
def _quiet_query_context() -> Iterator[None]:
    """pyspark logs every AnalysisException it raises with its whole Java stack trace (loggers
    ``SQLQueryContextLogger``, ``DataFrameQueryContextLogger``); here the exception is the
    expected answer, reported in one line: those loggers are off meanwhile."""
    from pyspark.logger import PySparkLogger

    loggers = [PySparkLogger.getLogger(n) for n in _QUERY_LOGGERS]
    before = [lg.disabled for lg in loggers]
    for lg in loggers:
        lg.disabled = True
    try:
        yield
    finally:
        for lg, was in zip(loggers, before, strict=True):
            lg.disabled = was


def _problems(spark: SparkSession, spec: DatasetSpec) -> list[str]:
    from pyspark.errors import AnalysisException
    from pyspark.sql import functions as F

    df = spark.createDataFrame([], csv_schema(spec)).withColumn(SOURCE_COLUMN, F.lit(""))
    typed = spark.createDataFrame([], struct_for(spec.columns))  # decimals are text in csv_schema
    problems: list[str] = []
    for i, d in enumerate(spec.derived):
        try:
            _ = typed.select(F.expr(d.expr).try_cast(spark_type(d.type)).alias(d.name)).schema
        except AnalysisException as exc:
            problems.append(f"derived.{i} ({d.name}): expr {d.expr!r}: {_first_line(exc)}")
    if problems:
        return problems
    try:
        _ = classify(df, spec).schema
    except AnalysisException as exc:
        problems.append(f"validation: {_first_line(exc)}")
    return problems


__all__ = ["definition_problems"]
