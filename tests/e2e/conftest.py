"""The pipeline as real processes on the local stack, private to one test module."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import uuid
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from ferry.clusters.hiveserver2 import rows_by_file
from ferry.core.config import Settings
from ferry.core.kafka import build_admin
from ferry.core.topics import ensure_topics
from ferry.pipeline import ServiceGroup, settings_env


@dataclass
class Pipeline:
    settings: Settings
    env: dict[str, str]
    nas_dir: Path
    work: Path
    group: ServiceGroup

    def hive_rows(self, table: str, file_ids: list[str]) -> dict[str, int]:
        """Rows per file id in ``table`` as an analyst sees them: over JDBC from HiveServer2."""
        return rows_by_file(self.settings, table, file_ids)

    def ferry(self, *args: str, timeout: float = 120) -> subprocess.CompletedProcess[str]:
        """Run the ``ferry`` CLI as an operator would, with this pipeline's settings."""
        return subprocess.run(
            [sys.executable, "-m", "ferry.cli", *args],
            capture_output=True,
            text=True,
            env={**os.environ, **self.env},
            timeout=timeout,
            check=False,
        )


def start_pipeline(stack: Settings, work: Path, extra: Mapping[str, Any] | None = None) -> Pipeline:
    """Start the four services with a private topic prefix, NAS dir and HDFS paths (and ``extra``
    settings overrides, dotted names)."""
    token = uuid.uuid4().hex[:10]
    overrides: dict[str, Any] = {
        "kafka.topic_prefix": f"e2e{token}",
        "paths.nas_dir": work / "nas",
        "paths.landing_path": f"/test/{token}/landing",
        "paths.staging_path": f"/test/{token}/staging",
        "paths.rejects_path": f"/test/{token}/rejects",
        "paths.incoming_path": f"/test/{token}/incoming",
        "transform.batch_wait_s": 2,
        "load.batch_wait_s": 2,
        "extract.poll_interval_s": 0.5,
        **(extra or {}),
    }
    env = settings_env(overrides)
    sections: dict[str, dict[str, Any]] = {}
    for key, value in overrides.items():
        section, field = key.split(".", 1)
        sections.setdefault(section, {})[field] = value
    settings = stack.model_copy(
        update={
            name: getattr(stack, name).model_copy(update=fields)
            for name, fields in sections.items()
        }
    )
    ensure_topics(build_admin(settings.kafka), settings.kafka)
    group = ServiceGroup(env, work / "logs")
    group.start()
    return Pipeline(settings, env, work / "nas", work, group)


def stop_pipeline(p: Pipeline) -> None:
    codes = p.group.stop()
    print(f"\nservice exit codes: {codes}; logs in {p.work / 'logs'}")
    shutil.rmtree(p.nas_dir, ignore_errors=True)


@pytest.fixture(scope="module")
def pipeline(stack: Settings, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Pipeline]:
    p = start_pipeline(stack, tmp_path_factory.mktemp("e2e"))
    try:
        yield p
    finally:
        stop_pipeline(p)
