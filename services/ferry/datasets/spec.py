"""Dataset definitions: which NAS files belong to a dataset and how they become Hive rows.

One YAML file per dataset in ``settings.paths.datasets_dir`` (``datasets/*.yaml``). A definition
ties a NAS sub-directory and file glob to a parse schema (ordered columns, Spark SQL types), CSV
options, a small declarative set of row validation rules, derived columns, the Hive table with its
partition columns, and the policy by which extract decides a file is finished (case C09).

This module is pure Python (no Spark): extract uses it to match NAS paths; the Spark jobs in
:mod:`ferry.stages` turn it into schemas and DDL.

Table layout (decided here, used by :mod:`ferry.stages.load.job` and :mod:`ferry.clusters.hive`):
the Hive table holds the parse columns and the derived columns, minus the partition columns, in
definition order, then :data:`FILE_ID_COLUMN` (an ordinary column on every row); then the partition
columns ``hive.partition_by`` (the data's own keys, e.g. ``flight_date``; none: an unpartitioned
table). Each file's rows are data files of their own in those partitions; loading one file again
replaces exactly that file's rows, wherever they were (cases C13, C19, docs/field-cases.md;
docs/hive-layout.md). Tables of the earlier layout, where ``ferry_file_id`` was the last partition
column, are rewritten by ``ferry migrate-layout``.
"""

from __future__ import annotations

import fnmatch
import re
from pathlib import Path, PurePosixPath
from typing import Literal

import yaml
from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator, model_validator

from ferry.core.errors import ConfigError

#: Column added by load to every row: the ``file_id`` of the source file; the table's last data
#: column (not a partition column: a partition per file does not scale, docs/hive-layout.md).
FILE_ID_COLUMN = "ferry_file_id"
#: Column added by load to every row: the file's exact name on the NAS, relative to the NAS root
#: (the manifest's ``source_path``, never the HDFS-safe name); the table's last data column.
#: NULL for rows loaded before the column existed (load adds it to such a table: ALTER TABLE).
SOURCE_PATH_COLUMN = "ferry_source_path"

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
_NAME = re.compile(r"^[a-z][a-z0-9_]*$")
_NUMERIC_TYPES = frozenset({"tinyint", "smallint", "int", "bigint", "float", "double"})


class _Frozen(BaseModel):
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


class ColumnSpec(_Frozen):
    """One parse column: a lower-case name and a Spark SQL type (``int``, ``decimal(9,2)``…)."""

    name: str
    type: str

    @field_validator("name")
    @classmethod
    def _name(cls, v: str) -> str:
        if not _NAME.match(v):
            raise ValueError(
                f"column name {v!r} must match {_NAME.pattern} (Hive lower-cases names)"
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

    expr: str = Field(description="Spark SQL expression over the parse columns.")


class CsvOptions(_Frozen):
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
        default=True, description="First line of each file is a header (checked, then skipped)."
    )
    delimiter: str = Field(default=",", min_length=1, max_length=1)
    quote: str = Field(default='"', min_length=1, max_length=1)
    escape: str = Field(
        default='"',
        min_length=1,
        max_length=1,
        description="Escape inside quotes (RFC 4180: doubled quote).",
    )
    null_value: str = Field(default="", description="Token read as NULL, e.g. 'NA'.")
    encoding: Literal["UTF-8"] = "UTF-8"
    multiline: bool = Field(
        default=True,
        description="Quoted fields may hold line breaks (one task per file); false: the files "
        "are split by lines and parsed in parallel.",
    )


class RangeRule(_Frozen):
    """Inclusive bounds of a numeric column; ``None`` = unbounded. NULL passes (see not_null)."""

    min: float | None = None
    max: float | None = None


class ValidationRules(_Frozen):
    """Row rules. A row failing one is rejected with a reason, never dropped.

    Reasons of the rules: ``null:<col>``, ``range:<col>``, ``not_allowed:<col>``, and
    ``invalid_partition_value:<col>`` (a partition column is NULL, reported only when no other
    reason applies). Records the parser refuses
    get ``fields:<found>/<expected>``, ``type:``/``overflow:``/``date:``/``timestamp:<col>=<value>``
    first, and a decimal with more fractional digits than its scale ``scale:<col>=<value>``
    (unless :attr:`DatasetSpec.decimal_rounding`); every reason that applies is kept (see
    :mod:`ferry.stages.transform.rows`).
    """

    not_null: tuple[str, ...] = ()
    ranges: dict[str, RangeRule] = Field(default_factory=dict)
    allowed_values: dict[str, tuple[str | int | float, ...]] = Field(default_factory=dict)


