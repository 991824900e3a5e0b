"""Dataset definitions: which NAS files belong to a dataset and how they become Hive rows.

One YAML file per dataset in ``settings.paths.datasets_dir`` (``datasets/*.yaml``). A definition
ties a NAS sub-directory and file glob to a parse schema (ordered columns, Spark SQL types), CSV
options, a small declarative set of row validation rules, derived columns, the Hive table with its
partition columns, and the policy by which extract decides a file is finished (case C09).

This module is pure Python (no Spark): extract uses it to match NAS paths; the Spark jobs in
:mod:`ferry.stages` turn it into schemas and DDL.

Table layout (decided here, used by :mod:`ferry.stages.load.job` and :mod:`ferry.tables.hive`):
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
from pathlib import Path, PurePosixPath
from typing import Literal

import yaml
from pydantic import Field, ValidationError, field_validator, model_validator

from ferry.datasets.fields import (
    NAME,
    NUMERIC_TYPES,
    ColumnSpec,
    CsvOptions,
    DerivedColumn,
    FinishedPolicy,
    Frozen,
    HiveTarget,
    NasSource,
    ValidationRules,
    value_fits,
)
from ferry.errors import ConfigError

#: Column added by load to every row: the ``file_id`` of the source file; the table's last data
#: column (not a partition column: a partition per file does not scale, docs/hive-layout.md).
FILE_ID_COLUMN = "ferry_file_id"
#: Column added by load to every row: the file's exact name on the NAS, relative to the NAS root
#: (the manifest's ``source_path``, never the HDFS-safe name); the table's last data column.
#: NULL for rows loaded before the column existed (load adds it to such a table: ALTER TABLE).
SOURCE_PATH_COLUMN = "ferry_source_path"


class DatasetSpec(Frozen):
    """A validated dataset definition. Build with :func:`load_datasets`."""

    name: str = Field(
        description="Dataset name, unique: lower case, `[a-z][a-z0-9_]*`; recorded in every "
        "file's manifest.",
        examples=["orders"],
    )
    nas: NasSource = Field(description="Where the dataset's files are dropped.")
    columns: tuple[ColumnSpec, ...] = Field(
        min_length=1, description="The parse schema: the files' columns, in file order."
    )
    csv: CsvOptions = Field(
        default_factory=CsvOptions, description="How the files are parsed (RFC 4180)."
    )
    validation: ValidationRules = Field(
        default_factory=ValidationRules,
        description="Row rules; a failing row is rejected with its reasons, never dropped.",
    )
    derived: tuple[DerivedColumn, ...] = Field(
        default=(),
        description="Columns computed from the parse columns, after them in the table.",
    )
    hive: HiveTarget = Field(description="The Hive table the rows are loaded into.")
    finished: FinishedPolicy = Field(
        default_factory=FinishedPolicy,
        description="When extract may take a file (never one still being written).",
    )
    decimal_rounding: Literal["HALF_UP"] | None = Field(
        default=None,
        description="A decimal value with more fractional digits than its column's scale is "
        "rejected with reason `scale:<col>=<value>` (case C20: never a silently different "
        "number) unless this names the rounding mode to apply: `HALF_UP` (12.345 → 12.35, "
        "-0.005 → -0.01; the mode of Spark's decimal cast; ferry.stages.transform.decimals).",
        examples=["HALF_UP"],
    )

    @field_validator("name")
    @classmethod
    def _name(cls, v: str) -> str:
        if not NAME.match(v):
            raise ValueError(f"dataset name {v!r} must match {NAME.pattern}")
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
            if types[col] not in NUMERIC_TYPES and not types[col].startswith("decimal"):
                raise ValueError(f"range rule on non-numeric column {col!r} ({types[col]})")
        for col, values in rules.allowed_values.items():
            for v in values:
                if not value_fits(v, types[col]):
                    raise ValueError(
                        f"allowed_values of column {col!r} ({types[col]}): {v!r} is not a "
                        f"value of that type"
                    )
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
