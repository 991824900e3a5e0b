"""The parts of a dataset definition (:class:`ferry.datasets.spec.DatasetSpec`): a column, a
derived column, the CSV options, the validation rules, the Hive target, the finished-file policy
and the NAS source, each a frozen pydantic model that refuses unknown keys. Every field carries a
description and an example: docs/datasets.md is generated from them
(:mod:`ferry.datasets.reference`, checked by tests/unit/test_datasets_doc.py).
"""

from __future__ import annotations

import re
from datetime import date, datetime
from pathlib import PurePosixPath
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator

#: Spark SQL / Hive type names a column may have (lower case), plus ``decimal(p,s)``.
_SIMPLE_TYPES = frozenset(
    {
        "string",
        "boolean",
        "tinyint",
        "smallint",
        "int",
        "bigint",
        "float",
        "double",
        "date",
        "timestamp",
    }
)
_DECIMAL = re.compile(r"^decimal\(\s*(\d+)\s*,\s*(\d+)\s*\)$")
NAME = re.compile(r"^[a-z][a-z0-9_]*$")
NUMERIC_TYPES = frozenset({"tinyint", "smallint", "int", "bigint", "float", "double"})


def value_fits(value: object, type_name: str) -> bool:
    """Whether a literal of ``allowed_values`` can be compared with a column of ``type_name``
    without a cast that fails at run time (Spark runs with ANSI mode on: ``'PAID'`` compared
    with an int column fails the whole job)."""
    if type_name == "string":
        return isinstance(value, str)
    if type_name == "boolean":
        return isinstance(value, bool)
    if type_name in NUMERIC_TYPES or type_name.startswith("decimal"):
        return isinstance(value, int | float) and not isinstance(value, bool)
    if not isinstance(value, str):
        return False
    try:
        (date.fromisoformat if type_name == "date" else datetime.fromisoformat)(value)
    except ValueError:
        return False
    return True


