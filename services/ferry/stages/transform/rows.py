"""Rows of the transform job: the CSV scan, the reject reasons of each record, per-file counts.

Parsing follows RFC 4180: a quoted field may hold the delimiter, a doubled quote and line breaks
(docs/field-cases.md, C14). With ``csv.multiline`` (the default) Spark reads each file as one
stream, so a quoted line break stays inside its record; with ``multiline: false`` files are split
into line-based chunks and parsed in parallel, and a quoted line break splits its record.

Reject reasons (column :data:`REJECT_REASON_COLUMN`, several joined by :data:`REASON_SEPARATOR`,
in this order)::

    fields:<found>/<expected>   the record has another number of fields (reported alone: the
                                values of such a record are not where the columns expect them)
    malformed                   the parser refused the record for no reason listed here
    type:<col>=<value>          not a value of the column's type (``abc``, ``-4.7`` in an int)
    overflow:<col>=<value>      an integer (or decimal) too large for the column's type
    scale:<col>=<value>         a decimal with more fractional digits than the column's scale
                                (unless the dataset's ``decimal_rounding`` allows rounding;
                                :mod:`ferry.stages.transform.decimals`)
    date:<col>=<value>          not a valid date (``2016-02-30``)
    timestamp:<col>=<value>     not a valid timestamp
    null:<col>  range:<col>  not_allowed:<col>
                                the dataset's rules (see :class:`ferry.datasets.ValidationRules`)
    invalid_partition_value:<col>
                                a partition column is NULL; only when no reason above applies
                                (it is most often their consequence)

``<value>`` is the field's text, at most :data:`VALUE_CHARS` characters (then ``…``), with
control characters (line breaks) and ``;`` shown as ``?``. A column with a value error is not
also reported as ``null:<col>``. The *code* of a reason is
its text before ``=`` (``type:dep_delay``): :func:`ferry.stages.transform.counts.file_counts`
counts rows per code, so the counts stay few whatever the values.

Everything is a Spark SQL expression (no Python per row); the reasons of a value error are
computed only for the records the CSV parser flagged (:data:`CORRUPT_COLUMN` not NULL).
"""

from __future__ import annotations

import operator
from collections.abc import Sequence
from functools import reduce
from typing import TYPE_CHECKING

from ferry.clusters.spark_jobs import (
    escape_glob,
    path_key,
    source_key_column,
    spark_type,
    struct_for,
)
from ferry.datasets.fields import ColumnSpec, CsvOptions
from ferry.datasets.spec import DatasetSpec
from ferry.stages.transform.decimals import decimals, raw_column
from ferry.stages.transform.decimals import problems as decimal_problems
from ferry.stages.transform.decimals import typed as decimal_values

if TYPE_CHECKING:
    from pyspark.sql import Column, DataFrame, SparkSession
    from pyspark.sql.types import StructType

#: Raw text of a record Spark could not parse into the schema (wrong field count, bad value).
CORRUPT_COLUMN = "_corrupt_record"
#: Source file of each row: the decoded path component
#: (see :func:`ferry.clusters.spark_jobs.path_key`).
SOURCE_COLUMN = "ferry_source_path"
#: Why a row was rejected (one or more reasons, see the module docstring); NULL for a valid row.
REJECT_REASON_COLUMN = "reject_reason"
#: Separator of the reasons of one row in :data:`REJECT_REASON_COLUMN`.
REASON_SEPARATOR = ";"
#: Characters of an offending value kept in a reason.
VALUE_CHARS = 40

_INTEGRAL = frozenset({"tinyint", "smallint", "int", "bigint"})
_INTEGER_TEXT = r"^[+-]?[0-9]+$"
_DECIMAL_TEXT = r"^[+-]?([0-9]+\.?[0-9]*|\.[0-9]+)([eE][+-]?[0-9]+)?$"


def reader_options(o: CsvOptions) -> dict[str, str]:
    """Spark CSV options of a dataset's :class:`ferry.datasets.CsvOptions` (also used by
    ``from_csv`` to re-read a flagged record, so both parse alike)."""
    return {
        "sep": o.delimiter,
        "quote": o.quote,
        "escape": o.escape,
        "nullValue": o.null_value,
        "encoding": o.encoding,
        "mode": "PERMISSIVE",
    }


def csv_schema(spec: DatasetSpec) -> StructType:
    """Parse schema: the definition's columns in order (decimal columns as text, converted by
    :func:`classify`, see :mod:`ferry.stages.transform.decimals`), then :data:`CORRUPT_COLUMN`."""
    from pyspark.sql import types as T

    text = {c.name for c, _, _ in decimals(spec)}
    schema = struct_for(
        [c if c.name not in text else ColumnSpec(name=c.name, type="string") for c in spec.columns]
    )
    return schema.add(T.StructField(CORRUPT_COLUMN, T.StringType(), True))


