"""Clusters from their own client configuration (``hadoop_conf_dir``, ``hive_conf_dir``): the
files an edge node holds, read with Hadoop's and Hive's keys; explicit settings win over them."""

from __future__ import annotations

from pathlib import Path

import pytest

from ferry.errors import ConfigError
from ferry.settings.client_conf import (
    cluster_from_conf_dir,
    metastore_from_conf_dir,
    read_site_xml,
    site_xml,
    write_site_xml,
)
from ferry_kit.settings import KitSettings, StackKerberos, StackNameNode
from ferry_kit.stack.client_conf import (
    client_conf_env,
    cluster_files,
    service_profile,
    write_conf_dir,
)


def write(d: Path, name: str, props: dict[str, str]) -> None:
    d.mkdir(parents=True, exist_ok=True)
    (d / name).write_text(site_xml(props))


HA_CORE = {"fs.defaultFS": "hdfs://prod-a", "hadoop.security.authentication": "kerberos"}
HA_HDFS = {
    "dfs.nameservices": "prod-a,other",
    "dfs.ha.namenodes.prod-a": "nn1, nn2",
    "dfs.namenode.rpc-address.prod-a.nn1": "m1.example:8020",
    "dfs.namenode.rpc-address.prod-a.nn2": "m2.example:8020",
    "dfs.namenode.http-address.prod-a.nn1": "m1.example:9870",
    "dfs.namenode.http-address.prod-a.nn2": "m2.example:50070",
    "dfs.namenode.kerberos.principal": "nn/_HOST@PROD.EXAMPLE",
    "dfs.data.transfer.protection": "privacy",
    "dfs.client.x": "${dfs.data.transfer.protection}-${unknown}",
}


def test_an_ha_nameservice_is_read_with_hadoops_keys(tmp_path):
    write(tmp_path, "core-site.xml", HA_CORE)
    write(tmp_path, "hdfs-site.xml", HA_HDFS)
    got = cluster_from_conf_dir(tmp_path)
    assert got["nameservice"] == "prod-a"
    assert got["namenodes"] == [
        {"id": "nn1", "host": "m1.example", "rpc_port": 8020, "http_port": 9870},
        {"id": "nn2", "host": "m2.example", "rpc_port": 8020, "http_port": 50070},
    ]
    assert (got["kerberos"], got["kerberos_realm"]) == (True, "PROD.EXAMPLE")
    assert got["hadoop_properties"]["dfs.data.transfer.protection"] == "privacy"
    assert got["hadoop_properties"]["dfs.client.x"] == "privacy-${unknown}"


def test_one_namenode_with_default_ports_and_a_wildcard_http_address(tmp_path):
    write(tmp_path, "core-site.xml", {"fs.defaultFS": "hdfs://nn.example"})
    write(tmp_path, "hdfs-site.xml", {"dfs.namenode.http-address": "0.0.0.0:9871"})
    got = cluster_from_conf_dir(tmp_path)
    assert {k: got[k] for k in ("host", "namenode_rpc_port", "namenode_http_port", "kerberos")} == {
        "host": "nn.example",
        "namenode_rpc_port": 8020,
        "namenode_http_port": 9871,
        "kerberos": False,
    }
    assert "webhdfs_url_override" not in got


@pytest.mark.parametrize(
    ("core", "hdfs", "message"),
    [
        ({}, {}, "no fs.defaultFS"),
        ({"fs.defaultFS": "file:///"}, {}, "is not an hdfs:// URI"),
        (
            {"fs.defaultFS": "hdfs://ns"},
            {"dfs.nameservices": "ns"},
            "nameservice 'ns' has no dfs.ha.namenodes.ns",
        ),
        (
            {"fs.defaultFS": "hdfs://ns"},
            {"dfs.nameservices": "ns", "dfs.ha.namenodes.ns": "nn1"},
            "no dfs.namenode.rpc-address.ns.nn1 for NameNode nn1 of ns",
        ),
    ],
)
def test_a_configuration_that_cannot_describe_a_cluster_is_refused(tmp_path, core, hdfs, message):
    write(tmp_path, "core-site.xml", core)
    write(tmp_path, "hdfs-site.xml", hdfs)
    with pytest.raises(ConfigError, match=message):
        cluster_from_conf_dir(tmp_path)


def test_missing_directory_and_broken_xml_name_the_path(tmp_path):
    with pytest.raises(ConfigError, match=f"{tmp_path / 'nope'} does not exist"):
        cluster_from_conf_dir(tmp_path / "nope")
    (tmp_path / "core-site.xml").write_text("<configuration><property>")
    with pytest.raises(ConfigError, match=f"cannot read configuration file {tmp_path}"):
        read_site_xml(tmp_path / "core-site.xml")


