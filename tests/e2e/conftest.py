"""The pipeline as real processes on the local stack, private to one test module."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import uuid
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from ferry.clusters.hiveserver2 import rows_by_file
from ferry.core.kafka.clients import build_admin
from ferry.core.kafka.topics import ensure_topics
from ferry.settings import Settings
from ferry_kit.pipeline import ServiceGroup, private_overrides, run_cli, settings_env
from ferry_kit.stack import kafka_secure
from ferry_kit.stack.client_conf import client_conf_env


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
        return run_cli(self.env, *args, timeout=timeout)


def private_definitions(stack: Settings, work: Path, token: str) -> Path:
    """A copy of the stack's dataset definitions in ``work/datasets`` whose tables are private
    (``ferry.<table>_<token>``): sample files have fixed bytes, hence fixed file ids, whose rows
    other runs may have left in the shared tables. Returns the directory."""
    defs = work / "datasets"
    defs.mkdir()
    for src in stack.paths.datasets_dir.glob("*.yaml"):
        text = src.read_text(encoding="utf-8")
        text = re.sub(r"^  table: (\w+)$", rf"  table: \1_{token}", text, flags=re.M)
        (defs / src.name).write_text(text, encoding="utf-8")
    return defs


def start_pipeline(stack: Settings, work: Path, extra: Mapping[str, Any] | None = None) -> Pipeline:
    """Start the four services with a private topic prefix, NAS dir and HDFS paths (and ``extra``
    settings overrides, dotted names), reading their clusters from the stack's client
    configuration directories (:func:`ferry_kit.stack.client_conf.client_conf_env`)."""
    token = uuid.uuid4().hex[:10]
    overrides = private_overrides("e2e", token, work / "nas") | dict(extra or {})
    # The services find both clusters and the metastore by their client configuration
    # directories (written by the stack), as on an edge node; the test process keeps the profile.
    env = client_conf_env(stack, os.environ.get("FERRY_PROFILE", "")) | settings_env(overrides)
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
    kafka_secure.grant(settings)  # on SASL_SSL: each service's ACLs for this prefix
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