def read_csv(spark: SparkSession, paths: Sequence[str], spec: DatasetSpec) -> DataFrame:
    """Read many CSV files of one dataset in one scan.

    ``paths`` are absolute, raw (not percent-encoded) paths or URIs (``hdfs://nn/ferry/landing/…``);
    any character is allowed in a file name (glob characters are escaped, C07). Columns of the
    result: the definition's columns, :data:`CORRUPT_COLUMN`, :data:`SOURCE_COLUMN` (equal to
    ``path_key(p)`` of the path ``p`` the row came from). Mode PERMISSIVE: a malformed record
    becomes a row with :data:`CORRUPT_COLUMN` set. ``multiLine`` is ``spec.csv.multiline``. A
    UTF-8 BOM is skipped by Spark's parser (C10; asserted by ``tests/unit/test_jobs_transform.py``).
    The header line is not checked here (see :func:`ferry.datasets.precheck.check_header`);
    columns are taken by position.

    Raises:
        ValueError: ``paths`` is empty or holds a relative path.
        pyspark.errors.AnalysisException: a path does not exist (when the plan is built).
    """
    from pyspark.sql import functions as F

    if not paths:
        raise ValueError("read_csv needs at least one path")
    for p in paths:
        if not path_key(p).startswith("/"):
            raise ValueError(f"path {p!r} must be absolute")
    o = spec.csv
    df = (
        spark.read.schema(csv_schema(spec))
        .options(**reader_options(o))
        .option("header", str(o.header).lower())
        .option("enforceSchema", "true")
        .option("multiLine", str(o.multiline).lower())
        .option("columnNameOfCorruptRecord", CORRUPT_COLUMN)
        .csv([escape_glob(p) for p in paths])
    )
    return df.select("*", source_key_column(F.col("_metadata.file_path")).alias(SOURCE_COLUMN))


def _java_literal(ch: str) -> str:
    """One character as a Java regex literal (also inside ``[...]``)."""
    return ch if ch.isalnum() else "\\" + ch


def field_count(raw: Column, o: CsvOptions) -> Column:
    """Spark column: the number of fields of the raw record text ``raw`` (int).

    Quoted sections (a quote at the start of a field up to its closing quote, with escaped or
    doubled quotes inside) are removed first, so a delimiter or a line break inside quotes is not
    counted; then fields = delimiters + 1.
    """
    from pyspark.sql import functions as F

    d, q, e = (_java_literal(c) for c in (o.delimiter, o.quote, o.escape))
    inner = f"(?:[^{q}]|{q}{q})*" if o.escape == o.quote else f"(?:[^{q}{e}]|{e}.)*"
    bare = F.regexp_replace(raw, f"(?s)(^|{d}){q}{inner}{q}", "$1")
    return F.length(bare) - F.length(F.replace(bare, F.lit(o.delimiter), F.lit(""))) + 1


def _shown(value: Column) -> Column:
    """The value as it appears in a reason: control characters and ``;`` → ``?``, truncated."""
    from pyspark.sql import functions as F

    clean = F.regexp_replace(value, r"[\p{Cntrl};]", "?")
    return F.when(
        F.char_length(clean) > VALUE_CHARS, F.concat(F.substring(clean, 1, VALUE_CHARS), F.lit("…"))
    ).otherwise(clean)


def _value_kind(type_name: str, token: Column) -> Column:
    """Spark column: the reason code prefix of a value the parser refused for this type."""
    from pyspark.sql import functions as F

    if type_name in ("date", "timestamp"):
        return F.lit(type_name)
    if type_name in _INTEGRAL:
        return F.when(token.rlike(_INTEGER_TEXT), "overflow").otherwise("type")
    if type_name.startswith("decimal"):
        return F.when(token.rlike(_DECIMAL_TEXT), "overflow").otherwise("type")
    return F.lit("type")


#: Helper columns of :func:`classify`, dropped before it returns: the raw record's field count
#: and the flagged record's fields as strings (a struct ``c0``, ``c1``, …).
_FIELDS_COLUMN = "_ferry_fields"
_TOKENS_COLUMN = "_ferry_tokens"
#: Helper column of :func:`classify`: the array of value and rule reasons (:func:`_checks`).
_CHECKS_COLUMN = "_ferry_checks"


