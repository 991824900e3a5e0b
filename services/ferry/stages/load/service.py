"""The load service: ``FileTransferred`` batches → Hive on cluster A (Spark, Hive metastore) →
``FileLoaded``. One long-lived Hive-enabled SparkSession; one Spark job per batch and dataset.

Dataset definitions are reloaded while it runs (:class:`ferry.datasets.reload.Definitions`); a
file whose definition is invalid waits in the waiting room (:mod:`ferry.core.waiting`)."""

from __future__ import annotations

from functools import partial

from ferry.clusters.locks import TableLocks
from ferry.clusters.spark import SparkHolder
from ferry.core.avro import default_codec
from ferry.core.config import Settings, get_settings
from ferry.core.events import FileTransferred
from ferry.core.heartbeat import datasets_status_path
from ferry.core.runner import StageRunner, build_runner
from ferry.core.service import service_main
from ferry.core.stage import Stage
from ferry.core.waiting import WaitingRoom
from ferry.datasets.reload import Definitions
from ferry.stages.load.handlers import LoadDeps, load_batch


def build(settings: Settings | None = None) -> StageRunner:
    """Wire the load stage (consumer group ``<prefix>.load``, Spark on A with the metastore)."""
    from ferry.stages.load.job import load_files

    settings = settings or get_settings()
    holder = SparkHolder(settings, "ferry-load", "a", hive=True)
    # Several load instances (and the maintenance commands) may rewrite one table: one at a time.
    locks = TableLocks(settings)
    job = partial(load_files, target_file_mb=settings.load.target_file_mb, locks=locks)
    definitions = Definitions(
        settings.paths.datasets_dir,
        "load",
        status_file=datasets_status_path(settings, "load"),
    )
    deps = LoadDeps(definitions, holder.get, holder.reset, job)
    room = WaitingRoom(settings, "load", default_codec(settings.paths.schemas_dir))
    stage = Stage.batched(
        "load",
        {FileTransferred: load_batch},
        settings.load,
        holder.warm,
        tick=lambda: room.tick(definitions.ready_changed, definitions.ready),
    )
    return build_runner(stage, deps, settings)


#: ``python -m ferry.stages.load`` / ``ferry run load``.
main = service_main(build)
