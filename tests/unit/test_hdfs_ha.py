"""HDFS NameNode HA (issue 13): the settings of a nameservice, the Hadoop client configuration
generated from them, and WebHdfs trying the NameNodes in turn against a stub HA pair (two stub
NameNodes on the same files, one answering StandbyException) and the fault proxy."""

from __future__ import annotations

import hashlib
import logging
import time
from collections.abc import Iterator

import pytest
from tests.support.webhdfs_stub import WebHdfsStub

from ferry.clusters.hdfs.webhdfs import WebHdfs
from ferry.clusters.spark import session_conf
from ferry.errors import DataNodeUnreachable, HdfsPathNotFound, HdfsUnavailable
from ferry.settings.hdfs import FAILOVER_PROXY_PROVIDER
from ferry.settings.retry import RetrySettings
from ferry_kit.settings import KitSettings, StackCluster, StackNameNode
from ferry_kit.testing.faultproxy import FaultProxy
from ferry_kit.testing.ports import free_port

FAST = RetrySettings(connect_timeout_s=0.5, read_timeout_s=0.5)

HA_A = {
    "nameservice": "cluster-a",
    "namenodes": [
        {"id": "nn1", "host": "10.0.0.1", "rpc_port": 8020, "http_port": 9870},
        {"id": "nn2", "host": "10.0.0.2", "rpc_port": 8020, "http_port": 9870},
    ],
}


# -- settings and generated client configuration ------------------------------------------------


def test_single_namenode_stays_the_default() -> None:
    a = KitSettings().cluster("a")
    assert (a.ha, a.nameservice, a.namenodes) == (False, None, ())
    assert a.fs_url == "hdfs://127.0.0.1:28020"
    assert a.webhdfs_url == "http://127.0.0.1:29870"
    assert a.hadoop_client_conf() == {}
    assert [(n.id, n.rpc_address, n.http_address) for n in a.namenode_list] == [
        ("nn1", "127.0.0.1:28020", "127.0.0.1:29870")
    ]
    conf = session_conf(KitSettings(), "app", "a", hive=True)
    assert not any(k.startswith("spark.hadoop.dfs.ha.") for k in conf)
    assert conf["spark.sql.warehouse.dir"] == "hdfs://127.0.0.1:28020/warehouse"


def test_spark_jvm_options_reach_drivers_and_executors_and_empty_means_jvm_defaults() -> None:
    conf = session_conf(KitSettings(), "ferry-transform", "b")
    assert conf["spark.driver.extraJavaOptions"] == "-XX:TieredStopAtLevel=1 -XX:+UseSerialGC"
    assert conf["spark.executor.extraJavaOptions"] == (
        "-XX:+UseSerialGC -XX:Tier4InvocationThreshold=50000 -XX:Tier4MinInvocationThreshold=10000 "
        "-XX:Tier4CompileThreshold=150000 -XX:Tier4BackEdgeThreshold=400000"
    )
    mine = KitSettings(spark={"driver_java_options": "", "executor_java_options": "-Xss2m"})
    conf = session_conf(mine, "ferry-transform", "b")
    assert "spark.driver.extraJavaOptions" not in conf
    assert conf["spark.executor.extraJavaOptions"] == "-Xss2m"


def test_ha_cluster_addresses_the_nameservice_and_generates_client_conf() -> None:
    s = KitSettings(clusters={"a": HA_A})
    a = s.cluster("a")
    assert a.ha is True
    assert a.fs_url == "hdfs://cluster-a"
    assert a.webhdfs_url == "http://10.0.0.1:9870;http://10.0.0.2:9870"
    assert a.hadoop_client_conf() == {
        "dfs.nameservices": "cluster-a",
        "dfs.ha.namenodes.cluster-a": "nn1,nn2",
        "dfs.client.failover.proxy.provider.cluster-a": FAILOVER_PROXY_PROVIDER,
        "dfs.namenode.rpc-address.cluster-a.nn1": "10.0.0.1:8020",
        "dfs.namenode.http-address.cluster-a.nn1": "10.0.0.1:9870",
        "dfs.namenode.rpc-address.cluster-a.nn2": "10.0.0.2:8020",
        "dfs.namenode.http-address.cluster-a.nn2": "10.0.0.2:9870",
    }
    assert FAILOVER_PROXY_PROVIDER == (
        "org.apache.hadoop.hdfs.server.namenode.ha.ConfiguredFailoverProxyProvider"
    )
    assert s.cluster("b").fs_url == "hdfs://127.0.0.1:18020"  # b keeps its defaults


