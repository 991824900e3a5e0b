"""Long soak (issue 30): Ferry for an hour or more under faults on a schedule, with retention on,
watching that memory, threads, file descriptors and disk stay flat.

Runs the four stages, the tracker and the gc service (:class:`ferry_kit.testing.chaos.FaultRig`:
private topic prefix, NAS directory and HDFS paths; cluster A's WebHDFS behind fault proxies) on
``--files`` distinct slices of both demo datasets (flights and weather), dropped evenly over
``--duration-min`` minutes, with retentions shortened (``--retention``) so the gc service acts
within the run, and the tracker's (``--tracker-retention``) and extract's watch of moved files
(``--watch-after``) so their in-memory indexes reach their bounds within the run too. Faults
(``--faults``, a comma list of ``<fault>@<when>[:<how long>]``, ``<when>`` as ``10m``, ``90s``
or ``40%`` of the duration):

* ``kafka``: the broker restarted (SIGTERM, then ``Stack.up``);
* ``namenode-a``: cluster A's NameNode paused (SIGSTOP, SIGCONT after ``:<how long>``, 60 s);
* ``master``: the ALIVE Spark master SIGKILLed (restored at the end);
* ``kill:<service>``: a service SIGKILLed and restarted (``kill:stage``: a pipeline stage
  chosen by ``--seed``);
* ``stall-a``: cluster A's WebHDFS silent through the rig's proxy (private to this run: what
  transfer and gc see of a paused NameNode A, without touching the shared stack).

The first three stop servers other people's work on the same stack uses: run them on a quiet
machine. Every ``--sample-s`` seconds it samples every process's RSS, threads and open file
descriptors and each zone's usage (``bench/soak_probe.py``). At the end it prints the
reliability (files lost, duplicated, quarantined, exact Hive rows per dataset), each process's
growth from the first to the last quarter after ``--warmup-min`` (target: at most 10 %), each
zone's largest usage against its retention's bound (files in flight plus files whose outcome is
younger than the retention plus two sweep intervals and a minute), and what gc removed; writes a
PNG per figure and the samples as CSV under ``--out``. Exit status 1 when a target is missed.

Usage: ``python bench/soak_long.py [--duration-min 60] [--files 10000] [--faults …]``; needs the
local stack (``ferry stack up``).
"""

from __future__ import annotations

import argparse
import random
import re
import signal
import sys
import tempfile
import threading
import time
from dataclasses import dataclass
from datetime import timedelta
from pathlib import Path

from soak_probe import Sampler, growth, plot, thread_growth, write_csv, zone_bound
from soak_report import MAX_GROWTH, report

from ferry.core.services import STAGES
from ferry.settings import get_settings
from ferry.settings.retention import RetentionSettings, parse_retention
from ferry_kit.stack.manager import Stack
from ferry_kit.testing.chaos import FaultRig, kill_active_master, wait_failover
from ferry_kit.testing.ports import free_port
from ferry_kit.testing.waiting import wait_for

DEFAULT_FAULTS = "kafka@17%,namenode-a@33%:60s,kill:stage@50%,master@67%,kill:gc@83%"
DEFAULT_RETENTION = (
    "landing=10m,staging=10m,incoming=10m,quarantined=10m,archive=15m,rejects=20m,orphans=15m"
)


@dataclass
class Fault:
    """One scheduled fault: when (s after start), what, its argument and how long it lasts."""

    at_s: float
    kind: str
    arg: str = ""
    for_s: float = 60.0
    started: float | None = None
    ended: float | None = None
    detail: str = ""

    @property
    def label(self) -> str:
        return f"{self.kind}{':' + self.arg if self.arg else ''}"


def seconds(text: str, duration_s: float) -> float:
    """``10m`` → 600, ``90s`` → 90, ``40%`` → 0.4 × ``duration_s``."""
    m = re.fullmatch(r"(\d+(?:\.\d+)?)(m|s|%)", text.strip())
    if not m:
        raise ValueError(f"a time is 10m, 90s or 40%, not {text!r}")
    value, unit = float(m.group(1)), m.group(2)
    return value * {"m": 60.0, "s": 1.0, "%": duration_s / 100}[unit]


def parse_faults(text: str, duration_s: float) -> list[Fault]:
    """``kafka@10m,namenode-a@20m:60s,kill:transform@50%`` → faults sorted by time."""
    out = []
    for item in (x.strip() for x in text.split(",") if x.strip()):
        what, _, when = item.partition("@")
        when, _, length = when.partition(":")
        kind, _, arg = what.partition(":")
        if kind not in ("kafka", "namenode-a", "master", "kill", "stall-a"):
            raise ValueError(f"unknown fault {kind!r} in {item!r}")
        length_s = seconds(length, duration_s) if length else 60.0
        out.append(Fault(seconds(when, duration_s), kind, arg, length_s))
    return sorted(out, key=lambda f: f.at_s)


