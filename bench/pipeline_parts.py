"""The parts of bench/bench_pipeline.py: each runs one kind of work on the real stack and returns
figures (seconds, bytes); the table is printed by bench_pipeline.py."""

from __future__ import annotations

import json
import os
import shutil
import statistics
import subprocess
import sys
import threading
import time
import uuid
from collections import defaultdict
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, NamedTuple

import psutil

from ferry.clusters.hdfs.webhdfs import WebHdfs
from ferry.core.identity import derive_file_id, sha256_file
from ferry.settings import Settings
from ferry_kit.pipeline import Outcomes, ServiceGroup, drop_file
from ferry_kit.stack.base import java, spark_home
from ferry_kit.stack.components import build_components
from ferry_kit.stack.manager import Stack

BENCH = Path(__file__).resolve().parent


def pct(values: Sequence[float], q: float) -> float:
    """The ``q`` quantile (nearest rank) of ``values``; NaN for none."""
    if not values:
        return float("nan")
    s = sorted(values)
    return s[min(len(s) - 1, round(q * (len(s) - 1)))]


class RssSampler:
    """Samples, every ``every_s``, the RSS of each stack component's process tree and of each
    service's (Python process + its Spark driver JVM); keeps each one's peak and the peaks of
    their sums (stack, services)."""

    def __init__(self, settings: Settings, every_s: float = 0.5) -> None:
        self.stack = Stack(settings)
        self.comps = build_components(settings)
        self.every_s = every_s
        self.services: dict[str, int] = {}
        self.peak: defaultdict[str, int] = defaultdict(int)
        self.peak_stack = 0
        self.peak_services = 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="rss", daemon=True)

    @staticmethod
    def _tree_rss(pid: int) -> int:
        try:
            proc = psutil.Process(pid)
            procs = [proc, *proc.children(recursive=True)]
        except psutil.Error:
            return 0
        total = 0
        for p in procs:
            try:
                total += p.memory_info().rss
            except psutil.Error:
                continue
        return total

    def _sample(self) -> None:
        stack_sum = 0
        for comp in self.comps:
            pid = self.stack.pid(comp)
            if pid is not None:
                rss = self._tree_rss(pid)
                stack_sum += rss
                self.peak[f"stack {comp.name}"] = max(self.peak[f"stack {comp.name}"], rss)
        svc_sum = 0
        for name, pid in list(self.services.items()):
            rss = self._tree_rss(pid)
            svc_sum += rss
            self.peak[f"service {name}"] = max(self.peak[f"service {name}"], rss)
        self.peak_stack = max(self.peak_stack, stack_sum)
        self.peak_services = max(self.peak_services, svc_sum)

    def _run(self) -> None:
        while not self._stop.wait(self.every_s):
            self._sample()

    def start(self) -> None:
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(10)


# -- (a) the per-file design ------------------------------------------------------------------


@dataclass
class BaselineResult:
    per_file_s: list[float] = field(default_factory=list)
    transform_s: list[float] = field(default_factory=list)
    load_s: list[float] = field(default_factory=list)


def _chunks(path: Path, size: int = 1 << 20) -> Iterator[bytes]:
    with path.open("rb") as fh:
        while chunk := fh.read(size):
            yield chunk


def _submit(settings: Settings, args: list[str], log: Path) -> dict[str, Any]:
    """One ``spark-submit bench/baseline_job.py ARGS`` against the stack's masters; its JSON."""
    cmd = [
        str(spark_home() / "bin" / "spark-submit"),
        "--master",
        settings.spark.master_url,
        str(BENCH / "baseline_job.py"),
        *args,
    ]
    env = {**os.environ, "SPARK_LOCAL_IP": settings.spark.host, "PYSPARK_PYTHON": sys.executable}
    with log.open("ab") as fh:
        out = subprocess.run(  # noqa: S603
            cmd, stdout=subprocess.PIPE, stderr=fh, env=env, timeout=600, check=False
        )
    lines = [ln for ln in out.stdout.decode().splitlines() if ln.startswith("{")]
    if out.returncode != 0 or not lines:
        raise RuntimeError(f"spark-submit {args[:2]} exited {out.returncode}; see {log}")
    return dict(json.loads(lines[-1]))


