"""Transform job (Spark on cluster B): landed CSV files → per-file Parquet in staging + rejects.

One Spark application serves many batches; one batch of files of ONE dataset is read by one CSV
scan (no JVM and no job per file). Each file is staged in the shape the load moves into the Hive
table as it is (docs/hive-layout.md): partitioned by the table's partition columns, with
``ferry_file_id`` and ``ferry_source_path``, under ``<staging>/<dataset>/<file_id>/``.
Order of calls (what :func:`run_batch` does)::

    heads  → classify_empty / check_header      (pure Python, per file, on the first 64 KiB)
    df     = read_csv(spark, paths, spec)         (PERMISSIVE, corrupt-record column, source path;
                                                   big quote-free files line-split: splits.py)
    c      = classify(df, spec)                   (derived columns + reject_reason; pure)
    write_batch(c, …)                             (the one pass over the batch's records:
                                                   valid rows staged, files with rejects
                                                   observed; then those files' rejects; counts
                                                   from what was written; one rename per file)

Rows are never dropped silently: every parsed record is either valid or a reject with a
``reject_reason`` (see :mod:`ferry.stages.transform.rows`). A record is what RFC 4180 calls
one (a quoted field may span lines, see :class:`ferry.datasets.CsvOptions`); blank lines are not
records (Spark's CSV reader skips them) and the header line of each file is not a record.
"""

from __future__ import annotations

import uuid
from collections.abc import Callable, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import TYPE_CHECKING, Literal

from ferry.clusters.spark_jobs import (
    FileSystemOps,
    HadoopFileSystem,
    check_file_id,
    commit_dir,
    join_path,
    path_key,
)
from ferry.datasets.compression import CorruptArchive
from ferry.datasets.precheck import HEAD_BYTES, check_header, classify_empty
from ferry.datasets.spec import FILE_ID_COLUMN, SOURCE_PATH_COLUMN, DatasetSpec
from ferry.errors import HdfsPathNotFound, InputExpired
from ferry.stages.transform.counts import (
    FileCounts,
    batch_counts,
    file_counts,
    shared_counts,
    staged_counts,
)
from ferry.stages.transform.rows import (
    REJECT_REASON_COLUMN,
    SOURCE_COLUMN,
    classify,
    split,
)
from ferry.stages.transform.splits import parallel_paths, read_batch
from ferry.tables.model import BatchMarker, StagedMarker
from ferry.tables.paths import MARKER_NAME, new_generation, shared_dir
from ferry.tables.staging import file_dir, name_files, write_files, write_shared

if TYPE_CHECKING:
    from pyspark.sql import DataFrame, Observation, SparkSession


#: Precheck kind of a landing path that does not exist (its FileResult: ``input_expired``).
GONE = "gone"
#: The precheck's kind of a compressed landing copy whose head does not decompress.
CORRUPT = "corrupt"

#: Driver threads for the per-file HDFS calls of a batch (head reads, commits). Each call is a
#: few py4j and NameNode round trips (~40 ms a file measured by bench/bench_transform.py on the
#: local stack), latency, not CPU, so they overlap well; 4 keeps the NameNode's 8 handlers free
#: for the other services.
DRIVER_THREADS = 4


@dataclass(frozen=True)
class FileResult:
    """Outcome of one file of a batch.

    status ``transformed``: ``staged_path`` holds its valid rows as Parquet, partitioned by the
    table's partition columns, with the marker ``_ferry.json`` (listing no file when
    ``rows_out == 0``); ``rejects_path`` its rejected rows, or ``None`` if there are none.
    status ``empty``: no data row (``reason`` = ``zero_bytes``/``blank``/``header_only``, C11);
    nothing written. status ``failed``: quarantine with ``reason`` (``header_mismatch``, or
    ``input_expired`` when the landing copy is gone) and ``message``; nothing written.
    """

    file_id: str
    source_path: str
    status: Literal["transformed", "empty", "failed"]
    counts: FileCounts = FileCounts()
    staged_path: str | None = None
    rejects_path: str | None = None
    reason: str | None = None
    message: str | None = None


