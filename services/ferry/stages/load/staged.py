"""What transfer left in A's incoming directory for each file, read before the load takes the
table's lock: the marker ``_ferry.json`` (generation, data files) and every data file's Parquet
footer (rows, schema), on driver threads, no Spark job.

A file transformed in a batch with others (issue 45) has its rows in the batch's shared data
files ``<incoming>/<dataset>/_shared/<generation>/``: the batch marker there (who holds rows in
which shared file) is read once per batch and each shared file's footer once
(:attr:`Staged.batch`, :attr:`Staged.shared_footers`); :mod:`ferry.stages.load.shared` plans
their moves.

A directory without a marker was staged by a Ferry of the copy-on-write layout (flat
``part-*`` files without ``ferry_file_id``): it is read and reshaped by Spark into the per-file
shape inside the table's scratch (:func:`reshape`): Spark only where it is needed.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from ferry.clusters.spark_jobs import (
    HadoopFileSystem,
    check_file_id,
    escape_glob,
    path_key,
    source_key_column,
    struct_for,
)
from ferry.datasets.spec import FILE_ID_COLUMN, SOURCE_PATH_COLUMN, DatasetSpec
from ferry.errors import PermanentError
from ferry.tables.footers import Footer, read_footers_or_errors, schema_problems
from ferry.tables.index import parallel
from ferry.tables.model import BatchMarker, IndexFormatError, StagedMarker
from ferry.tables.paths import MARKER_NAME, join, new_generation, shared_dir
from ferry.tables.replace import NewFiles
from ferry.tables.staging import file_dir, name_files, write_files

if TYPE_CHECKING:
    from pyspark.sql import DataFrame, SparkSession
    from pyspark.sql.types import StructType


@dataclass(frozen=True)
class Staged:
    """One file's incoming directory: ``marker`` (``None``: none there), the ``footers`` of the
    data files it names, ``exists`` (``False``: nothing at all there)."""

    file_id: str
    directory: str
    marker: StagedMarker | None
    footers: Mapping[str, Footer] = field(default_factory=dict)
    exists: bool = True
    #: the first data file the marker names that could not be read (``None``: all were)
    unreadable: PermanentError | None = None
    #: the batch marker of the shared files the marker names (``None``: it names none)
    batch: BatchMarker | None = None
    #: footers of those shared files, ``{path relative to the batch directory: Footer}``
    shared_footers: Mapping[str, Footer] = field(default_factory=dict)

    @property
    def batch_dir(self) -> str:
        """The directory of the batch's shared files on A: ``<dataset dir>/_shared/<gen>``."""
        assert self.marker is not None
        return shared_dir(parent_uri(self.directory), self.marker.generation)

    @property
    def legacy(self) -> bool:
        """Staged by a Ferry of the copy-on-write layout (a directory without a marker)."""
        return self.exists and self.marker is None

    def new_files(
        self, source_path: str | None, compacted: Mapping[str, int] | None = None
    ) -> NewFiles:
        """The file's output as :class:`NewFiles` (needs a marker); ``compacted``: its rows in
        shared files, by their paths in the table (:mod:`ferry.stages.load.shared`)."""
        assert self.marker is not None
        rows = {rel: self.footers[rel].rows for rel in self.marker.files}
        return NewFiles(
            self.file_id,
            self.marker.generation,
            self.directory,
            rows,
            source_path,
            dict(compacted or {}),
        )


def parent_uri(uri: str) -> str:
    """The parent directory of a directory URI or path (``hdfs://nn/a/b`` → ``hdfs://nn/a``)."""
    return uri.rstrip("/").rsplit("/", 1)[0]


def read_markers(fs: HadoopFileSystem, files: Mapping[str, str]) -> dict[str, Staged]:
    """The marker (or its absence) of each incoming directory ``{file_id: URI}`` (threads)."""

    def one(item: tuple[str, str]) -> Staged:
        fid, directory = item
        check_file_id(fid)
        path = join(directory, MARKER_NAME)
        data = fs.read_bytes(path)
        if data is not None:
            marker = StagedMarker.from_json(data, path)
            if marker.file_id != fid:
                raise PermanentError(
                    f"{path} names file {marker.file_id}, not {fid}", reason="bad_manifest"
                )
            return Staged(fid, directory, marker)
        return Staged(fid, directory, None, exists=fs.exists(directory))

    found = dict(zip(files, parallel(one, list(files.items())), strict=True))
    batches = sorted({s.batch_dir for s in found.values() if s.marker and s.marker.shared})
    if not batches:
        return found

    def batch(directory: str) -> BatchMarker | PermanentError:
        path = join(directory, MARKER_NAME)
        data = fs.read_bytes(path)
        if data is None:
            return PermanentError(f"{path}: no batch marker", reason="hdfs_not_found")
        try:
            return BatchMarker.from_json(data, path)
        except IndexFormatError as exc:
            return PermanentError(str(exc), reason="bad_manifest")

    got = dict(zip(batches, parallel(batch, batches), strict=True))
    out = {}
    for fid, s in found.items():
        b = got.get(s.batch_dir) if s.marker and s.marker.shared else None
        if isinstance(b, PermanentError):
            out[fid] = Staged(fid, s.directory, s.marker, unreadable=b)
        else:
            out[fid] = Staged(fid, s.directory, s.marker, batch=b)
    return out


