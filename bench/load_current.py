"""The copy-on-write load of the commit before the per-file layout, run by bench/bench_load.py in
a process of its own with that commit's ``services/`` first on ``PYTHONPATH`` (two versions of
the ``ferry`` package cannot share one interpreter).

Reads a plan (JSON file, argv[1]): phases, each a table and batches of ``{file_id: flat staged
directory}``, with the rows each file must have; loads every batch with that commit's
``ferry.stages.load.job.load_files`` (holding the table's ZooKeeper lock, as its load service
did), checks the rows it returns, and writes per phase the seconds of each batch, then the
table's rows per file id, partitions and data files per partition, to the JSON file argv[2].
Uses only names that commit has.
"""

from __future__ import annotations

import json
import sys
import time
from functools import partial
from pathlib import Path
from typing import Any


def files_per_partition(spark: Any, table: str) -> dict[str, int]:
    """Data files per partition directory of ``table`` (a listing of its directory)."""
    loc = next(
        str(r["data_type"])
        for r in spark.sql(f"DESCRIBE TABLE EXTENDED {table}").collect()
        if r["col_name"] == "Location"
    )
    jvm = spark._jvm
    root = jvm.org.apache.hadoop.fs.Path(loc)
    fs = root.getFileSystem(spark._jsc.hadoopConfiguration())
    out: dict[str, int] = {}
    it = fs.listFiles(root, True)
    prefix = str(fs.makeQualified(root).toUri().getPath()).rstrip("/") + "/"
    while it.hasNext():
        st = it.next()
        path = str(st.getPath().toUri().getPath())
        rel = path[len(prefix) :] if path.startswith(prefix) else path
        if any(part.startswith(("_", ".")) for part in rel.split("/")):
            continue
        part = rel.rsplit("/", 1)[0] if "/" in rel else ""
        out[part] = out.get(part, 0) + 1
    return out


def main(plan_path: str, out_path: str) -> int:
    from ferry.core.config import get_settings

    from ferry.clusters.spark import build_session
    from ferry.datasets import load_datasets
    from ferry.stages.load.job import load_files
    from ferry.tables.locks import TableLocks

    plan = json.loads(Path(plan_path).read_text())
    settings = get_settings()
    base = load_datasets(settings.paths.datasets_dir)[plan["dataset"]]
    spark = build_session(settings, "ferry-bench-load-current", "a", hive=True)
    locks = TableLocks(settings)
    load = partial(load_files, target_file_mb=settings.load.target_file_mb, locks=locks)
    result: dict[str, Any] = {}
    try:
        for phase in plan["phases"]:
            db, table = phase["table"].split(".")
            hive = base.hive.model_copy(update={"database": db, "table": table})
            spec = base.model_copy(update={"hive": hive})
            seconds = []
            for batch in phase["batches"]:
                t0 = time.perf_counter()
                got = load(spark, spec, batch)
                seconds.append(time.perf_counter() - t0)
                want = {fid: phase["rows"][fid] for fid in batch}
                if dict(got) != want:
                    raise AssertionError(f"{phase['name']}: loaded {got}, expected {want}")
            spark.catalog.refreshTable(phase["table"])
            counts = spark.table(phase["table"]).groupBy("ferry_file_id").count().collect()
            result[phase["name"]] = {
                "seconds": seconds,
                "rows": {r[0]: int(r[1]) for r in counts},
                "files": files_per_partition(spark, phase["table"]),
                "partitions": spark.sql(f"SHOW PARTITIONS {phase['table']}").count(),
            }
            print(f"current layout: {phase['name']}: {sum(seconds):.1f}s", flush=True)
    finally:
        Path(out_path).write_text(json.dumps(result))
        locks.close()
        spark.stop()
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1], sys.argv[2]))
