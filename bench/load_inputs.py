"""Inputs of bench/bench_load.py, on HDFS A: staged files in both shapes.

* the per-file shape (what transform stages and transfer copies now: a tree partitioned by the
  table's partition columns, with the file id, names and marker; ``ferry.tables``);
* the flat shape the copy-on-write load of the earlier commit reads (``part-*`` files of the
  parse and derived columns, no file id), made from the same rows.

Small files are synthetic flights rows (one Spark job); the demo year and the 300 MB file are
the real thing: the demo's daily CSVs and the year repeated (bench/pipeline_parts.big_file),
uploaded to A and transformed by transform's own ``run_batch`` (a session on A), so the staged
trees are exactly what the pipeline hands the load.
"""

from __future__ import annotations

import time
from collections.abc import Mapping
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

from ferry.clusters.spark_jobs import HadoopFileSystem, spark_type
from ferry.datasets.spec import FILE_ID_COLUMN, SOURCE_PATH_COLUMN, DatasetSpec
from ferry.tables.paths import new_generation
from ferry.tables.staging import file_dir, name_files, write_files


def synthetic(spark: Any, spec: DatasetSpec, prefix: str, *, files: int, rows: int) -> Any:
    """``files`` × ``rows`` flights rows, all on 2013-01-01, file ids ``<prefix>-000000`` …, with
    ``ferry_file_id`` and ``ferry_source_path`` (the flights definition's columns)."""
    from pyspark.sql import functions as F

    idx = (F.col("id") / rows).cast("long")
    j = (F.col("id") % rows).cast("int")
    date = F.lit("2013-01-01").cast("date")
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
    if sorted(c.name for c in spec.all_columns) != sorted(exprs):
        raise SystemExit(f"the flights definition changed; this bench generates {sorted(exprs)}")
    fid = F.format_string(f"{prefix}-%06d", idx)
    cols = [exprs[c.name].cast(spark_type(c.type)).alias(c.name) for c in spec.all_columns]
    return spark.range(files * rows).select(
        *cols,
        fid.alias(FILE_ID_COLUMN),
        F.format_string("flights/flights_%s.csv", fid).alias(SOURCE_PATH_COLUMN),
    )


def stage_new(spark: Any, spec: DatasetSpec, df: Any, root: str, ids: list[str]) -> dict[str, str]:
    """``df`` staged in the per-file shape under ``root``: ``{file_id: directory}``."""
    write_files(df, [c.name for c in spec.table_data_columns], spec.hive.partition_by, root)
    fs, gen = HadoopFileSystem(spark), new_generation()
    with ThreadPoolExecutor(8) as pool:
        list(pool.map(lambda f: name_files(fs, file_dir(root, f), f, gen), ids))
    return {f: file_dir(root, f) for f in ids}


def stage_flat(spark: Any, spec: DatasetSpec, df: Any, root: str, ids: list[str]) -> dict[str, str]:
    """``df`` (with ``ferry_file_id``) staged flat per file under ``root`` as the earlier
    transform did (the definition's columns, no file id): ``{file_id: directory}``."""
    gen = f"{root}/_generate"
    cols = [c.name for c in spec.all_columns]
    df.select(*cols, FILE_ID_COLUMN).repartition(FILE_ID_COLUMN).write.partitionBy(
        FILE_ID_COLUMN
    ).parquet(gen)
    fs = HadoopFileSystem(spark)
    fs.mkdirs(root)

    def move(f: str) -> None:
        src = f"{gen}/{FILE_ID_COLUMN}={f}"
        if fs.exists(src):
            fs.move(src, f"{root}/{f}")
        else:  # a file without valid rows: an empty staged directory, as transform left it
            fs.mkdirs(f"{root}/{f}")

    with ThreadPoolExecutor(8) as pool:
        list(pool.map(move, ids))
    fs.delete(gen, recursive=True)
    return {f: f"{root}/{f}" for f in ids}


def read_tree(spark: Any, spec: DatasetSpec, dirs: Mapping[str, str]) -> Any:
    """The rows of per-file staged trees (the data files their markers name), with their
    partition column taken from the path."""
    from pyspark.sql import functions as F

    from ferry.tables.model import StagedMarker
    from ferry.tables.paths import MARKER_NAME

    fs = HadoopFileSystem(spark)
    paths = []
    for d in dirs.values():
        data = fs.read_bytes(f"{d}/{MARKER_NAME}")
        if data is None:
            raise SystemExit(f"{d} has no marker: not a per-file staged tree")
        paths += [f"{d}/{rel}" for rel in StagedMarker.from_json(data).files]
    [pcol] = spec.hive.partition_by
    typ = next(c.type for c in spec.all_columns if c.name == pcol)
    df = spark.read.parquet(*paths)
    value = F.regexp_extract(F.col("_metadata.file_path"), f"/{pcol}=([^/]+)/", 1)
    return df.withColumn(pcol, value.cast(spark_type(typ)))


def upload(spark: Any, local: list[Path], dest: str) -> dict[str, Path]:
    """Copy local files into directory ``dest`` on A (the JVM's HDFS client): ``{URI: local}``."""
    jvm = spark._jvm
    fs = jvm.org.apache.hadoop.fs.Path(dest).getFileSystem(spark._jsc.hadoopConfiguration())
    fs.mkdirs(jvm.org.apache.hadoop.fs.Path(dest))
    out = {}
    for p in local:
        uri = f"{dest}/{p.name}"
        fs.copyFromLocalFile(
            False, True, jvm.org.apache.hadoop.fs.Path(str(p)), jvm.org.apache.hadoop.fs.Path(uri)
        )
        out[uri] = p
    return out


def transform(
    spark: Any, spec: DatasetSpec, files: Mapping[str, str], root: str, say: Any
) -> tuple[dict[str, str], dict[str, int], float]:
    """Transform's ``run_batch`` on A over ``{landing URI: file_id}``: ``({file_id: staged
    directory}, {file_id: rows_out}, seconds)``."""
    from ferry.stages.transform.job import run_batch

    t0 = time.perf_counter()
    res = run_batch(
        spark,
        spec,
        dict(files),
        staging_root=f"{root}/staging",
        rejects_root=f"{root}/rejects",
        sources={fid: f"flights/{uri.rsplit('/', 1)[-1]}" for uri, fid in files.items()},
    )
    seconds = time.perf_counter() - t0
    bad = {f: r.status for f, r in res.items() if r.status != "transformed"}
    if bad:
        raise SystemExit(f"transform did not stage {bad}")
    say(f"transformed {len(files)} file(s) in {seconds:.1f}s")
    staged = {f: str(r.staged_path) for f, r in res.items()}
    return staged, {f: r.counts.rows_out for f, r in res.items()}, seconds
