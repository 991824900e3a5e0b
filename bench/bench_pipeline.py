"""Ferry against the per-file design it replaces, on the same stack in one run: one table.

Parts (``--parts``, comma separated; default all, in this order):

* ``baseline``: the per-file design on a sample of ``--sample`` daily files (every k-th of the
  demo's 729): per file one ``spark-submit`` (pyspark's, against the stack's Spark masters) that
  transforms it on B and stages it on A, then one that loads it into Hive (bench/baseline_job.py,
  the same dataset definitions and job code); seconds per file, extrapolated to 729 files;
* ``backlog``: ``--backlog`` new files (``--arrival-rows`` rows over ``--backlog-days`` days,
  one by default) put on the NAS while
  no service runs, then the services started (after an outage): start → last file in Hive,
  files/min, rows checked in Hive (bench/arrival.py);
* ``ferry``: the four stage services on the same sample, then on all 729 files (dropped the
  demo's way), wall time, files/min, per-hop median/p95, ratio to the baseline; then
  ``--lone`` single files each dropped on the idle, warm pipeline, by rename and then written in
  place: drop → Hive p50/p95 (bench/pipeline_variants.py);
* ``big``: files of ``--big-mb`` MB (the year's flights repeated) through the services, per hop
  seconds and MB/s; the ``--gz-mb`` one also gzipped (dataset ``flights_gz``);
* ``arrival``: files arriving at a steady rate on the running services (bench/arrival.py): for
  each of ``--arrival-days`` (days of rows per file: 1, and 60 for case C23) and each rate of
  ``--rates`` files/s, ``--minutes`` of drops by rename of ``--arrival-rows``-row files; drop →
  Hive p50/p95/max, the backlog, the drain after the last drop, rows checked in Hive, a plot;
* ``stream``: the first big file landed by extract's handler (WebHDFS, sha256) and copied B → A by
  transfer's copy, beside ``hdfs dfs -put`` and ``-cp`` of the same file (the stack's Hadoop jars);
* ``peer``: what a data engineer would write instead (bench/peers.py): a Structured Streaming job
  per dataset (``availableNow``, ``foreachBatch`` into Hive on A) and a bulk batch job
  (partitioned Parquet into the table's location, ``MSCK REPAIR TABLE``), each in a ``local[2]``
  session, on the sample, the year (unless ``--year 0``) and each big file; with Ferry's seconds
  over the peer's for the sets Ferry ran in the same run;
* ``arrival-peer``: the Structured Streaming peer left running on the flights NAS directory with
  its default trigger (bench/peers.py ``live``), the same kind of files dropped at the same rates
  (after Ferry's services stopped); drop → micro-batch in Hive p50/p95/max, backlog, drain, a plot;
  then the highest of ``--rates`` each of Ferry and the peer kept up with (``arrival.sustained``);
* ``floor``: plain Spark ``local[2]`` CSV → Parquet over the same bytes (the year; each big file),
  and the same read written in the table's layout (one file per partition).

Peak RSS of every stack component and service is sampled throughout (psutil, 0.5 s). Unless
``--no-costs``, every Ferry set and every peer run is also metered (bench/costs.py): CPU seconds
per file of every process and round trips per file by kind (HDFS namespace calls, DataNode blocks,
Kafka records and offset commits, metastore calls, Spark jobs/stages/tasks from event logs, which
every driver then writes under ``<work>/eventlogs``), printed as ``cost`` rows.
MB = 10^6 bytes. Usage: ``python bench/bench_pipeline.py [--parts ferry,big,peer] [--sample 20]
[--big-mb 300,1000] [--lone 5] [--work DIR]``. Starts the stack if needed and stops it at the
end unless ``--keep-up``. Prints figures; asserts nothing about time.
"""

from __future__ import annotations

import argparse
import contextlib
import dataclasses
import os
import pickle
import signal
import statistics
import sys
import time
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

