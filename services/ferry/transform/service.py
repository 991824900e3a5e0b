"""The transform service: ``FileExtracted`` batches → one Spark job each on the master pair → B
staging → ``FileTransformed``. The SparkSession lives as long as the service (no JVM per file)."""

from __future__ import annotations

import logging
from typing import Any

from ferry.core.config import Settings, get_settings
from ferry.core.events import FileExtracted
from ferry.core.runner import Stage, StageRunner, build_runner
from ferry.datasets import load_datasets
from ferry.transform.handlers import TransformDeps, transform_batch

log = logging.getLogger(__name__)


class SparkHolder:
    """Lazily builds the stage's SparkSession and rebuilds it after a failure stopped it."""

    def __init__(self, settings: Settings, app_name: str, cluster: str, hive: bool = False) -> None:
        self.settings, self.app_name, self.cluster, self.hive = settings, app_name, cluster, hive
        self._spark: Any = None

    def get(self) -> Any:
        from ferry.core.spark import build_session

        if self._spark is not None and self._spark.sparkContext._jsc.sc().isStopped():
            self.reset()
        if self._spark is None:
            self._spark = build_session(self.settings, self.app_name, self.cluster, hive=self.hive)
        return self._spark

    def reset(self) -> None:
        """Stop the session if its context died (e.g. the application was removed by a master)."""
        if self._spark is None:
            return
        try:
            if self._spark.sparkContext._jsc.sc().isStopped():
                self._spark.stop()
                self._spark = None
        except Exception:  # noqa: BLE001 - the JVM side is gone: drop the handle, rebuild later
            log.warning("%s: dropping a broken SparkSession", self.app_name, exc_info=True)
            self._spark = None


def build(settings: Settings | None = None) -> StageRunner:
    """Wire the transform stage (topics, consumer group ``<prefix>.transform``, Spark on B)."""
    from ferry.jobs.transform import run_batch

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
    stage = Stage(
        "transform",
        {FileExtracted: transform_batch},
        batch_size=settings.transform.batch_size,
        batch_wait_s=settings.transform.batch_wait_s,
    )
    return build_runner(stage, deps, settings)


def main() -> None:
    """``python -m ferry.transform`` / ``ferry run transform``."""
    logging.basicConfig(
        level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s"
    )
    build().run()
