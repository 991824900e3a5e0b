"""The load job on many small files, on the real stack (HDFS A, the Spark master pair, the Hive
metastore): seconds per batch, metastore partitions, Parquet files, and exact rows per file.

Writes ``--files`` synthetic staged files of the ``flights`` dataset (``--rows`` rows each, every
file's rows on one of ``--days`` days from 2013-01-01) to HDFS A as transfer leaves them
(``<root>/incoming/flights/<file_id>/part-….parquet``, no ``ferry_file_id`` column): ONE Spark job
partitioned by file id, then one rename per file. Then loads them into a fresh table, ``--batch``
files per call of the load job (what the load service calls per batch), and prints:

* seconds per batch: median, p95, first, last, total, files/s;
* metastore partitions (``SHOW PARTITIONS``) and Parquet data files under the table (HDFS listing);
* rows per file id from the table, asserted equal to ``--rows`` for every file;
* a replay: ``--replay`` of the files loaded again (one call), and the rows per file id of the
  whole table before and after it (asserted equal).

``--layout new``: :func:`ferry.stages.load.job.load_files` (tables partitioned by the data's own
columns; docs/hive-layout.md). ``--layout old``: the load job of commit 2e72f47
(``ferry_file_id`` the last partition column: a partition per file and day), read with
``git show 2e72f47:services/ferry/stages/load/job.py`` into a temporary module and run unchanged,
given the dataset definition as that commit saw it (:class:`OldLayoutSpec`).

``--order mixed`` (default) gives file ``i`` the day ``i % days``: every batch touches every day
(the most partitions per batch). ``--order chrono`` gives the files days in arrival order.

Usage: ``python bench/bench_load.py [--files 10000] [--batch 256] [--layout new|old]``.
Needs the stack's ``hive`` and ``spark`` groups (started if they are not running). Drops its table
and cleans its HDFS paths on exit; the (empty) database ``ferry_bench`` stays: the local stack's
metastore fails ``DROP DATABASE`` (its ACID event listener needs BoneCP, not on its classpath).
"""

from __future__ import annotations

import argparse
import importlib.util
import statistics
import subprocess
import sys
import tempfile
import time
import uuid
from collections.abc import Callable, Mapping
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

from rich.console import Console
from rich.table import Table

from ferry.clusters.hive import rewrite_root, table_location
from ferry.clusters.spark_jobs import spark_type
from ferry.datasets.fields import ColumnSpec
from ferry.datasets.spec import FILE_ID_COLUMN, DatasetSpec, load_datasets
from ferry.settings import get_settings
from ferry_kit.stack.manager import Stack

#: The commit whose load job ``--layout old`` runs (the last with a partition per file).
OLD_COMMIT = "2e72f47"
OLD_JOB_PATH = "services/ferry/stages/load/job.py"
REPO = Path(__file__).resolve().parent.parent

LoadFn = Callable[[Any, Any, Mapping[str, str]], Mapping[str, int]]


class OldLayoutSpec:
    """A :class:`DatasetSpec` as the load job of :data:`OLD_COMMIT` saw it: the table's data
    columns do not include ``ferry_file_id``, which is its LAST partition column (the properties
    of ``git show 2e72f47:services/ferry/datasets/spec.py``). Everything else is delegated."""

    def __init__(self, spec: DatasetSpec) -> None:
        self._spec = spec

    def __getattr__(self, name: str) -> Any:
        return getattr(self._spec, name)

    @property
    def table_data_columns(self) -> tuple[ColumnSpec, ...]:
        parts = self._spec.hive.partition_by
        return tuple(c for c in self._spec.all_columns if c.name not in parts)

    @property
    def table_partition_columns(self) -> tuple[ColumnSpec, ...]:
        types = {c.name: c.type for c in self._spec.all_columns}
        return (
            *(ColumnSpec(name=n, type=types[n]) for n in self._spec.hive.partition_by),
            ColumnSpec.model_construct(name=FILE_ID_COLUMN, type="string"),
        )

    @property
    def table_columns(self) -> tuple[ColumnSpec, ...]:
        return (*self.table_data_columns, *self.table_partition_columns)