from arrival import arrival_part, backlog_part, peer_arrival_part
from costs import CostMeter, cost_rows, environment_note, event_log_env
from peers import peer_part
from pipeline_parts import (
    BaselineResult,
    FerryRun,
    Floor,
    RssSampler,
    big_file,
    floor,
    fs_shell,
    run_baseline,
    run_ferry,
)
from pipeline_variants import definitions_with_gz, gz_part, lone_part
from rich.console import Console
from rich.table import Table

from ferry.clusters.hdfs.webhdfs import WebHdfs
from ferry.core.events import FileExtracted
from ferry.core.kafka.clients import build_admin
from ferry.core.kafka.topics import ensure_topics
from ferry.datasets.spec import load_datasets
from ferry.settings import Settings, get_settings
from ferry.stages.extract.handlers import ExtractDeps, extract_file
from ferry.stages.extract.scanner import Candidate
from ferry.stages.transfer.copy import copy_between
from ferry_kit.demo_data import write_demo_files
from ferry_kit.pipeline import ServiceGroup
from ferry_kit.settings import get_kit_settings
from ferry_kit.stack.client_conf import yarn_client_env
from ferry_kit.stack.manager import Stack

PARTS = (
    "baseline",
    "backlog",
    "ferry",
    "big",
    "arrival",
    "peer",
    "arrival-peer",
    "stream",
    "floor",
)
YEAR = 729
console = Console(width=160)


@dataclasses.dataclass
class Metered:
    """What :func:`metered` divides by (``files``); ``close()`` ends the window early (once)."""

    files: int
    close: Callable[[], None] = lambda: None


@contextlib.contextmanager
def metered(
    meter: CostMeter | None, label: str, files: int, rows: list[tuple[str, ...]]
) -> Iterator[Metered]:
    """Meter the work inside (no-op without a meter): its cost rows, per file of
    ``Metered.files``, are appended to ``rows`` when it finishes, also when it failed (what it
    cost until then)."""
    box = Metered(files)
    if meter is None:
        yield box
        return
    before = meter.snapshot()
    closed: list[bool] = []

    def close() -> None:
        if not closed:
            closed.append(True)
            rows.extend(cost_rows(label, meter.costs(before, meter.snapshot()), box.files))

    box.close = close
    try:
        yield box
    finally:
        close()


@contextlib.contextmanager
def guard(part: str, rows: list[tuple[str, ...]]) -> Iterator[None]:
    """Run a part; an exception becomes a FAILED row (traceback printed) and the next part runs."""
    try:
        yield
    except Exception as exc:  # noqa: BLE001 - a benchmark reports a failed part and goes on
        console.print_exception()
        rows.append((part, "FAILED", "", f"{type(exc).__name__}: {str(exc)[:90]}", ""))