def test_spark_conf_of_ha_cluster_carries_the_nameservice() -> None:
    s = KitSettings(clusters={"a": HA_A})
    conf = session_conf(s, "ferry-load", "a", hive=True)
    assert conf["spark.hadoop.fs.defaultFS"] == "hdfs://cluster-a"
    assert conf["spark.sql.warehouse.dir"] == "hdfs://cluster-a/warehouse"
    assert conf["spark.hadoop.dfs.nameservices"] == "cluster-a"
    assert conf["spark.hadoop.dfs.ha.namenodes.cluster-a"] == "nn1,nn2"
    assert conf["spark.hadoop.dfs.namenode.rpc-address.cluster-a.nn2"] == "10.0.0.2:8020"
    assert conf["spark.hadoop.dfs.client.failover.proxy.provider.cluster-a"] == (
        FAILOVER_PROXY_PROVIDER
    )
    # a session on B gets no A keys
    assert "spark.hadoop.dfs.nameservices" not in session_conf(s, "ferry-transform", "b")


def test_ha_settings_from_environment_json(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("FERRY_CLUSTERS__A__NAMESERVICE", "ns-x")
    monkeypatch.setenv(
        "FERRY_CLUSTERS__A__NAMENODES",
        '[{"id": "n1", "rpc_port": 1, "http_port": 2},'
        ' {"id": "n2", "rpc_port": 3, "http_port": 4}]',
    )
    a = KitSettings().cluster("a")
    assert a.fs_url == "hdfs://ns-x"
    assert a.webhdfs_url == "http://127.0.0.1:2;http://127.0.0.1:4"


@pytest.mark.parametrize(
    ("fields", "message"),
    [
        ({"namenodes": HA_A["namenodes"]}, "namenodes given without a nameservice"),
        ({"nameservice": "x"}, "nameservice 'x' has no namenodes"),
        (
            {"nameservice": "x", "namenodes": [HA_A["namenodes"][0]] * 2},
            "duplicate NameNode ids",
        ),
    ],
)
def test_inconsistent_ha_settings_are_rejected(fields: dict[str, object], message: str) -> None:
    with pytest.raises(ValueError, match=message):
        KitSettings(clusters={"a": fields})


def test_ha_profile_settings() -> None:
    from ferry.settings.sources import _deep_merge, _read_yaml, profile_files

    data: dict[str, object] = {}
    for path in profile_files("ha"):
        data = _deep_merge(data, _read_yaml(path, "FERRY_PROFILE"))
    a = KitSettings(**data).cluster("a")  # type: ignore[arg-type]
    assert a.fs_url == "hdfs://cluster-a"
    assert [(n.id, n.rpc_port, n.http_port) for n in a.namenodes] == [
        ("nn1", 24020, 24870),
        ("nn2", 24021, 24871),
    ]
    assert len(a.journalnode_ports) == 3
    # Every port differs from the default stack's: the HA tier runs beside the secure tier.
    default = KitSettings()
    ports = {
        default.kafka.port,
        default.zookeeper.port,
        default.metastore.port,
        default.hiveserver2.port,
        *default.spark.master_ports,
        default.cluster("b").namenode_rpc_port,
        default.cluster("a").namenode_rpc_port,
    }
    ha = KitSettings(**data)  # type: ignore[arg-type]
    assert ports.isdisjoint(
        {
            ha.kafka.port,
            ha.zookeeper.port,
            ha.metastore.port,
            ha.hiveserver2.port,
            *ha.spark.master_ports,
            ha.cluster("b").namenode_rpc_port,
            *(n.rpc_port for n in a.namenodes),
        }
    )
    # A service beside that stack reads ha-services (client_conf.CLUSTER_PROFILES): the same
    # values as the stack's own profile, key for key.
    (services,) = profile_files("ha-services")
    for section, values in _read_yaml(services, "FERRY_PROFILE").items():
        assert data[section] == values, section  # type: ignore[index]


# -- WebHdfs over an HA pair -------------------------------------------------------------------


@pytest.fixture
def pair() -> Iterator[tuple[WebHdfsStub, str, str]]:
    """A stub HA pair: (stub, nn1 address, nn2 address), nn1 standby, nn2 active."""
    with WebHdfsStub() as stub:
        nn1, nn2 = stub.namenode_address, stub.add_namenode()
        stub.state.standby.add(nn1)
        yield stub, nn1, nn2


def _ha_port(*addresses: str) -> WebHdfs:
    nns = [
        StackNameNode(id=f"nn{i}", rpc_port=1, http_port=int(a.split(":")[1]))
        for i, a in enumerate(addresses, start=1)
    ]
    cluster = StackCluster(
        namenode_rpc_port=1,
        namenode_http_port=1,
        nameservice="ns",
        namenodes=tuple(nns),
        datanode_port=1,
        datanode_http_port=1,
        datanode_ipc_port=1,
    )
    return WebHdfs(cluster, FAST, name="a", user="ferry")


def _nn_requests(stub: WebHdfsStub) -> list[str]:
    return [op for server, _, op, _ in stub.state.requests if server == "namenode"]


def test_standby_moves_to_next_namenode_and_is_remembered(
    pair: tuple[WebHdfsStub, str, str], caplog: pytest.LogCaptureFixture
) -> None:
    stub, nn1, nn2 = pair
    port = _ha_port(nn1, nn2)
    data = b"row\n" * 1000
    with caplog.at_level(logging.WARNING, logger="ferry.clusters.hdfs.webhdfs"):
        written = port.upload_stream("/in/f.csv", iter([data]))
    assert written.sha256 == hashlib.sha256(data).hexdigest()
    assert stub.state.files["/in/f.csv"] == data
    assert port.active_url == f"http://{nn2}"
    assert [r.getMessage() for r in caplog.records] == [
        f"cluster 'a': WebHDFS now via NameNode http://{nn2} (was http://{nn1}: standby or "
        "unreachable)"
    ]
    # the first call paid one standby answer; the next calls go to nn2 directly
    first = len(stub.state.requests)
    assert port.status("/in/f.csv").size == len(data)
    assert b"".join(port.open_stream("/in/f.csv")) == data
    later = stub.state.requests[first:]
    assert [(m, op) for _, m, op, _ in later] == [
        ("GET", "GETFILESTATUS"),
        ("GET", "OPEN"),
        ("GET", "OPEN"),  # the DataNode hop
    ]


def test_failover_back_when_the_active_becomes_standby(
    pair: tuple[WebHdfsStub, str, str],
) -> None:
    stub, nn1, nn2 = pair
    port = _ha_port(nn1, nn2)
    port.mkdirs("/d")
    assert port.active_url == f"http://{nn2}"
    stub.state.standby = {nn2}  # a failover: nn1 active now
    port.mkdirs("/e")
    assert port.active_url == f"http://{nn1}"
    assert stub.state.dirs >= {"/d", "/e"}


def test_refused_namenode_moves_to_next(pair: tuple[WebHdfsStub, str, str]) -> None:
    stub, _, nn2 = pair
    dead = f"127.0.0.1:{free_port()}"
    port = _ha_port(dead, nn2)
    assert port.list("/") == []
    assert port.active_url == f"http://{nn2}"


def test_stalled_namenode_times_out_then_moves_to_next(pair: tuple[WebHdfsStub, str, str]) -> None:
    stub, nn1, nn2 = pair
    stub.state.standby.clear()
    host, p = nn1.split(":")
    with FaultProxy(host, int(p)) as proxy:
        proxy.stall()
        port = _ha_port(proxy.address, nn2)
        started = time.monotonic()
        port.mkdirs("/x")
        elapsed = time.monotonic() - started
    assert FAST.read_timeout_s <= elapsed < FAST.read_timeout_s + 1.0
    assert port.active_url == f"http://{nn2}"
    assert "/x" in stub.state.dirs


def test_reset_namenode_moves_to_next(pair: tuple[WebHdfsStub, str, str]) -> None:
    stub, nn1, nn2 = pair
    stub.state.standby.clear()
    host, p = nn1.split(":")
    with FaultProxy(host, int(p)) as proxy:
        proxy.reset_rate(1.0)
        port = _ha_port(proxy.address, nn2)
        port.mkdirs("/y")
        assert proxy.counts["reset_rate"] >= 1
    assert port.active_url == f"http://{nn2}"


def test_every_namenode_standby_is_transient_and_names_the_exception(
    pair: tuple[WebHdfsStub, str, str],
) -> None:
    stub, nn1, nn2 = pair
    stub.state.standby = {nn1, nn2}
    with pytest.raises(HdfsUnavailable, match="StandbyException") as info:
        _ha_port(nn1, nn2).status("/")
    assert "cluster 'a'" in str(info.value)
    assert _nn_requests(stub) == ["GETFILESTATUS", "GETFILESTATUS"]


def test_permanent_error_is_not_retried_on_the_other_namenode(
    pair: tuple[WebHdfsStub, str, str],
) -> None:
    stub, nn1, nn2 = pair
    stub.state.standby.clear()
    with pytest.raises(HdfsPathNotFound):
        _ha_port(nn1, nn2).status("/missing")
    assert _nn_requests(stub) == ["GETFILESTATUS"]


def test_unreachable_datanode_is_not_a_namenode_failover(
    pair: tuple[WebHdfsStub, str, str],
) -> None:
    stub, nn1, nn2 = pair
    stub.state.standby.clear()
    stub.state.files["/f"] = b"x"
    stub.state.advertised_datanode = f"127.0.0.1:{free_port()}"  # nothing listens there
    port = _ha_port(nn1, nn2)
    with pytest.raises(DataNodeUnreachable):
        b"".join(port.open_stream("/f"))
    assert _nn_requests(stub) == ["OPEN"]  # nn2 was never asked
    assert port.active_url == f"http://{nn1}"


def test_spark_sessions_compile_no_method_the_jit_would_leave_interpreted() -> None:
    # HotSpot's HugeMethodLimit (8000 bytes): a bigger whole-stage method runs interpreted
    conf = session_conf(KitSettings(), "ferry-transform", "b")
    assert conf["spark.sql.codegen.hugeMethodLimit"] == "8000"
