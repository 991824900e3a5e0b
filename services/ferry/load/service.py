"""The load service: ``FileTransferred`` batches → Hive on cluster A (Spark, Hive metastore) →
``FileLoaded``. One long-lived Hive-enabled SparkSession; one Spark job per batch and dataset."""

from __future__ import annotations

import logging

from ferry.core.config import Settings, get_settings
from ferry.core.events import FileTransferred
from ferry.core.runner import Stage, StageRunner, build_runner
from ferry.datasets import load_datasets
from ferry.load.handlers import LoadDeps, load_batch
from ferry.transform.service import SparkHolder


def build(settings: Settings | None = None) -> StageRunner:
    """Wire the load stage (consumer group ``<prefix>.load``, Spark on A with the metastore)."""
    from ferry.jobs.load import load_files

    settings = settings or get_settings()
    holder = SparkHolder(settings, "ferry-load", "a", hive=True)
    deps = LoadDeps(
        load_datasets(settings.paths.datasets_dir), holder.get, holder.reset, load_files
    )
    stage = Stage(
        "load",
        {FileTransferred: load_batch},
        batch_size=settings.load.batch_size,
        batch_wait_s=settings.load.batch_wait_s,
    )
    return build_runner(stage, deps, settings)


def main() -> None:
    """``python -m ferry.load`` / ``ferry run load``."""
    logging.basicConfig(
        level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s"
    )
    build().run()
