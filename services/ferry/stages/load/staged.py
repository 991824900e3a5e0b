"""What transfer left in A's incoming directory for each file, read before the load takes the
table's lock: the marker ``_ferry.json`` (generation, data files) and every data file's Parquet
footer (rows, schema), on driver threads, no Spark job.

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
from ferry.tables.model import StagedMarker
from ferry.tables.paths import MARKER_NAME, join, new_generation
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

    @property
    def legacy(self) -> bool:
        """Staged by a Ferry of the copy-on-write layout (a directory without a marker)."""
        return self.exists and self.marker is None

    def new_files(self, source_path: str | None) -> NewFiles:
        """The file's output as :class:`NewFiles` (needs a marker)."""
        assert self.marker is not None
        rows = {rel: self.footers[rel].rows for rel in self.marker.files}
        return NewFiles(self.file_id, self.marker.generation, self.directory, rows, source_path)


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

    return dict(zip(files, parallel(one, list(files.items())), strict=True))


def with_footers(spark: SparkSession, staged: Mapping[str, Staged]) -> dict[str, Staged]:
    """``staged`` with the footers of every data file the markers name (threads, all files); a
    file whose data file cannot be read gets it in :attr:`Staged.unreadable` (a load that
    crashed may have moved it into the table already: the caller looks again after finishing
    that load)."""
    wanted = [join(s.directory, rel) for s in staged.values() if s.marker for rel in s.marker.files]
    found = read_footers_or_errors(spark, wanted)
    out = {}
    for fid, s in staged.items():
        if s.marker is None:
            out[fid] = s
            continue
        got = {rel: found[join(s.directory, rel)] for rel in s.marker.files}
        feet = {rel: f for rel, f in got.items() if isinstance(f, Footer)}
        bad = next((e for e in got.values() if isinstance(e, PermanentError)), None)
        out[fid] = Staged(fid, s.directory, s.marker, feet, s.exists, bad)
    return out


def check_schema(s: Staged, expected: Mapping[str, str], table: str) -> PermanentError | None:
    """The error of the first data file of ``s`` whose columns differ from the table's data
    columns ``expected`` (``{name: type}``) by name (case C12), naming file and columns."""
    for rel, footer in s.footers.items():
        problems = schema_problems(footer.schema, expected)
        if problems:
            return PermanentError(
                f"cannot load {s.file_id} into {table}: {join(s.directory, rel)}: "
                + "; ".join(problems),
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
