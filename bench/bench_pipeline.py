"""Ferry against the per-file design it replaces, on the same stack in one run: one table.

Parts (``--parts``, comma separated; default all, in this order):

* ``baseline``: the per-file design on a sample of ``--sample`` daily files (every k-th of the
  demo's 729): per file one ``spark-submit`` (pyspark's, against the stack's Spark masters) that
  transforms it on B and stages it on A, then one that loads it into Hive (bench/baseline_job.py,
  the same dataset definitions and job code); seconds per file, extrapolated to 729 files;
* ``ferry``: the four stage services on the same sample, then on all 729 files (dropped the
  demo's way), wall time, files/min, per-hop median/p95, ratio to the baseline; then
  ``--lone`` single files each dropped on the idle, warm pipeline: drop → Hive p50/p95;
* ``big``: files of ``--big-mb`` MB (the year's flights repeated) through the services, per hop
  seconds and MB/s;
* ``stream``: the first big file landed by extract's handler (WebHDFS, sha256) and copied B → A by
  transfer's copy, beside ``hdfs dfs -put`` and ``-cp`` of the same file (the stack's Hadoop jars);
* ``floor``: plain Spark ``local[2]`` CSV → Parquet over the same bytes (the year; each big file).

Peak RSS of every stack component and service is sampled throughout (psutil, 0.5 s).
MB = 10^6 bytes. Usage: ``python bench/bench_pipeline.py [--parts ferry,big] [--sample 20]
[--big-mb 300,1000] [--lone 5]``. Starts the stack if needed and stops it at the end unless
``--keep-up``. Prints figures; asserts nothing about time.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
import uuid
from pathlib import Path

from pipeline_parts import (
    BaselineResult,
    FerryRun,
    RssSampler,
    big_file,
    floor,
    fs_shell,
    pct,
    run_baseline,
    run_ferry,
)
from rich.console import Console
from rich.table import Table

from ferry.clusters.hdfs import WebHdfs
from ferry.core.config import Settings, get_settings
from ferry.core.events import FileExtracted
from ferry.core.kafka import build_admin
from ferry.core.topics import ensure_topics
from ferry.datasets import load_datasets
from ferry.demo_data import write_demo_files
from ferry.pipeline import ServiceGroup
from ferry.stack.manager import Stack
from ferry.stages.extract.handlers import ExtractDeps, extract_file
from ferry.stages.extract.scanner import Candidate
from ferry.stages.transfer.copy import copy_between

PARTS = ("baseline", "ferry", "big", "stream", "floor")
YEAR = 729
console = Console(width=160)


def say(text: str) -> None:
    console.print(f"[dim]{time.strftime('%H:%M:%S')}[/dim] {text}", soft_wrap=True)


def stream(settings: Settings, path: Path, rows: list[tuple[str, ...]]) -> None:
    """Extract's landing and transfer's copy of ``path``, then ``hdfs dfs -put``/``-cp``."""
    spec = load_datasets(settings.paths.datasets_dir)["flights"]
    b, a = settings.cluster("b"), settings.cluster("a")
    hb, ha = WebHdfs.for_cluster("b", settings), WebHdfs.for_cluster("a", settings)
    root = f"/bench/stream-{uuid.uuid4().hex[:8]}"
    mb = path.stat().st_size / 1e6
    st = path.stat()
    cand = Candidate(path, spec, f"flights/{path.name}", st.st_size, st.st_mtime_ns)
    try:
        deps = ExtractDeps(hb, f"{root}/landing", b.fs_url, settings.extract.chunk_bytes)
        t0 = time.perf_counter()
        [ev] = extract_file(cand, deps)
        s = time.perf_counter() - t0
        assert isinstance(ev, FileExtracted)
        rows.append(
            (
                "stream",
                f"extract landing {mb:.0f} MB (sha256)",
                f"{s:.1f}",
                f"{mb / s:.0f} MB/s",
                "",
            )
        )
        landed = ev.manifest.uris["landing"].removeprefix(b.fs_url)
        t0 = time.perf_counter()
        copy_between(hb, landed, ha, f"{root}/copy/f", retry=settings.retry)
        s = time.perf_counter() - t0
        rows.append(
            (
                "stream",
                f"transfer copy B→A {mb:.0f} MB (sha256, verified)",
                f"{s:.1f}",
                f"{mb / s:.0f} MB/s",
                "",
            )
        )
        s = fs_shell(settings, "b", ["-put", str(path), f"{b.fs_url}{root}/put/f"])
        rows.append(
            (
                "stream",
                f"hdfs dfs -put {mb:.0f} MB to B (JVM start incl.)",
                f"{s:.1f}",
                f"{mb / s:.0f} MB/s",
                "",
            )
        )
        s = fs_shell(settings, "b", ["-cp", f"{b.fs_url}{root}/put/f", f"{a.fs_url}{root}/cp/f"])
        rows.append(
            (
                "stream",
                f"hdfs dfs -cp {mb:.0f} MB B→A (JVM start incl.)",
                f"{s:.1f}",
                f"{mb / s:.0f} MB/s",
                "",
            )
        )
    finally:
        for port in (hb, ha):
            port.delete(root, recursive=True)
            port.close()


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--parts", default=",".join(PARTS), help=f"of {','.join(PARTS)}")
    ap.add_argument("--sample", type=int, default=20, help="files of the per-file baseline (>=20)")
    ap.add_argument("--year", type=int, default=YEAR, help="files of the full Ferry run (<=729)")
    ap.add_argument("--big-mb", default="300,1000", help="sizes of the big files, MB")
    ap.add_argument("--lone", type=int, default=5, help="single files dropped on the idle pipeline")
    ap.add_argument("--keep-up", action="store_true", help="leave the stack running")
    args = ap.parse_args()
    parts = [p for p in args.parts.split(",") if p]
    if unknown := set(parts) - set(PARTS):
        ap.error(f"unknown parts {sorted(unknown)}; known: {PARTS}")
    big_mb = [int(x) for x in args.big_mb.split(",") if x]
    settings = get_settings()
    specs = load_datasets(settings.paths.datasets_dir)
    work = settings.var_dir / "bench-pipeline"
    t_all = time.monotonic()
    say("writing the demo's daily files …")
    demo = write_demo_files(work / "source", specs).files
    step = max(1, len(demo) // args.sample)
    sample = list(demo[::step][: args.sample])
    year = list(demo[: args.year])
    bigs = [big_file(demo, work / "big" / f"flights_big{m}mb.csv", m * 10**6) for m in big_mb]
    rows: list[tuple[str, ...]] = []
    stack = Stack(settings)
    stack.up(deadline_s=300)
    ensure_topics(build_admin(settings.kafka), settings.kafka)
    rss = RssSampler(settings)
    rss.start()
    base: BaselineResult | None = None
    group: ServiceGroup | None = None
    nas = settings.paths.nas_dir
    try:
        if "baseline" in parts:
            say(f"baseline: {len(sample)} files, 2 spark-submit each …")
            base = run_baseline(settings, sample, work / "baseline.log", say)
            per = statistics.mean(base.per_file_s)
            rows.append(
                (
                    "baseline",
                    f"per-file spark-submit ×2, {len(sample)} files",
                    f"{sum(base.per_file_s):.0f}",
                    f"{per:.1f} s/file (median {statistics.median(base.per_file_s):.1f}; "
                    f"transform {statistics.median(base.transform_s):.1f}, "
                    f"load {statistics.median(base.load_s):.1f})",
                    "",
                )
            )
            rows.append(
                (
                    "baseline",
                    f"extrapolated to {YEAR} files",
                    f"{per * YEAR:.0f}",
                    f"{60 / per:.1f} files/min",
                    "",
                )
            )
        if "ferry" in parts or "big" in parts:
            group = ServiceGroup({}, work / "logs")
            group.start()
            for name, proc in group.procs.items():
                rss.services[name] = proc.pid
        if "ferry" in parts:
            assert group is not None
            runs: list[tuple[str, list[object]]] = [
                (f"{len(sample)} sample files", list(sample)),
                (f"{len(year)} files (the year)", list(year)),
            ]
            for label, fs in runs:
                say(f"ferry: {label} …")
                r = run_ferry(
                    settings, [(f.dataset, f.path, nas / f.relative_path) for f in fs], 900, group
                )  # type: ignore[attr-defined]
                ratio = ""
                if base is not None:
                    x = statistics.mean(base.per_file_s) * r.files / r.wall_s
                    ratio = f"{x:.1f}× the per-file design"
                rows.append(
                    (
                        "ferry",
                        label,
                        f"{r.wall_s:.1f}",
                        f"{r.files / r.wall_s * 60:.0f} files/min, "
                        f"{r.nbytes / r.wall_s / 1e6:.2f} MB/s",
                        ratio,
                    )
                )
                _hop_rows(rows, r, "ferry")
            say(f"ferry: {args.lone} lone files on the idle pipeline …")
            lone = []
            for f in sample[: args.lone]:
                r = run_ferry(
                    settings, [(f.dataset, f.path, nas / f.relative_path)], 120, group, slow_every=0
                )
                lone.append(r.hops["drop → loaded"][0] if r.hops["drop → loaded"] else float("nan"))
                say(
                    f"lone {f.relative_path}: {lone[-1]:.1f}s ("
                    + ", ".join(f"{h} {v[0]:.1f}" for h, v in r.latencies.items())
                    + ")"
                )
            rows.append(
                (
                    "ferry",
                    f"one file NAS → Hive, idle warm pipeline (×{len(lone)})",
                    f"p50 {pct(lone, 0.5):.1f}",
                    f"p95 {pct(lone, 0.95):.1f}",
                    "target p50 < 8, p95 < 12",
                )
            )
        if "big" in parts:
            assert group is not None
            for path, m in zip(bigs, big_mb, strict=True):
                say(f"big: {path.name} ({path.stat().st_size / 1e6:.0f} MB) …")
                r = run_ferry(
                    settings,
                    [("flights", path, nas / "flights" / path.name)],
                    900,
                    group,
                    slow_every=0,
                )
                rows.append(
                    (
                        "big",
                        f"{m} MB file NAS → Hive",
                        f"{r.wall_s:.1f}",
                        f"{r.nbytes / r.wall_s / 1e6:.1f} MB/s",
                        "",
                    )
                )
                _hop_rows(rows, r, "big", mb=r.nbytes / 1e6)
    finally:
        if group is not None:
            group.stop()
    try:
        if "stream" in parts and bigs:
            say("stream: extract, transfer, hdfs dfs …")
            stream(settings, bigs[0], rows)
    finally:
        rss.stop()
        if not args.keep_up:
            say("stopping the stack …")
            stack.down()
    if "floor" in parts:
        say("floor: plain Spark local[2] …")
        s = sum(
            floor(
                ds,
                [f.path for f in year if f.dataset == ds],
                work / "floor-out",
                work / "floor.log",
            )
            for ds in sorted({f.dataset for f in year})
        )
        nb = sum(f.path.stat().st_size for f in year)
        rows.append(
            (
                "floor",
                f"Spark local[2] CSV → Parquet, the {len(year)} files (one job per dataset)",
                f"{s:.1f}",
                f"{nb / s / 1e6:.1f} MB/s",
                "",
            )
        )
        for path, m in zip(bigs, big_mb, strict=True):
            s = floor("flights", [path], work / "floor-out", work / "floor.log")
            rows.append(
                (
                    "floor",
                    f"Spark local[2] CSV → Parquet, {m} MB file",
                    f"{s:.1f}",
                    f"{path.stat().st_size / s / 1e6:.1f} MB/s",
                    "",
                )
            )
    for name, peak in sorted(rss.peak.items()):
        rows.append(("rss", f"peak RSS {name}", "", f"{peak / 2**20:.0f} MiB", ""))
    rows.append(("rss", "peak RSS, stack (sum)", "", f"{rss.peak_stack / 2**20:.0f} MiB", ""))
    rows.append(("rss", "peak RSS, services (sum)", "", f"{rss.peak_services / 2**20:.0f} MiB", ""))
    table = Table(
        title=f"Ferry vs the per-file design — bench_pipeline ({time.strftime('%Y-%m-%d %H:%M')})"
    )
    for col in ("part", "work", "seconds", "rate", "ratio / target"):
        table.add_column(col, justify="right" if col == "seconds" else "left")
    for row in rows:
        table.add_row(*row)
    console.print(table)
    console.print(f"whole run: {time.monotonic() - t_all:.0f} s wall")
    return 0


def _hop_rows(rows: list[tuple[str, ...]], r: FerryRun, part: str, mb: float | None = None) -> None:
    for hop, (med, p95) in r.latencies.items():
        rate = f"{mb / med:.1f} MB/s" if mb and med == med and med > 0 else f"p95 {p95:.1f}"
        rows.append((part, f"  {hop} (median)", f"{med:.1f}", rate, ""))


if __name__ == "__main__":
    sys.exit(main())
