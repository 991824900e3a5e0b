"""transform's warm-up: the first batch after a start costs what the second does (issue 45).

A Spark application's first job of a kind pays for what later ones reuse: the classes of the CSV
reader, the Parquet writer and the commit protocol loaded in the driver and in each executor,
the batch's whole-stage code generated and compiled (Janino; Spark caches the compiled classes
by their source), and the first round trips of the session's HDFS client. Building the session
and running one tiny job (:meth:`ferry.clusters.spark.SparkHolder.warm`) pays only for the last.
So before the stage joins its consumer group (``ferry.core.runtime.runner``: a stage is healthy
once it is a member), :func:`warm_transform` runs the real :func:`~ferry.stages.transform.job.
run_batch` once per ready dataset on two files of two synthetic records each
(:func:`synthetic_csv`): one meant to pass the dataset's rules and one that breaks them, so the
staging write, the rejects write and both counts run; two files, so a batch that shares its data
files (``transform.share_files``) runs the shared write and its count, as every real batch of
more than one file does (with one file the warm-up took the per-file path, and the first real
batch after a start still cost 1.8 times the second: 2026-12-07). Everything it writes is under
``<staging_root>/<dataset>/_tmp/warm-up-<id>/`` and removed when it is done; a warm-up killed
half-way leaves a ``_tmp`` entry that gc sweeps like a dead batch's
(``retention.tmp_max_age_s``). No event is produced and no offset moves.
"""

from __future__ import annotations

import logging
import re
import time
import uuid
from collections.abc import Callable, Mapping
from typing import Any

from ferry.clusters.spark_jobs import HadoopFileSystem, join_path
from ferry.datasets.spec import DatasetSpec

log = logging.getLogger(__name__)

#: A value of each Spark SQL type that parses (decimal: any ``decimal(p,s)``).
_SAMPLE = {
    "string": "x",
    "boolean": "true",
    "tinyint": "1",
    "smallint": "1",
    "int": "1",
    "bigint": "1",
    "float": "1.0",
    "double": "1.0",
    "date": "2013-01-01",
    "timestamp": "2013-01-01T00:00:00Z",
}
#: The warm-up files' file ids: 32 hex digits, as real ones (``ferry.core.identity``).
WARM_FILE_IDS = ("0" * 32, "0" * 31 + "1")


def _value(spec: DatasetSpec, column: str, type_: str) -> str:
    """A text for ``column`` that its type parses and, where the rules say which, that they
    allow: the first allowed value, else a range's lower (or upper) bound."""
    rules = spec.validation
    if column in rules.allowed_values:
        return str(rules.allowed_values[column][0])
    rng = rules.ranges.get(column)
    if rng is not None:
        bound = rng.min if rng.min is not None else rng.max
        if bound is not None:
            return str(int(bound)) if float(bound).is_integer() else str(bound)
    if re.fullmatch(r"decimal\(\s*\d+\s*,\s*\d+\s*\)", type_):
        return "1"
    return _SAMPLE.get(type_, "1")


def synthetic_csv(spec: DatasetSpec) -> bytes:
    """A file of ``spec``'s shape (its header when it has one, its delimiter, UTF-8, LF) with two
    records: the first of values each column's type parses and its rules allow
    (:func:`_value`; derived columns and cross-column rules may still reject it), the second of
    NULLs only (``csv.null_value``), which a not-null rule or the partition columns reject."""
    sep = spec.csv.delimiter
    names = [c.name for c in spec.columns]
    good = [_value(spec, c.name, c.type.lower().strip()) for c in spec.columns]
    null = [spec.csv.null_value or ""] * len(names)
    lines = ([sep.join(names)] if spec.csv.header else []) + [sep.join(good), sep.join(null)]
    return ("\n".join(lines) + "\n").encode("utf-8")


def warm_dataset(
    spark: Any, spec: DatasetSpec, staging_root: str, run_batch: Callable[..., Any]
) -> float:
    """Run ``run_batch`` on two files of :func:`synthetic_csv` of ``spec`` (file ids
    :data:`WARM_FILE_IDS`) in a private ``_tmp`` directory of staging (removed afterwards, also
    on failure); returns the seconds it took.

    Raises whatever ``run_batch`` raises (the caller logs it: a warm-up is an optimisation).
    """
    fs = HadoopFileSystem(spark)
    scratch = join_path(staging_root, spec.name, "_tmp", f"warm-up-{uuid.uuid4().hex}")
    t0 = time.monotonic()
    try:
        names = {fid: f"warm-up-{n}.csv" for n, fid in enumerate(WARM_FILE_IDS)}
        files = {join_path(scratch, "input", name): fid for fid, name in names.items()}
        for source in files:
            fs.write_bytes(source, synthetic_csv(spec))
        run_batch(
            spark,
            spec,
            files,
            staging_root=join_path(scratch, "staging"),
            rejects_root=join_path(scratch, "rejects"),
            sources=names,
            fs=fs,
        )
    finally:
        fs.delete(scratch, recursive=True)
    return time.monotonic() - t0


def warm_transform(
    warm_session: Callable[[], Any],
    specs: Callable[[], Mapping[str, DatasetSpec]],
    staging_root: str,
    run_batch: Callable[..., Any],
    warm: Callable[..., float] = warm_dataset,
    datasets: int | None = None,
) -> None:
    """The transform stage's ``warm_up``: ``warm_session()`` (build the session, one tiny job;
    returns the session), then one synthetic batch for each of the first ``datasets`` datasets of
    ``specs()`` (the definitions ready once the session can compile them) in name order (all
    when ``None``; ``transform.warm_up_datasets``), each ``warm(spark, spec, staging_root,
    run_batch)`` (:func:`warm_dataset`). The JVM's class loading is paid by the first batch for
    every dataset; the others' first real batches pay only their own code generation. A dataset
    whose batch fails is logged and the next one warmed: its first real batch pays what this one
    would have.

    Raises whatever ``warm_session`` raises (no master: the runner logs it and goes on).
    """
    spark = warm_session()
    names = sorted(specs().items())
    chosen = names if datasets is None else names[:datasets]
    if len(chosen) < len(names):
        log.info(
            "transform: warm-up batches for %d of %d datasets (transform.warm_up_datasets)",
            len(chosen),
            len(names),
        )
    for name, spec in chosen:
        try:
            took = warm(spark, spec, staging_root, run_batch)
        except Exception:  # noqa: BLE001 - an optimisation: the real batch meets it again
            log.warning("transform: warm-up batch of %s failed", name, exc_info=True)
            continue
        log.info("transform: warm-up batch of %s in %.1f s", name, took)