def run_baseline(settings: Settings, files: Sequence[Any], log: Path, say: Any) -> BaselineResult:
    """Per sample file: land it on B (untimed: extract's part), then time one spark-submit that
    transforms it to staging on A and one that loads it into Hive (database ``ferry_baseline``)."""
    b, a = settings.cluster("b"), settings.cluster("a")
    root = f"/bench/baseline-{uuid.uuid4().hex[:8]}"
    hdfs = WebHdfs.for_cluster("b", settings)
    res = BaselineResult()
    try:
        for i, f in enumerate(files):
            fid = derive_file_id(f.dataset, sha256_file(f.path))
            src = f"{root}/landing/{f.relative_path}"
            hdfs.upload_stream(src, _chunks(f.path))
            t0 = time.perf_counter()
            out = _submit(
                settings,
                ["transform", f.dataset, f"{b.fs_url}{src}", f"{a.fs_url}{root}", fid],
                log,
            )
            t1 = time.perf_counter()
            _submit(settings, ["load", f.dataset, out["staged"], fid, "ferry_baseline"], log)
            t2 = time.perf_counter()
            res.transform_s.append(t1 - t0)
            res.load_s.append(t2 - t1)
            res.per_file_s.append(t2 - t0)
            say(f"baseline {i + 1}/{len(files)} {f.relative_path}: {t2 - t0:.1f}s")
    finally:
        hdfs.delete(root, recursive=True)
        hdfs.close()
        a_port = WebHdfs.for_cluster("a", settings)
        a_port.delete(root, recursive=True)
        a_port.close()
    return res


# -- (b)(c) Ferry's services ------------------------------------------------------------------


@dataclass
class FerryRun:
    files: int
    wall_s: float
    nbytes: int
    latencies: dict[str, tuple[float, float]]
    hops: dict[str, list[float]]
    failed: int


_HOPS = {
    "drop → extracted": (None, "extracted"),
    "extracted → transformed": ("extracted", "transformed"),
    "transformed → transferred": ("transformed", "transferred"),
    "transferred → loaded": ("transferred", "loaded"),
    "drop → loaded": (None, "loaded"),
}


def run_ferry(
    settings: Settings,
    files: Sequence[tuple[str, Path, Path]],
    deadline_s: float,
    group: ServiceGroup,
    *,
    slow_every: int = 10,
) -> FerryRun:
    """Drop ``(dataset, source, NAS path)`` files the demo's way (every ``slow_every``-th copied
    slowly, the others write-then-rename) on the running ``group``; wait until each has an
    outcome. Hops are timed from the drop (the start of a slow copy, the end of a rename) to each
    event's Kafka timestamp."""
    fids = [derive_file_id(ds, sha256_file(src)) for ds, src, _ in files]
    nbytes = sum(src.stat().st_size for _, src, _ in files)
    outcomes = Outcomes(settings, since_ms=int(time.time() * 1000) - 1)
    dropped: dict[str, float] = {}
    t0 = time.monotonic()
    try:
        for i, ((_, src, nas), fid) in enumerate(zip(files, fids, strict=True)):
            mode = "slow" if slow_every and i % slow_every == 0 else "rename"
            before = time.time() * 1000
            drop_file(src, nas, mode=mode)
            # a slow copy is visible from its start; a renamed one once the rename is done
            dropped.setdefault(fid, before if mode == "slow" else time.time() * 1000)
            if i % 20 == 0:
                outcomes.poll(0.02)
        while not outcomes.settled(fids):
            if time.monotonic() - t0 > deadline_s:
                raise TimeoutError(f"{len(files)} files: no outcome for all after {deadline_s}s")
            outcomes.poll(0.5)
            group.check_alive()
        wall = time.monotonic() - t0
    finally:
        outcomes.close()
    hops: dict[str, list[float]] = {h: [] for h in _HOPS}
    for fid in fids:
        st = outcomes.stamps.get(fid, {})
        for hop, (frm, to) in _HOPS.items():
            start = dropped[fid] if frm is None else st.get(frm)
            if start is not None and to in st:
                hops[hop].append((st[to] - start) / 1000)
    lat = {h: (statistics.median(v) if v else float("nan"), pct(v, 0.95)) for h, v in hops.items()}
    failed = sum(1 for f in fids if f in outcomes.failed and f not in outcomes.loaded)
    return FerryRun(len(files), wall, nbytes, lat, hops, failed)


