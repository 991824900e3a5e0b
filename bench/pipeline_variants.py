"""bench_pipeline's single-file rows: lone files on the idle pipeline (dropped by rename or
written in place) and a big file dropped gzipped.

A gzipped drop needs a dataset whose ``nas.pattern`` takes ``*.csv.gz`` (the demo's ``flights``
takes ``flights_*.csv`` only): :func:`definitions_with_gz` writes the run's definitions directory,
the repository's definitions plus ``flights_gz`` (the flights definition with its own NAS
sub-directory, pattern ``flights_*.csv.gz`` and table ``ferry.flights_gz``); bench_pipeline points
``paths.datasets_dir`` at it before any settings are read, so the services see it too.
"""

from __future__ import annotations

import gzip
import os
import shutil
import statistics
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import Any

import yaml
from pipeline_parts import pct, run_ferry

from ferry.settings import Settings
from ferry_kit.pipeline import ServiceGroup

#: The gzipped variant's dataset: the flights definition under another name, sub-directory,
#: pattern and table.
GZ_DATASET = "flights_gz"

Rows = list[tuple[str, ...]]


def definitions_with_gz(src: Path, dest: Path) -> Path:
    """``dest`` (made anew): every ``*.yaml`` definition of ``src``, plus ``flights_gz.yaml``."""
    if dest.exists():
        shutil.rmtree(dest)
    dest.mkdir(parents=True)
    for path in sorted(src.glob("*.yaml")):
        shutil.copyfile(path, dest / path.name)
    spec = yaml.safe_load((src / "flights.yaml").read_text(encoding="utf-8"))
    spec["name"] = GZ_DATASET
    spec["nas"] = {"subdir": GZ_DATASET, "pattern": "flights_*.csv.gz"}
    spec["hive"]["table"] = GZ_DATASET
    (dest / f"{GZ_DATASET}.yaml").write_text(yaml.safe_dump(spec, sort_keys=False))
    return dest


def gzip_copy(src: Path, dest: Path, level: int = 6) -> Path:
    """``src`` gzipped (``level``, gzip's default 6) at ``dest``, streamed in 1 MiB chunks;
    reused when newer than ``src``."""
    if dest.exists() and dest.stat().st_mtime >= src.stat().st_mtime:
        return dest
    tmp = dest.with_name(f".{dest.name}.tmp")
    with src.open("rb") as fin, gzip.open(tmp, "wb", compresslevel=level) as fout:
        shutil.copyfileobj(fin, fout, 1 << 20)
    os.replace(tmp, dest)
    return dest


def gz_part(
    settings: Settings,
    big: Path,
    mb: int,
    group: ServiceGroup,
    rows: Rows,
    ferry_s: dict[str, float],
    say: Callable[[str], None],
) -> None:
    """The ``mb`` MB big file gzipped, dropped by rename into ``flights_gz``: NAS → Hive."""
    gz = gzip_copy(big, big.with_name(big.name + ".gz"))
    say(f"big: {gz.name} ({gz.stat().st_size / 1e6:.0f} MB gzipped, {mb} MB of CSV) …")
    nas = settings.paths.nas_dir / GZ_DATASET / gz.name
    r = run_ferry(settings, [(GZ_DATASET, gz, nas)], 900, group, slow_every=0)
    rate = f"{mb / r.wall_s:.1f} MB/s of CSV"
    rows.append(("big", f"{mb} MB file gzipped NAS → Hive", f"{r.wall_s:.1f}", rate, "< 60 s"))
    ferry_s[f"{mb} MB file gzipped"] = r.wall_s
    for hop, (med, _) in r.latencies.items():
        rows.append(("big", f"  {hop} (median)", f"{med:.1f}", "", ""))


def lone_file(src: Path, dest: Path) -> Path:
    """``src`` without its last data row at ``dest``: a file no earlier run loaded (own id)."""
    lines = src.read_bytes().splitlines(keepends=True)
    dest.parent.mkdir(parents=True, exist_ok=True)
    dest.write_bytes(b"".join(lines[:-1]))
    return dest


def lone_part(
    settings: Settings,
    demo: list[Any],
    work: Path,
    count: int,
    group: ServiceGroup,
    rows: Rows,
    say: Callable[[str], None],
    *,
    in_place: bool,
) -> None:
    """``count`` files no run loaded before, each dropped alone on the idle pipeline: by rename
    from a hidden name, or written in place (extract's stable policy then waits its polls)."""
    how = "written in place" if in_place else "dropped by rename"
    target = "p50 < 6" if in_place else "p50 < 3"
    say(f"ferry: {count} lone files {how} on the idle pipeline …")
    nas = settings.paths.nas_dir
    flights = [f for f in demo if f.dataset == "flights"]
    lone: list[float] = []
    per_hop: dict[str, list[float]] = {}
    offset = count if in_place else 0  # other days than the renamed ones
    for i, f in enumerate(flights[offset : offset + count]):
        name = f"flights_lone_{i}_{uuid.uuid4().hex[:6]}.csv"
        src = lone_file(f.path, work / "lone" / name)
        r = run_ferry(
            settings,
            [("flights", src, nas / "flights" / src.name)],
            120,
            group,
            slow_every=1 if in_place else 0,
        )
        lone.append(r.hops["drop → loaded"][0] if r.hops["drop → loaded"] else float("nan"))
        hops = ", ".join(f"{h} {v[0]:.1f}" for h, v in r.latencies.items())
        say(f"lone {src.name}: {lone[-1]:.1f}s ({hops})")
        for hop, (med, _) in r.latencies.items():
            per_hop.setdefault(hop, []).append(med)
    rows.append(
        (
            "ferry",
            f"one file NAS → Hive, {how}, idle warm pipeline (×{len(lone)})",
            f"p50 {pct(lone, 0.5):.1f}",
            f"p95 {pct(lone, 0.95):.1f}, max {max(lone):.1f}",
            f"target {target}",
        )
    )
    for hop, vals in per_hop.items():
        rows.append(("ferry", f"  lone: {hop} (median)", f"{statistics.median(vals):.1f}", "", ""))