def old_load_files(work: Path) -> LoadFn:
    """``load_files`` of :data:`OLD_COMMIT`, from ``git show`` into ``work``, imported by path.

    Raises:
        subprocess.CalledProcessError: git cannot show the file (not a clone with that commit).
    """
    source = subprocess.run(
        ["git", "-C", str(REPO), "show", f"{OLD_COMMIT}:{OLD_JOB_PATH}"],
        check=True,
        capture_output=True,
        text=True,
    ).stdout
    path = work / "ferry_load_job_2e72f47.py"
    path.write_text(source, encoding="utf-8")
    module_spec = importlib.util.spec_from_file_location("ferry_load_job_2e72f47", path)
    assert module_spec is not None and module_spec.loader is not None
    module = importlib.util.module_from_spec(module_spec)
    module_spec.loader.exec_module(module)
    fn: LoadFn = module.load_files
    return fn


def stage_files(
    spark: Any, spec: DatasetSpec, root: str, *, files: int, rows: int, days: int, order: str
) -> tuple[dict[str, str], float]:
    """Write the synthetic staged files; returns ``{file_id: staged directory}`` in file order and
    the seconds of the Spark write (the rest is the renames)."""
    from pyspark.sql import functions as F

    run = root.rsplit("-", 1)[-1]
    idx = (F.col("id") / rows).cast("long")
    j = (F.col("id") % rows).cast("int")
    offset = idx % days if order == "mixed" else (idx * days / files).cast("long")
    date = F.date_add(F.lit("2013-01-01").cast("date"), offset.cast("int"))
    hour = (j + 5) % 24

    def pick(values: list[str], n: Any) -> Any:
        return F.element_at(F.array(*[F.lit(v) for v in values]), (n % len(values) + 1).cast("int"))

    exprs = {
        "year": F.year(date),
        "month": F.month(date),
        "day": F.dayofmonth(date),
        "dep_time": hour * 100 + j % 60,
        "sched_dep_time": hour * 100,
        "dep_delay": j % 60,
        "arr_time": ((hour + 2) % 24) * 100 + j % 60,
        "sched_arr_time": ((hour + 2) % 24) * 100,
        "arr_delay": j % 45 - 10,
        "carrier": pick(["UA", "AA", "B6", "DL", "EV", "MQ"], idx),
        "flight": (idx % 5000) + 1,
        "tailnum": F.format_string("N%05d", idx % 100000),
        "origin": pick(["EWR", "JFK", "LGA"], idx),
        "dest": pick(["ATL", "ORD", "LAX", "BOS", "MCO"], idx + j),
        "air_time": j + 60,
        "distance": (idx % 2000) + 100,
        "hour": hour,
        "minute": j % 60,
        "time_hour": F.timestamp_seconds(F.unix_date(date) * 86400 + hour * 3600),
        "flight_date": date,
    }
    names = [c.name for c in spec.all_columns]
    if sorted(names) != sorted(exprs):
        raise SystemExit(f"the flights definition changed; this bench generates {sorted(exprs)}")
    fid = F.format_string(f"bench{run}-%06d", idx).alias(FILE_ID_COLUMN)
    cols = [exprs[c.name].cast(spark_type(c.type)).alias(c.name) for c in spec.all_columns]
    gen, incoming = f"{root}/_generate", f"{root}/incoming/{spec.name}"
    df = spark.range(files * rows).select(*cols, fid)
    t0 = time.perf_counter()
    df.repartition(FILE_ID_COLUMN).write.partitionBy(FILE_ID_COLUMN).parquet(gen)
    write_s = time.perf_counter() - t0
    jvm = spark._jvm
    fs = jvm.org.apache.hadoop.fs.Path(root).getFileSystem(spark._jsc.hadoopConfiguration())
    fs.mkdirs(jvm.org.apache.hadoop.fs.Path(incoming))
    ids = [f"bench{run}-{i:06d}" for i in range(files)]

    def move(file_id: str) -> None:
        src = jvm.org.apache.hadoop.fs.Path(f"{gen}/{FILE_ID_COLUMN}={file_id}")
        if not fs.rename(src, jvm.org.apache.hadoop.fs.Path(f"{incoming}/{file_id}")):
            raise OSError(f"rename of {file_id}'s staged directory failed")

    with ThreadPoolExecutor(8) as pool:
        list(pool.map(move, ids))
    fs.delete(jvm.org.apache.hadoop.fs.Path(gen), True)
    return {i: f"{incoming}/{i}" for i in ids}, write_s


