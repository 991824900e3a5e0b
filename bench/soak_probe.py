"""What the long soak (bench/soak_long.py) measures each minute: every process's RSS, threads and
open file descriptors (psutil), and each zone's usage (HDFS: bytes by ``GETCONTENTSUMMARY``,
files as the zone's file directories, one per file whatever it holds; the NAS directories); and
what it concludes from them (growth from the first to the last quarter, zone usage against its
retention's bound) and plots (one PNG per figure, matplotlib).

Processes, by role (a role keeps its name across restarts, so a killed and restarted service is
one series): each Ferry service the rig runs and its child processes (``transform/java`` is the
Spark driver JVM pyspark starts), the Spark executors of those drivers (``transform/executor``:
children of the worker whose ``--driver-url`` port is one a driver of ours listens on), and every
component of the local stack (``kafka``, ``hdfs-a-namenode``, …; on a shared stack their growth
is not only ours).

Each sample also counts every role's threads by name (``/proc/<pid>/task/<tid>/comm``: the JVM
names its native threads after its Java threads, cut to 15 characters; digits dropped, so
``Executor task launch worker for task 12`` and ``…13`` are one pool), which tells a pool that grows
from one that swings with the work in flight (:func:`thread_growth`).
"""

from __future__ import annotations

import csv
import os
import re
import threading
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path

import psutil

from ferry.clusters.hdfs.webhdfs import WebHdfs
from ferry.settings import Settings
from ferry.settings.retention import ZONES
from ferry_kit.stack.manager import Stack

#: Shells and launchers between a service and its JVM: not sampled.
_LAUNCHERS = {"bash", "sh", "dash"}


@dataclass
class Sample:
    """One minute's figures: ``procs`` role → (rss bytes, threads, fds, processes), ``pids``
    role → its processes' ids (a restart changes them); ``zones`` zone → (bytes, files),
    ``orphans`` zone → files under its ``_tmp`` directories."""

    t: float
    procs: dict[str, tuple[int, int, int, int]] = field(default_factory=dict)
    pids: dict[str, tuple[int, ...]] = field(default_factory=dict)
    zones: dict[str, tuple[int, int]] = field(default_factory=dict)
    orphans: dict[str, int] = field(default_factory=dict)
    #: role → thread name (digits dropped) → threads of that name
    thread_names: dict[str, dict[str, int]] = field(default_factory=dict)


def thread_names(pid: int) -> dict[str, int]:
    """Thread name (``/proc/<pid>/task/*/comm``, digits and trailing separators dropped) → threads
    of that name in process ``pid``; empty when the process is gone."""
    out: dict[str, int] = {}
    try:
        tids = os.listdir(f"/proc/{pid}/task")
    except OSError:
        return out
    for tid in tids:
        try:
            with open(f"/proc/{pid}/task/{tid}/comm", encoding="utf-8", errors="replace") as fh:
                name = re.sub(r"\d+", "", fh.read().strip()).rstrip(" -_#:") or "?"
        except OSError:
            continue
        out[name] = out.get(name, 0) + 1
    return out


def _roles(services: Mapping[str, int], settings: Settings) -> dict[str, list[psutil.Process]]:
    """role → its live processes (see the module docstring)."""
    out: dict[str, list[psutil.Process]] = {}
    driver_ports: dict[int, str] = {}
    for name, pid in services.items():
        try:
            root = psutil.Process(pid)
            out.setdefault(name, []).append(root)
            for child in root.children(recursive=True):
                exe = os.path.basename(child.cmdline()[0]) if child.cmdline() else child.name()
                if exe in _LAUNCHERS:
                    continue
                out.setdefault(f"{name}/{exe}", []).append(child)
                for conn in child.net_connections(kind="tcp"):
                    if conn.status == psutil.CONN_LISTEN:
                        driver_ports[conn.laddr.port] = name
        except psutil.Error:
            continue
    stack = Stack(settings)
    for comp in stack.select(None):
        pid = stack.pid(comp)
        if pid is None:
            continue
        try:
            proc = psutil.Process(pid)
        except psutil.Error:
            continue
        out.setdefault(comp.name, []).append(proc)
        if comp.name == "spark-worker":
            for child in proc.children(recursive=True):
                owner = _executor_of(child, driver_ports)
                if owner is not None:
                    out.setdefault(f"{owner}/executor", []).append(child)
    return out


