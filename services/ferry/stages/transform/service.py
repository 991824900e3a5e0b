"""The transform service: ``FileExtracted`` batches → one Spark job each on the master pair → B
staging → ``FileTransformed``. The SparkSession lives as long as the service (no JVM per file)."""

from __future__ import annotations

import logging

from ferry.clusters.spark import SparkHolder
from ferry.core.events import FileExtracted
from ferry.core.runtime.runner import StageRunner, build_runner
from ferry.core.runtime.service import service_main
from ferry.core.runtime.stage import Stage
from ferry.datasets.spec import load_datasets
from ferry.lineage.observer import lineage_observer
from ferry.settings import Settings, get_settings
from ferry.stages.transform.handlers import TransformDeps, transform_batch

log = logging.getLogger(__name__)


def build(settings: Settings | None = None) -> StageRunner:
    """Wire the transform stage (topics, consumer group ``<prefix>.transform``, Spark on B)."""
    from ferry.stages.transform.job import run_batch

    settings = settings or get_settings()
    b = settings.cluster("b")
    holder = SparkHolder(settings, "ferry-transform", "b")
    deps = TransformDeps(
        datasets=load_datasets(settings.paths.datasets_dir),
        spark=holder.get,
        reset_spark=holder.reset,
        run_batch=run_batch,
        staging_root=f"{b.fs_url}{settings.paths.staging_path}",
        rejects_root=f"{b.fs_url}{settings.paths.rejects_path}",
    )
    stage = Stage.batched(
        "transform", {FileExtracted: transform_batch}, settings.transform, holder.warm
    )
    return build_runner(stage, deps, settings, observer=lineage_observer(settings, stage.name))


#: ``ferry run transform`` (:func:`ferry.core.services.run`).
main = service_main(build)
