"""The load service: ``FileTransferred`` batches → Hive on cluster A (HDFS renames, the Hive
metastore) → ``FileLoaded``. One long-lived Hive-enabled SparkSession (Spark jobs only for
compaction and for rows staged by an earlier Ferry) and a background compactor."""

from __future__ import annotations

from functools import partial

from ferry.clusters.locks import TableLocks
from ferry.clusters.spark import SparkHolder
from ferry.core.config import Settings, get_settings
from ferry.core.events import FileTransferred
from ferry.core.runner import StageRunner, build_runner
from ferry.core.service import service_main
from ferry.core.stage import Stage
from ferry.datasets import load_datasets
from ferry.stages.load.compactor import Compactor
from ferry.stages.load.handlers import LoadDeps, load_batch


def build(settings: Settings | None = None) -> StageRunner:
    """Wire the load stage (consumer group ``<prefix>.load``, Spark on A with the metastore)."""
    from ferry.stages.load.job import load_files

    settings = settings or get_settings()
    holder = SparkHolder(settings, "ferry-load", "a", hive=True)
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
        target_file_mb=ld.target_file_mb,
        locks=locks,
        on_loaded=compactor.submit if compactor is not None else None,
    )
    deps = LoadDeps(load_datasets(settings.paths.datasets_dir), holder.get, holder.reset, job)
    stage = Stage.batched("load", {FileTransferred: load_batch}, settings.load, holder.warm)
    return build_runner(stage, deps, settings)


#: ``python -m ferry.stages.load`` / ``ferry run load``.
main = service_main(build)
