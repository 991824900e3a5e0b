"""What a data engineer would write instead of Ferry, timed on the same files: the ``peer`` part
of bench/bench_pipeline.py (issue 29).

Two peers, each a plain Spark ``local[2]`` session with Hive support against the stack's
metastore, the JVM's own options (no Ferry settings), run as ``python bench/peers.py JOB …`` (one
process, hence one session, per peer and file set):

* ``stream``: one Structured Streaming query per dataset, one after the other: a file source on
  the dataset's NAS directory with its parse schema (the definition's columns, header, delimiter,
  quote, null value), its derived columns, the rows breaking a not-null rule (or with a NULL
  partition value) dropped, ``trigger(availableNow=True)``, ``foreachBatch`` inserting
  (``insertInto``) into a Hive table on cluster A partitioned as the definition says; its
  checkpoint on A;
* ``bulk``: one batch job per dataset: the same rows written as partitioned Parquet straight
  into the (external) table's location on A, then ``MSCK REPAIR TABLE``.

``live`` (the ``arrival-peer`` part, bench/arrival.py): the ``stream`` peer as users run it on
files that keep arriving: one query on the flights NAS directory with Spark's default trigger
(the next micro-batch as soon as the last ended), ``maxFilesPerTrigger`` unset, left running; it
prints a JSON line when the query started (``{"ready": …}``), one per micro-batch once its rows
are in the Hive table (``{"batch": id, "at": epoch s, "files": [names], "rows": n}``), and, once
the file ``STOP`` of its root appears (a local path), stops and prints ``{"rows": n}``.

Neither keeps rejects or their reasons, a landing copy, checksums or per-file lineage: that is
what Ferry does beyond them. Both create fresh tables in a private database (``DATABASE``), which
the ``drop`` job removes with its files. Each job prints one JSON line: ``{"seconds": …,
"session_s": …, "rows": {table: rows in the table}}``; ``seconds`` is the work (tables created,
files read, rows in Hive), the session start apart.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from collections.abc import Callable, Sequence
from contextlib import AbstractContextManager
from pathlib import Path
from typing import Any

BENCH = Path(__file__).resolve().parent


def _session(settings: Any, name: str) -> Any:
    """A ``local[2]`` session with Hive support on cluster A (metastore, warehouse, HDFS A)."""
    from pyspark.sql import SparkSession

    a = settings.cluster("a")
    conf = {
        "spark.master": "local[2]",
        "spark.app.name": name,
        "spark.ui.enabled": "false",
        "spark.ui.showConsoleProgress": "false",
        "spark.sql.session.timeZone": "UTC",
        "spark.driver.memory": "1g",
        "spark.hadoop.fs.defaultFS": a.fs_url,
        "spark.hadoop.dfs.replication": "1",
        "spark.hadoop.dfs.client.block.write.replace-datanode-on-failure.enable": "false",
        **{f"spark.hadoop.{k}": v for k, v in a.hadoop_client_conf().items()},
        **{f"spark.hadoop.{k}": v for k, v in settings.metastore.hive_properties.items()},
        "spark.hadoop.hive.metastore.uris": settings.metastore.uri,
        "spark.sql.warehouse.dir": f"{a.fs_url}{settings.metastore.warehouse_path}",
        "spark.hadoop.hive.exec.dynamic.partition": "true",
        "spark.hadoop.hive.exec.dynamic.partition.mode": "nonstrict",
    }
    builder = SparkSession.builder
    for k, v in conf.items():
        builder = builder.config(k, v)
    return builder.enableHiveSupport().getOrCreate()


def _ddl(spec: Any, table: str, location: str | None) -> str:
    """``CREATE [EXTERNAL] TABLE`` of the dataset's staged columns, partitioned as defined."""
    parts = spec.hive.partition_by
    cols = [c for c in spec.all_columns if c.name not in parts]
    by = {c.name: c for c in spec.all_columns}
    body = ", ".join(f"`{c.name}` {c.type}" for c in cols)
    pby = ", ".join(f"`{p}` {by[p].type}" for p in parts)
    ext = "EXTERNAL " if location else ""
    where = f" LOCATION '{location}'" if location else ""
    return f"CREATE {ext}TABLE {table} ({body}) PARTITIONED BY ({pby}) STORED AS PARQUET{where}"


def _rows(df: Any, spec: Any) -> Any:
    """The parsed frame with the derived columns, without the rows breaking a not-null rule or
    with a NULL partition value, columns in table order (data, then partition columns)."""
    from pyspark.sql import functions as F

    from ferry.clusters.spark_jobs import spark_type

    for d in spec.derived:
        df = df.withColumn(d.name, F.expr(d.expr).try_cast(spark_type(d.type)))
    keep = F.lit(True)
    for c in (*spec.validation.not_null, *spec.hive.partition_by):
        keep = keep & F.col(c).isNotNull()
    parts = spec.hive.partition_by
    order = [c.name for c in spec.all_columns if c.name not in parts] + list(parts)
    return df.where(keep).select(*order)


