"""Fixtures shared by every tier.

``stack`` (module scope) brings up the components of the real local stack that the test module
declares with ``pytestmark = pytest.mark.stack("hdfs")`` (component or group names: ``kafka``,
``hdfs``, ``spark``, ``hive``, ``zookeeper``, ``all``; a module without the marker gets ``all``),
with what they require, through the same code as ``ferry stack up``. Components already up are left
alone, so a later module that needs more starts only the missing ones. At the end of the run it
stops exactly the components this run started (components that were already running, e.g. after
``make up``, are left running), unless ``FERRY_KEEP_STACK=1`` or it runs as a pytest-xdist worker
(the Makefile's ``test-shared``). ``unique`` gives each test its own topic prefix, consumer group
and HDFS root so tests never read each other's data.
"""

from __future__ import annotations

import os
import uuid
from collections.abc import Iterator
from dataclasses import dataclass

import pytest

from ferry.settings import Settings
from ferry_kit.settings import get_kit_settings


@pytest.fixture(scope="session")
def settings() -> Settings:
    """Ferry's settings with the kit's (a KitSettings): the tiers run on the kit's local stack."""
    return get_kit_settings()


#: Seconds the longest modules of the shared integration and e2e run took (a fresh-clone `make
#: test`, 2026-12-07: pytest's slowest durations summed per module, setup included). They are
#: collected first and, with ``--dist loadfile --no-loadscope-reorder`` (the Makefile's
#: SHARED_PARALLEL), handed to the pytest-xdist workers first: longest-processing-time-first
#: scheduling, so no worker is left alone with a long module at the end while the others idle.
#: Modules not listed keep their collection order after these.
LONG_MODULES = {
    "tests/e2e/test_load_layout.py": 523,
    "tests/e2e/test_pipeline.py": 448,
    "tests/e2e/test_supervision.py": 415,
    "tests/e2e/test_retention.py": 308,
    "tests/e2e/test_datasets.py": 195,
    "tests/e2e/test_wheel_install.py": 122,
    "tests/e2e/test_recovery.py": 104,
    "tests/e2e/test_quarantine_loop.py": 93,
    "tests/e2e/test_compressed.py": 88,
    # the secure tier (make test-secure, two workers): the ticket renewal test waits 300 s
    "tests/secure/test_kerberos_hdfs.py": 310,
    "tests/secure/test_kerberos_pipeline.py": 141,
}


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """The modules of :data:`LONG_MODULES` first, longest first (a stable sort: the tests of a
    module keep their order, and so do the other modules)."""
    items.sort(key=lambda item: -LONG_MODULES.get(item.nodeid.split("::", 1)[0], 0))


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line(
        "markers",
        "stack(*names): local-stack components or groups the module needs "
        "(kafka, hdfs, spark, hive, zookeeper, all; default all)",
    )


class StackRun:
    """The local stack for one test run: brings components up on demand, remembers what it
    started."""

    def __init__(self, settings: Settings) -> None:
        from ferry_kit.stack.manager import Stack

        self.settings = settings
        self.stack = Stack(settings)
        self.started: list[str] = []
        self._healthy: set[str] = set()
        self.deadline_s = float(os.environ.get("FERRY_STACK_DEADLINE_S", "300"))

    def need(self, *names: str) -> Settings:
        """Bring up ``names`` (components or groups) and what they require, once per run.

        Returns the settings. Raises StackError when a component does not become healthy.
        """
        wanted = {c.name for c in self.stack.select(names)}
        if not wanted <= self._healthy:
            self.started += self.stack.up(self.deadline_s, components=names)
            self._healthy |= wanted
        return self.settings

    def close(self) -> None:
        """Stop what this run started, unless ``FERRY_KEEP_STACK=1`` or this process is one of
        several pytest-xdist workers (``PYTEST_XDIST_WORKER``): another worker may still use what
        this one started (``Stack.up`` serialises the workers' starts by a lock file; ``make
        test`` stops the stack after the tier, ``ferry stack down`` by hand)."""
        if os.environ.get("PYTEST_XDIST_WORKER"):
            if self.started:
                print(f"\nleft running for the other workers: {', '.join(self.started)}")
            return
        if self.started and os.environ.get("FERRY_KEEP_STACK") != "1":
            self.stack.down(only=self.started)


@pytest.fixture(scope="session")
def stack_run(settings: Settings) -> Iterator[StackRun]:
    run = StackRun(settings)
    yield run
    run.close()


@pytest.fixture(scope="module")
def stack(stack_run: StackRun, request: pytest.FixtureRequest) -> Settings:
    """The running local stack's settings, with the module's ``stack`` marker's components up
    (deadline ``FERRY_STACK_DEADLINE_S``, default 300 s)."""
    marker = request.node.get_closest_marker("stack")
    return stack_run.need(*(marker.args if marker else ("all",)))


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
def cluster_spark(stack_run: StackRun):  # type: ignore[no-untyped-def]
    """One SparkSession for the whole run, on the standalone master pair, Hive-enabled on cluster A
    (brings up the ``spark`` and ``hive`` groups).

    pyspark allows one SparkContext per process, so unit tests (local Spark) run in a separate
    pytest process from the integration and e2e tiers (see the Makefile's ``test`` target).
    """
    from ferry.clusters.spark import build_session

    spark = build_session(stack_run.need("spark", "hive"), "ferry-tests", "a", hive=True)
    yield spark
    spark.stop()