class Frozen(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")


def _check_type(value: str) -> str:
    v = value.strip().lower()
    if v in _SIMPLE_TYPES:
        return v
    m = _DECIMAL.match(v)
    if m and 0 < int(m.group(1)) <= 38 and int(m.group(2)) <= int(m.group(1)):
        return f"decimal({m.group(1)},{m.group(2)})"
    raise ValueError(
        f"unsupported type {value!r}; use one of {sorted(_SIMPLE_TYPES)} or decimal(p,s)"
    )


class ColumnSpec(Frozen):
    """One parse column: a lower-case name and a Spark SQL type (``int``, ``decimal(9,2)``…)."""

    name: str = Field(
        description="Column name: lower case, `[a-z][a-z0-9_]*`, not starting with `ferry_`; "
        "with `csv.header`, the file's header must name the columns in this order.",
        examples=["order_ts"],
    )
    type: str = Field(
        description="Spark SQL / Hive type: string, boolean, tinyint, smallint, int, bigint, "
        "float, double, date, timestamp or decimal(p,s) (p ≤ 38). A value that does not parse "
        "rejects its row (`type:`, `overflow:`, `date:`, `timestamp:` reasons); a decimal "
        "with more fraction digits than the scale rejects its row too (`scale:`, case C20: "
        "12.345 into decimal(10,2)) unless the dataset sets `decimal_rounding`.",
        examples=["decimal(10,2)"],
    )

    @field_validator("name")
    @classmethod
    def _name(cls, v: str) -> str:
        if not NAME.match(v):
            raise ValueError(
                f"column name {v!r} must match {NAME.pattern} (Hive lower-cases names)"
            )
        if v.startswith("ferry_"):
            raise ValueError(
                f"column name {v!r}: the prefix 'ferry_' is reserved for Ferry's columns"
            )
        return v

    @field_validator("type")
    @classmethod
    def _type(cls, v: str) -> str:
        return _check_type(v)


class DerivedColumn(ColumnSpec):
    """A column computed from the parse columns by a Spark SQL expression.

    The expression must be total: it may not raise on any row (Spark 4 runs with ANSI mode on, so
    use ``try_*`` functions, e.g. ``try_to_date``). A derived partition column that evaluates to
    NULL rejects the row with reason ``invalid_partition_value``.
    """

    name: str = Field(
        description="Column name: lower case, `[a-z][a-z0-9_]*`, not starting with `ferry_`, "
        "unlike every parse column's.",
        examples=["order_day"],
    )
    type: str = Field(
        description="Type of the column (as `columns[].type`); the expression's value is cast "
        "to it with try_cast (NULL when it does not fit).",
        examples=["date"],
    )
    expr: str = Field(
        description="Spark SQL expression over the parse columns (not other derived columns), "
        "cast to `type` with try_cast; must not raise on any row: use try_* functions. "
        "`ferry datasets check` compiles it.",
        examples=["try_to_date(order_ts)"],
    )


class CsvOptions(Frozen):
    """How the files are parsed (Spark CSV options of the same meaning), per RFC 4180: a quoted
    field may hold the delimiter, the quote (doubled, ``escape`` = ``quote``) and line breaks.

    ``multiline`` (default ``true``): a quoted field may span lines (docs/field-cases.md, C14).
    Spark then reads each file as one stream (memory stays bounded) but cannot split a file
    between tasks, so one file is parsed by one core. Set ``multiline: false`` only for a
    dataset whose fields never hold a line break and whose files are large (hundreds of MB):
    Spark then splits each file at line boundaries and parses the parts in parallel, and a
    quoted line break, if one does occur, cuts its record in two (both parts rejected, and
    ``rows_in`` counts both). The default is the mode that is right for every RFC 4180 file;
    the files Ferry moves today (one per day and dataset, under a few MB) are smaller than
    one split (128 MB), so they would not be split anyway.
    """

    header: bool = Field(
        default=True,
        description="First line of each file is a header: checked against `columns` (a "
        "mismatch quarantines the file `header_mismatch`), then skipped.",
        examples=[True],
    )
    delimiter: str = Field(
        default=",",
        min_length=1,
        max_length=1,
        description="Field separator, one character.",
        examples=[";"],
    )
    quote: str = Field(
        default='"',
        min_length=1,
        max_length=1,
        description="Quote character; a quoted field may hold the delimiter and line breaks.",
        examples=['"'],
    )
    escape: str = Field(
        default='"',
        min_length=1,
        max_length=1,
        description="Escape inside quotes (RFC 4180: the quote doubled).",
        examples=["\\"],
    )
    null_value: str = Field(
        default="", description="Token read as NULL (an empty field always is).", examples=["NA"]
    )
    encoding: Literal["UTF-8"] = Field(
        default="UTF-8",
        description="Text encoding; only UTF-8 (a BOM is skipped).",
        examples=["UTF-8"],
    )
    multiline: bool = Field(
        default=True,
        description="Quoted fields may hold line breaks (one task per file); false: the files "
        "are split by lines and parsed in parallel.",
        examples=[False],
    )


class RangeRule(Frozen):
    """Inclusive bounds of a numeric column; ``None`` = unbounded. NULL passes (see not_null)."""

    min: float | None = Field(
        default=None, description="Smallest allowed value (inclusive).", examples=[0]
    )
    max: float | None = Field(
        default=None, description="Largest allowed value (inclusive).", examples=[10000]
    )


class ValidationRules(Frozen):
    """Row rules. A row failing one is rejected with a reason, never dropped.

    Reasons of the rules: ``null:<col>``, ``range:<col>``, ``not_allowed:<col>``, and
    ``invalid_partition_value:<col>`` (a partition column is NULL, reported only when no other
    reason applies). Records the parser refuses
    get ``fields:<found>/<expected>``, ``type:``/``overflow:``/``date:``/``timestamp:<col>=<value>``
    first, and a decimal with more fractional digits than its scale ``scale:<col>=<value>``
    (unless :attr:`ferry.datasets.spec.DatasetSpec.decimal_rounding`); every reason that applies
    is kept (see :mod:`ferry.stages.transform.rows`).
    """

    not_null: tuple[str, ...] = Field(
        default=(),
        description="Columns (parse or derived) that must not be NULL; reason `null:<col>`.",
        examples=[["order_id", "order_ts"]],
    )
    ranges: dict[str, RangeRule] = Field(
        default_factory=dict,
        description="Numeric column → inclusive bounds; reason `range:<col>`. NULL passes.",
        examples=[{"amount": {"min": 0, "max": 10000}}],
    )
    allowed_values: dict[str, tuple[str | int | float, ...]] = Field(
        default_factory=dict,
        description="Column → the only values it may hold (strings for a string column, "
        "numbers for a numeric one); reason `not_allowed:<col>`. NULL passes.",
        examples=[{"status": ["NEW", "PAID", "SHIPPED"]}],
    )


class HiveTarget(Frozen):
    """Target table. ``partition_by``: parse or derived columns, the table's only partition
    columns (``ferry_file_id`` is a data column)."""

    database: str = Field(description="Hive database (created if missing).", examples=["retail"])
    table: str = Field(
        description="Hive table (created at the first load; its columns may only grow).",
        examples=["orders"],
    )
    partition_by: tuple[str, ...] = Field(
        default=(),
        description="Parse or derived columns the table is partitioned by, in order; a row "
        "whose partition value is NULL is rejected (`invalid_partition_value:<col>`).",
        examples=[["order_day"]],
    )

    @field_validator("database", "table")
    @classmethod
    def _ident(cls, v: str) -> str:
        if not NAME.match(v):
            raise ValueError(f"Hive identifier {v!r} must match {NAME.pattern}")
        return v

    @property
    def full_name(self) -> str:
        """``database.table``."""
        return f"{self.database}.{self.table}"


class FinishedPolicy(Frozen):
    """When extract may take a NAS file (case C09: never a file still being copied).

    ``stable``: size and mtime unchanged over ``stable_polls`` consecutive polls ``poll_interval_s``
    seconds apart. ``marker``: a sibling file named ``<file><marker_suffix>`` exists.
    """

    policy: Literal["stable", "marker"] = Field(
        default="stable",
        description="`stable`: size and mtime unchanged for a while; `marker`: a sibling "
        "`<name><marker_suffix>` file exists (written last by the upstream).",
        examples=["marker"],
    )
    stable_polls: int = Field(
        default=2, ge=1, description="Polls the size and mtime must stay unchanged.", examples=[3]
    )
    poll_interval_s: float = Field(
        default=2.0, gt=0, description="Seconds between two of those polls.", examples=[5.0]
    )
    marker_suffix: str = Field(
        default=".done", min_length=1, description="Suffix of the marker file.", examples=[".ok"]
    )


class NasSource(Frozen):
    """Files of the dataset: ``<nas_dir>/<subdir>/<name matching pattern>`` (fnmatch, case kept)."""

    subdir: str = Field(
        description="Sub-directory of the NAS drop directory holding the files (relative).",
        examples=["orders"],
    )
    pattern: str = Field(
        description="Glob of the file names taken (fnmatch, case-sensitive); other names are "
        "reported and left alone.",
        examples=["orders_*.csv"],
    )

    @field_validator("subdir")
    @classmethod
    def _subdir(cls, v: str) -> str:
        p = PurePosixPath(v)
        if p.is_absolute() or ".." in p.parts or not p.parts:
            raise ValueError(f"subdir {v!r} must be a relative path inside the NAS directory")
        return str(p)
