"""Spark writes of per-file trees: each source file's rows as Parquet files of their own,
partitioned by the table's partition columns, named after the file, with a marker.

One Spark job writes the rows of many files at once, ``partitionBy(ferry_stage_file, *partition
columns)``, repartitioned by the same columns so that each (file, partition) is written by one
task as one file. The data files hold the table's data columns in table order, ``ferry_file_id``
and ``ferry_source_path`` included (a copy of the file id, :data:`STAGE_COLUMN`, names the
per-file directory and is not in the files). Then, per file (:func:`name_files`), the data files
are renamed ``ferry-<file_id>-<generation>-<n>.parquet`` inside the directory and the
:class:`~ferry.tables.model.StagedMarker` is written beside them: the directory is
then what transform stages, transfer copies and load moves into the table.

Used by transform (staging on B), by load for staged output of an earlier Ferry (reshaped into
the table's scratch) and by ``ferry migrate-layout``.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Protocol

from ferry.datasets.spec import FILE_ID_COLUMN
from ferry.tables.model import StagedMarker
from ferry.tables.paths import MARKER_NAME, data_file_name, join, parent

if TYPE_CHECKING:
    from pyspark.sql import DataFrame

#: The partition column naming each file's directory in a write (a copy of ``ferry_file_id``).
STAGE_COLUMN = "ferry_stage_file"


class TreeFs(Protocol):
    """The filesystem calls :func:`name_files` needs (:class:`~ferry.clusters.spark_jobs.
    HadoopFileSystem`)."""

    def exists(self, path: str) -> bool: ...
    def mkdirs(self, path: str) -> None: ...
    def move(self, src: str, dst: str) -> None: ...
    def list_files(self, path: str) -> dict[str, int]: ...
    def write_bytes(self, path: str, data: bytes) -> None: ...


def write_files(
    df: DataFrame,
    data_columns: Sequence[str],
    partition_by: Sequence[str],
    root: str,
) -> None:
    """Write ``df`` (with ``ferry_file_id``, the ``data_columns`` and the ``partition_by``
    columns) under ``root`` as ``ferry_stage_file=<file id>/<partition dirs>/part-…``, one Spark
    job. ``root`` must not exist.

    Raises:
        pyspark errors: the job failed (nothing is committed; the caller deletes ``root``).
    """
    from pyspark.sql import functions as F

    parts = [F.col(f"`{c}`") for c in partition_by]
    out = df.withColumn(STAGE_COLUMN, F.col(FILE_ID_COLUMN)).select(
        *[F.col(f"`{c}`") for c in data_columns], F.col(STAGE_COLUMN), *parts
    )
    (
        out.repartition(F.col(STAGE_COLUMN), *parts)
        .write.partitionBy(STAGE_COLUMN, *partition_by)
        .mode("errorifexists")
        .parquet(root)
    )


def write_shared(
    df: DataFrame,
    data_columns: Sequence[str],
    partition_by: Sequence[str],
    root: str,
) -> None:
    """Write ``df`` (as for :func:`write_files`) under ``root`` as ``<partition dirs>/part-…``:
    ONE data file per partition holding the rows of every file of the batch (issue 45, case
    C23: a batch of files over the same 60 days writes 60 files, not files × 60). Repartitioned
    by the partition columns, so each partition is written by one task. ``root`` must not exist.

    Raises:
        pyspark errors: the job failed (nothing is committed; the caller deletes ``root``).
    """
    from pyspark.sql import functions as F

    parts = [F.col(f"`{c}`") for c in partition_by]
    out = df.select(*[F.col(f"`{c}`") for c in data_columns], *parts)
    (out.repartition(*parts).write.partitionBy(*partition_by).mode("errorifexists").parquet(root))


def file_dir(root: str, file_id: str) -> str:
    """The directory :func:`write_files` gave one file's rows (it may not exist: no rows)."""
    return join(root, f"{STAGE_COLUMN}={file_id}")


def name_files(fs: TreeFs, directory: str, file_id: str, generation: str) -> StagedMarker:
    """Rename the data files under ``directory`` to :func:`~ferry.tables.paths.
    data_file_name` (in their partition directories, numbered in path order), write the marker
    ``_ferry.json`` last, and return it. A missing ``directory`` (a file without rows) is made
    and gets a marker listing no file. Not atomic: commit the directory by rename afterwards.

    Raises:
        TransientError: a rename failed.
    """
    files = fs.list_files(directory)
    if not files and not fs.exists(directory):
        fs.mkdirs(directory)
    named = []
    for n, rel in enumerate(sorted(files)):
        new = join(parent(rel), data_file_name(file_id, generation, n)).lstrip("/")
        fs.move(join(directory, rel), join(directory, new))
        named.append(new)
    marker = StagedMarker(file_id, generation, tuple(named))
    fs.write_bytes(join(directory, MARKER_NAME), marker.to_json())
    return marker
