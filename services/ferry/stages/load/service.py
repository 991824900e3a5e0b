"""The load service: ``FileTransferred`` batches → Hive on cluster A (HDFS renames, the Hive
metastore) → ``FileLoaded``. One long-lived Hive-enabled SparkSession (Spark jobs only for
compaction and for rows staged by an earlier Ferry) and a background compactor.

Dataset definitions are reloaded while it runs (:class:`ferry.datasets.reload.Definitions`); a
file whose definition is invalid waits in the waiting room (:mod:`ferry.core.runtime.waiting`)."""

from __future__ import annotations

from functools import partial
from typing import Any
from urllib.parse import urlsplit

from ferry.clusters.hdfs.port import HdfsPort
from ferry.clusters.hdfs.webhdfs import WebHdfs
from ferry.clusters.spark import SparkHolder
from ferry.core.events import FileTransferred
from ferry.core.runtime.heartbeat import datasets_status_path, spark_status_path, sweep_dead
from ferry.core.runtime.runner import StageRunner, build_runner
from ferry.core.runtime.service import service_main
from ferry.core.runtime.stage import Stage
from ferry.core.runtime.waiting import WaitingRoom
from ferry.core.wire.avro import default_codec
from ferry.datasets.reload import Definitions
from ferry.errors import HdfsPathNotFound
from ferry.lineage.observer import lineage_observer
from ferry.settings import Settings, get_settings
from ferry.stages.load.compactor import Compactor
from ferry.stages.load.handlers import LoadDeps, load_batch
from ferry.tables.locks import TableLocks
from ferry.tables.model import IndexFormatError, StagedMarker
from ferry.tables.paths import MARKER_NAME, shared_dir


def build(settings: Settings | None = None) -> StageRunner:
    """Wire the load stage (consumer group ``<prefix>.load``, Spark on A with the metastore)."""
    from ferry.stages.load.job import KnownTables, LoadedFiles, load_files

    settings = settings or get_settings()
    holder = SparkHolder(
        settings, "ferry-load", "a", hive=True, status=spark_status_path(settings, "load")
    )
    # Several load instances (and the maintenance commands) may change one table: one at a time.
    locks = TableLocks(settings)
    ld = settings.load
    compactor = (
        Compactor(
            holder.get,
            locks,
            max_files=ld.compact_max_files,
            target_bytes=ld.target_file_mb * 1024 * 1024,
        )
        if ld.compact
        else None
    )
    job = partial(
        load_files,
        known=KnownTables(),
        loaded=LoadedFiles(),
        target_file_mb=ld.target_file_mb,
        locks=locks,
        on_loaded=compactor.submit if compactor is not None else None,
    )
    sweep_dead(datasets_status_path(settings, "load").parent)  # files of killed processes
    definitions = Definitions(
        settings.paths.datasets_dir,
        "load",
        status_file=datasets_status_path(settings, "load"),
    )
    hdfs_a = WebHdfs.for_cluster("a", settings)
    deps = LoadDeps(
        definitions,
        holder.get,
        holder.reset,
        job,
        missing_input=partial(missing_input, hdfs_a),
    )
    room = WaitingRoom(settings, "load", default_codec(settings.paths.schemas_dir))
    stage = Stage.batched(
        "load",
        {FileTransferred: load_batch},
        settings.load,
        holder.warm,
        tick=lambda: room.tick(definitions.ready_changed, definitions.ready),
    )
    return build_runner(stage, deps, settings, observer=lineage_observer(settings, stage.name))


def missing_input(hdfs_a: HdfsPort, uri: str, rows_out: int | None) -> str | None:
    """Why the incoming directory ``uri`` on cluster A cannot be loaded: ``"no such directory"``,
    ``"no data file, N row(s) expected"``, or ``None`` (it looks whole). One LISTSTATUS. A staged
    tree (transform's marker and partition directories, docs/hive-layout.md) counts its
    partition directories; the load consumes the directory, so ``"no such directory"`` also
    follows a completed load (the caller asks only when the table lacks the file's rows).

    Raises:
        TransientError: cluster A did not answer (the batch is retried as it would be anyway).
    """
    try:
        entries = hdfs_a.list(urlsplit(uri).path)
    except HdfsPathNotFound:
        return "no such directory"
    data = [e for e in entries if not e.name.startswith((".", "_"))]
    if not data and (rows_out or 0) > 0:
        return _shared_missing(hdfs_a, urlsplit(uri).path, entries, rows_out)
    return None


def _shared_missing(
    hdfs_a: HdfsPort, directory: str, entries: list[Any], rows_out: int | None
) -> str | None:
    """For a directory without data files: ``None`` when its marker names shared files and
    their batch marker is there (issue 45: the rows are in ``../_shared/<generation>/``), else
    why it cannot be loaded."""
    none = f"no data file, {rows_out} row(s) expected"
    if not any(e.name == MARKER_NAME for e in entries):
        return none
    try:
        marker = StagedMarker.from_json(
            b"".join(hdfs_a.open_stream(f"{directory}/{MARKER_NAME}")), directory
        )
    except (IndexFormatError, HdfsPathNotFound):
        return none
    if not marker.shared:
        return none
    batch = shared_dir(directory.rstrip("/").rsplit("/", 1)[0], marker.generation)
    if hdfs_a.status_or_none(f"{batch}/{MARKER_NAME}") is None:
        return f"its shared files are gone ({batch}), {rows_out} row(s) expected"
    return None


#: ``ferry run load`` (:func:`ferry.core.services.run`).
main = service_main(build)
