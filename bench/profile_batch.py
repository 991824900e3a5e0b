"""Where a transform or load batch spends its time, on the real stack: Spark stages from the Spark
UI's REST API (``/api/v1/applications/<id>/stages``), the driver under cProfile (py4j calls
included), HDFS calls made through py4j (count and seconds) and Hive client calls
(``HiveCatalogMetrics``: metastore calls and partitions fetched, driver side).

``--stage transform``: lands ``--files`` flights slices (with ``--days N``: files of 60 rows
spread over N consecutive days, case C23's shape; and, with ``--big PATH``, that file) on
B, runs :func:`ferry.stages.transform.job.run_batch` once on a warm-up batch of 8, then on the
files (and then on the big file alone), staging on cluster A; writes what it staged to
``var/bench-profile/staged.json``. ``--stage load`` (a second process: one SparkContext each)
loads those staged files into ``ferry_profile.flights`` with
:func:`ferry.stages.load.job.load_files`: the small files in one batch, then the big file.

Usage: ``python bench/profile_batch.py --stage transform [--files 256] [--big PATH]`` then
``python bench/profile_batch.py --stage load``. Needs ``ferry stack up``.
"""

from __future__ import annotations

import argparse
import cProfile
import io
import json
import pstats
import sys
import tempfile
import time
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import Any

import requests
from bench_transform import TimedFs, _chunks

from ferry.clusters.hdfs.webhdfs import WebHdfs
from ferry.clusters.spark import session_conf
from ferry.clusters.spark_jobs import HadoopFileSystem
from ferry.datasets.spec import load_datasets
from ferry.settings import Settings, get_settings
from ferry_kit.testing.slices import SliceFile, dataset_slices

UI_PORT = 14050


def session(
    settings: Settings, cluster: str, hive: bool, extra: dict[str, str] | None = None
) -> Any:
    """Ferry's session for ``cluster`` with the Spark UI on (its REST API lists the stages), and
    ``extra`` Spark configuration over Ferry's."""
    import os

    from pyspark.sql import SparkSession

    os.environ.setdefault("SPARK_LOCAL_IP", settings.spark.host)
    builder = SparkSession.builder
    conf = session_conf(settings, f"ferry-profile-{cluster}", cluster, hive=hive)
    conf |= {"spark.ui.enabled": "true", "spark.ui.port": str(UI_PORT), **(extra or {})}
    for k, v in conf.items():
        builder = builder.config(k, v)
    if hive:
        builder = builder.enableHiveSupport()
    return builder.getOrCreate()


def stages_since(spark: Any, first_stage: int) -> list[dict[str, Any]]:
    """Completed stages with id >= ``first_stage``: the REST API's stage records."""
    url = spark.sparkContext.uiWebUrl
    app = spark.sparkContext.applicationId
    got = requests.get(f"{url}/api/v1/applications/{app}/stages", timeout=30).json()
    return sorted((s for s in got if s["stageId"] >= first_stage), key=lambda s: s["stageId"])


def hive_calls(spark: Any) -> tuple[int, int]:
    m = spark._jvm.org.apache.spark.metrics.source.HiveCatalogMetrics
    return int(m.METRIC_HIVE_CLIENT_CALLS().getCount()), int(
        m.METRIC_PARTITIONS_FETCHED().getCount()
    )


def profiled(spark: Any, label: str, fn: Callable[[], Any], fs: TimedFs | None = None) -> Any:
    """Run ``fn`` under cProfile; print wall, stages, HDFS and Hive calls, top driver frames."""
    st0 = spark.sparkContext.statusTracker()
    first = max([*st0.getActiveStageIds(), *_known_stages(spark), -1]) + 1
    calls0 = hive_calls(spark)
    prof = cProfile.Profile()
    t0 = time.perf_counter()
    prof.enable()
    try:
        out = fn()
    finally:
        prof.disable()
    wall = time.perf_counter() - t0
    calls1 = hive_calls(spark)
    print(f"\n=== {label}: wall {wall:.2f}s")
    stages = stages_since(spark, first)
    spark_s = 0.0
    for s in stages:
        dur = _ms(s.get("completionTime")) - _ms(s.get("submissionTime"))
        spark_s += dur / 1000
        print(
            f"  stage {s['stageId']:>4} {s['status']:<9} tasks {s['numTasks']:>4} "
            f"{dur / 1000:6.2f}s run {s.get('executorRunTime', 0) / 1000:6.2f}s "
            f"in {s.get('inputBytes', 0) / 1e6:7.1f}MB out {s.get('outputBytes', 0) / 1e6:7.1f}MB "
            f"shuffle w/r {s.get('shuffleWriteBytes', 0) / 1e6:.1f}/"
            f"{s.get('shuffleReadBytes', 0) / 1e6:.1f}MB "
            f"spill {s.get('diskBytesSpilled', 0) / 1e6:.1f}MB "
            f"gc {s.get('jvmGcTime', 0) / 1000:.1f}s {s['name'][:50]}"
        )
    print(f"  stages: {len(stages)}, summed stage time {spark_s:.2f}s (stages may overlap)")
    if fs is not None:
        per = ", ".join(f"{k} {fs.calls[k]} {fs.seconds[k]:.2f}s" for k in sorted(fs.calls))
        print(f"  HDFS via py4j: busy {fs.busy_s:.2f}s wall; {per}")
    print(
        f"  Hive client calls {calls1[0] - calls0[0]}, partitions fetched {calls1[1] - calls0[1]}"
    )
    buf = io.StringIO()
    pstats.Stats(prof, stream=buf).sort_stats("cumulative").print_stats(18)
    print("  driver cProfile (cumulative):")
    print("\n".join("    " + ln for ln in buf.getvalue().splitlines()[6:30] if ln.strip()))
    return out