def rows_per_file(spark: Any, table: str) -> dict[str, int]:
    """``{ferry_file_id: rows}`` of the whole table (one Spark job)."""
    spark.catalog.refreshTable(table)
    rows = spark.table(table).groupBy(FILE_ID_COLUMN).count().collect()
    return {r[0]: int(r[1]) for r in rows}


def table_files(spark: Any, table: str, depth: int) -> tuple[int, int]:
    """(``part-*`` files at the partition depth, all files) under the table's directory."""
    jvm = spark._jvm
    loc = jvm.org.apache.hadoop.fs.Path(table_location(spark, table))
    fs = loc.getFileSystem(spark._jsc.hadoopConfiguration())
    pattern = "/".join([table_location(spark, table).rstrip("/"), *["*"] * depth, "part-*"])
    parts = fs.globStatus(jvm.org.apache.hadoop.fs.Path(pattern))
    return len(parts), int(fs.getContentSummary(loc).getFileCount())


def summary(counts: Mapping[str, int]) -> str:
    values = list(counts.values()) or [0]
    return (
        f"{len(counts)} file ids, rows per id min {min(values)} max {max(values)}, "
        f"total {sum(values)}"
    )


def pct(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, max(0, round(q * len(ordered)) - 1))]


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--files", type=int, default=10_000, help="staged files to load")
    ap.add_argument("--rows", type=int, default=10, help="rows per file")
    ap.add_argument("--days", type=int, default=30, help="days the files' rows fall on")
    ap.add_argument("--batch", type=int, default=256, help="files per call of the load job")
    ap.add_argument("--layout", choices=["new", "old"], default="new", help="which load job")
    ap.add_argument("--order", choices=["mixed", "chrono"], default="mixed", help="file days")
    ap.add_argument("--replay", type=int, default=100, help="files loaded again at the end")
    args = ap.parse_args()
    if min(args.files, args.rows, args.days, args.batch, args.replay) < 1:
        ap.error("--files, --rows, --days, --batch, --replay must be at least 1")
    if args.replay > args.files:
        ap.error("--replay must be at most --files")
    console = Console(soft_wrap=True)
    settings = get_settings()
    t0 = time.perf_counter()
    started = Stack(settings).up(deadline_s=300, components=["hive", "spark"])
    console.print(
        f"stack (hive, spark groups): {len(started)} started in {time.perf_counter() - t0:.1f}s"
    )
    base = load_datasets(settings.paths.datasets_dir)["flights"]
    tag = uuid.uuid4().hex[:8]
    hive = base.hive.model_copy(update={"database": "ferry_bench", "table": f"load_{tag}"})
    spec = base.model_copy(update={"hive": hive})
    table = spec.hive.full_name
    root = f"{settings.cluster('a').fs_url}/bench/load-{tag}"
    work = Path(tempfile.mkdtemp(prefix="ferry-bench-load-"))
    load: LoadFn
    job_spec: Any
    if args.layout == "old":
        load, job_spec = old_load_files(work), OldLayoutSpec(spec)
        depth = len(spec.hive.partition_by) + 1
    else:
        from functools import partial

        from ferry.stages.load.job import load_files

        load = partial(load_files, target_file_mb=settings.load.target_file_mb)
        job_spec, depth = spec, len(spec.hive.partition_by)

    from ferry.clusters.spark import build_session

    t0 = time.perf_counter()
    spark = build_session(settings, "ferry-bench-load", "a", hive=True)
    console.print(f"SparkSession start: {time.perf_counter() - t0:.1f}s")
    scratch = ""
    try:
        t0 = time.perf_counter()
        staged, write_s = stage_files(
            spark,
            spec,
            root,
            files=args.files,
            rows=args.rows,
            days=args.days,
            order=args.order,
        )
        console.print(
            f"staged {len(staged)} files x {args.rows} rows on HDFS A in "
            f"{time.perf_counter() - t0:.1f}s (one Spark job: {write_s:.1f}s, then a rename "
            "per file)"
        )
        ids = list(staged)
        seconds: list[float] = []
        for k in range(0, len(ids), args.batch):
            batch = {i: staged[i] for i in ids[k : k + args.batch]}
            t0 = time.perf_counter()
            loaded = load(spark, job_spec, batch)
            seconds.append(time.perf_counter() - t0)
            if not scratch:
                scratch = rewrite_root(spark, table)
            wrong = {i: n for i, n in loaded.items() if n != args.rows}
            assert set(loaded) == set(batch) and not wrong, f"batch at {k}: {wrong}"
            console.print(
                f"[dim]batch {len(seconds)}: {len(batch)} files in {seconds[-1]:.2f}s",
                highlight=False,
            )
        partitions = spark.sql(f"SHOW PARTITIONS {table}").count()
        data_files, all_files = table_files(spark, table, depth)
        before = rows_per_file(spark, table)
        assert before == dict.fromkeys(ids, args.rows), summary(before)
        step = len(ids) // args.replay
        again = {i: staged[i] for i in ids[::step][: args.replay]}
        t0 = time.perf_counter()
        replayed = load(spark, job_spec, again)
        replay_s = time.perf_counter() - t0
        after = rows_per_file(spark, table)
        assert replayed == dict.fromkeys(again, args.rows), summary(replayed)
        assert after == before, f"before: {summary(before)}; after: {summary(after)}"
        partitions_after = spark.sql(f"SHOW PARTITIONS {table}").count()
        files_after = table_files(spark, table, depth)[0]

        title = (
            f"load, layout {args.layout}: {args.files} files x {args.rows} rows over {args.days} "
            f"days ({args.order}), batches of {args.batch}"
        )
        out = Table(title=title)
        for col in ("batches", "median s", "p95 s", "first s", "last s", "total s", "files/s"):
            out.add_column(col, justify="right")
        out.add_row(
            str(len(seconds)),
            f"{statistics.median(seconds):.2f}",
            f"{pct(seconds, 0.95):.2f}",
            f"{seconds[0]:.2f}",
            f"{seconds[-1]:.2f}",
            f"{sum(seconds):.1f}",
            f"{len(ids) / sum(seconds):.1f}",
        )
        console.print(out)
        console.print(f"metastore partitions (SHOW PARTITIONS): {partitions}")
        console.print(
            f"Parquet data files under the table: {data_files} (all files there: {all_files})"
        )
        console.print(f"rows per file id: {summary(before)}: OK (all exactly {args.rows})")
        console.print(
            f"replay of {len(again)} files in one call: {replay_s:.2f}s; rows per file id "
            f"before: {summary(before)}; after: {summary(after)}; equal: OK "
            f"(the replayed files: {summary({i: after[i] for i in again})})"
        )
        console.print(
            f"after the replay: {partitions_after} partitions, {files_after} Parquet data files"
        )
    finally:
        t0 = time.perf_counter()
        spark.sql(f"DROP TABLE IF EXISTS {table}")
        jvm: Any = spark._jvm
        fs = jvm.org.apache.hadoop.fs.Path(root).getFileSystem(spark._jsc.hadoopConfiguration())
        for path in filter(None, (root, scratch)):
            fs.delete(jvm.org.apache.hadoop.fs.Path(path), True)
        console.print(f"cleaned up (table, HDFS paths) in {time.perf_counter() - t0:.1f}s")
        spark.stop()
    return 0


if __name__ == "__main__":
    sys.exit(main())
