"""Dataset definitions (YAML files in ``datasets/``, :mod:`ferry.datasets.spec`) and the cheap,
pure-Python checks on a file's first bytes (:mod:`ferry.datasets.precheck`)."""

from ferry.datasets.spec import (
    FILE_ID_COLUMN,
    SOURCE_PATH_COLUMN,
    ColumnSpec,
    CsvOptions,
    DatasetSpec,
    DerivedColumn,
    FinishedPolicy,
    HiveTarget,
    NasSource,
    RangeRule,
    ValidationRules,
    dataset_for,
    load_dataset,
    load_datasets,
)

__all__ = [
    "FILE_ID_COLUMN",
    "SOURCE_PATH_COLUMN",
    "ColumnSpec",
    "CsvOptions",
    "DatasetSpec",
    "DerivedColumn",
    "FinishedPolicy",
    "HiveTarget",
    "NasSource",
    "RangeRule",
    "ValidationRules",
    "dataset_for",
    "load_dataset",
    "load_datasets",
]