def _known_stages(spark: Any) -> list[int]:
    url, app = spark.sparkContext.uiWebUrl, spark.sparkContext.applicationId
    try:
        got = requests.get(f"{url}/api/v1/applications/{app}/stages", timeout=30).json()
    except requests.RequestException:
        return []
    return [int(s["stageId"]) for s in got]


def _ms(stamp: str | None) -> float:
    """Milliseconds of the REST API's ``2026-11-30T22:01:02.345GMT`` stamps."""
    if not stamp:
        return 0.0
    from datetime import datetime

    return datetime.strptime(stamp, "%Y-%m-%dT%H:%M:%S.%f%Z").timestamp() * 1000


def spanning(
    settings: Settings, work: Path, count: int, *, rows: int, days: int, seed: int
) -> list[SliceFile]:
    """``count`` flights files of ``rows`` rows taken round-robin from ``days`` consecutive days
    (a random start day per file; ``seed`` makes them reproducible)."""
    import random

    import pandas as pd

    from ferry.core.identity import derive_file_id, sha256_file
    from ferry_kit.demo_data import csv_lines, daily_frames, write_csv

    spec = load_datasets(settings.paths.datasets_dir)["flights"]
    frames = [frame for _day, frame in daily_frames("flights")]
    rnd = random.Random(seed)
    out = []
    for i in range(count):
        start = rnd.randrange(len(frames) - days + 1)
        picked = [
            frames[start + j % days].iloc[[(i + j // days) % len(frames[start + j % days])]]
            for j in range(rows)
        ]
        path = work / "spanning" / f"flights_span{days}_{seed}_{i:05d}.csv"
        n = write_csv(path, csv_lines(spec, pd.concat(picked)), spec)
        fid = derive_file_id("flights", sha256_file(path))
        out.append(SliceFile(path, f"{spec.nas.subdir}/{path.name}", fid, n))
    return out


def transform(settings: Settings, args: argparse.Namespace, state: Path) -> None:
    from ferry.stages.transform.job import run_batch

    spec = load_datasets(settings.paths.datasets_dir)["flights"]
    b, a = settings.cluster("b"), settings.cluster("a")
    root = f"/bench/profile-{uuid.uuid4().hex[:8]}"
    hdfs = WebHdfs.for_cluster("b", settings)
    work = Path(tempfile.mkdtemp(prefix="ferry-profile-"))
    if args.days > 1:
        files = spanning(settings, work, args.files + 8, rows=60, days=args.days, seed=3000)
    else:
        files = dataset_slices(settings, work, args.files + 8, rows=60, first=3000)
    landed = {}
    for f in files:
        hdfs.upload_stream(f"{root}/landing/{f.relative}", _chunks(f.src))
        landed[f"{b.fs_url}{root}/landing/{f.relative}"] = f.file_id
    big = Path(args.big) if args.big else None
    if big is not None:
        t0 = time.perf_counter()
        hdfs.upload_stream(f"{root}/landing/flights/{big.name}", _chunks(big))
        print(f"\nlanded {big.name} on B in {time.perf_counter() - t0:.1f}s")
    items = list(landed.items())
    staging = f"{a.fs_url}{root}/staging"
    kw: dict[str, Any] = {
        "staging_root": staging,
        "rejects_root": f"{a.fs_url}{root}/rejects",
        "share": settings.transform.share_files,  # as the service runs it
    }
    staged: dict[str, dict[str, str]] = {}
    walls: dict[str, float] = {}
    # one Spark application per variant (executor JVM options × --conf), one after the other
    variants = [
        (opts, conf)
        for opts in args.executor_opts or [settings.spark.executor_java_options]
        for conf in args.conf or [""]
    ]
    for opts, conf in variants:
        mine = settings.model_copy(
            update={"spark": settings.spark.model_copy(update={"executor_java_options": opts})}
        )
        extra = dict(kv.split("=", 1) for kv in conf.split(",") if kv)
        spark = session(mine, "b", hive=False, extra=extra)
        print(f"\n##### executor JVM options: {opts!r}; Spark configuration over Ferry's: {extra}")
        t0 = time.perf_counter()
        run_batch(spark, spec, dict(items[:8]), **kw)  # warm-up: a new application's first batch
        print(f"\n=== warm-up: first batch of 8 files: wall {time.perf_counter() - t0:.2f}s")
        batch = dict(items[8:])
        if batch:
            fs = TimedFs(HadoopFileSystem(spark))
            res = profiled(
                spark,
                f"transform {len(batch)} files",
                lambda: run_batch(spark, spec, batch, fs=fs, **kw),  # noqa: B023
                fs,
            )
            staged["small"] = {r.file_id: str(r.staged_path) for r in res.values()}
        if big is not None:
            from ferry.core.identity import derive_file_id, sha256_file

            fid = derive_file_id("flights", sha256_file(big))
            fs = TimedFs(HadoopFileSystem(spark))
            path = f"{b.fs_url}{root}/landing/flights/{big.name}"
            t0 = time.perf_counter()
            res = profiled(
                spark,
                f"transform {big.name} ({big.stat().st_size / 1e6:.0f} MB)",
                lambda: run_batch(spark, spec, {path: fid}, fs=fs, **kw),  # noqa: B023
                fs,
            )
            walls[f"{opts} {conf}".strip()] = time.perf_counter() - t0
            staged["big"] = {fid: str(res[fid].staged_path)}
        spark.stop()
    if big is not None and args.floor:
        from pipeline_parts import floor

        got = floor("flights", [big], work / "floor-out", work / "floor.log")
        secs = got.plain
        print(f"\n=== floor: Spark local[2] CSV → Parquet of {big.name}: {secs:.2f}s")
        print(f"  … partitioned like the table (one file per partition): {got.partitioned:.2f}s")
        for variant, wall in walls.items():
            print(f"  transform / floor, {variant!r}: {wall:.2f} / {secs:.2f} = {wall / secs:.1f}×")
    state.write_text(json.dumps({"root": root, **staged}))
    hdfs.delete(root, recursive=True)
    hdfs.close()


def load(settings: Settings, state: Path) -> None:
    from ferry.stages.load.job import load_files

    saved = json.loads(state.read_text())
    spec = load_datasets(settings.paths.datasets_dir)["flights"]
    spec = spec.model_copy(
        update={"hive": spec.hive.model_copy(update={"database": "ferry_profile"})}
    )
    spark = session(settings, "a", hive=True)
    first = dict(list(saved["small"].items())[:8])
    load_files(spark, spec, first)  # warm-up: creates the table
    rest = dict(list(saved["small"].items())[8:])
    if rest:  # ``--files 8`` leaves only the warm-up batch
        profiled(spark, f"load {len(rest)} files", lambda: load_files(spark, spec, rest))
    if "big" in saved:
        profiled(spark, "load the big file", lambda: load_files(spark, spec, saved["big"]))
    spark.sql(f"DROP TABLE IF EXISTS {spec.hive.full_name}")
    spark.stop()
    port = WebHdfs.for_cluster("a", settings)
    port.delete(saved["root"], recursive=True)
    port.close()


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--stage", choices=("transform", "load"), required=True)
    ap.add_argument("--files", type=int, default=256)
    ap.add_argument("--big", default="", help="a big flights CSV to profile alone")
    ap.add_argument("--days", type=int, default=1, help="days each small file's rows span")
    ap.add_argument(
        "--floor", action="store_true", help="then time the plain Spark local[2] floor of --big"
    )
    ap.add_argument(
        "--executor-opts",
        action="append",
        help="executor JVM options of one run (repeat: one Spark application each, in order; "
        "default: the settings')",
    )
    ap.add_argument(
        "--conf",
        action="append",
        help="Spark configuration of one run over Ferry's, K=V[,K=V] (repeat: one Spark "
        "application each, after each --executor-opts; default: Ferry's)",
    )
    args = ap.parse_args()
    settings = get_settings()
    state = settings.var_dir / "bench-profile" / "staged.json"
    state.parent.mkdir(parents=True, exist_ok=True)
    if args.stage == "transform":
        transform(settings, args, state)
    else:
        load(settings, state)
    return 0


if __name__ == "__main__":
    sys.exit(main())
