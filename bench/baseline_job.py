"""The per-file design Ferry replaces, as one ``spark-submit`` per file and step; and the floor.

Run by bench/bench_pipeline.py, never imported by Ferry:

* ``spark-submit baseline_job.py transform DATASET SRC_URI STAGING_ROOT FILE_ID``: one file on
  cluster B → staged Parquet on cluster A (ferry.stages.transform.job.run_batch with one file,
  the same dataset definition and checks as the transform service);
* ``spark-submit baseline_job.py load DATASET STAGED_DIR FILE_ID DATABASE``: that staged file
  into the dataset's Hive table in ``DATABASE`` (ferry.stages.load.job.load_files with one file);
* ``python baseline_job.py floor DATASET OUT_DIR CSV...``: plain Spark ``local[2]``, CSV →
  Parquet with the dataset's parse schema, no validation, no Hive (the floor), timed after a
  warm-up conversion of the first file; then the same read written in the table's layout (the
  dataset's derived columns, ``repartition`` by the table's partition columns and
  ``partitionBy`` them: one file per partition, what a bulk job writing into the table does).
  Prints one JSON line ``{"read_write_s": …, "partitioned_s": …, "session_s": …}``.

Each prints one JSON line with what it did; exit status 1 when a file was not transformed.
"""

from __future__ import annotations

import json
import sys
import time


def main(argv: list[str]) -> int:
    from ferry.datasets.spec import load_datasets
    from ferry.settings import get_settings

    mode, dataset, *rest = argv
    settings = get_settings()
    spec = load_datasets(settings.paths.datasets_dir)[dataset]
    t0 = time.perf_counter()
    if mode == "floor":
        from pyspark.sql import SparkSession
        from pyspark.sql import functions as F

        from ferry.clusters.spark_jobs import spark_type, struct_for

        out, *csvs = rest
        spark = (
            SparkSession.builder.master("local[2]")
            .config("spark.ui.enabled", "false")
            .config("spark.sql.session.timeZone", "UTC")
            .getOrCreate()
        )
        session_s = time.perf_counter() - t0

        def convert(paths: list[str], dest: str, partitioned: bool = False) -> None:
            df = (
                spark.read.schema(struct_for(spec.columns))
                .option("header", str(spec.csv.header).lower())
                .option("nullValue", spec.csv.null_value)
                .csv(paths)
            )
            if not partitioned:
                df.write.mode("overwrite").parquet(dest)
                return
            derived = {d.name: F.expr(d.expr).try_cast(spark_type(d.type)) for d in spec.derived}
            parts = spec.hive.partition_by
            (
                df.withColumns(derived)
                .repartition(*parts)
                .write.mode("overwrite")
                .partitionBy(*parts)
                .parquet(dest)
            )

        convert(csvs[:1], f"{out}-warm-up")  # class loading and JIT: not the floor's cost
        convert(csvs[:1], f"{out}-warm-up", partitioned=True)
        t1 = time.perf_counter()
        convert(csvs, out)
        t2 = time.perf_counter()
        convert(csvs, f"{out}-partitioned", partitioned=True)
        t3 = time.perf_counter()
        got = {"read_write_s": t2 - t1, "partitioned_s": t3 - t2, "session_s": session_s}
        print(json.dumps(got))
        spark.stop()
        return 0
    from ferry.clusters.spark import build_session

    if mode == "transform":
        from ferry.stages.transform.job import run_batch

        src, staging_root, file_id = rest
        spark = build_session(settings, f"baseline-transform-{file_id[:8]}", "b")
        results = run_batch(
            spark,
            spec,
            {src: file_id},
            staging_root=f"{staging_root}/staging",
            rejects_root=f"{staging_root}/rejects",
        )
        r = results[file_id]
        print(json.dumps({"status": r.status, "staged": r.staged_path}))
        spark.stop()
        return 0 if r.status in ("transformed", "empty") else 1
    if mode == "load":
        from ferry.stages.load.job import load_files

        staged, file_id, database = rest
        spec = spec.model_copy(update={"hive": spec.hive.model_copy(update={"database": database})})
        spark = build_session(settings, f"baseline-load-{file_id[:8]}", "a", hive=True)
        rows = load_files(spark, spec, {file_id: staged})
        print(json.dumps({"rows": rows[file_id]}))
        spark.stop()
        return 0
    raise SystemExit(f"unknown mode {mode!r}")


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
