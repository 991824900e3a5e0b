"""The load on the real stack, the copy-on-write layout beside the per-file layout, in one run
(HDFS A, the Spark master pair, the Hive metastore, ZooKeeper for the table locks).

``current`` is the load job of :data:`BASE_COMMIT` (the commit before the per-file layout), run
unchanged in a process of its own (bench/load_current.py, that commit's ``services/`` from
``git archive`` first on ``PYTHONPATH``) on flat staged copies of the same rows; ``per-file`` is
this checkout's ``load_files`` with the load service's compactor running beside it
(``load.compact_max_files``, ``load.target_file_mb``) and its table locks. Parts:

(a) growth: ``--growth-files`` synthetic files of ``--growth-rows`` rows, ALL in one partition
    (one day), loaded in batches of ``--growth-batch``: seconds per batch, first / median /
    last, and the data files left in the partition (after the compactor is done); each layout
    first loads 3 files one by one into a table of their own (warm-up: class loading, JIT,
    the metastore client), so the first batch of growth is not also the process's first load;
(b) the demo's year of daily flights files (transformed by transform's own ``run_batch`` on A),
    in batches of ``--year-batch``, then the ``--big-mb`` MB file (the year's flights repeated,
    bench/pipeline_parts.big_file; 3.37 M rows over 365 days at 300 MB) onto that table: its
    load's seconds;
(c) replay of ``--replay`` of the year's daily files in one batch: the current layout reloads
    the same staged files; the per-file layout once as a redelivery (same transform output:
    nothing to do) and once with a new transform output of those files (``run_batch`` again:
    each file's data files replaced).

Every load's returned rows are checked, and at the end each table's rows per file id are
compared with what was staged (exact). Prints one table; asserts nothing about time.
Usage: ``python bench/bench_load.py [--growth-files 2000] [--big-mb 300] [--keep]``. Drops its
tables and HDFS paths on exit (``--keep`` leaves them); the database ``ferry_bench`` stays.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
import uuid
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from load_inputs import read_tree, stage_flat, stage_new, synthetic, transform, upload
from pipeline_parts import big_file
from rich.console import Console
from rich.table import Table

from ferry.datasets.spec import load_datasets
from ferry.settings import get_settings
from ferry.stages.load.compactor import Compactor
from ferry.stages.load.job import load_files
from ferry.tables.hive import table_location
from ferry.tables.locks import TableLocks
from ferry_kit.demo_data import write_demo_files
from ferry_kit.stack.manager import Stack

#: The commit whose load job is the ``current`` column (the last before the per-file layout).
BASE_COMMIT = "33b9204"
REPO = Path(__file__).resolve().parent.parent
console = Console(soft_wrap=True)


def say(text: str) -> None:
    console.print(f"[dim]{text}", highlight=False)


def base_checkout(work: Path) -> Path:
    """``services/``, ``datasets/``, ``schemas/`` of :data:`BASE_COMMIT` under ``work``."""
    out = work / "base"
    out.mkdir()
    archive = subprocess.run(
        ["git", "-C", str(REPO), "archive", BASE_COMMIT, "services", "datasets", "schemas"],
        check=True,
        capture_output=True,
    ).stdout
    subprocess.run(["tar", "-x", "-C", str(out)], input=archive, check=True)
    return out


def files_per_partition(spark: Any, table: str) -> dict[str, int]:
    """Data files per partition directory of ``table`` (a listing; the index excluded)."""
    from ferry.clusters.spark_jobs import HadoopFileSystem

    out: dict[str, int] = {}
    for rel in HadoopFileSystem(spark).list_files(table_location(spark, table)):
        part = rel.rsplit("/", 1)[0] if "/" in rel else ""
        out[part] = out.get(part, 0) + 1
    return out


def rows_per_file(spark: Any, table: str) -> dict[str, int]:
    spark.catalog.refreshTable(table)
    return {r[0]: int(r[1]) for r in spark.table(table).groupBy("ferry_file_id").count().collect()}


def batches(files: Mapping[str, str], size: int) -> list[dict[str, str]]:
    ids = list(files)
    return [{f: files[f] for f in ids[k : k + size]} for k in range(0, len(ids), size)]


def run_new(spark: Any, settings: Any, spec: Any, phases: list[dict[str, Any]]) -> dict[str, Any]:
    """Each phase's batches through this checkout's load, the compactor running beside it."""
    locks = TableLocks(settings)
    ld = settings.load
    comp = Compactor(
        lambda: spark, locks, max_files=ld.compact_max_files, target_bytes=ld.target_file_mb << 20
    )
    out: dict[str, Any] = {}
    try:
        for phase in phases:
            db, table = phase["table"].split(".")
            pspec = spec.model_copy(
                update={"hive": spec.hive.model_copy(update={"database": db, "table": table})}
            )
            seconds = []
            for batch in phase["batches"]:
                t0 = time.perf_counter()
                got = load_files(spark, pspec, batch, locks=locks, on_loaded=comp.submit)
                seconds.append(time.perf_counter() - t0)
                want = {f: phase["rows"][f] for f in batch}
                if dict(got) != want:
                    raise AssertionError(f"{phase['name']}: loaded {got}, expected {want}")
            t0 = time.perf_counter()
            if not comp.drain(1800):
                raise TimeoutError("the compactor did not finish within 30 minutes")
            out[phase["name"]] = {
                "seconds": seconds,
                "drain_s": time.perf_counter() - t0,
                "rows": rows_per_file(spark, phase["table"]),
                "files": files_per_partition(spark, phase["table"]),
                "partitions": spark.sql(f"SHOW PARTITIONS {phase['table']}").count(),
            }
            say(f"per-file layout: {phase['name']}: {sum(seconds):.1f}s")
    finally:
        comp.close()
        locks.close()
    return out


def run_current(base: Path, work: Path, settings: Any, phases: list[dict[str, Any]]) -> Any:
    """The phases through :data:`BASE_COMMIT`'s load (bench/load_current.py, own process)."""
    plan, out = work / "plan.json", work / "current.json"
    plan.write_text(json.dumps({"dataset": "flights", "phases": phases}))
    env = {
        **os.environ,
        "PYTHONPATH": str(base / "services"),
        "FERRY_VAR_DIR": str(settings.var_dir),
        "FERRY_PATHS__DATASETS_DIR": str(settings.paths.datasets_dir),
    }
    script = Path(__file__).resolve().parent / "load_current.py"
    subprocess.run([sys.executable, str(script), str(plan), str(out)], env=env, check=True)
    return json.loads(out.read_text())


