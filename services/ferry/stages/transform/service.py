"""The transform service: ``FileExtracted`` batches → one Spark job each on the master pair → B
staging → ``FileTransformed``. The SparkSession lives as long as the service (no JVM per file).

Dataset definitions are reloaded while it runs (:class:`ferry.datasets.reload.Definitions`):
each new version is compiled with Spark's analyzer first (:mod:`ferry.stages.transform.compile`);
a definition that is invalid or does not compile is not run, and its files wait in the waiting
room (:mod:`ferry.core.runtime.waiting`) until it is fixed, while the other datasets go on."""

from __future__ import annotations

import logging
from functools import partial

from ferry.clusters.spark import SparkHolder
from ferry.core.events import FileExtracted
from ferry.core.runtime.heartbeat import datasets_status_path, spark_status_path, sweep_dead
from ferry.core.runtime.runner import StageRunner, build_runner
from ferry.core.runtime.service import service_main
from ferry.core.runtime.stage import Stage
from ferry.core.runtime.waiting import WaitingRoom
from ferry.core.wire.avro import default_codec
from ferry.datasets.reload import Definitions, snapshot
from ferry.datasets.spec import DatasetSpec
from ferry.errors import SparkUnavailable
from ferry.lineage.observer import lineage_observer
from ferry.settings import Settings, get_settings
from ferry.stages.transform.handlers import TransformDeps, transform_batch
from ferry.stages.transform.warmup import warm_transform

log = logging.getLogger(__name__)


def build(settings: Settings | None = None) -> StageRunner:
    """Wire the transform stage (topics, consumer group ``<prefix>.transform``, Spark on B)."""
    from ferry.stages.transform.compile import definition_problems
    from ferry.stages.transform.job import run_batch

    settings = settings or get_settings()
    b = settings.cluster("b")
    holder = SparkHolder(
        settings, "ferry-transform", "b", status=spark_status_path(settings, "transform")
    )

    def compile_spec(spec: DatasetSpec) -> list[str]:
        if not holder.built:  # the warm-up builds it; until then, compiled at the next reload
            raise SparkUnavailable("no Spark session yet", cluster="b")
        return definition_problems(holder.get(), spec)

    sweep_dead(datasets_status_path(settings, "transform").parent)  # files of killed processes
    definitions = Definitions(
        settings.paths.datasets_dir,
        "transform",
        compile_spec,
        status_file=datasets_status_path(settings, "transform"),
    )
    deps = TransformDeps(
        datasets=definitions,
        spark=holder.get,
        reset_spark=holder.reset,
        run_batch=partial(run_batch, share=settings.transform.share_files),
        staging_root=f"{b.fs_url}{settings.paths.staging_path}",
        rejects_root=f"{b.fs_url}{settings.paths.rejects_path}",
    )
    room = WaitingRoom(settings, "transform", default_codec(settings.paths.schemas_dir))
    stage = Stage.batched(
        "transform",
        {FileExtracted: transform_batch},
        settings.transform,
        partial(
            warm_transform,
            holder.warm,
            lambda: snapshot(definitions).specs,
            deps.staging_root,
            deps.run_batch,  # as the real batches run: shared data files or not
            datasets=settings.transform.warm_up_datasets,
        ),
        tick=lambda: room.tick(definitions.ready_changed, definitions.ready),
    )
    return build_runner(stage, deps, settings, observer=lineage_observer(settings, stage.name))


#: ``ferry run transform`` (:func:`ferry.core.services.run`).
main = service_main(build)