def staged_path(staging_root: str, dataset: str, file_id: str) -> str:
    """Final staging directory of one file: ``<staging_root>/<dataset>/<file_id>``."""
    return join_path(staging_root, dataset, check_file_id(file_id))


def _observed_rejects(seen: Observation) -> set[str] | None:
    """The source keys of the files holding a rejected row, as the staging write observed them;
    ``None`` if its observation is not there: not completed when the action returned (Spark 4
    completes it then), or empty because adaptive execution replaced the plan holding it (a
    batch whose every row is rejected: no valid row reaches the write, and Spark's
    ``AQEPropagateEmptyRelation`` drops the stages after the shuffle, the observation with them).
    """
    if not seen._jo.future().isCompleted():  # type: ignore[union-attr]
        return None
    if seen._jo.getRow().size() == 0:  # type: ignore[union-attr]
        return None
    return set(seen.get["rejected"])


def write_batch(
    classified: DataFrame,
    spec: DatasetSpec,
    files: Mapping[str, str],
    *,
    staging_root: str,
    rejects_root: str,
    fs: FileSystemOps,
    reread: Callable[[Sequence[str]], DataFrame],
    sources: Mapping[str, str] | None = None,
    batch_id: str | None = None,
    share: bool = False,
) -> dict[str, FileResult]:
    """Write a batch's valid rows and rejects, count them, then commit each file by rename.

    ``files`` maps each source path (as given to :func:`read_csv`) to its ``file_id``;
    ``classified`` is the :func:`classify` output of all of them and ``reread(paths)`` the same
    for some of them (a new scan); ``sources`` maps a ``file_id`` to its NAS name (the
    manifest's ``source_path``, written into every valid row's ``ferry_source_path``; NULL
    without it).

    One pass over the batch's records: the Spark job that writes the valid rows also observes
    (``DataFrame.observe``) the set of files holding a rejected row. Only those files are read
    again (``reread``), to write their rejects: a batch without rejects, such as a clean big
    file, is parsed once, and no copy of it is cached. The counts are taken from what was
    written, never from the observation (an aggregate that a retried task may count twice): valid
    rows per file from the staged Parquet's footers, rejected rows per file and reason code from
    the rejects' Parquet (:mod:`ferry.stages.transform.counts`); ``rows_in`` is their sum. If the
    observation is missing, every file is taken as holding rejects (slower, never wrong).

    Valid rows are written once for the whole batch to ``<staging_root>/<dataset>/_tmp/<batch_id>``
    in the per-file shape the load moves into the table (:mod:`ferry.tables.staging`):
    per file, partitioned by the table's partition columns, the table's data columns with
    ``ferry_file_id`` and ``ferry_source_path``, files named
    ``ferry-<file_id>-<generation>-<n>.parquet`` (one generation per batch: two transform runs of
    a file never share a name) and the marker ``_ferry.json``; then each file's directory is
    renamed to :func:`staged_path` (an existing one is replaced, see
    :func:`ferry.clusters.spark_jobs.commit_dir`). Rejects likewise to
    ``<rejects_root>/<dataset>/<file_id>``. Only the batch's own temp directories are deleted.
    Spark jobs: the staging write and its count; with rejects, their write and count too.
    Returns ``{file_id: FileResult}``.

    With ``share`` (``transform.share_files``), a batch of two files or more of a partitioned
    table writes ONE data file per partition holding every file's rows (issue 45, case C23:
    :func:`~ferry.tables.staging.write_shared`), committed by one rename as the batch directory
    ``<staging_root>/<dataset>/_shared/<generation>`` with its
    :class:`~ferry.tables.model.BatchMarker`; each file's staged directory then holds only its
    marker, naming its rows in those shared files (counted per data file and file id by
    :func:`~ferry.stages.transform.counts.shared_counts`). Replay and removal stay per file: the
    load rewrites a shared file without the rows of a file replaced or removed.

    Raises:
        ValueError: a bad ``file_id``, or rows written under a file id not in ``files``.
        TransientError: a rename failed.
    """
    from pyspark.sql import Observation
    from pyspark.sql import functions as F

    batch_id = batch_id or uuid.uuid4().hex
    generation = new_generation()
    for fid in files.values():
        check_file_id(fid)
    pairs = [x for p, fid in files.items() for x in (F.lit(path_key(p)), F.lit(fid))]
    file_id = F.create_map(*pairs)[F.col(SOURCE_COLUMN)]
    names = [x for fid, name in (sources or {}).items() for x in (F.lit(fid), F.lit(name))]
    nas_name = F.create_map(*names)[F.col(FILE_ID_COLUMN)] if names else F.lit(None)
    seen = Observation(f"ferry-transform-{batch_id}")
    has_reject = F.when(F.col(REJECT_REASON_COLUMN).isNotNull(), F.col(SOURCE_COLUMN))
    observed = classified.observe(seen, F.collect_set(has_reject).alias("rejected"))
    valid, _ = split(observed, spec)
    tmp_valid = join_path(staging_root, spec.name, "_tmp", batch_id)
    tmp_markers = join_path(staging_root, spec.name, "_tmp", f"{batch_id}-markers")
    tmp_rej = join_path(rejects_root, spec.name, "_tmp", batch_id)
    shared = share and len(files) > 1 and bool(spec.hive.partition_by)
    members: dict[str, dict[str, int]] = {}
    spark = classified.sparkSession
    sc = spark.sparkContext
    try:
        sc.setJobDescription(f"ferry transform {spec.name}: stage {len(files)} file(s)")
        staged = valid.withColumn(FILE_ID_COLUMN, file_id).withColumn(
            SOURCE_PATH_COLUMN, nas_name.cast("string")
        )
        write = write_shared if shared else write_files
        write(
            staged,
            [c.name for c in spec.table_data_columns],
            spec.hive.partition_by,
            tmp_valid,
        )
        keys = _observed_rejects(seen)
        with_rejects = [p for p in files if keys is None or path_key(p) in keys]
        if shared:
            members = shared_counts(spark, tmp_valid) if fs.exists(tmp_valid) else {}
            valid_rows: dict[str, int] = {}
            for held in members.values():
                for fid, n in held.items():
                    valid_rows[fid] = valid_rows.get(fid, 0) + n
        else:
            valid_rows = staged_counts(spark, tmp_valid) if fs.exists(tmp_valid) else {}
        rejected: dict[str, FileCounts] = {}
        if with_rejects:
            sc.setJobDescription(
                f"ferry transform {spec.name}: rejects of {len(with_rejects)} file(s)"
            )
            _, rejects = split(reread(with_rejects), spec)
            (
                rejects.withColumn(FILE_ID_COLUMN, file_id)
                .repartition(FILE_ID_COLUMN)
                .write.partitionBy(FILE_ID_COLUMN)
                .mode("errorifexists")
                .parquet(tmp_rej)
            )
            rejected = file_counts(spark.read.parquet(tmp_rej), with_rejects)
        counts = batch_counts(files, valid_rows, rejected)
        if members:  # the batch's shared files first: a marker never names a missing one
            batch_dir = shared_dir(join_path(staging_root, spec.name), generation)
            fs.write_bytes(
                join_path(tmp_valid, MARKER_NAME), BatchMarker(generation, members).to_json()
            )
            fs.mkdirs(join_path(staging_root, spec.name, "_shared"))
            fs.move(tmp_valid, batch_dir)

        def commit(path: str, fid: str) -> FileResult:
            c = counts[path]
            if shared:
                part = join_path(tmp_markers, fid)
                mine = {rel: held[fid] for rel, held in members.items() if fid in held}
                marker = StagedMarker(fid, generation, (), mine)
                fs.write_bytes(join_path(part, MARKER_NAME), marker.to_json())
            else:
                part = file_dir(tmp_valid, fid)
                name_files(fs, part, fid, generation)
            final = staged_path(staging_root, spec.name, fid)
            commit_dir(fs, part, final)
            rej_final = join_path(rejects_root, spec.name, fid)
            if c.rows_rejected:
                commit_dir(fs, join_path(tmp_rej, f"{FILE_ID_COLUMN}={fid}"), rej_final)
            else:
                fs.delete(rej_final, recursive=True)  # stale rejects of an earlier attempt
            return FileResult(
                file_id=fid,
                source_path=path,
                status="transformed",
                counts=c,
                staged_path=final,
                rejects_path=rej_final if c.rows_rejected else None,
            )

        # Files commit independently; their NameNode round trips overlap (see DRIVER_THREADS).
        with ThreadPoolExecutor(DRIVER_THREADS, thread_name_prefix="ferry-commit") as pool:
            done = list(pool.map(commit, files.keys(), files.values()))
        return {r.file_id: r for r in done}
    finally:
        sc.setJobDescription(None)  # type: ignore[arg-type]
        fs.delete(tmp_valid, recursive=True)
        fs.delete(tmp_rej, recursive=True)
        if shared:
            fs.delete(tmp_markers, recursive=True)


