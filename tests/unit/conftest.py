"""Unit-tier fixtures: ONE local SparkSession for the whole run (the unit tier needs no server).

The session is Hive-enabled (embedded Derby metastore and warehouse under a pytest temp dir) so
the load tests exercise real Hive tables; transform tests use the same session. ``local[1]``,
small heap, no UI, one shuffle partition: the machine has 2 cores shared with other work. The JVM
starts only when a test asks for ``spark``.
"""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest
from tests.support.extract_helpers import Extract
from tests.support.paths import REPO_ROOT

from ferry.core.wire.avro import EventCodec, default_codec
from ferry.datasets.spec import DatasetSpec, load_datasets
from ferry.settings.spark import DRIVER_JAVA_OPTIONS


@pytest.fixture(scope="session")
def spark(tmp_path_factory: pytest.TempPathFactory) -> Iterator[object]:
    from pyspark.sql import SparkSession

    root = tmp_path_factory.mktemp("spark")
    session = (
        SparkSession.builder.master("local[1]")
        .appName("ferry-unit-tests")
        .config("spark.ui.enabled", "false")
        .config("spark.driver.memory", "768m")
        .config("spark.sql.shuffle.partitions", "1")
        .config("spark.default.parallelism", "1")
        .config("spark.sql.session.timeZone", "UTC")
        .config("spark.sql.warehouse.dir", str(root / "warehouse"))
        .config(
            "spark.hadoop.javax.jdo.option.ConnectionURL",
            f"jdbc:derby:;databaseName={root / 'metastore_db'};create=true",
        )
        # C1 only, serial GC, as Ferry's drivers: many tiny jobs, no loop hot enough for C2 (the
        # Spark-heavy unit modules, 61 tests: 188 s with the JVM's defaults, 151 s with these,
        # 170 s with the executors' options; 2026-12-07, beside an e2e run)
        .config(
            "spark.driver.extraJavaOptions", f"-Dderby.system.home={root} {DRIVER_JAVA_OPTIONS}"
        )
        .config("spark.hadoop.mapreduce.fileoutputcommitter.marksuccessfuljobs", "false")
        .enableHiveSupport()
        .getOrCreate()
    )
    session.sparkContext.setLogLevel("ERROR")
    yield session
    session.stop()


@pytest.fixture(scope="session")
def specs() -> dict[str, DatasetSpec]:
    """The repository's dataset definitions (``datasets/*.yaml``)."""
    return load_datasets(REPO_ROOT / "datasets")


@pytest.fixture
def unique_db() -> str:
    """A Hive database name private to one test."""
    return f"ferry_t_{uuid.uuid4().hex[:10]}"


@pytest.fixture
def flights(specs: dict[str, DatasetSpec]) -> DatasetSpec:
    """The repo's flights definition: stable policy, 2 polls, 2.0 s apart, ``flights_*.csv``."""
    spec = specs["flights"]
    assert (spec.finished.policy, spec.finished.stable_polls, spec.finished.poll_interval_s) == (
        "stable",
        2,
        2.0,
    )
    return spec


@pytest.fixture(scope="session")
def codec() -> EventCodec:
    """The event codec on the repository's schemas (``schemas/``)."""
    return default_codec(REPO_ROOT / "schemas")


@pytest.fixture
def ex(tmp_path: Path, flights: DatasetSpec, codec: EventCodec) -> Extract:
    """The extract tests' NAS under ``tmp_path`` with the flights definition and the codec."""
    return Extract(tmp_path, flights, codec)