class Faults:
    """Runs each fault in a thread of its own when its time comes; undoes pauses at the end."""

    def __init__(self, rig: FaultRig, plan: list[Fault], seed: int) -> None:
        self.rig, self.plan, self.rng = rig, plan, random.Random(seed)
        self.threads: list[threading.Thread] = []
        self.master_killed = False
        self.paused: int | None = None

    def due(self, elapsed_s: float) -> None:
        """Start the faults whose time has come: a SIGKILL here (the process is replaced before
        anyone sees it dead), the others in a thread of their own (they take a while)."""
        for f in self.plan:
            if f.started is None and elapsed_s >= f.at_s:
                f.started = time.time()
                if f.kind == "kill":
                    self._run(f)
                    continue
                t = threading.Thread(target=self._run, args=(f,), daemon=True)
                t.start()
                self.threads.append(t)

    def _run(self, f: Fault) -> None:
        rig, stack = self.rig, Stack(self.rig.base)
        try:
            if f.kind == "kafka":
                broker = stack.component("kafka")
                stack.kill("kafka", signal.SIGTERM)
                wait_for(lambda: stack.pid(broker) is None, "the broker's exit", 120, 0.2)
                stack.up(deadline_s=300)
                f.detail = f"broker back after {time.time() - (f.started or 0):.1f} s"
            elif f.kind == "namenode-a":
                self.paused = stack.kill("hdfs-a-namenode", signal.SIGSTOP)
                time.sleep(f.for_s)
                stack.kill("hdfs-a-namenode", signal.SIGCONT)
                self.paused = None
                f.detail = f"paused {f.for_s:.0f} s"
            elif f.kind == "master":
                killed, at = kill_active_master(rig.base, signal.SIGKILL)
                self.master_killed = True
                f.detail = (
                    f"{killed}; standby ALIVE after {wait_failover(rig.base, killed, at):.1f} s"
                )
            elif f.kind == "kill":
                name = self.rng.choice(STAGES) if f.arg in ("", "stage") else f.arg
                rig.group.kill(name, signal.SIGKILL)
                rig.group.start(name)
                f.detail = f"SIGKILL {name}, restarted"
            elif f.kind == "stall-a":
                rig.nn.stall()
                time.sleep(f.for_s)
                rig.nn.pass_through()
                f.detail = f"A's WebHDFS silent {f.for_s:.0f} s"
        except Exception as exc:  # noqa: BLE001 - reported in the table, the soak goes on
            f.detail = f"failed: {type(exc).__name__}: {exc}"
        finally:
            f.ended = time.time()

    def undo(self) -> None:
        """Resume a paused NameNode, restore a killed master (never leave the stack broken)."""
        stack = Stack(self.rig.base)
        if self.paused is not None:
            stack.kill("hdfs-a-namenode", signal.SIGCONT)
        self.rig.nn.pass_through()
        if self.master_killed:
            stack.up(deadline_s=300)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--duration-min", type=float, default=60.0, help="drops spread over this")
    ap.add_argument("--files", type=int, default=10_000, help="files in all, both datasets")
    ap.add_argument("--weather-share", type=float, default=0.5)
    ap.add_argument("--rows-flights", type=int, default=30)
    ap.add_argument("--rows-weather", type=int, default=4)
    ap.add_argument("--first", type=int, default=2000, help="first flights slice (tests: 0..)")
    ap.add_argument("--first-weather", type=int, default=0, help="first weather slice")
    ap.add_argument("--faults", default=DEFAULT_FAULTS)
    ap.add_argument("--retention", default=DEFAULT_RETENTION, help="zone=duration,…")
    ap.add_argument(
        "--tracker-retention",
        default="10m",
        help="tracker.loaded_retention_s as a duration: the tracker keeps each loaded file's "
        "detail this long (7 days by default: within an hour its index only grows, by design)",
    )
    ap.add_argument(
        "--watch-after",
        default="10m",
        help="extract.watch_after_s as a duration: extract watches each moved file this long "
        "(a day by default: within an hour its watch list only grows, by design)",
    )
    ap.add_argument("--gc-interval-s", type=float, default=30.0)
    ap.add_argument("--sample-s", type=float, default=60.0)
    ap.add_argument("--warmup-min", type=float, default=5.0)
    ap.add_argument("--drain-s", type=float, default=1800.0, help="after the drops, at most")
    ap.add_argument("--after-min", type=float, default=0.0, help="keep sampling after the drain")
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--out", type=Path, default=None, help="PNGs and samples.csv (default: temp)")
    args = ap.parse_args()
    duration_s = args.duration_min * 60
    plan = parse_faults(args.faults, duration_s)
    keep = dict(item.split("=", 1) for item in args.retention.split(",") if item)
    retention = RetentionSettings(**{k: parse_retention(v) for k, v in keep.items()})
    settings = get_settings()
    Stack(settings).up(deadline_s=300)
    work = Path(tempfile.mkdtemp(prefix="ferry-soak-long-"))
    out_dir = args.out or work / "out"
    out_dir.mkdir(parents=True, exist_ok=True)
    metrics_port = free_port()
    extra = {f"retention.{k}": v for k, v in keep.items()} | {
        "retention.interval_s": args.gc_interval_s,
        "retention.nas_interval_s": max(60.0, args.gc_interval_s),
        "retention.metrics_port": metrics_port,
        "tracker.web_port": free_port(),
        "tracker.data_dir": work / "tracker",
        "tracker.loaded_retention_s": _s(parse_retention(args.tracker_retention)),
        "extract.watch_after_s": _s(parse_retention(args.watch_after)),
        "kafka.session_timeout_ms": 10_000,
    }
    services = (*STAGES, "tracker", "gc")
    rig = FaultRig(settings, work, seed=args.seed, extra=extra, services=services)
    n_weather = round(args.files * args.weather_share)
    files = rig.slices(args.files - n_weather, rows=args.rows_flights, first=args.first)
    files += rig.slices(
        n_weather, rows=args.rows_weather, first=args.first_weather, dataset="weather"
    )
    random.Random(args.seed).shuffle(files)
    print(f"soak: {len(files)} files over {args.duration_min} min; logs {rig.group.log_dir}")
    faults = Faults(rig, plan, args.seed)
    alive = lambda: {n: p.pid for n, p in rig.group.procs.items() if p.poll() is None}  # noqa: E731
    sampler = Sampler(rig.settings, alive, ["flights", "weather"], args.sample_s).start()
    start = time.monotonic()
    dropped = 0

    def tick() -> None:
        nonlocal dropped
        elapsed = time.monotonic() - start
        due = min(len(files), int(elapsed / duration_s * len(files)) + 1)
        if dropped < due:
            rig.drop(files[dropped:due])
            dropped = due
        faults.due(elapsed)

    deadline = False
    restarts: dict[str, int] = {}

    def revive() -> None:
        """What supervisord does under ``ferry up``: a service that exited is started again (a
        stage stops itself when the broker never acknowledged its events); counted."""
        for name, proc in list(rig.group.procs.items()):
            if proc.poll() is not None:
                restarts[name] = restarts.get(name, 0) + 1
                print(f"  {name} exited with {proc.returncode}; started again")
                rig.group.start(name)

    ids = [f.file_id for f in files]
    try:
        while not rig.outcomes.settled(ids):
            if time.monotonic() - start > duration_s + args.drain_s:
                deadline = True
                print(f"deadline: {rig.outcomes.unsettled(ids)[:400]}")
                break
            rig.outcomes.poll(0.5)
            revive()
            tick()
        settled_s = time.monotonic() - start
        end = time.monotonic() + args.after_min * 60
        while time.monotonic() < end:
            rig.outcomes.poll(1.0)
            revive()
        for t in faults.threads:
            t.join(600)
        sampler.stop()
        hive = rig.hive_rows(files)
        removed = gc_removed(rig.group.log_dir / "gc.log")
    finally:
        faults.undo()
        codes = rig.close()
    marks = [(f.started, f.label) for f in plan if f.started is not None]
    write_csv(sampler.samples, out_dir / "samples.csv")
    pngs = plot(sampler.samples, out_dir, marks)
    outcomes = {
        fid: (st["extracted"] / 1000, (st.get("loaded") or st.get("failed") or 0) / 1000 or None)
        for fid, st in rig.outcomes.stamps.items()
        if "extracted" in st
    }
    slack_s = 2 * args.gc_interval_s + 60
    bounds = {
        z: [(s, zone_bound(s.t, outcomes, _s(retention.of(z)), slack_s)) for s in sampler.samples]
        for z in ("landing", "staging", "rejects", "incoming", "archive", "empty", "failed")
    }
    grown = growth(sampler.samples, args.warmup_min * 60)
    ok = report(
        files=files,
        outcomes=rig.outcomes,
        hive=hive,
        plan=plan,
        growth=grown,
        thread_changes={
            g.role: thread_growth(sampler.samples, g.role, args.warmup_min * 60)
            for g in grown
            if g.measure == "threads" and abs(g.percent) > MAX_GROWTH
        },
        bounds=bounds,
        retention=retention,
        removed=removed,
        settled_s=settled_s,
        deadline=deadline,
        codes=codes,
        restarts=restarts,
        pngs=pngs,
        out_dir=out_dir,
    )
    return 0 if ok else 1


def _s(keep: timedelta | None) -> float | None:
    return None if keep is None else keep.total_seconds()


def gc_removed(log: Path) -> dict[str, float]:
    """zone → files the gc service removed, from its log (one line per file and class; the
    counters of ``/metrics`` start again with each restart of the service)."""
    out: dict[str, float] = {}
    text = log.read_text(errors="replace") if log.exists() else ""
    for line in text.splitlines():
        if "ferry.gc.remover: gc: " in line:
            for zone, n in re.findall(r"(\w+) removed (\d+) file\(s\)", line):
                out[zone] = out.get(zone, 0) + int(n)
        elif m := re.search(r"ferry.gc.service: gc: (\w+) removed ", line):
            out[m.group(1)] = out.get(m.group(1), 0) + 1
    return out


if __name__ == "__main__":
    sys.exit(main())