def baseline_part(
    settings: Settings, sample: list[Any], work: Path, rows: list[tuple[str, ...]]
) -> BaselineResult:
    say(f"baseline: {len(sample)} files, 2 spark-submit each …")
    base = run_baseline(settings, sample, work / "baseline.log", say)
    per = statistics.mean(base.per_file_s)
    med = statistics.median
    rows.append(
        (
            "baseline",
            f"per-file spark-submit ×2, {len(sample)} files",
            f"{sum(base.per_file_s):.0f}",
            f"{per:.1f} s/file (median {med(base.per_file_s):.1f}: "
            f"transform {med(base.transform_s):.1f} + load {med(base.load_s):.1f})",
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
    return base


def floor_part(
    year: list[Any], bigs: list[Path], big_mb: list[int], work: Path, rows: list[tuple[str, ...]]
) -> None:
    """Two rows per set of files: plain CSV → Parquet, and the same in the table's layout."""
    say("floor: plain Spark local[2] …")
    out, log = work / "floor-out", work / "floor.log"

    def add(what: str, got: Floor, nb: int) -> None:
        for label, secs in (("", got.plain), (", partitioned like the table", got.partitioned)):
            rate = f"{nb / secs / 1e6:.1f} MB/s"
            rows.append(
                ("floor", f"Spark local[2] CSV → Parquet{label}, {what}", f"{secs:.1f}", rate, "")
            )

    if year:  # ``--year 0``: only the big files
        got = [
            floor(ds, [f.path for f in year if f.dataset == ds], out, log)
            for ds in sorted({f.dataset for f in year})
        ]
        total = Floor(sum(g.plain for g in got), sum(g.partitioned for g in got))
        nb = sum(f.path.stat().st_size for f in year)
        add(f"the {len(year)} files (one job per dataset)", total, nb)
    for path, m in zip(bigs, big_mb, strict=True):
        add(f"{m} MB file", floor("flights", [path], out, log), path.stat().st_size)


def demo_files(work: Path, specs: Any) -> list[Any]:
    """The demo's 729 daily files under ``work/source``: written once, then reused (their list
    kept in ``work/source.pickle``) while every file is still there."""
    saved = work / "source.pickle"
    if saved.exists():
        files = pickle.loads(saved.read_bytes())  # noqa: S301 - our own file
        if all(f.path.exists() for f in files):
            return list(files)
    files = list(write_demo_files(work / "source", specs).files)
    saved.write_bytes(pickle.dumps(files))
    return files


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
        hb.mkdirs(f"{root}/put")  # FsShell -put and -cp do not create a missing parent
        ha.mkdirs(f"{root}/cp")
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


def yarn_env(settings: Any) -> dict[str, str]:
    """What the services get besides the bench's own environment: nothing, unless a cluster's
    Spark runs on its YARN (``FERRY_PROFILE=yarn``, ``make bench-yarn``); then, as ``ferry up``
    starts them, the clusters read from the client configuration directories the stack wrote
    (Spark finds each ResourceManager in ``yarn-site.xml`` there)."""
    return yarn_client_env(settings, os.environ.get("FERRY_PROFILE", ""))


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--parts", default=",".join(PARTS), help=f"of {','.join(PARTS)}")
    ap.add_argument("--sample", type=int, default=20, help="files of the per-file baseline (>=20)")
    ap.add_argument("--year", type=int, default=YEAR, help="files of the full Ferry run (<=729)")
    ap.add_argument("--big-mb", default="300,1000", help="sizes of the big files, MB")
    ap.add_argument("--lone", type=int, default=5, help="single files dropped on the idle pipeline")
    ap.add_argument("--gz-mb", type=int, default=300, help="the big file also dropped gzipped")
    ap.add_argument("--keep-up", action="store_true", help="leave the stack running")
    ap.add_argument("--work", default="", help="work directory (default var_dir/bench-pipeline)")
    ap.add_argument("--rates", default="1,3", help="arrival: files per second, each in turn")
    ap.add_argument("--minutes", type=float, default=3.0, help="arrival: minutes of drops a rate")
    ap.add_argument("--arrival-rows", type=int, default=60, help="arrival: rows per file")
    ap.add_argument("--arrival-days", default="1,60", help="arrival: days of rows per file")
    ap.add_argument("--backlog", type=int, default=5000, help="backlog: files on the NAS at start")
    ap.add_argument("--backlog-days", type=int, default=1, help="backlog: days of rows per file")
    ap.add_argument("--no-costs", action="store_true", help="no cost rows, no Spark event logs")
    args = ap.parse_args()
    # SIGTERM (a timeout) unwinds like Ctrl-C: the services are stopped, the stack taken down
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))
    parts = [p for p in args.parts.split(",") if p]
    if unknown := set(parts) - set(PARTS):
        ap.error(f"unknown parts {sorted(unknown)}; known: {PARTS}")
    big_mb = [int(x) for x in args.big_mb.split(",") if x]
    work = Path(args.work) if args.work else get_settings().var_dir / "bench-pipeline"
    if "big" in parts and args.gz_mb in big_mb:  # before settings are read: services see it too
        defs = definitions_with_gz(get_settings().paths.datasets_dir, work / "datasets")
        os.environ["FERRY_PATHS__DATASETS_DIR"] = str(defs)
        get_settings.cache_clear()
    settings = get_kit_settings()  # Ferry's settings and the local stack's (ports, heaps)
    specs = load_datasets(settings.paths.datasets_dir)
    work.mkdir(parents=True, exist_ok=True)
    if not args.no_costs:  # before any driver starts: the services and peers inherit it
        os.environ.update(event_log_env(work / "eventlogs"))
    t_all = time.monotonic()
    say("writing the demo's daily files …")
    demo = demo_files(work, specs)
    step = max(1, len(demo) // args.sample)
    sample = list(demo[::step][: args.sample])
    # the first batch after the services are ready, then a second of as many other files
    second = list(demo[step // 2 :: step][: args.sample]) if step > 1 else []
    year = list(demo[: args.year])
    bigs = [big_file(demo, work / "big" / f"flights_big{m}mb.csv", m * 10**6) for m in big_mb]
    rows: list[tuple[str, ...]] = []
    stack = Stack(settings)
    stack.up(deadline_s=300)
    ensure_topics(build_admin(settings.kafka), settings.kafka)
    rss = RssSampler(settings)
    rss.start()
    meter = None if args.no_costs else CostMeter(settings, rss.services, work / "eventlogs")
    costs: list[tuple[str, ...]] = []
    base: BaselineResult | None = None
    group: ServiceGroup | None = None
    (nas := settings.paths.nas_dir).mkdir(parents=True, exist_ok=True)  # extract won't make it
    ferry_s: dict[str, float] = {}  # Ferry's wall seconds per file set, for the peers' ratios
    ferry_arrivals: dict[int, list[Any]] = {}  # days a file → Ferry's arrival runs
    try:
        if "baseline" in parts:
            with guard("baseline", rows):
                base = baseline_part(settings, sample, work, rows)
        if "backlog" in parts:
            first = ServiceGroup(yarn_env(settings), work / "logs-backlog")
            with guard("backlog", rows), metered(meter, "backlog", args.backlog, costs):
                try:
                    backlog_part(
                        settings,
                        demo,
                        work,
                        first,
                        rows,
                        say,
                        count=args.backlog,
                        file_rows=args.arrival_rows,
                        pids=rss.services,
                        days=args.backlog_days,
                    )
                finally:
                    first.stop()
                    rss.services.clear()  # the next group's ids replace them
        if {"ferry", "big", "arrival"} & set(parts):
            group = ServiceGroup(yarn_env(settings), work / "logs")
            group.start()
            for name, proc in group.procs.items():
                rss.services[name] = proc.pid
            # as `ferry up` does: files are dropped once every stage is warm and in its group
            ready = group.wait_ready(settings, 600)
            rows.append(
                (
                    "ferry",
                    "services started → ready (warm, in their groups)",
                    f"{ready:.1f}",
                    "",
                    "",
                )
            )
        if "ferry" in parts:
            assert group is not None
            runs = [
                (f"{len(sample)} sample files", sample),
                (f"{len(second)} other files, after the sample", second),
                (f"{len(year)} files (the year)", year),
            ]
            for label, fs in runs:
                if not fs:
                    continue
                with guard("ferry", rows):
                    say(f"ferry: {label} …")
                    drops = [(f.dataset, f.path, nas / f.relative_path) for f in fs]
                    with metered(meter, f"ferry, {label}", len(fs), costs):
                        r = run_ferry(settings, drops, 900, group)
                    ratio = ""
                    if base is not None:
                        x = statistics.mean(base.per_file_s) * r.files / r.wall_s
                        ratio = f"{x:.1f}× the per-file design"
                    rate = f"{r.files / r.wall_s * 60:.0f} files/min"
                    rate += f", {r.nbytes / r.wall_s / 1e6:.2f} MB/s"
                    failed = f", {r.failed} failed" if r.failed else ""
                    rows.append(("ferry", label + failed, f"{r.wall_s:.1f}", rate, ratio))
                    ferry_s[label] = r.wall_s
                    _hop_rows(rows, r, "ferry")
            for in_place in (False, True) if args.lone > 0 else ():  # --lone 0: none
                with guard("lone", rows):
                    lone_part(settings, demo, work, args.lone, group, rows, say, in_place=in_place)
        if "big" in parts:
            assert group is not None
            for path, m in zip(bigs, big_mb, strict=True):
                with guard("big", rows):
                    say(f"big: {path.name} ({path.stat().st_size / 1e6:.0f} MB) …")
                    drops = [("flights", path, nas / "flights" / path.name)]
                    r = run_ferry(settings, drops, 900, group, slow_every=0)
                    rate = f"{r.nbytes / r.wall_s / 1e6:.1f} MB/s"
                    rows.append(("big", f"{m} MB file NAS → Hive", f"{r.wall_s:.1f}", rate, ""))
                    ferry_s[f"{m} MB file"] = r.wall_s
                    _hop_rows(rows, r, "big", mb=r.nbytes / 1e6)
            if args.gz_mb in big_mb:
                with guard("big", rows):
                    big = bigs[big_mb.index(args.gz_mb)]
                    gz_part(settings, big, args.gz_mb, group, rows, ferry_s, say)
        if "arrival" in parts:
            assert group is not None
            for days in [int(d) for d in args.arrival_days.split(",") if d]:
                n_rates = [float(r) for r in args.rates.split(",") if r]
                with guard("arrival", rows):
                    ferry_arrivals[days] = arrival_part(
                        settings,
                        demo,
                        work,
                        group,
                        rows,
                        say,
                        rates=n_rates,
                        minutes=args.minutes,
                        file_rows=args.arrival_rows,
                        days=days,
                        measure=lambda label, n: metered(meter, label, n, costs),
                    )
    finally:
        if group is not None:
            group.stop()
    try:
        if "peer" in parts:
            with guard("peer", rows):
                sets = [(f"{len(sample)} sample files", sample)]
                sets += [(f"{len(year)} files (the year)", year)]
                peer_sets = [(lb, [(f.dataset, f.path) for f in fs]) for lb, fs in sets if fs]
                peer_sets += [
                    (f"{m} MB file", [("flights", p)]) for p, m in zip(bigs, big_mb, strict=True)
                ]
                peer_part(
                    settings,
                    peer_sets,
                    work,
                    ferry_s,
                    rows,
                    say,
                    measure=lambda label, n: metered(meter, label, n, costs),
                )
        if "arrival-peer" in parts:
            for days in [int(d) for d in args.arrival_days.split(",") if d]:
                with guard("arrival-peer", rows):
                    peer_arrival_part(
                        settings,
                        demo,
                        work,
                        rows,
                        say,
                        rates=[float(r) for r in args.rates.split(",") if r],
                        minutes=args.minutes,
                        file_rows=args.arrival_rows,
                        days=days,
                        ferry_runs=ferry_arrivals.get(days, ()),
                    )
        if "stream" in parts and bigs:
            with guard("stream", rows):
                say("stream: extract, transfer, hdfs dfs …")
                stream(settings, bigs[0], rows)
    finally:
        rss.stop()
        if meter is not None:
            meter.close()
        if not args.keep_up:
            say("stopping the stack …")
            stack.down()
    if "floor" in parts:
        with guard("floor", rows):
            floor_part(year, bigs, big_mb, work, rows)
    rows += costs
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
    if meter is not None:
        console.print(environment_note())
    console.print(f"whole run: {time.monotonic() - t_all:.0f} s wall")
    return 0


def _hop_rows(rows: list[tuple[str, ...]], r: FerryRun, part: str, mb: float | None = None) -> None:
    for hop, (med, p95) in r.latencies.items():
        rate = f"{mb / med:.1f} MB/s" if mb and med == med and med > 0 else f"p95 {p95:.1f}"
        rows.append((part, f"  {hop} (median)", f"{med:.1f}", rate, ""))


if __name__ == "__main__":
    sys.exit(main())