def _executor_of(proc: psutil.Process, driver_ports: Mapping[int, str]) -> str | None:
    """The service whose driver this executor serves, from its ``--driver-url …:<port>``."""
    try:
        cmd = proc.cmdline()
    except psutil.Error:
        return None
    if "--driver-url" not in cmd:
        return None
    url = cmd[cmd.index("--driver-url") + 1]
    port = url.rsplit(":", 1)[-1]
    return driver_ports.get(int(port)) if port.isdigit() else None


def _file_dirs(port: WebHdfs, root: str, datasets: list[str]) -> int:
    """Files an HDFS zone holds: the ``<root>/<dataset>/<file_id>`` directories (one per file,
    whatever it holds: a landed file; a staged file's data files and marker; its rejects), not
    ``_tmp`` nor other hidden entries. One LISTSTATUS per dataset."""
    n = 0
    for d in datasets:
        if port.content_summary(f"{root}/{d}") is None:
            continue
        n += sum(1 for e in port.list(f"{root}/{d}") if not e.name.startswith(("_", ".")))
    return n


def _nas_usage(directory: Path) -> tuple[int, int]:
    size = files = 0
    for root, _dirs, names in os.walk(directory):
        for n in names:
            try:
                size += os.lstat(os.path.join(root, n)).st_size
                files += 1
            except OSError:
                continue
    return size, files


class Sampler:
    """Samples every ``every_s`` seconds in a daemon thread until :meth:`stop`.

    ``services()`` gives the Ferry services' pids (role → pid) at each sample.
    """

    def __init__(
        self,
        settings: Settings,
        services: Callable[[], Mapping[str, int]],
        datasets: list[str],
        every_s: float,
    ) -> None:
        self.settings = settings
        self.services = services
        self.datasets = datasets
        self.every_s = every_s
        self.samples: list[Sample] = []
        self._stop = threading.Event()
        self._hdfs = {c: WebHdfs.for_cluster(c, settings) for c in ("a", "b")}
        self._thread = threading.Thread(target=self._run, name="soak-sampler", daemon=True)

    def start(self) -> Sampler:
        self._thread.start()
        return self

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(60)
        self.samples.append(self.sample())

    def _run(self) -> None:
        while not self._stop.is_set():
            self.samples.append(self.sample())
            self._stop.wait(self.every_s)

    def sample(self) -> Sample:
        s = Sample(time.time())
        for role, procs in _roles(self.services(), self.settings).items():
            rss = threads = fds = n = 0
            pids = []
            names: dict[str, int] = {}
            for p in procs:
                for name, k in thread_names(p.pid).items():
                    names[name] = names.get(name, 0) + k
                try:
                    with p.oneshot():
                        rss += p.memory_info().rss
                        threads += p.num_threads()
                        fds += p.num_fds()
                        n += 1
                        pids.append(p.pid)
                except psutil.Error:
                    continue
            if n:
                s.procs[role] = (rss, threads, fds, n)
                s.pids[role] = tuple(sorted(pids))
                s.thread_names[role] = names
        paths = self.settings.paths
        for z in ZONES:
            if z.on_hdfs:
                port = self._hdfs[z.store]
                root = getattr(paths, z.path_setting)
                try:
                    got = port.content_summary(root)
                    s.zones[z.name] = (got[0] if got else 0, _file_dirs(port, root, self.datasets))
                    tmp = [port.content_summary(f"{root}/{d}/_tmp") for d in self.datasets]
                    s.orphans[z.name] = sum(t[1] for t in tmp if t)
                except Exception:  # noqa: BLE001 - a cluster paused by a fault: no figure now
                    continue
            else:
                s.zones[z.name] = _nas_usage(Path(paths.nas_dir) / ".ferry" / z.path_setting)
        return s