def main() -> int:  # noqa: PLR0915 - one run, in the order the table reads
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--growth-files", type=int, default=2000)
    ap.add_argument("--growth-rows", type=int, default=1000)
    ap.add_argument("--growth-batch", type=int, default=100)
    ap.add_argument("--year-batch", type=int, default=256)
    ap.add_argument("--big-mb", type=int, default=300)
    ap.add_argument("--days", type=int, default=None, help="demo days (default: the year)")
    ap.add_argument("--replay", type=int, default=100)
    ap.add_argument("--keep", action="store_true", help="keep the tables and HDFS paths")
    args = ap.parse_args()
    settings = get_settings()
    t0 = time.perf_counter()
    Stack(settings).up(deadline_s=300, components=["hive", "spark", "zookeeper"])
    say(f"stack (hive, spark, zookeeper) up in {time.perf_counter() - t0:.1f}s")
    spec = load_datasets(settings.paths.datasets_dir)["flights"]
    tag = uuid.uuid4().hex[:8]
    root = f"{settings.cluster('a').fs_url}/bench/load-{tag}"
    work = Path(tempfile.mkdtemp(prefix="ferry-bench-load-"))
    tables = {
        f"{k}_{lay}": f"ferry_bench.{k}_{lay}_{tag}"
        for k in ("warm", "growth", "year")
        for lay in ("cur", "new")
    }
    from ferry.clusters.spark import build_session

    spark = build_session(settings, "ferry-bench-load", "a", hive=True)
    try:
        # -- inputs ---------------------------------------------------------------------------
        ids = [f"g{tag}-{i:06d}" for i in range(args.growth_files)]
        df = synthetic(spark, spec, f"g{tag}", files=args.growth_files, rows=args.growth_rows)
        growth_new = stage_new(spark, spec, df, f"{root}/growth-new", ids)
        growth_cur = stage_flat(spark, spec, df, f"{root}/growth-cur", ids)
        say(f"staged {len(ids)} small files twice (per-file tree, flat)")
        warm_ids = [f"w{tag}-{i:06d}" for i in range(3)]
        wdf = synthetic(spark, spec, f"w{tag}", files=3, rows=args.growth_rows)
        warm = {
            "new": stage_new(spark, spec, wdf, f"{root}/warm-new", warm_ids),
            "cur": stage_flat(spark, spec, wdf, f"{root}/warm-cur", warm_ids),
        }
        demo = write_demo_files(
            work / "nas", {"flights": spec}, datasets=["flights"], days=args.days
        ).files
        big = big_file(demo, work / "big" / f"flights_big{args.big_mb}mb.csv", args.big_mb * 10**6)
        landed = upload(spark, [f.path for f in demo], f"{root}/landing/flights")
        big_uri = next(iter(upload(spark, [big], f"{root}/landing/flights")))
        from ferry.core.identity import derive_file_id, sha256_file

        year_ids = {uri: derive_file_id("flights", sha256_file(p)) for uri, p in landed.items()}
        big_id = derive_file_id("flights", sha256_file(big))
        year_new, year_rows, year_s = transform(spark, spec, year_ids, root, say)
        big_new, big_rows, big_t = transform(spark, spec, {big_uri: big_id}, root, say)
        year_cur = stage_flat(
            spark, spec, read_tree(spark, spec, year_new), f"{root}/year-cur", list(year_new)
        )
        big_cur = stage_flat(
            spark, spec, read_tree(spark, spec, big_new), f"{root}/big-cur", [big_id]
        )
        step = len(year_ids) / args.replay
        again = [list(year_ids.values())[int(i * step)] for i in range(args.replay)]
        rows = {**{f: args.growth_rows for f in [*ids, *warm_ids]}, **year_rows, **big_rows}

        def phases(
            layout: str, growth: Mapping[str, str], year: Mapping[str, str], bigd: Mapping[str, str]
        ) -> list[dict[str, Any]]:
            return [
                # class loading, JIT, the metastore client: not what a batch of growth costs
                {
                    "name": "warm-up",
                    "table": tables[f"warm_{layout}"],
                    "batches": [{f: warm[layout][f]} for f in warm[layout]],
                    "rows": rows,
                },
                {
                    "name": "growth",
                    "table": tables[f"growth_{layout}"],
                    "batches": batches(growth, args.growth_batch),
                    "rows": rows,
                },
                {
                    "name": "year",
                    "table": tables[f"year_{layout}"],
                    "batches": batches(year, args.year_batch),
                    "rows": rows,
                },
                {
                    "name": "big",
                    "table": tables[f"year_{layout}"],
                    "batches": [dict(bigd)],
                    "rows": rows,
                },
                {
                    "name": "replay",
                    "table": tables[f"year_{layout}"],
                    "batches": [{f: year[f] for f in again}],
                    "rows": rows,
                },
            ]

        # -- the current layout, its own process ----------------------------------------------
        say(f"current layout ({BASE_COMMIT}) in its own process …")
        cur = run_current(
            base_checkout(work), work, settings, phases("cur", growth_cur, year_cur, big_cur)
        )
        # -- the per-file layout ------------------------------------------------------------------
        new = run_new(spark, settings, spec, phases("new", growth_new, year_new, big_new))
        landing = {u: f for u, f in year_ids.items() if f in again}
        replay_new, _, _ = transform(spark, spec, landing, f"{root}/again", say)
        again_phase = {
            "name": "replay",
            "table": tables["year_new"],
            "batches": [replay_new],
            "rows": rows,
        }
        new["replay new output"] = run_new(spark, settings, spec, [again_phase])["replay"]
        want_growth = {f: rows[f] for f in ids}
        want_year = {f: rows[f] for f in [*year_rows, big_id]}
        for name, res, parts in (
            ("current", cur, ("growth", "replay")),
            ("per-file", new, ("growth", "replay", "replay new output")),
        ):
            for part in parts:
                want = want_growth if part == "growth" else want_year
                assert res[part]["rows"] == want, f"{name} {part}: rows per file id differ"
        print_table(args, cur, new, len(ids), year_s + big_t)
    finally:
        if not args.keep:
            for t in tables.values():
                spark.sql(f"DROP TABLE IF EXISTS {t}")
            jvm: Any = spark._jvm
            fs = jvm.org.apache.hadoop.fs.Path(root).getFileSystem(spark._jsc.hadoopConfiguration())
            fs.delete(jvm.org.apache.hadoop.fs.Path(root), True)
        spark.stop()
    return 0