def run_batch(
    spark: SparkSession,
    spec: DatasetSpec,
    files: Mapping[str, str],
    *,
    staging_root: str,
    rejects_root: str,
    sources: Mapping[str, str] | None = None,
    fs: FileSystemOps | None = None,
    share: bool = False,
) -> dict[str, FileResult]:
    """Transform one batch of landed files of one dataset; the transform service's one call.

    ``files``: ``{landing path: file_id}`` (raw absolute paths or URIs, see :func:`read_csv`);
    ``sources``: ``{file_id: NAS name}`` (the manifests' ``source_path``, see
    :func:`write_batch`).
    Empty files (C11), files with a wrong header and files whose landing copy is gone (reason
    ``input_expired``: removed by its retention) are classified without Spark and not read;
    the rest are read by one scan and classified; :func:`write_batch` stages their valid rows in
    that one pass, reads again only the files holding rejected rows, counts from what it wrote
    and commits per file (``share``: the batch's rows in shared data files, see
    :func:`write_batch`). Returns ``{file_id: FileResult}`` for every file.

    Raises:
        ValueError: bad ``file_id``.
        TransientError: a rename failed (the whole batch can be retried: commits replace).
        py4j.protocol.Py4JJavaError / pyspark errors: the Spark job failed (retry the batch).
    """
    fs = fs or HadoopFileSystem(spark)
    results: dict[str, FileResult] = {}
    to_read: dict[str, str] = {}
    for fid in files.values():
        check_file_id(fid)
    reader = fs

    heads: dict[str, bytes] = {}

    def precheck(path: str) -> tuple[str | None, str | None]:
        """(empty kind, header problem) from the file's first HEAD_BYTES (only these in memory);
        kind ``gone`` when the landing copy no longer exists."""
        try:
            head = heads[path] = reader.read_head(path, HEAD_BYTES)
        except HdfsPathNotFound:
            return GONE, None
        except CorruptArchive as exc:  # extract checks whole archives; a landing copy changed
            return CORRUPT, str(exc)
        kind = classify_empty(head, header=spec.csv.header)
        return kind, None if kind is not None else check_header(head, spec)

    with ThreadPoolExecutor(DRIVER_THREADS, thread_name_prefix="ferry-head") as pool:
        checks = list(pool.map(precheck, files))
    for (path, fid), (kind, problem) in zip(files.items(), checks, strict=True):
        if kind is not None and kind not in (GONE, CORRUPT):
            results[fid] = FileResult(file_id=fid, source_path=path, status="empty", reason=kind)
            continue
        failure = {
            GONE: (InputExpired.reason, "no such file"),
            CORRUPT: ("corrupt_archive", problem),
            None: ("header_mismatch", problem),
        }[kind]
        if failure[1] is not None:
            reason, why = failure
            results[fid] = FileResult(
                file_id=fid,
                source_path=path,
                status="failed",
                reason=reason,
                message=f"{path}: {why}",
            )
            continue
        to_read[path] = fid
    if not to_read:
        return results
    parallel = parallel_paths(spark, spec, {p: heads[p] for p in to_read}, fs, HEAD_BYTES)

    def classified(paths: Sequence[str]) -> DataFrame:
        return classify(read_batch(spark, list(paths), spec, parallel & set(paths)), spec)

    return results | write_batch(
        classified(list(to_read)),
        spec,
        to_read,
        staging_root=staging_root,
        rejects_root=rejects_root,
        fs=fs,
        reread=classified,
        sources=sources,
        share=share,
    )