def _reader(spark_read: Any, spec: Any) -> Any:
    from ferry.clusters.spark_jobs import struct_for

    o = spec.csv
    return (
        spark_read.schema(struct_for(spec.columns))
        .option("header", str(o.header).lower())
        .option("sep", o.delimiter)
        .option("quote", o.quote)
        .option("escape", o.escape)
        .option("nullValue", o.null_value)
        .option("multiLine", str(o.multiline).lower())
    )


def job(kind: str, database: str, root: str, dirs: dict[str, str]) -> dict[str, Any]:
    """Run peer ``kind`` over ``{dataset: local directory of its CSV files}``; its figures."""
    from ferry.datasets.spec import load_datasets
    from ferry.settings import get_settings

    settings = get_settings()
    specs = load_datasets(settings.paths.datasets_dir)
    a = settings.cluster("a")
    t0 = time.perf_counter()
    spark = _session(settings, f"ferry-peer-{kind}")
    session_s = time.perf_counter() - t0
    t1 = time.perf_counter()
    spark.sql(f"CREATE DATABASE IF NOT EXISTS {database} LOCATION '{a.fs_url}{root}/db'")
    tables: dict[str, str] = {}
    for name, directory in sorted(dirs.items()):
        spec = specs[name]
        table = tables[name] = f"{database}.{spec.hive.table}_{kind}"
        src = f"file://{directory}"
        if kind == "stream":
            spark.sql(_ddl(spec, table, None))
            stream = _reader(spark.readStream, spec).csv(src)

            def insert(batch: Any, _id: int, spec: Any = spec, table: str = table) -> None:
                _rows(batch, spec).write.insertInto(table)

            (
                stream.writeStream.foreachBatch(insert)
                .option("checkpointLocation", f"{a.fs_url}{root}/checkpoints/{name}")
                .trigger(availableNow=True)
                .start()
                .awaitTermination()
            )
        elif kind == "bulk":
            location = f"{a.fs_url}{root}/tables/{name}"
            spark.sql(_ddl(spec, table, location))
            rows = _rows(_reader(spark.read, spec).csv(src), spec)
            rows.write.partitionBy(*spec.hive.partition_by).mode("append").parquet(location)
            spark.sql(f"MSCK REPAIR TABLE {table}")
        else:
            raise SystemExit(f"unknown peer {kind!r}")
    seconds = time.perf_counter() - t1
    counted = {t: int(spark.table(t).count()) for t in tables.values()}
    spark.stop()
    return {"seconds": seconds, "session_s": session_s, "rows": counted}


def live(database: str, root: str, directory: str, stop_file: str) -> dict[str, Any]:
    """The ``live`` peer (module docstring) over the flights files of local ``directory``;
    returns ``{"rows": rows in its table}`` once ``stop_file`` exists."""
    from pyspark.sql import functions as F

    from ferry.datasets.spec import load_datasets
    from ferry.settings import get_settings

    settings = get_settings()
    spec = load_datasets(settings.paths.datasets_dir)["flights"]
    a = settings.cluster("a")
    spark = _session(settings, "ferry-peer-live")
    spark.sql(f"CREATE DATABASE IF NOT EXISTS {database} LOCATION '{a.fs_url}{root}/db'")
    table = f"{database}.{spec.hive.table}_live"
    spark.sql(_ddl(spec, table, None))
    stream = _reader(spark.readStream, spec).csv(f"file://{directory}")
    stream = stream.withColumn("_src", F.input_file_name())

    def insert(batch: Any, batch_id: int) -> None:
        batch.persist()
        _rows(batch, spec).write.insertInto(table)
        names = sorted({r[0].rsplit("/", 1)[-1] for r in batch.select("_src").distinct().collect()})
        print(
            json.dumps(
                {"batch": batch_id, "at": time.time(), "files": names, "rows": batch.count()}
            ),
            flush=True,
        )
        batch.unpersist()

    query = (
        stream.writeStream.foreachBatch(insert)
        .option("checkpointLocation", f"{a.fs_url}{root}/checkpoints/live")
        .start()
    )
    print(json.dumps({"ready": time.time()}), flush=True)
    while not os.path.exists(stop_file):
        if query.awaitTermination(0.5):  # ended by itself: an error, raised here
            break
    query.stop()
    rows = int(spark.table(table).count())
    spark.stop()
    return {"rows": rows}


def drop(databases: Sequence[str]) -> dict[str, Any]:
    """Drop the peers' databases with their tables (the files: the caller deletes the roots)."""
    from ferry.settings import get_settings

    spark = _session(get_settings(), "ferry-peer-drop")
    for database in databases:
        try:
            spark.sql(f"DROP DATABASE IF EXISTS {database} CASCADE")
        except Exception:
            # fine if the database is gone: the metastore client's retry of a drop whose first
            # answer was lost (RetryingMetaStoreClient) finds it gone, NoSuchObjectException
            if spark.catalog.databaseExists(database):
                raise
    spark.stop()
    return {"dropped": list(databases)}


