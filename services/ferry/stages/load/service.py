"""The load service: ``FileTransferred`` batches → Hive on cluster A (Spark, Hive metastore) →
``FileLoaded``. One long-lived Hive-enabled SparkSession; one Spark job per batch and dataset.

Dataset definitions are reloaded while it runs (:class:`ferry.datasets.reload.Definitions`); a
file whose definition is invalid waits in the waiting room (:mod:`ferry.core.runtime.waiting`)."""

from __future__ import annotations

from functools import partial
from urllib.parse import urlsplit

from ferry.clusters.hdfs.port import HdfsPort
from ferry.clusters.hdfs.webhdfs import WebHdfs
from ferry.clusters.locks import TableLocks
from ferry.clusters.spark import SparkHolder
from ferry.core.errors import HdfsPathNotFound
from ferry.core.events import FileTransferred
from ferry.core.runtime.heartbeat import datasets_status_path, sweep_dead
from ferry.core.runtime.runner import StageRunner, build_runner
from ferry.core.runtime.service import service_main
from ferry.core.runtime.stage import Stage
from ferry.core.runtime.waiting import WaitingRoom
from ferry.core.wire.avro import default_codec
from ferry.datasets.reload import Definitions
from ferry.lineage.observer import lineage_observer
from ferry.settings import Settings, get_settings
from ferry.stages.load.handlers import LoadDeps, load_batch


def build(settings: Settings | None = None) -> StageRunner:
    """Wire the load stage (consumer group ``<prefix>.load``, Spark on A with the metastore)."""
    from ferry.stages.load.job import load_files

    settings = settings or get_settings()
    holder = SparkHolder(settings, "ferry-load", "a", hive=True)
    # Several load instances (and the maintenance commands) may rewrite one table: one at a time.
    locks = TableLocks(settings)
    job = partial(load_files, target_file_mb=settings.load.target_file_mb, locks=locks)
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
    ``"no data file, N row(s) expected"``, or ``None`` (it looks whole). One LISTSTATUS.

    Raises:
        TransientError: cluster A did not answer (the batch is retried as it would be anyway).
    """
    try:
        entries = hdfs_a.list(urlsplit(uri).path)
    except HdfsPathNotFound:
        return "no such directory"
    data = [e for e in entries if e.is_file and not e.name.startswith((".", "_"))]
    if not data and (rows_out or 0) > 0:
        return f"no data file, {rows_out} row(s) expected"
    return None


#: ``ferry run load`` (:func:`ferry.core.services.run`).
main = service_main(build)
