"""Files that arrive all day: the ``arrival`` part of bench/bench_pipeline.py (issue 45).

For each rate of ``--rates`` (files per second) in turn, new flights files are dropped on the
running services by rename (write ``.<name>.part``, then rename, as upstreams do) at that rate
for ``--minutes``, each holding ``--rows`` rows (the demo's daily files hold 700-1,000; the
field reports 20-120) spread over ``--days`` days of the year (1: one partition per file; 60: a
correction or catch-up file touching 60 partitions, case C23). Every file is new (its own rows,
so its own file id). Printed per rate:

* drop → loaded in Hive (the ``loaded`` event's Kafka timestamp) p50, p95 and max;
* the backlog (dropped, not yet loaded) every ``--sample-s`` seconds, and its mean over the last
  third of the dropping against the first third: a backlog that keeps growing means the rate is
  not sustained;
* the seconds from the last drop until every file was loaded (drained);
* every file's rows in Hive (through HiveServer2) against the rows its ``loaded`` event counted:
  ``exact`` or the files that differ.

A plot of backlog and latency over time per rate is written to ``<work>/arrival-<days>d.png``.
:func:`peer_arrival_part` (the ``arrival-peer`` part) drops the same kind of files at the same
rates on the Structured Streaming peer left running (``bench/peers.py live``: its default
trigger), its latency the end of the micro-batch that inserted the file; :func:`sustained` names
the highest rate each kept up with (``arrival-<days>d-peer.png``).
:func:`backlog_part` is the ``backlog`` part: files already on the NAS when the services start.
Asserts nothing about time.
"""

from __future__ import annotations

import random
import time
from collections.abc import Callable, Sequence
from contextlib import AbstractContextManager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from pipeline_parts import pct

from ferry.clusters.hiveserver2 import rows_by_file
from ferry.core.identity import derive_file_id, sha256_file
from ferry.settings import Settings
from ferry_kit.pipeline import Outcomes, ServiceGroup, drop_file
from ferry_kit.settings import KitSettings

Rows = list[tuple[str, ...]]


@dataclass
class ArrivalRun:
    """What one rate did: per file the drop time and the loaded time (epoch ms)."""

    rate: float
    dropped_ms: dict[str, float] = field(default_factory=dict)
    loaded_ms: dict[str, float] = field(default_factory=dict)
    backlog: list[tuple[float, int]] = field(default_factory=list)  #: (s since start, files)
    last_drop_s: float = 0.0
    drained_s: float = float("nan")
    mismatched: list[str] = field(default_factory=list)
    failed: int = 0

    def latencies_s(self) -> list[float]:
        return [
            (self.loaded_ms[f] - t) / 1000
            for f, t in self.dropped_ms.items()
            if f in self.loaded_ms
        ]

    def growth(self) -> tuple[float, float]:
        """Mean backlog over the first and the last third of the dropping."""
        during = [(t, n) for t, n in self.backlog if t <= self.last_drop_s]
        if len(during) < 3:
            return float("nan"), float("nan")
        k = len(during) // 3
        first = [n for _, n in during[:k]]
        last = [n for _, n in during[-k:]]
        return sum(first) / len(first), sum(last) / len(last)


def flights_rows(demo: Sequence[Any]) -> tuple[bytes, list[list[bytes]]]:
    """The flights header line and each day's data lines (the demo's daily files, in day order)."""
    days = sorted((f for f in demo if f.dataset == "flights"), key=lambda f: f.day)
    header = b""
    out = []
    for f in days:
        head, _, body = f.path.read_bytes().partition(b"\n")
        header = head + b"\n"
        out.append([ln + b"\n" for ln in body.splitlines() if ln])
    return header, out