class HiveTarget(_Frozen):
    """Target table. ``partition_by``: parse or derived columns, the table's only partition
    columns (``ferry_file_id`` is a data column)."""

    database: str
    table: str
    partition_by: tuple[str, ...] = ()

    @field_validator("database", "table")
    @classmethod
    def _ident(cls, v: str) -> str:
        if not _NAME.match(v):
            raise ValueError(f"Hive identifier {v!r} must match {_NAME.pattern}")
        return v

    @property
    def full_name(self) -> str:
        """``database.table``."""
        return f"{self.database}.{self.table}"


class FinishedPolicy(_Frozen):
    """When extract may take a NAS file (case C09: never a file still being copied).

    ``stable``: size and mtime unchanged over ``stable_polls`` consecutive polls ``poll_interval_s``
    seconds apart. ``marker``: a sibling file named ``<file><marker_suffix>`` exists.
    """

    policy: Literal["stable", "marker"] = "stable"
    stable_polls: int = Field(default=2, ge=1)
    poll_interval_s: float = Field(default=2.0, gt=0)
    marker_suffix: str = Field(default=".done", min_length=1)


class NasSource(_Frozen):
    """Files of the dataset: ``<nas_dir>/<subdir>/<name matching pattern>`` (fnmatch, case kept)."""

    subdir: str
    pattern: str

    @field_validator("subdir")
    @classmethod
    def _subdir(cls, v: str) -> str:
        p = PurePosixPath(v)
        if p.is_absolute() or ".." in p.parts or not p.parts:
            raise ValueError(f"subdir {v!r} must be a relative path inside the NAS directory")
        return str(p)


class DatasetSpec(_Frozen):
    """A validated dataset definition. Build with :func:`load_datasets`."""

    name: str
    nas: NasSource
    columns: tuple[ColumnSpec, ...] = Field(min_length=1)
    csv: CsvOptions = Field(default_factory=CsvOptions)
    validation: ValidationRules = Field(default_factory=ValidationRules)
    derived: tuple[DerivedColumn, ...] = ()
    hive: HiveTarget
    finished: FinishedPolicy = Field(default_factory=FinishedPolicy)
    decimal_rounding: Literal["HALF_UP"] | None = Field(
        default=None,
        description="A decimal value with more fractional digits than its column's scale is "
        "rejected with reason scale:<col>=<value> (case C20: never a silently different "
        "number) unless this names the rounding mode to apply: HALF_UP (12.345 → 12.35, "
        "-0.005 → -0.01; the mode of Spark's decimal cast; ferry.stages.transform.decimals).",
    )

    @field_validator("name")
    @classmethod
    def _name(cls, v: str) -> str:
        if not _NAME.match(v):
            raise ValueError(f"dataset name {v!r} must match {_NAME.pattern}")
        return v

    @model_validator(mode="after")
    def _cross_check(self) -> DatasetSpec:
        parse = [c.name for c in self.columns]
        every = parse + [d.name for d in self.derived]
        dupes = sorted({n for n in every if every.count(n) > 1})
        if dupes:
            raise ValueError(f"duplicate column names: {dupes}")
        types = {c.name: c.type for c in (*self.columns, *self.derived)}
        rules = self.validation
        for col in (*rules.not_null, *rules.ranges, *rules.allowed_values):
            if col not in types:
                raise ValueError(f"validation rule names unknown column {col!r}")
        for col in rules.ranges:
            if types[col] not in _NUMERIC_TYPES and not types[col].startswith("decimal"):
                raise ValueError(f"range rule on non-numeric column {col!r} ({types[col]})")
        for col in self.hive.partition_by:
            if col not in types:
                raise ValueError(f"partition column {col!r} is not a parse or derived column")
        if len(set(self.hive.partition_by)) != len(self.hive.partition_by):
            raise ValueError(f"partition_by repeats a column: {list(self.hive.partition_by)}")
        if len(self.hive.partition_by) >= len(every):
            raise ValueError(
                "a Hive table needs at least one column that is not a partition column"
            )
        return self

    # -- views used by extract and the jobs -----------------------------------------------------

    def match(self, relative_nas_path: str | PurePosixPath) -> bool:
        """True if a path relative to the NAS directory is a file of this dataset.

        ``flights/flights_2013-01-01.csv`` matches ``subdir: flights``, ``pattern: flights_*.csv``;
        files in deeper sub-directories, and marker files, do not. Compared as given (no Unicode
        normalisation: extract normalises names before asking).
        """
        p = PurePosixPath(relative_nas_path)
        if str(p.parent) != self.nas.subdir:
            return False
        if self.finished.policy == "marker" and p.name.endswith(self.finished.marker_suffix):
            return False
        return fnmatch.fnmatchcase(p.name, self.nas.pattern)

    @property
    def all_columns(self) -> tuple[ColumnSpec, ...]:
        """Parse columns then derived columns: the columns of a staged (Parquet) row, in order."""
        return (*self.columns, *(ColumnSpec(name=d.name, type=d.type) for d in self.derived))

    @property
    def table_data_columns(self) -> tuple[ColumnSpec, ...]:
        """Non-partition columns of the Hive table, in table order, ending with
        ``ferry_file_id string, ferry_source_path string``."""
        return (
            *(c for c in self.all_columns if c.name not in self.hive.partition_by),
            ColumnSpec.model_construct(name=FILE_ID_COLUMN, type="string"),
            ColumnSpec.model_construct(name=SOURCE_PATH_COLUMN, type="string"),
        )

    @property
    def table_partition_columns(self) -> tuple[ColumnSpec, ...]:
        """Partition columns of the Hive table (``hive.partition_by``), in order."""
        types = {c.name: c.type for c in self.all_columns}
        return tuple(ColumnSpec(name=n, type=types[n]) for n in self.hive.partition_by)

    @property
    def table_columns(self) -> tuple[ColumnSpec, ...]:
        """Every Hive table column in table order (data columns, then partition columns)."""
        return (*self.table_data_columns, *self.table_partition_columns)