def big_file(demo_files: Sequence[Any], dest: Path, target_bytes: int) -> Path:
    """``dest``: the header and the year's flights rows (the demo's daily flights files) repeated
    until the file holds at least ``target_bytes``; reused when already that size."""
    flights = sorted(f.path for f in demo_files if f.dataset == "flights")
    if dest.exists() and dest.stat().st_size >= target_bytes:
        return dest
    header = flights[0].read_bytes().split(b"\n", 1)[0] + b"\n"
    body = b"".join(p.read_bytes().split(b"\n", 1)[1] for p in flights)
    dest.parent.mkdir(parents=True, exist_ok=True)
    tmp = dest.with_name(f".{dest.name}.tmp")
    with tmp.open("wb") as fh:
        fh.write(header)
        written = len(header)
        while written < target_bytes:
            fh.write(body)
            written += len(body)
    os.replace(tmp, dest)
    return dest


# -- (d) the floor, (stream) copies -----------------------------------------------------------


class Floor(NamedTuple):
    """Seconds of plain Spark ``local[2]`` over the same CSV files (bench/baseline_job.py
    ``floor``): ``plain`` CSV → Parquet; ``partitioned`` CSV → Parquet in the table's layout
    (derived columns, one file per partition of the table's partition columns)."""

    plain: float
    partitioned: float


def floor(dataset: str, csvs: Sequence[Path], out: Path, log: Path) -> Floor:
    """The floors of ``csvs`` (:class:`Floor`), each one job in one ``local[2]`` session."""
    shutil.rmtree(out, ignore_errors=True)
    with log.open("ab") as fh:
        proc = subprocess.run(  # noqa: S603
            [sys.executable, str(BENCH / "baseline_job.py"), "floor", dataset, str(out)]
            + [str(c) for c in csvs],
            stdout=subprocess.PIPE,
            stderr=fh,
            timeout=900,
            check=True,
        )
    shutil.rmtree(out, ignore_errors=True)
    shutil.rmtree(f"{out}-warm-up", ignore_errors=True)
    shutil.rmtree(f"{out}-partitioned", ignore_errors=True)
    line = [ln for ln in proc.stdout.decode().splitlines() if ln.startswith("{")][-1]
    got = json.loads(line)
    return Floor(float(got["read_write_s"]), float(got["partitioned_s"]))


def fs_shell(settings: Settings, cluster: str, args: list[str]) -> float:
    """Seconds of ``hdfs dfs ARGS`` (FsShell from the stack's Hadoop jars, cluster's conf),
    JVM start included.

    Raises:
        RuntimeError: FsShell exited non-zero (its last error lines in the message).
    """
    var = settings.var_dir
    cmd = [
        java(),
        "-Xmx512m",
        f"-Dhadoop.home.dir={var / 'jars' / 'hdfs'}",
        "-cp",
        f"{var / 'conf' / f'hdfs-{cluster}'}:{var / 'jars' / 'hdfs'}/*",
        "org.apache.hadoop.fs.FsShell",
        *args,
    ]
    t0 = time.perf_counter()
    done = subprocess.run(cmd, timeout=600, capture_output=True, text=True)  # noqa: S603
    if done.returncode != 0:
        errors = [line for line in done.stderr.splitlines() if " WARN " not in line]
        raise RuntimeError(
            f"hdfs dfs {args[0]} exited {done.returncode}: {' | '.join(errors[-3:])}"
        )
    return time.perf_counter() - t0