@dataclass(frozen=True)
class Growth:
    """One role's figure (``rss``, ``threads``, ``fds``): mean of the first and of the last
    quarter of its samples after warm-up, and the growth in percent; ``restarted``: the role had
    other processes before (killed, crashed), the figures are those of its longest-lived ones."""

    role: str
    measure: str
    first: float
    last: float
    restarted: bool = False

    @property
    def percent(self) -> float:
        return 0.0 if self.first == 0 else 100.0 * (self.last - self.first) / self.first


def _quarters(samples: list[Sample], role: str, warmup_s: float) -> tuple[list[Sample], ...]:
    """The first and last quarter of ``role``'s samples taken ``warmup_s`` after its processes
    started, on its longest-lived set of processes; and whether it had others (a restart)."""
    runs: dict[tuple[int, ...], list[Sample]] = {}
    for s in samples:
        if role in s.procs:
            runs.setdefault(s.pids[role], []).append(s)
    mine = max(runs.values(), key=lambda r: r[-1].t - r[0].t)
    kept = [s for s in mine if s.t >= mine[0].t + warmup_s]
    if len(kept) < 4:
        return [], [], []
    span = kept[-1].t - kept[0].t
    q1 = [s for s in kept if s.t <= kept[0].t + span / 4]
    q4 = [s for s in kept if s.t >= kept[-1].t - span / 4]
    return q1, q4, [s for r in runs.values() if r is not mine for s in r]


def growth(samples: list[Sample], warmup_s: float) -> list[Growth]:
    """Growth of every role's RSS, threads and fds from the first to the last quarter of its
    samples taken ``warmup_s`` after its processes started (their first sample). A role whose
    processes changed (a restart) is judged on its longest-lived set of processes: comparing a
    process with its replacement says nothing about either."""
    out = []
    for role in sorted({r for s in samples for r in s.procs}):
        q1, q4, others = _quarters(samples, role, warmup_s)
        if not q1:
            continue
        for i, measure in enumerate(("rss", "threads", "fds")):
            a = [s.procs[role][i] for s in q1]
            b = [s.procs[role][i] for s in q4]
            out.append(Growth(role, measure, sum(a) / len(a), sum(b) / len(b), bool(others)))
    return out


def thread_growth(
    samples: list[Sample], role: str, warmup_s: float, top: int = 5
) -> list[tuple[str, float, float]]:
    """The thread names of ``role`` whose mean count changed most from the first to the last
    quarter (the samples :func:`growth` compares), as (name, first, last), largest change first,
    at most ``top``."""
    q1, q4, _ = _quarters(samples, role, warmup_s)
    if not q1:
        return []

    def mean(part: list[Sample], name: str) -> float:
        return sum(s.thread_names.get(role, {}).get(name, 0) for s in part) / len(part)

    names = {n for s in q1 + q4 for n in s.thread_names.get(role, {})}
    changes = [(n, mean(q1, n), mean(q4, n)) for n in names]
    changes.sort(key=lambda c: -abs(c[2] - c[1]))
    return [c for c in changes[:top] if c[1] != c[2]]


def zone_bound(
    t: float,
    outcomes: Mapping[str, tuple[float, float | None]],
    keep_s: float | None,
    slack_s: float,
) -> int | None:
    """Most files a zone may hold at ``t`` (epoch s) under its retention ``keep_s``: files in
    flight (extracted, no outcome yet; a file is landed a moment before its FileExtracted, so
    files extracted up to 10 s after ``t`` count) plus files whose outcome is less than
    ``keep_s + slack_s`` old (``outcomes``: file id → (extracted, outcome or None) times).
    ``None`` when the zone keeps everything."""
    if keep_s is None:
        return None
    n = 0
    for extracted, done in outcomes.values():
        if extracted > t + 10:
            continue
        if done is None or done > t or t - done < keep_s + slack_s:
            n += 1
    return n


