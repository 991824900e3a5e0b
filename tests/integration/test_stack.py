"""Issue 2: every server of the local stack answers real client calls."""

from __future__ import annotations

import signal
import subprocess
import sys
import time

import pytest
import requests
from confluent_kafka import Consumer, Producer
from confluent_kafka.admin import AdminClient, NewTopic
from hdfs import InsecureClient

from ferry_kit.stack import health
from ferry_kit.stack.manager import Stack
from ferry_kit.testing.waiting import wait_for

pytestmark = [pytest.mark.integration, pytest.mark.stack("all")]


def test_kafka_produce_and_consume(stack, unique):
    topic = f"{unique.topic_prefix}.stack"
    admin = AdminClient({"bootstrap.servers": stack.kafka.bootstrap_servers})
    admin.create_topics([NewTopic(topic, num_partitions=1, replication_factor=1)])[topic].result(
        timeout=10
    )
    producer = Producer(
        {"bootstrap.servers": stack.kafka.bootstrap_servers, "enable.idempotence": True}
    )
    for i in range(3):
        producer.produce(topic, key=f"k{i}".encode(), value=f"v{i}".encode())
    assert producer.flush(10) == 0
    consumer = Consumer(
        {
            "bootstrap.servers": stack.kafka.bootstrap_servers,
            "group.id": unique.group,
            "auto.offset.reset": "earliest",
        }
    )
    consumer.subscribe([topic])
    got: list[tuple[bytes, bytes]] = []
    deadline = time.monotonic() + 30
    try:
        while len(got) < 3 and time.monotonic() < deadline:
            msg = consumer.poll(1.0)
            if msg is not None and msg.error() is None:
                got.append((msg.key(), msg.value()))
    finally:
        consumer.close()
    assert got == [(b"k0", b"v0"), (b"k1", b"v1"), (b"k2", b"v2")]


@pytest.mark.parametrize("cluster", ["b", "a"])
def test_hdfs_write_read_rename_list_and_spark_reads_it(stack, unique, cluster_spark, cluster):
    cs = stack.cluster(cluster)
    client = InsecureClient(cs.webhdfs_url, user="ferry", timeout=(5, 30))
    root = f"{unique.hdfs_root}/{cluster}"
    client.write(f"{root}/tmp.csv", data="id,name\n1,données été\n2,b\n", encoding="utf-8")
    client.rename(f"{root}/tmp.csv", f"{root}/final.csv")
    assert client.list(root) == ["final.csv"]
    with client.read(f"{root}/final.csv", encoding="utf-8") as reader:
        assert reader.read() == "id,name\n1,données été\n2,b\n"
    rows = cluster_spark.read.option("header", True).csv(f"{cs.fs_url}{root}/final.csv").collect()
    assert [(r["id"], r["name"]) for r in rows] == [("1", "données été"), ("2", "b")]
    client.delete(root, recursive=True)


def test_hive_table_created_in_one_session_is_visible_from_another(stack, unique, cluster_spark):
    table = f"default.stack_{unique.token}"
    creator = f"""
from ferry.settings import get_settings
from ferry.clusters.spark import build_session
spark = build_session(get_settings(), "ferry-tests-creator", "a", hive=True)
spark.sql("CREATE TABLE {table} (id INT, city STRING) STORED AS PARQUET")
spark.sql("INSERT INTO {table} VALUES (1, 'Orly'), (2, 'Évry')")
spark.stop()
"""
    subprocess.run([sys.executable, "-c", creator], check=True, timeout=300)
    rows = cluster_spark.sql(f"SELECT id, city FROM {table} ORDER BY id").collect()
    assert [(r.id, r.city) for r in rows] == [(1, "Orly"), (2, "Évry")]
    location = (
        cluster_spark.sql(f"DESCRIBE FORMATTED {table}").where("col_name = 'Location'").first()
    )
    assert (
        location.data_type
        == f"{stack.cluster('a').fs_url}{stack.metastore.warehouse_path}/stack_{unique.token}"
    )
    cluster_spark.sql(f"DROP TABLE {table}")


def _alive_master(urls: list[str]) -> str | None:
    for url in urls:
        try:
            if health.spark_master_state(url).get("status") == "ALIVE":
                return url
        except health.Unhealthy:
            continue
    return None


@pytest.mark.exclusive  # kills the stack's ALIVE master (pyproject.toml: markers)
@pytest.mark.parametrize("sig", [signal.SIGKILL, signal.SIGTERM], ids=["SIGKILL", "SIGTERM"])
def test_spark_job_survives_the_active_master_killed(stack, cluster_spark, sig):
    """C03, with SIGKILL (ZooKeeper expires the dead master's session) and separately SIGTERM
    (the master's JVM exits and closes its session)."""
    sp = stack.spark
    urls = [f"http://{sp.host}:{p}" for p in sp.master_webui_ports]
    assert cluster_spark.sparkContext.master == sp.master_url
    assert cluster_spark.range(1000).selectExpr("sum(id) AS s").first().s == 499500

    active = _alive_master(urls)
    assert active is not None
    name = f"spark-master-{urls.index(active) + 1}"
    st = Stack(stack)
    st.kill(name, sig)
    t0 = time.monotonic()
    standby = urls[1 - urls.index(active)]

    def standby_state() -> str | None:
        try:
            return health.spark_master_state(standby).get("status")
        except health.Unhealthy:
            return None

    state = wait_for(lambda: standby_state() == "ALIVE" and "ALIVE", "the standby ALIVE", 120, 0.2)
    failover_s = time.monotonic() - t0
    print(f"\nFAILOVER {sig.name} {name} -> standby ALIVE in {failover_s:.1f} s")
    assert state == "ALIVE"
    try:
        # The application re-registers with the new master and runs new jobs on the same executors.
        assert cluster_spark.range(2000).selectExpr("sum(id) AS s").first().s == 1999000
    finally:
        st.up(deadline_s=120)  # bring the killed master back, as the new standby
    doc = requests.get(f"{standby}/json/", timeout=5).json()
    assert doc["status"] == "ALIVE"
    assert any(app["name"] == "ferry-tests" for app in doc["activeapps"]), doc["activeapps"]