def load_dataset(path: str | Path) -> DatasetSpec:
    """Read and validate one definition file.

    Raises:
        ConfigError: the file cannot be read, is not YAML, or is not a valid definition; the
            message names the file.
    """
    path = Path(path)
    try:
        data = yaml.safe_load(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, yaml.YAMLError) as exc:
        raise ConfigError(f"dataset definition {path}: cannot read: {exc}") from exc
    if not isinstance(data, dict):
        raise ConfigError(
            f"dataset definition {path}: must be a mapping, not {type(data).__name__}"
        )
    try:
        return DatasetSpec.model_validate(data)
    except ValidationError as exc:
        raise ConfigError(f"dataset definition {path}: invalid: {exc}") from exc


def load_datasets(directory: str | Path) -> dict[str, DatasetSpec]:
    """Every ``*.yaml``/``*.yml`` definition in ``directory``, keyed by dataset name.

    Raises:
        ConfigError: the directory is missing, a file is invalid (named), two files define the
            same dataset name, or two datasets share a NAS sub-directory and pattern.
    """
    directory = Path(directory)
    if not directory.is_dir():
        raise ConfigError(f"datasets directory {directory} does not exist")
    specs: dict[str, DatasetSpec] = {}
    origin: dict[str, Path] = {}
    for path in sorted([*directory.glob("*.yaml"), *directory.glob("*.yml")]):
        spec = load_dataset(path)
        if spec.name in specs:
            raise ConfigError(
                f"dataset {spec.name!r} defined twice: {origin[spec.name]} and {path}"
            )
        for other in specs.values():
            if (other.nas.subdir, other.nas.pattern) == (spec.nas.subdir, spec.nas.pattern):
                raise ConfigError(
                    f"datasets {other.name!r} and {spec.name!r} ({path}) claim the same NAS files"
                )
        specs[spec.name] = spec
        origin[spec.name] = path
    return specs


def dataset_for(
    specs: dict[str, DatasetSpec], relative_nas_path: str | PurePosixPath
) -> DatasetSpec | None:
    """The one dataset whose definition matches the path, or ``None`` if no dataset claims it."""
    for spec in specs.values():
        if spec.match(relative_nas_path):
            return spec
    return None