def write_csv(samples: list[Sample], path: Path) -> None:
    """Every sample as rows ``t, kind (proc|zone|thread), name, values…`` (``thread`` rows:
    ``role/thread name`` and the count)."""
    with path.open("w", newline="", encoding="utf-8") as fh:
        w = csv.writer(fh)
        w.writerow(["t", "kind", "name", "rss_or_bytes", "threads_or_files", "fds", "processes"])
        for s in samples:
            for role, (rss, th, fds, n) in sorted(s.procs.items()):
                w.writerow([f"{s.t:.0f}", "proc", role, rss, th, fds, n])
            for zone, (size, files) in sorted(s.zones.items()):
                w.writerow([f"{s.t:.0f}", "zone", zone, size, files, "", ""])
            for role, names in sorted(s.thread_names.items()):
                for name, k in sorted(names.items()):
                    w.writerow([f"{s.t:.0f}", "thread", f"{role}/{name}", "", k, "", ""])


def plot(samples: list[Sample], out_dir: Path, marks: list[tuple[float, str]]) -> list[Path]:
    """One PNG per figure: RSS, threads and fds per role, files and bytes per zone; faults
    (``marks``: epoch s, label) as vertical lines. Returns the files written."""
    import matplotlib

    matplotlib.use("Agg")
    from matplotlib import pyplot as plt

    if not samples:
        return []
    t0 = samples[0].t
    figures: list[tuple[str, str, Callable[[Sample], dict[str, float]]]] = [
        ("rss", "RSS, MiB", lambda s: {r: v[0] / 2**20 for r, v in s.procs.items()}),
        ("threads", "threads", lambda s: {r: float(v[1]) for r, v in s.procs.items()}),
        ("fds", "open file descriptors", lambda s: {r: float(v[2]) for r, v in s.procs.items()}),
        ("zone_files", "files per zone", lambda s: {z: float(v[1]) for z, v in s.zones.items()}),
        ("zone_bytes", "MiB per zone", lambda s: {z: v[0] / 2**20 for z, v in s.zones.items()}),
    ]
    written = []
    for name, label, values in figures:
        series: dict[str, list[tuple[float, float]]] = {}
        for s in samples:
            for key, v in values(s).items():
                series.setdefault(key, []).append(((s.t - t0) / 60, v))
        fig, ax = plt.subplots(figsize=(13, 6))
        colors = plt.get_cmap("tab20").colors
        for i, (key, points) in enumerate(sorted(series.items())):
            ax.plot(
                [p[0] for p in points],
                [p[1] for p in points],
                label=key,
                linewidth=1.2,
                color=colors[i % len(colors)],
                linestyle=("-", "--", ":")[i // len(colors) % 3],
            )
        for at, text in marks:
            ax.axvline((at - t0) / 60, color="grey", linestyle=":", linewidth=0.8)
            ax.text((at - t0) / 60, ax.get_ylim()[1], text, rotation=90, fontsize=7, va="top")
        ax.set_xlabel("minutes since start")
        ax.set_ylabel(label)
        ax.legend(fontsize=7, loc="upper left", bbox_to_anchor=(1.01, 1.0))
        fig.tight_layout()
        path = out_dir / f"{name}.png"
        fig.savefig(path, dpi=110)
        plt.close(fig)
        written.append(path)
    return written


__all__ = [
    "Growth",
    "Sample",
    "Sampler",
    "growth",
    "plot",
    "thread_growth",
    "thread_names",
    "write_csv",
    "zone_bound",
]