def print_table(args: Any, cur: Any, new: Any, n_growth: int, transform_s: float) -> None:
    def growth(r: Any) -> str:
        s = r["growth"]["seconds"]
        k = max(1, min(5, len(s) // 4))
        head, tail = statistics.median(s[:k]), statistics.median(s[-k:])
        return (
            f"{s[0]:.2f} / {statistics.median(s):.2f} / {s[-1]:.2f} (last/first "
            f"{s[-1] / s[0]:.2f}); first {k} / last {k}: {head:.2f} / {tail:.2f} "
            f"({tail / head:.2f})"
        )

    def files(r: Any, part: str) -> str:
        f = r[part]["files"]
        return f"{r[part]['partitions']} partitions; data files per partition max {max(f.values())}"

    out = Table(title=f"load: current layout ({BASE_COMMIT}) beside the per-file layout")
    out.add_column("")
    out.add_column("current (copy-on-write)", justify="right")
    out.add_column("per-file", justify="right")
    out.add_row(
        f"(a) growth: {n_growth} files × {args.growth_rows} rows into one partition, "
        f"batches of {args.growth_batch}: s per batch first / median / last; medians of the "
        "first and last few",
        growth(cur),
        growth(new),
    )
    out.add_row(
        "(a) data files in that partition after",
        files(cur, "growth"),
        files(new, "growth") + f" (compactor drained in {new['growth']['drain_s']:.1f}s)",
    )
    out.add_row(
        f"(b) demo: {args.days or 365} daily files, batches of {args.year_batch}, s total",
        f"{sum(cur['year']['seconds']):.1f}",
        f"{sum(new['year']['seconds']):.1f}",
    )
    out.add_row(
        f"(b) the {args.big_mb} MB file onto that table: load s",
        f"{cur['big']['seconds'][0]:.1f}",
        f"{new['big']['seconds'][0]:.1f}",
    )
    out.add_row(
        f"(c) replay of {args.replay} daily files in one batch, s",
        f"{cur['replay']['seconds'][0]:.1f}",
        f"{new['replay']['seconds'][0]:.1f} (redelivery); "
        f"{new['replay new output']['seconds'][0]:.1f} (new transform output)",
    )
    out.add_row("year table after", files(cur, "replay"), files(new, "replay new output"))
    out.add_row("rows per file id (every file)", "exact", "exact")
    console.print(out)
    say(f"(transform of the inputs on A, not part of the load figures: {transform_s:.1f}s)")


if __name__ == "__main__":
    sys.exit(main())
