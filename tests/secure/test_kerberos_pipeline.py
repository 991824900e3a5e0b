"""The whole pipeline on the secure profiles: Kafka on SASL_SSL and Kerberos on both HDFS clusters
and the Hive metastore (profile ``secure``, ``make test-secure``).

Real processes: the KDC, the SASL_SSL broker, Kerberos NameNodes and DataNodes of A and B, the
Spark master pair and worker, the Hive metastore with SASL; the four stages as child processes.
The e2e scenario (daily files of both datasets and the field cases, tests/e2e/scenario.py) flows
NAS → Hive with exact counts. Spark drivers log in from the keytab, their executors use HDFS
delegation tokens (docs/security.md, "Spark and the metastore"); the NameNodes' logs show both.
Hive is read back through the kerberized HiveServer2 (the Spark Thrift Server logged in as hive/,
JDBC over SASL GSSAPI with Ferry's ticket), as an analyst reads it.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from functools import partial
from pathlib import Path

import pytest
from tests.e2e.conftest import Pipeline, start_pipeline, stop_pipeline
from tests.e2e.scenario import assert_scenario, run_pipeline_scenario

from ferry.clusters.hiveserver2 import rows_by_file
from ferry.clusters.spark import build_session
from ferry.datasets.spec import load_datasets
from ferry.settings import Settings

_SETTINGS = Settings()

pytestmark = [
    pytest.mark.stack("kdc", "kafka", "hdfs", "spark", "hive-metastore", "hiveserver2"),
    pytest.mark.skipif(
        not (_SETTINGS.kerberos.enabled and _SETTINGS.kafka.security_protocol == "SASL_SSL"),
        reason="needs Kerberos and Kafka on SASL_SSL: FERRY_PROFILE=secure (make test-secure)",
    ),
]


@pytest.fixture(scope="module")
def pipeline(stack: Settings, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Pipeline]:
    assert (stack.kafka.security_protocol, stack.kerberos.enabled) == ("SASL_SSL", True)
    p = start_pipeline(stack, tmp_path_factory.mktemp("krb-e2e"))
    try:
        yield p
    finally:
        stop_pipeline(p)


def namenode_log(stack: Settings, cluster: str) -> Path:
    return stack.var_dir / "log" / f"hdfs-{cluster}-namenode.log"


def written_since(path: Path, offset: int) -> str:
    """What ``path`` got after its first ``offset`` bytes (all of it if it was started anew):
    the NameNode logs outlive test runs, and an earlier run's lines must not count."""
    with path.open("rb") as f:
        if f.seek(0, 2) >= offset:
            f.seek(offset)
        else:
            f.seek(0)
        return f.read().decode(errors="replace")


def test_files_reach_hive_with_exact_counts_over_kerberos_and_sasl_ssl(
    pipeline: Pipeline, stack: Settings
) -> None:
    offsets = {c: namenode_log(stack, c).stat().st_size for c in ("b", "a")}
    result = run_pipeline_scenario(
        pipeline.settings,
        pipeline.nas_dir,
        pipeline.work,
        partial(rows_by_file, pipeline.settings),
        deadline_s=600,
        check_alive=pipeline.group.check_alive,
    )
    assert_scenario(result)
    assert sum(1 for d in result.dropped if d.rows is not None) == 7
    assert result.outcomes.events["failed"] == 2  # the 0-byte and the header-only file
    # No call failed on Kerberos (e.g. a mutual-authentication check) and was retried; no
    # service printed the Kafka password
    password = stack.kafka.password().get_secret_value()
    for log_file in sorted((pipeline.work / "logs").glob("*.log")):
        text = log_file.read_text(errors="replace")
        found = [m for m in ("Mutual", "Kerberos:", "SpnegoError", password) if m in text]
        assert found == [], log_file
    # A Spark session of Ferry's, as load's, reads the same rows from HDFS A: its executors
    # with a delegation token (load's own executors read nothing from A in this scenario: its
    # files are moved into the table by the driver)
    spark = build_session(pipeline.settings, "ferry-krb-verify", "a", hive=True)
    specs = load_datasets(pipeline.settings.paths.datasets_dir)
    for dataset in sorted({d.dataset for d in result.dropped}):
        table = specs[dataset].hive.full_name
        ids = [d.file_id for d in result.dropped if d.dataset == dataset and d.rows]
        got = spark.sql(
            f"SELECT ferry_file_id, count(*) FROM {table} WHERE ferry_file_id IN "
            f"({', '.join(repr(i) for i in ids)}) GROUP BY ferry_file_id"
        ).collect()
        assert {r[0]: int(r[1]) for r in got} == rows_by_file(pipeline.settings, table, ids)
    # Both NameNodes saw Ferry's principal with a ticket (drivers, WebHDFS) and with a delegation
    # token (transform's executors on B, the session above on A)
    principal = re.escape(stack.kerberos.client_principal)
    for cluster in ("b", "a"):
        log = written_since(namenode_log(stack, cluster), offsets[cluster])
        methods = set(re.findall(rf"Auth successful for {principal} \(auth:(\w+)\)", log))
        assert {"KERBEROS", "TOKEN"} <= methods, (cluster, methods)
