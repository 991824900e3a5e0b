"""The pipeline as real processes on the local stack, private to one test module."""

from __future__ import annotations

import shutil
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from ferry.core.config import Settings
from ferry.core.kafka import build_admin
from ferry.core.topics import ensure_topics
from ferry.pipeline import ServiceGroup, settings_env


@dataclass
class Pipeline:
    settings: Settings
    nas_dir: Path
    work: Path
    group: ServiceGroup

    def hive_rows(self, spark, table: str, file_ids: list[str]) -> dict[str, int]:  # type: ignore[no-untyped-def]
        from pyspark.sql import functions as F

        spark.catalog.refreshTable(table)  # load rewrote partitions since this session listed them
        rows = (spark.table(table).where(F.col("ferry_file_id").isin(file_ids))
                .groupBy("ferry_file_id").count().collect())
        return {r["ferry_file_id"]: int(r["count"]) for r in rows}


@pytest.fixture(scope="module")
def pipeline(stack: Settings, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Pipeline]:
    import uuid

    token = uuid.uuid4().hex[:10]
    work = tmp_path_factory.mktemp(f"e2e-{token}")
    overrides = {
        "kafka.topic_prefix": f"e2e{token}",
        "paths.nas_dir": work / "nas",
        "paths.landing_path": f"/test/{token}/landing",
        "paths.staging_path": f"/test/{token}/staging",
        "paths.rejects_path": f"/test/{token}/rejects",
        "paths.incoming_path": f"/test/{token}/incoming",
        "transform.batch_wait_s": 2,
        "load.batch_wait_s": 2,
        "extract.poll_interval_s": 0.5,
    }
    env = settings_env(overrides)
    settings = stack.model_copy(update={
        "kafka": stack.kafka.model_copy(update={"topic_prefix": overrides["kafka.topic_prefix"]}),
        "paths": stack.paths.model_copy(update={
            "nas_dir": overrides["paths.nas_dir"],
            "landing_path": overrides["paths.landing_path"], "staging_path": overrides["paths.staging_path"],
            "rejects_path": overrides["paths.rejects_path"], "incoming_path": overrides["paths.incoming_path"],
        }),
    })
    ensure_topics(build_admin(settings.kafka), settings.kafka)
    group = ServiceGroup(env, work / "logs")
    group.start()
    try:
        yield Pipeline(settings, work / "nas", work, group)
    finally:
        codes = group.stop()
        print(f"\nservice exit codes: {codes}; logs in {work / 'logs'}")
        shutil.rmtree(work / "nas", ignore_errors=True)