def _helpers(spec: DatasetSpec) -> dict[str, Column]:
    """The helper columns, each computed once per row and referenced by name by the reasons.

    Written inline, ``from_csv`` and the field count were copied into every check, and the
    checks into every later step: 768 copies of ``from_csv`` for flights, a plan of 966,000
    characters (17,200 now), analysed, optimised and printed for each of a batch's actions.
    As columns of their own projection they are one node each; Spark does not collapse a
    projection into the next one when that would duplicate a non-cheap expression
    (``CollapseProject``), so they are also computed once per row.
    """
    from pyspark.sql import functions as F

    o, n = spec.csv, len(spec.columns)
    raw = F.col(CORRUPT_COLUMN)
    _bad_fields, flagged = _flags(n)
    schema = ", ".join(f"c{i} string" for i in range(n))
    return {
        _FIELDS_COLUMN: field_count(raw, o),
        _TOKENS_COLUMN: F.when(flagged, F.from_csv(raw, schema, reader_options(o))),
    }


def _flags(n: int) -> tuple[Column, Column]:
    """(the record has another number of fields than ``n``, the parser flagged it otherwise)."""
    from pyspark.sql import functions as F

    raw = F.col(CORRUPT_COLUMN)
    bad_fields = raw.isNotNull() & (F.col(_FIELDS_COLUMN) != F.lit(n))
    return bad_fields, raw.isNotNull() & ~bad_fields


def _checks(spec: DatasetSpec) -> Column:
    """Spark column: the array of the row's value and rule reasons, NULL when none applies or
    when the field count is wrong (the array is built only for a row one check hits). Reads the
    columns of :func:`_helpers`."""
    from pyspark.sql import functions as F

    bad_fields, flagged = _flags(len(spec.columns))
    tokens = F.col(_TOKENS_COLUMN)
    value_error: dict[str, Column] = {}
    checks: list[tuple[Column, Column]] = []
    # Every parse column, strings too: a query then always reads all of them, so Spark's CSV
    # column pruning never narrows what the parser checks (it compares a record's field count
    # only with the columns a query reads).
    dec = decimal_problems(spec)
    for i, col in enumerate(spec.columns):
        if col.name in dec:  # read as text: refused here, not by the parser
            failed, kind = dec[col.name]
            value_error[col.name] = failed
            shown = _shown(F.col(raw_column(col.name)))
            checks.append((failed, F.concat(kind, F.lit(f":{col.name}="), shown)))
            continue
        token = tokens.getField(f"c{i}")
        failed = flagged & token.isNotNull() & F.col(col.name).isNull()
        value_error[col.name] = failed
        text = F.concat(_value_kind(col.type, token), F.lit(f":{col.name}="), _shown(token))
        checks.append((failed, text))
    ok_fields = ~F.coalesce(bad_fields, F.lit(False))
    rules = spec.validation
    for c in rules.not_null:
        cond = F.col(c).isNull()
        if c in value_error:
            cond = cond & ~value_error[c]
        checks.append((cond, F.lit(f"null:{c}")))
    for c, r in rules.ranges.items():
        cond = F.lit(False)
        if r.min is not None:
            cond = cond | (F.col(c) < F.lit(r.min))
        if r.max is not None:
            cond = cond | (F.col(c) > F.lit(r.max))
        checks.append((F.coalesce(cond, F.lit(False)), F.lit(f"range:{c}")))
    for c, values in rules.allowed_values.items():
        bad = F.coalesce(~F.col(c).isin(list(values)), F.lit(False))
        checks.append((bad, F.lit(f"not_allowed:{c}")))
    if not checks:
        return F.lit(None).cast("array<string>")
    # Most rows pass every check: one boolean expression decides whether the array is built
    # (an array of every check per valid row was most of transform's cost on big files).
    hit = ok_fields & F.coalesce(reduce(operator.or_, [cond for cond, _ in checks]), F.lit(False))
    return F.when(hit, F.array_compact(F.array(*[F.when(cond, r) for cond, r in checks])))


def _reasons(spec: DatasetSpec) -> Column:
    """Spark column: the reasons of a row, joined; NULL when the row is valid. Reads the
    columns of :func:`_helpers` and :data:`_CHECKS_COLUMN` (:func:`_checks`)."""
    from pyspark.sql import functions as F

    n = len(spec.columns)
    bad_fields, flagged = _flags(n)
    found = F.col(_FIELDS_COLUMN)
    others = F.coalesce(F.col(_CHECKS_COLUMN), F.array().cast("array<string>"))
    # A record the parser flagged always gets a reason, even one none of the checks names.
    malformed = F.when(flagged & (F.size(others) == 0), F.lit("malformed"))
    fields = F.when(bad_fields, F.concat(F.lit("fields:"), found.cast("string"), F.lit(f"/{n}")))
    causes = F.concat(F.array_compact(F.array(fields, malformed)), others)
    # A NULL partition value is most often the consequence of another problem of the row (a
    # month of 13 makes a derived date NULL): it is reported only when nothing else explains it.
    partition = F.array_compact(
        F.array(
            *[
                F.when(F.col(c).isNull(), F.lit(f"invalid_partition_value:{c}"))
                for c in spec.hive.partition_by
            ]
        )
    )
    every = F.when(F.size(causes) > 0, causes).otherwise(partition)
    # A row with no flag, no check hit and its partition values present is valid: its reason is
    # NULL without building the arrays above.
    suspect = [F.col(CORRUPT_COLUMN).isNotNull(), F.col(_CHECKS_COLUMN).isNotNull()]
    suspect += [F.col(c).isNull() for c in spec.hive.partition_by]
    reason = F.when(F.size(every) > 0, F.array_join(every, REASON_SEPARATOR))
    return F.when(reduce(operator.or_, suspect), reason)