def test_the_metastore_from_hive_site(tmp_path):
    write(
        tmp_path,
        "hive-site.xml",
        {
            "hive.metastore.uris": "thrift://ms1.example:9083,thrift://ms2.example:9083",
            "hive.metastore.warehouse.dir": "hdfs://prod-a/apps/hive/warehouse",
            "hive.metastore.sasl.enabled": "true",
        },
    )
    got = metastore_from_conf_dir(tmp_path)
    assert (got["host"], got["port"], got["warehouse_path"]) == (
        "ms1.example",
        9083,
        "/apps/hive/warehouse",
    )
    assert got["hive_properties"]["hive.metastore.sasl.enabled"] == "true"


def test_a_kerberized_hiveserver2_principal_comes_from_hive_site_unless_given(
    tmp_path, monkeypatch
):
    monkeypatch.delenv("FERRY_PROFILE", raising=False)
    write(
        tmp_path,
        "hive-site.xml",
        {
            "hive.metastore.uris": "thrift://ms1.example:9083",
            "hive.server2.authentication": "kerberos",
            "hive.server2.authentication.kerberos.principal": "hive/_HOST@EXAMPLE.COM",
        },
    )
    monkeypatch.setenv("FERRY_METASTORE__HIVE_CONF_DIR", str(tmp_path))
    assert KitSettings().hiveserver2.principal is None  # Kerberos off: nothing derived
    monkeypatch.setenv("FERRY_KERBEROS__ENABLED", "true")
    with pytest.raises(ConfigError, match=r"names HiveServer2's principal .*set hiveserver2.host"):
        KitSettings()
    monkeypatch.setenv("FERRY_HIVESERVER2__HOST", "HS2.Example")
    assert KitSettings().hiveserver2.principal == "hive/hs2.example@EXAMPLE.COM"
    monkeypatch.setenv("FERRY_HIVESERVER2__PRINCIPAL", "hive/other@EXAMPLE.COM")
    assert KitSettings().hiveserver2.principal == "hive/other@EXAMPLE.COM"
    monkeypatch.setenv("FERRY_HIVESERVER2__PRINCIPAL", "")  # blank: turned off, not derived
    assert KitSettings().hiveserver2.principal is None
    monkeypatch.delenv("FERRY_HIVESERVER2__PRINCIPAL")
    write(tmp_path, "hive-site.xml", {"hive.metastore.uris": "thrift://ms1.example:9083"})
    assert KitSettings().hiveserver2.principal is None  # no hive.server2.authentication


def test_a_bad_directory_is_named_by_its_setting(tmp_path, monkeypatch):
    monkeypatch.delenv("FERRY_PROFILE", raising=False)
    monkeypatch.setenv("FERRY_METASTORE__HIVE_CONF_DIR", str(tmp_path / "hive"))
    with pytest.raises(
        ConfigError,
        match=f"metastore.hive_conf_dir: configuration directory {tmp_path}/hive does not exist",
    ):
        KitSettings()
    monkeypatch.delenv("FERRY_METASTORE__HIVE_CONF_DIR")
    monkeypatch.setenv("FERRY_CLUSTERS__B__HADOOP_CONF_DIR", str(tmp_path))
    with pytest.raises(
        ConfigError, match=r"clusters.b.hadoop_conf_dir: .* holds none of core-site"
    ):
        KitSettings()


def test_local_files_default_under_var_dir(tmp_path, monkeypatch):
    monkeypatch.delenv("FERRY_PROFILE", raising=False)
    monkeypatch.setenv("FERRY_VAR_DIR", str(tmp_path / "state"))
    s = KitSettings()
    assert (s.tracker.data_dir, s.supervise.home, s.kerberos.ccache.parent) == (
        tmp_path / "state" / "tracker",
        tmp_path / "state",
        tmp_path / "state" / "run",
    )
    from ferry.core.runtime.heartbeat import heartbeat_path

    assert heartbeat_path(s, "extract", 7) == tmp_path / "state" / "run" / "extract.7.alive"


