"""Fixtures shared by every tier.

``stack`` (session scope) brings the real local stack up once per test run through the same code as
``ferry stack up`` and, at the end, stops exactly the components this run started (components that
were already running, e.g. after ``make up``, are left running). ``unique`` gives each test its own
topic prefix, consumer group and HDFS root so tests never read each other's data (house style 14).
"""

from __future__ import annotations

import os
import uuid
from collections.abc import Iterator
from dataclasses import dataclass

import pytest

from ferry.core.config import Settings, get_settings


@pytest.fixture(scope="session")
def settings() -> Settings:
    return get_settings()


@pytest.fixture(scope="session")
def stack(settings: Settings) -> Iterator[Settings]:
    """The running local stack's settings; starts what is not running (deadline 300 s)."""
    from ferry.stack.manager import Stack

    st = Stack(settings)
    started = st.up(deadline_s=float(os.environ.get("FERRY_STACK_DEADLINE_S", "300")))
    yield settings
    if started and os.environ.get("FERRY_KEEP_STACK") != "1":
        st.down(only=started)


@dataclass(frozen=True)
class Unique:
    """Names private to one test."""

    token: str
    topic_prefix: str
    group: str
    hdfs_root: str

    def settings(self, base: Settings) -> Settings:
        """``base`` with this test's topic prefix."""
        return base.model_copy(
            update={"kafka": base.kafka.model_copy(update={"topic_prefix": self.topic_prefix})}
        )


@pytest.fixture
def unique() -> Unique:
    token = uuid.uuid4().hex[:10]
    return Unique(token, f"t{token}", f"g{token}", f"/test/{token}")


@pytest.fixture(scope="session")
def cluster_spark(stack: Settings):  # type: ignore[no-untyped-def]
    """One SparkSession for the whole run, on the standalone master pair, Hive-enabled on cluster A.

    pyspark allows one SparkContext per process, so unit tests (local Spark) run in a separate
    pytest process from the integration and e2e tiers (see the Makefile's ``test`` target).
    """
    from ferry.clusters.spark import build_session

    spark = build_session(stack, "ferry-tests", "a", hive=True)
    yield spark
    spark.stop()