def make_files(
    header: bytes,
    days: list[list[bytes]],
    dest: Path,
    count: int,
    rows: int,
    span: int,
    seed: int,
) -> list[Path]:
    """``count`` files in ``dest`` of ``rows`` rows each from ``span`` consecutive days (a random
    start day, rows taken round-robin from each day at a random offset); ``seed`` makes them
    reproducible and unlike another seed's."""
    rnd = random.Random(seed)
    dest.mkdir(parents=True, exist_ok=True)
    paths = []
    for i in range(count):
        start = rnd.randrange(len(days) - span + 1)
        chosen = days[start : start + span]
        offsets = [rnd.randrange(len(d)) for d in chosen]
        lines = [
            chosen[j % span][(offsets[j % span] + j // span) % len(chosen[j % span])]
            for j in range(rows)
        ]
        path = dest / f"flights_arrival_{seed}_{i:05d}.csv"
        path.write_bytes(header + b"".join(lines))
        paths.append(path)
    return paths


def run_rate(
    settings: Settings,
    files: Sequence[Path],
    rate: float,
    group: ServiceGroup,
    *,
    sample_s: float,
    drain_deadline_s: float,
    done: Callable[[], None] = lambda: None,
) -> ArrivalRun:
    """Drop ``files`` at ``rate`` files/s on the running ``group``; follow them until each is
    loaded or failed (``drain_deadline_s`` after the last drop at most), then call ``done()``
    and check the rows in Hive (a HiveServer2 query, outside what ``done`` closes)."""
    nas = settings.paths.nas_dir / "flights"
    fids = {derive_file_id("flights", sha256_file(p)): p for p in files}
    run = ArrivalRun(rate)
    outcomes = Outcomes(settings, since_ms=int(time.time() * 1000) - 1)
    t0 = time.monotonic()
    next_sample = 0.0
    try:
        ids = list(fids)
        for i, fid in enumerate(ids):
            due = t0 + i / rate
            while (now := time.monotonic()) < due:
                outcomes.poll(min(0.2, due - now))
            drop_file(fids[fid], nas / fids[fid].name, mode="rename")
            run.dropped_ms[fid] = time.time() * 1000
            if time.monotonic() - t0 >= next_sample:
                run.backlog.append((time.monotonic() - t0, _backlog(run, outcomes)))
                next_sample += sample_s
        run.last_drop_s = time.monotonic() - t0
        deadline = time.monotonic() + drain_deadline_s
        while not outcomes.settled(ids) and time.monotonic() < deadline:
            outcomes.poll(0.5)
            group.check_alive()
            if time.monotonic() - t0 >= next_sample:
                run.backlog.append((time.monotonic() - t0, _backlog(run, outcomes)))
                next_sample += sample_s
        if outcomes.settled(ids):
            run.drained_s = time.monotonic() - t0 - run.last_drop_s
        run.backlog.append((time.monotonic() - t0, _backlog(run, outcomes)))
    finally:
        outcomes.close()
        done()  # the work is over: what follows is the bench's own check
    for fid in ids:
        stamps = outcomes.stamps.get(fid, {})
        if fid in outcomes.loaded and "loaded" in stamps:
            run.loaded_ms[fid] = stamps["loaded"]
    run.failed = sum(1 for f in ids if f in outcomes.failed and f not in outcomes.loaded)
    loaded = {f: outcomes.loaded[f].manifest.rows_out for f in ids if f in outcomes.loaded}
    in_hive = rows_by_file(settings, "ferry.flights", list(loaded))
    run.mismatched = [f for f, n in loaded.items() if in_hive.get(f, 0) != n]
    return run


def sustained(runs: Sequence[ArrivalRun]) -> float | None:
    """The highest rate of ``runs`` that was kept up with: every file loaded, the backlog over
    the last third of the dropping at most 1.5 × that over the first third plus 2 files (flat,
    not growing), and drained within 60 s of the last drop; ``None`` when none was."""
    ok = []
    for r in runs:
        first, last = r.growth()
        if r.drained_s <= 60 and last <= 1.5 * first + 2 and len(r.loaded_ms) == len(r.dropped_ms):
            ok.append(r.rate)
    return max(ok, default=None)


def run_peer_rate(
    settings: Settings,
    files: Sequence[Path],
    rate: float,
    work: Path,
    *,
    sample_s: float,
    drain_deadline_s: float,
    log: Path,
) -> tuple[ArrivalRun, int]:
    """Drop ``files`` by rename at ``rate`` files/s into a fresh NAS directory that a running
    ``bench/peers.py live`` query reads; a file is "loaded" when the micro-batch holding it
    printed its end. Returns the run and the rows in the peer's table after it stopped.

    Raises:
        RuntimeError: the peer did not start within 300 s or exited with an error.
    """
    import json
    import os
    import subprocess
    import sys
    import threading

    key = f"{int(time.time())}{int(rate * 10)}"
    nas = work / "peer-live" / key / "flights"
    nas.mkdir(parents=True)
    stop_file = work / "peer-live" / key / "STOP"
    database, root = f"ferry_peer_live_{key}", f"/tmp/ferry-peer-live/{key}"
    run = ArrivalRun(rate)
    seen: dict[str, float] = {}
    ready = threading.Event()
    with log.open("ab") as err:
        proc = subprocess.Popen(  # noqa: S603
            [sys.executable, str(Path(__file__).parent / "peers.py"), "live", database, root,
             str(nas), str(stop_file)],
            stdout=subprocess.PIPE,
            stderr=err,
            env={**os.environ, "PYSPARK_PYTHON": sys.executable},
        )  # fmt: skip
    final: dict[str, Any] = {}

    def read() -> None:
        assert proc.stdout is not None
        for line in proc.stdout:
            if not line.startswith(b"{"):
                continue
            doc = json.loads(line)
            if "ready" in doc:
                ready.set()
            elif "batch" in doc:
                for name in doc["files"]:
                    seen.setdefault(name, doc["at"] * 1000)
            else:
                final.update(doc)

    reader = threading.Thread(target=read, daemon=True)
    reader.start()
    try:
        if not ready.wait(300):
            raise RuntimeError(f"the live peer did not start within 300 s (log {log})")
        names = {p.name: p for p in files}
        t0 = time.monotonic()
        next_sample = 0.0

        def sample() -> None:
            nonlocal next_sample
            if time.monotonic() - t0 >= next_sample:
                left = sum(1 for n in run.dropped_ms if n not in seen)
                run.backlog.append((time.monotonic() - t0, left))
                next_sample += sample_s

        for i, name in enumerate(names):
            while (now := time.monotonic()) < t0 + i / rate:
                time.sleep(min(0.05, t0 + i / rate - now))  # the drop's due time
            drop_file(names[name], nas / name, mode="rename")
            run.dropped_ms[name] = time.time() * 1000
            sample()
        run.last_drop_s = time.monotonic() - t0
        deadline = time.monotonic() + drain_deadline_s
        while any(n not in seen for n in names) and time.monotonic() < deadline:
            if proc.poll() is not None:
                raise RuntimeError(f"the live peer exited {proc.returncode} (log {log})")
            time.sleep(0.2)  # the peer's next micro-batch line
            sample()
        if all(n in seen for n in names):
            run.drained_s = time.monotonic() - t0 - run.last_drop_s
        run.backlog.append((time.monotonic() - t0, sum(1 for n in names if n not in seen)))
    finally:
        stop_file.touch()
        try:
            proc.wait(timeout=300)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(timeout=30)
        reader.join(timeout=30)
    run.loaded_ms = {n: seen[n] for n in run.dropped_ms if n in seen}
    return run, int(final.get("rows", -1))


def peer_arrival_part(
    settings: Settings,
    demo: Sequence[Any],
    work: Path,
    rows: Rows,
    say: Callable[[str], None],
    *,
    rates: Sequence[float],
    minutes: float,
    file_rows: int,
    days: int,
    ferry_runs: Sequence[ArrivalRun] = (),
) -> list[ArrivalRun]:
    """The streaming peer at each rate in turn (see the module docstring); a row each, then the
    highest rate each of the peer and Ferry (``ferry_runs``, the same rates) kept up with."""
    header, by_day = flights_rows(demo)
    runs = []
    log = work / "peer-live.log"
    for k, rate in enumerate(rates):
        count = max(1, round(rate * minutes * 60))
        seed = int(time.time()) * 10 + 5 + k
        files = make_files(
            header, by_day, work / "arrival-peer" / str(seed), count, file_rows, days, seed
        )
        say(f"arrival-peer: {count} files, {rate:g}/s for {minutes:g} min, the streaming peer …")
        run, in_table = run_peer_rate(
            settings,
            files,
            rate,
            work,
            sample_s=5.0,
            drain_deadline_s=max(300.0, minutes * 120),
            log=log,
        )
        runs.append(run)
        lat = run.latencies_s()
        first, last = run.growth()
        lines = sum(len(p.read_bytes().splitlines()) - 1 for p in files)
        rows.append(
            (
                "arrival-peer",
                f"streaming peer, {rate:g} files/s × {minutes:g} min, {file_rows} rows over "
                f"{days} day(s) a file",
                f"p50 {pct(lat, 0.5):.1f}",
                f"p95 {pct(lat, 0.95):.1f}, max {max(lat, default=float('nan')):.1f}; "
                f"drained {run.drained_s:.0f} s after the last drop",
                f"backlog {first:.0f} → {last:.0f}; {in_table} rows in its table of {lines}",
            )
        )
    plot(runs, work / f"arrival-{days}d-peer.png", f"streaming peer, {days} day(s) per file")
    best = {
        "Ferry": sustained(ferry_runs) if ferry_runs else None,
        "streaming peer": sustained(runs),
    }
    tried = ", ".join(f"{r:g}" for r in rates)
    rows.append(
        (
            "arrival-peer",
            f"highest rate kept up with, {days} day(s) a file (of {tried}/s)",
            "",
            ", ".join(f"{who} {'none' if r is None else f'{r:g}/s'}" for who, r in best.items()),
            "",
        )
    )
    return runs


def _backlog(run: ArrivalRun, outcomes: Outcomes) -> int:
    return sum(1 for f in run.dropped_ms if f not in outcomes.loaded and f not in outcomes.failed)


def plot(runs: Sequence[ArrivalRun], path: Path, title: str) -> None:
    """Backlog (files) and drop → loaded latency (s) over time, one line per rate."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, (top, bottom) = plt.subplots(2, 1, figsize=(9, 7), sharex=True)
    for run in runs:
        label = f"{run.rate:g} files/s"
        top.plot([t for t, _ in run.backlog], [n for _, n in run.backlog], label=label)
        start = min(run.dropped_ms.values())
        pts = sorted(
            ((t - start) / 1000, (run.loaded_ms[f] - t) / 1000)
            for f, t in run.dropped_ms.items()
            if f in run.loaded_ms
        )
        bottom.plot([x for x, _ in pts], [y for _, y in pts], ".", ms=3, label=label)
    top.set_ylabel("backlog (files dropped, not loaded)")
    bottom.set_ylabel("drop → loaded in Hive (s)")
    bottom.set_xlabel("seconds since the first drop")
    top.legend()
    top.set_title(title)
    fig.tight_layout()
    fig.savefig(path, dpi=90)
    plt.close(fig)


def arrival_part(
    settings: Settings,
    demo: Sequence[Any],
    work: Path,
    group: ServiceGroup,
    rows: Rows,
    say: Callable[[str], None],
    *,
    rates: Sequence[float],
    minutes: float,
    file_rows: int,
    days: int,
    measure: Callable[[str, int], AbstractContextManager[Any]],
) -> list[ArrivalRun]:
    """Each rate in turn on the running ``group``; a row each (see the module docstring).
    ``measure(label, files)`` wraps each rate's drops and drain; what it yields has ``close()``,
    which ends the measured window before the rows are checked in Hive."""
    header, by_day = flights_rows(demo)
    runs = []
    for k, rate in enumerate(rates):
        count = max(1, round(rate * minutes * 60))
        seed = int(time.time()) * 10 + k  # new rows every run: files no earlier run loaded
        files = make_files(
            header, by_day, work / "arrival" / str(seed), count, file_rows, days, seed
        )
        say(
            f"arrival: {count} files of {file_rows} rows over {days} day(s), {rate:g}/s for "
            f"{minutes:g} min …"
        )
        with measure(f"arrival, {rate:g}/s, {days} day(s) a file", count) as window:
            run = run_rate(
                settings,
                files,
                rate,
                group,
                sample_s=5.0,
                drain_deadline_s=max(300.0, minutes * 120),
                done=window.close,
            )
        runs.append(run)
        lat = run.latencies_s()
        first, last = run.growth()
        exact = "every row exact" if not run.mismatched else f"{len(run.mismatched)} files differ"
        failed = f", {run.failed} failed" if run.failed else ""
        rows.append(
            (
                "arrival",
                f"{rate:g} files/s × {minutes:g} min, {file_rows} rows over {days} day(s) a file",
                f"p50 {pct(lat, 0.5):.1f}",
                f"p95 {pct(lat, 0.95):.1f}, max {max(lat, default=float('nan')):.1f}; "
                f"drained {run.drained_s:.0f} s after the last drop",
                f"backlog {first:.0f} → {last:.0f} (first → last third); {exact}{failed}",
            )
        )
    plot(runs, work / f"arrival-{days}d.png", f"{file_rows} rows over {days} day(s) per file")
    return runs


def backlog_part(
    settings: KitSettings,
    demo: Sequence[Any],
    work: Path,
    group: ServiceGroup,
    rows: Rows,
    say: Callable[[str], None],
    *,
    count: int,
    file_rows: int,
    pids: dict[str, int],
    days: int = 1,
    deadline_s: float = 3600.0,
) -> None:
    """A backlog at start (after an outage): ``count`` new flights files of ``file_rows`` rows,
    each over ``days`` consecutive days (1: one partition a file; 60: case C23), put on the NAS
    by rename while no service runs, then ``group`` (not
    started yet) started, its processes' ids put in ``pids`` (the cost meter's services). One
    row: from the start to the last file loaded, files/min, how long the services took to be
    ready, and every file's rows in Hive against its ``loaded`` event.

    Raises:
        TimeoutError: not every file settled within ``deadline_s`` of the start.
    """
    header, by_day = flights_rows(demo)
    seed = int(time.time()) * 10 + 9
    files = make_files(header, by_day, work / "backlog" / str(seed), count, file_rows, days, seed)
    nas = settings.paths.nas_dir / "flights"
    ids = [derive_file_id("flights", sha256_file(p)) for p in files]
    say(
        f"backlog: {count} files of {file_rows} rows over {days} day(s) on the NAS, then the "
        "services start …"
    )
    for p in files:
        drop_file(p, nas / p.name, mode="rename")
    outcomes = Outcomes(settings, since_ms=int(time.time() * 1000) - 1)
    t0 = time.monotonic()
    try:
        group.start()
        pids |= {name: proc.pid for name, proc in group.procs.items()}
        ready = group.wait_ready(settings, 600)
        while not outcomes.settled(ids):
            if time.monotonic() - t0 > deadline_s:
                raise TimeoutError(outcomes.unsettled(ids))
            outcomes.poll(1.0)
            group.check_alive()
        wall = time.monotonic() - t0
    finally:
        outcomes.close()
    failed = sum(1 for f in ids if f in outcomes.failed and f not in outcomes.loaded)
    loaded = {f: outcomes.loaded[f].manifest.rows_out for f in ids if f in outcomes.loaded}
    in_hive = rows_by_file(settings, "ferry.flights", list(loaded))
    differ = [f for f, n in loaded.items() if in_hive.get(f, 0) != n]
    exact = "every row exact" if not differ else f"{len(differ)} files differ"
    rows.append(
        (
            "backlog",
            f"{count} files on the NAS at start ({file_rows} rows over {days} day(s) each) → Hive",
            f"{wall:.1f}",
            f"{count / wall * 60:.0f} files/min; services ready after {ready:.0f} s",
            f"{exact}{f', {failed} failed' if failed else ''}",
        )
    )