#: The classification's column expressions per dataset definition (keyed by ``id(spec)``, the
#: spec kept alive beside them): building them from Python is thousands of py4j round trips
#: (6,800 for flights, bench/bench_transform.py), slow on a loaded machine. Built once per
#: dataset and process: unresolved expressions belong to the driver's JVM, not to a session.
_BUILT: dict[int, tuple[DatasetSpec, dict[str, Column], dict[str, Column], Column]] = {}


def _expressions(spec: DatasetSpec) -> tuple[dict[str, Column], dict[str, Column], Column]:
    """(derived column expressions by name, helper columns by name in the order they are added,
    the reason expression) of ``spec``, built once."""
    from pyspark.sql import functions as F

    hit = _BUILT.get(id(spec))
    if hit is None or hit[0] is not spec:
        derived = {d.name: F.expr(d.expr).try_cast(spark_type(d.type)) for d in spec.derived}
        helpers = _helpers(spec) | {_CHECKS_COLUMN: _checks(spec)}
        hit = _BUILT[id(spec)] = (spec, derived, helpers, _reasons(spec))
    return hit[1], hit[2], hit[3]


def classify(df: DataFrame, spec: DatasetSpec) -> DataFrame:
    """Add the derived columns (``try_cast`` to their type) and :data:`REJECT_REASON_COLUMN`.

    Input: the frame of :func:`read_csv` (any frame with the definition's columns,
    :data:`CORRUPT_COLUMN` and :data:`SOURCE_COLUMN`). Output: the same rows, no row added or
    removed, columns = input + each decimal column's source text
    (:func:`~ferry.stages.transform.decimals.raw_column`, what :func:`split` keeps in the
    rejects) + derived + reason. Pure: no action is run. One projection per
    step, each reading the columns of the one before: the derived columns, the field count, the
    flagged record's fields, the value and rule reasons, the joined reason (the helper columns
    are dropped). Written as one expression, the reason held 768 copies of ``from_csv`` for
    flights (see :func:`_helpers`; docs/operations.md, "Query planning"). Decimal columns,
    read as text, are converted first (:mod:`ferry.stages.transform.decimals`).
    """
    from pyspark.sql import functions as F

    derived, helpers, reasons = _expressions(spec)
    raws = {raw_column(c.name): F.col(c.name) for c, _, _ in decimals(spec)}
    out = df.withColumns(raws).withColumns(decimal_values(spec)) if raws else df
    out = out.withColumns(derived) if derived else out
    for name, expr in helpers.items():  # one projection each: each reads the one before
        out = out.withColumn(name, expr)
    return out.withColumn(REJECT_REASON_COLUMN, reasons).drop(*helpers)


def split(classified: DataFrame, spec: DatasetSpec) -> tuple[DataFrame, DataFrame]:
    """``(valid, rejects)`` of a :func:`classify` output.

    valid: the staged columns (:attr:`DatasetSpec.all_columns`) then :data:`SOURCE_COLUMN`.
    rejects: the parse columns, :data:`CORRUPT_COLUMN`, :data:`SOURCE_COLUMN`,
    :data:`REJECT_REASON_COLUMN`; a decimal column holds its source text (a string), so a
    value refused as ``scale:``/``overflow:``/``type:`` is kept as the file held it.
    """
    from pyspark.sql import functions as F

    reason = F.col(REJECT_REASON_COLUMN)
    valid = classified.where(reason.isNull()).select(
        *[c.name for c in spec.all_columns], SOURCE_COLUMN
    )
    texts = {c.name for c, _, _ in decimals(spec)}
    parsed = [
        F.col(raw_column(c.name)).alias(c.name) if c.name in texts else F.col(c.name)
        for c in spec.columns
    ]
    rejects = classified.where(reason.isNotNull()).select(
        *parsed, CORRUPT_COLUMN, SOURCE_COLUMN, REJECT_REASON_COLUMN
    )
    return valid, rejects


def transform(df: DataFrame, spec: DatasetSpec) -> tuple[DataFrame, DataFrame]:
    """The pure transform, tested on a few rows: ``split(classify(df, spec), spec)``."""
    return split(classify(df, spec), spec)