def test_settings_take_the_directories_under_explicit_values(tmp_path, monkeypatch):
    a, hive = tmp_path / "a", tmp_path / "hive"
    write(a, "core-site.xml", HA_CORE)
    write(a, "hdfs-site.xml", HA_HDFS)
    write(hive, "hive-site.xml", {"hive.metastore.uris": "thrift://ms1.example:9083"})
    monkeypatch.setenv("FERRY_CLUSTERS__A__HADOOP_CONF_DIR", str(a))
    monkeypatch.setenv("FERRY_METASTORE__HIVE_CONF_DIR", str(hive))
    monkeypatch.delenv("FERRY_PROFILE", raising=False)
    monkeypatch.delenv("FERRY_CONFIG", raising=False)
    s = KitSettings()
    ca = s.cluster("a")
    assert (ca.fs_url, ca.webhdfs_url) == (
        "hdfs://prod-a",
        "http://m1.example:9870;http://m2.example:50070",
    )
    assert ca.hadoop_client_conf()["dfs.data.transfer.protection"] == "privacy"
    assert (s.kerberos.enabled, s.kerberos.realm) == (True, "PROD.EXAMPLE")
    assert s.metastore.uri == "thrift://ms1.example:9083"
    assert s.cluster("b").fs_url == "hdfs://127.0.0.1:18020"  # b keeps Ferry's defaults
    # explicit keys win over the files
    monkeypatch.setenv("FERRY_KERBEROS__ENABLED", "false")
    monkeypatch.setenv("FERRY_METASTORE__PORT", "9999")
    monkeypatch.setenv("FERRY_CLUSTERS__A__NAMESERVICE", "prod-a")
    monkeypatch.setenv(
        "FERRY_CLUSTERS__A__NAMENODES", '[{"id": "nn9", "rpc_port": 1, "http_port": 2}]'
    )
    s = KitSettings()
    assert (s.kerberos.enabled, s.metastore.port) == (False, 9999)
    assert [nn.id for nn in s.cluster("a").namenodes] == ["nn9"]


def test_what_the_stack_writes_reads_back_as_the_same_cluster(tmp_path):
    base = KitSettings()
    krb = StackKerberos(enabled=True, realm="FERRY.LOCAL")
    ha = base.cluster("a").model_copy(
        update={
            "nameservice": "cluster-a",
            "namenodes": (
                StackNameNode(id="nn1", rpc_port=28020, http_port=29870),
                StackNameNode(id="nn2", rpc_port=28021, http_port=29871),
            ),
        }
    )
    proxied = (
        StackNameNode(id="nn1", rpc_port=40001, http_port=40002),
        StackNameNode(id="nn2", rpc_port=40003, http_port=40004),
    )
    for cs, nns in ((base.cluster("b"), None), (ha, None), (ha, proxied)):
        d = write_conf_dir(tmp_path / f"{cs.fs_url[7:]}-{nns is None}", cluster_files(cs, krb, nns))
        got = cluster_from_conf_dir(d)
        assert got["kerberos"] is True and got["kerberos_realm"] == "FERRY.LOCAL"
        if cs.ha:
            want = [nn.model_dump(exclude={"zkfc_port"}) for nn in (nns or cs.namenodes)]
            assert (got["nameservice"], got["namenodes"]) == ("cluster-a", want)
        else:
            assert (got["host"], got["namenode_rpc_port"], got["namenode_http_port"]) == (
                cs.host,
                cs.namenode_rpc_port,
                cs.namenode_http_port,
            )


def test_services_read_the_clusters_from_the_directories_not_the_profile(tmp_path):
    assert service_profile("ha") == "ha-services"
    assert service_profile("kerberos") == ""
    assert service_profile("secure") == "secure-kafka"
    assert service_profile("ha,secure-kafka,kerberos") == "ha-services,secure-kafka"
    env = client_conf_env(
        KitSettings(), "secure", {"a": tmp_path / "a", "b": tmp_path / "b", "hive": tmp_path / "h"}
    )
    assert env == {
        "FERRY_CLUSTERS__A__HADOOP_CONF_DIR": str(tmp_path / "a"),
        "FERRY_CLUSTERS__B__HADOOP_CONF_DIR": str(tmp_path / "b"),
        "FERRY_METASTORE__HIVE_CONF_DIR": str(tmp_path / "h"),
        "FERRY_PROFILE": "secure-kafka",
    }


def test_a_site_file_is_replaced_whole_never_truncated_in_place(tmp_path, monkeypatch):
    """A reader sees the old file until the new one is complete (secure CI: a Spark driver read an
    empty core-site.xml another service was rewriting)."""
    import ferry.settings.client_conf as cc

    target = tmp_path / "conf" / "core-site.xml"
    write_site_xml(target, {"fs.defaultFS": "hdfs://old:8020"})
    seen: list[tuple[dict[str, str], dict[str, str]]] = []
    real_replace = cc.os.replace

    def replace(src, dst):
        # at the moment of the swap: the temporary file is complete, the target still the old one
        seen.append((read_site_xml(Path(src)), read_site_xml(Path(dst))))
        real_replace(src, dst)

    monkeypatch.setattr(cc.os, "replace", replace)
    write_site_xml(target, {"fs.defaultFS": "hdfs://new:8020", "a.b": "<&>"})
    assert seen == [
        ({"fs.defaultFS": "hdfs://new:8020", "a.b": "<&>"}, {"fs.defaultFS": "hdfs://old:8020"})
    ]
    assert read_site_xml(target) == {"fs.defaultFS": "hdfs://new:8020", "a.b": "<&>"}
    assert sorted(p.name for p in target.parent.iterdir()) == ["core-site.xml"]