def with_footers(spark: SparkSession, staged: Mapping[str, Staged]) -> dict[str, Staged]:
    """``staged`` with the footers of every data file the markers name (threads, all files); a
    file whose data file cannot be read gets it in :attr:`Staged.unreadable` (a load that
    crashed may have moved it into the table already: the caller looks again after finishing
    that load)."""
    wanted = [join(s.directory, rel) for s in staged.values() if s.marker for rel in s.marker.files]
    shared = {
        join(s.batch_dir, rel)
        for s in staged.values()
        if s.marker and s.batch and s.unreadable is None
        for rel in s.marker.shared
    }
    found = read_footers_or_errors(spark, [*wanted, *sorted(shared)])
    out = {}
    for fid, s in staged.items():
        if s.marker is None or s.unreadable is not None:
            out[fid] = s
            continue
        got = {rel: found[join(s.directory, rel)] for rel in s.marker.files}
        feet = {rel: f for rel, f in got.items() if isinstance(f, Footer)}
        bad = next((e for e in got.values() if isinstance(e, PermanentError)), None)
        shared_feet: dict[str, Footer] = {}
        if s.batch is not None:
            for rel in s.marker.shared:
                f = found[join(s.batch_dir, rel)]
                held = s.batch.members.get(rel, {})
                if isinstance(f, PermanentError):
                    bad = bad or f
                elif f.rows != sum(held.values()) or held.get(fid) != s.marker.shared[rel]:
                    bad = bad or PermanentError(
                        f"{join(s.batch_dir, rel)} holds {f.rows} rows, its batch marker says "
                        f"{sum(held.values())} ({held.get(fid)} of {fid}, whose marker says "
                        f"{s.marker.shared[rel]})",
                        reason="count_mismatch",
                    )
                else:
                    shared_feet[rel] = f
        out[fid] = Staged(fid, s.directory, s.marker, feet, s.exists, bad, s.batch, shared_feet)
    return out


def check_schema(s: Staged, expected: Mapping[str, str], table: str) -> PermanentError | None:
    """The error of the first data file of ``s`` whose columns differ from the table's data
    columns ``expected`` (``{name: type}``) by name (case C12), naming file and columns."""
    feet = [(join(s.directory, rel), f) for rel, f in s.footers.items()]
    if s.shared_footers:
        feet += [(join(s.batch_dir, rel), f) for rel, f in s.shared_footers.items()]
    for path, footer in feet:
        problems = schema_problems(footer.schema, expected)
        if problems:
            return PermanentError(
                f"cannot load {s.file_id} into {table}: {path}: " + "; ".join(problems),
                reason="schema_mismatch",
            )
    return None


def staged_schema(spec: DatasetSpec) -> StructType:
    """Schema of an earlier Ferry's staged Parquet: :attr:`DatasetSpec.all_columns` in order."""
    return struct_for(spec.all_columns)


def read_legacy(
    spark: SparkSession,
    spec: DatasetSpec,
    files: Mapping[str, str],
    sources: Mapping[str, str] | None = None,
) -> DataFrame:
    """Rows of several flat staged directories (``{file_id: URI}``, an earlier Ferry's shape) in
    one scan, with ``ferry_file_id`` and ``ferry_source_path`` (from ``sources``: ``{file_id: NAS
    source_path}``, NULL for a file not in it) last. The schema is read from the files, so
    :func:`ferry.stages.load.job.align_to_table` sees what was really staged; only empty
    directories give an empty frame of :func:`staged_schema`.

    Raises:
        ValueError: no files, or a bad ``file_id``.
        pyspark.errors.AnalysisException: a directory does not exist.
    """
    from pyspark.errors import AnalysisException
    from pyspark.sql import functions as F

    if not files:
        raise ValueError("read_legacy needs at least one file")
    for fid in files:
        check_file_id(fid)
    dirs = [p.rstrip("/") for p in files.values()]
    try:
        df = spark.read.option("mergeSchema", "true").parquet(*[escape_glob(d) for d in dirs])
    except AnalysisException as exc:
        if "UNABLE_TO_INFER_SCHEMA" not in str(exc):
            raise
        empty = spark.createDataFrame([], staged_schema(spec))
        return empty.withColumn(FILE_ID_COLUMN, F.lit(None).cast("string")).withColumn(
            SOURCE_PATH_COLUMN, F.lit(None).cast("string")
        )
    pairs = [x for fid, d in files.items() for x in (F.lit(path_key(d)), F.lit(fid))]
    parent = F.regexp_replace(source_key_column(F.col("_metadata.file_path")), "/[^/]*$", "")
    df = df.withColumn(FILE_ID_COLUMN, F.create_map(*pairs)[parent])
    known = {fid: path for fid, path in (sources or {}).items() if fid in files}
    if not known:
        return df.withColumn(SOURCE_PATH_COLUMN, F.lit(None).cast("string"))
    names = [x for fid, path in known.items() for x in (F.lit(fid), F.lit(path))]
    return df.withColumn(SOURCE_PATH_COLUMN, F.create_map(*names)[F.col(FILE_ID_COLUMN)])


def reshape(
    spark: SparkSession,
    spec: DatasetSpec,
    aligned: DataFrame,
    file_ids: list[str],
    scratch: str,
) -> dict[str, Staged]:
    """Write the rows of ``aligned`` (table columns, by name) per file under ``scratch`` in the
    per-file shape (one Spark job), name the files, and return each file's :class:`Staged`
    (with footers) as if transfer had left it there."""
    data = [c.name for c in spec.table_data_columns]
    sc = spark.sparkContext
    sc.setJobDescription(f"ferry load {spec.name}: reshape {len(file_ids)} file(s) staged earlier")
    try:
        write_files(aligned, data, spec.hive.partition_by, scratch)
    finally:
        sc.setJobDescription(None)  # type: ignore[arg-type]
    fs = HadoopFileSystem(spark)
    gen = new_generation()
    markers = parallel(lambda f: name_files(fs, file_dir(scratch, f), f, gen), file_ids)
    staged = {
        fid: Staged(fid, file_dir(scratch, fid), m)
        for fid, m in zip(file_ids, markers, strict=True)
    }
    return with_footers(spark, staged)