def run_peer(
    kind: str, database: str, *roots: str, dirs: dict[str, Path], log: Path
) -> dict[str, Any]:
    """``python bench/peers.py KIND DATABASE ROOT dataset=dir …`` in its own process; its JSON
    (``drop``: ``python bench/peers.py drop DATABASE…``, ``roots`` then the other databases).

    Raises:
        RuntimeError: the job exited non-zero or printed no figures (its log: ``log``).
    """
    args = [*roots, *(f"{k}={v}" for k, v in dirs.items())]
    with log.open("ab") as fh:
        out = subprocess.run(  # noqa: S603
            [sys.executable, str(BENCH / "peers.py"), kind, database, *args],
            stdout=subprocess.PIPE,
            stderr=fh,
            env={**os.environ, "PYSPARK_PYTHON": sys.executable},
            timeout=1800,
            check=False,
        )
    lines = [ln for ln in out.stdout.decode().splitlines() if ln.startswith("{")]
    if out.returncode != 0 or not lines:
        raise RuntimeError(f"peer {kind} exited {out.returncode}; see {log}")
    return dict(json.loads(lines[-1]))


def peer_dirs(files: Sequence[tuple[str, Path]], dest: Path) -> dict[str, Path]:
    """The peers' NAS directories: ``dest/<dataset>/`` holding a hard link (else a copy) of each
    ``(dataset, file)``; a private copy of the NAS, so Ferry's extract never takes them."""
    import shutil

    dirs: dict[str, Path] = {}
    for dataset, path in files:
        d = dirs.setdefault(dataset, dest / dataset)
        d.mkdir(parents=True, exist_ok=True)
        target = d / path.name
        if not target.exists():
            try:
                os.link(path, target)
            except OSError:
                shutil.copyfile(path, target)
    return dirs


PEERS = {
    "stream": "Structured Streaming, availableNow, foreachBatch insertInto",
    "bulk": "batch job: partitioned Parquet into the location + MSCK REPAIR",
}


def peer_part(
    settings: Any,
    sets: Sequence[tuple[str, Sequence[tuple[str, Path]]]],
    work: Path,
    ferry_s: dict[str, float],
    rows: list[tuple[str, ...]],
    say: Any,
    measure: Callable[[str, int], AbstractContextManager[None]] | None = None,
) -> None:
    """Each peer on each ``(label, [(dataset, file)…])`` set; a row each, with Ferry's seconds
    over the peer's when ``ferry_s`` has the set's label (Ferry ran it in this run). Every
    database and HDFS root the peers made is removed at the end, whatever happened.
    ``measure(label, files)``, when given, wraps each peer's run (its whole process: the JVM's
    start is inside), e.g. bench/costs.py's meter."""
    import contextlib
    import uuid

    from ferry.clusters.hdfs.webhdfs import WebHdfs

    tag = uuid.uuid4().hex[:8]
    log = work / "peers.log"
    made: list[tuple[str, str]] = []
    try:
        for i, (label, files) in enumerate(sets):
            dirs = peer_dirs(files, work / "peer-nas" / f"{tag}-{i}")
            mb = sum(p.stat().st_size for _, p in files) / 1e6
            for kind, what in PEERS.items():
                db, root = f"ferry_peer_{tag}_{i}_{kind}", f"/bench/peer-{tag}-{i}-{kind}"
                made.append((db, root))
                say(f"peer {kind}: {label} ({len(files)} files, {mb:.1f} MB) …")
                with (measure or (lambda *_: contextlib.nullcontext()))(
                    f"peer {kind}, {label}", len(files)
                ):
                    out = run_peer(kind, db, root, dirs=dirs, log=log)
                secs = float(out["seconds"])
                got = sum(out["rows"].values())
                ferry = ferry_s.get(label)
                ratio = f"Ferry {ferry:.1f} s / peer: {ferry / secs:.2f}×" if ferry else ""
                rows.append(
                    (
                        "peer",
                        f"{what}; {label}",
                        f"{secs:.1f}",
                        f"{mb / secs:.2f} MB/s, {got:,} rows (session {out['session_s']:.1f} s)",
                        ratio,
                    )
                )
    finally:
        if made:
            run_peer("drop", made[0][0], *[db for db, _ in made[1:]], dirs={}, log=log)
            port = WebHdfs.for_cluster("a", settings)
            for _, root in made:
                port.delete(root, recursive=True)
            port.close()
        import shutil

        shutil.rmtree(work / "peer-nas", ignore_errors=True)


def main(argv: list[str]) -> int:
    kind, database, *rest = argv
    if kind == "drop":
        print(json.dumps(drop([database, *rest])))
        return 0
    if kind == "live":
        root, directory, stop_file = rest
        print(json.dumps(live(database, root, directory, stop_file)))
        return 0
    root, *pairs = rest
    dirs = dict(p.split("=", 1) for p in pairs)
    print(json.dumps(job(kind, database, root, dirs)))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
