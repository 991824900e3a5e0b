"""Wire privacy's settings and configuration (docs/security.md, "Wire privacy"): the protection
level Hadoop's clients and the stack's daemons get, WebHDFS over HTTPS (URLs, a cluster's own
files, the stack's keys and certificates) and an untrusted certificate as a one-line refusal.
The running servers are tests/secure/test_wire_privacy.py's."""

from __future__ import annotations

import re
import ssl
import stat
from pathlib import Path

import pytest
import requests

from ferry.clusters.hdfs.errors import classify
from ferry.clusters.kerberos import hadoop_client_conf
from ferry.errors import AuthenticationFailed, ConfigError, HdfsUnavailable
from ferry.settings.client_conf import cluster_from_conf_dir, read_site_xml, site_xml
from ferry_kit.settings import KitSettings, StackKerberos
from ferry_kit.stack.base import Layout
from ferry_kit.stack.client_conf import client_conf_env, cluster_files, write_conf_dir
from ferry_kit.stack.servers import hdfs_conf


def test_protection_takes_hadoops_levels_and_privacy_adds_aes_for_block_data() -> None:
    assert StackKerberos().protection == "authentication"
    assert StackKerberos(protection=" Privacy, authentication,privacy").protection == (
        "privacy,authentication"
    )
    with pytest.raises(ValueError, match="protection 'secret': expected one or more of"):
        StackKerberos(protection="secret")
    keys = hadoop_client_conf(StackKerberos(enabled=True, protection="privacy"))
    assert {k: v for k, v in keys.items() if "protection" in k or "cipher" in k} == {
        "hadoop.rpc.protection": "privacy",
        "dfs.data.transfer.protection": "privacy",
        "dfs.encrypt.data.transfer.cipher.suites": "AES/CTR/NoPadding",
    }
    keys = hadoop_client_conf(StackKerberos(enabled=True, protection="integrity"))
    assert "dfs.encrypt.data.transfer.cipher.suites" not in keys


def test_https_clusters_are_reached_at_https_urls() -> None:
    cs = KitSettings().cluster("a")
    assert cs.webhdfs_url == "http://127.0.0.1:29870"
    tls = cs.model_copy(update={"http_policy": "HTTPS_ONLY"})
    assert (tls.web_scheme, tls.webhdfs_url) == ("https", "https://127.0.0.1:29870")


def write(d: Path, name: str, props: dict[str, str]) -> None:
    d.mkdir(parents=True, exist_ok=True)
    (d / name).write_text(site_xml(props))


def test_a_clusters_files_give_https_addresses_and_the_rpc_protection(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    one, ha = tmp_path / "one", tmp_path / "ha"
    core = {"hadoop.security.authentication": "kerberos", "hadoop.rpc.protection": "privacy"}
    write(one, "core-site.xml", {"fs.defaultFS": "hdfs://nn.example:8020", **core})
    write(one, "hdfs-site.xml", {"dfs.http.policy": "HTTPS_ONLY"})  # 9871: Hadoop's default
    got = cluster_from_conf_dir(one)
    assert {k: got[k] for k in ("http_policy", "namenode_http_port", "kerberos_protection")} == {
        "http_policy": "HTTPS_ONLY",
        "namenode_http_port": 9871,
        "kerberos_protection": "privacy",
    }
    write(ha, "core-site.xml", {"fs.defaultFS": "hdfs://prod"})
    write(
        ha,
        "hdfs-site.xml",
        {
            "dfs.http.policy": "HTTPS_ONLY",
            "dfs.nameservices": "prod",
            "dfs.ha.namenodes.prod": "nn1",
            "dfs.namenode.rpc-address.prod.nn1": "m1.example:8020",
            "dfs.namenode.http-address.prod.nn1": "m1.example:9870",
            "dfs.namenode.https-address.prod.nn1": "m1.example:9443",
        },
    )
    assert cluster_from_conf_dir(ha)["namenodes"] == [
        {"id": "nn1", "host": "m1.example", "rpc_port": 8020, "http_port": 9443}
    ]
    write(ha, "hdfs-site.xml", {"dfs.http.policy": "HTTPS_PLEASE"})
    with pytest.raises(ConfigError, match="dfs.http.policy='HTTPS_PLEASE' is not one of Hadoop's"):
        cluster_from_conf_dir(ha)

    monkeypatch.delenv("FERRY_PROFILE", raising=False)
    monkeypatch.delenv("FERRY_CONFIG", raising=False)
    monkeypatch.setenv("FERRY_CLUSTERS__A__HADOOP_CONF_DIR", str(one))
    monkeypatch.setenv("FERRY_CLUSTERS__A__SSL_CA_PATH", str(tmp_path / "ca.pem"))
    s = KitSettings()
    assert (s.cluster("a").webhdfs_url, s.cluster("a").ssl_ca_path) == (
        "https://nn.example:9871",
        tmp_path / "ca.pem",
    )
    assert (s.kerberos.enabled, s.kerberos.protection) == (True, "privacy")
    monkeypatch.setenv("FERRY_KERBEROS__PROTECTION", "integrity")  # a setting given wins
    assert KitSettings().kerberos.protection == "integrity"


def test_an_untrusted_certificate_is_a_refusal_and_a_reset_handshake_is_transient() -> None:
    def classified(exc: BaseException) -> object:
        return classify(
            "WebHDFS LISTSTATUS '/'", exc, netloc="nn:1", is_datanode=False, timeout=(1, 2)
        )

    bad = ssl.SSLCertVerificationError(1, "certificate verify failed")
    bad.verify_message = "self-signed certificate in certificate chain"
    try:
        raise requests.exceptions.SSLError("HTTPSConnectionPool(…)") from bad
    except requests.exceptions.SSLError as exc:
        err = classified(exc)
    assert (type(err), str(err)) == (
        AuthenticationFailed,
        "WebHDFS LISTSTATUS '/': TLS: the certificate of nn:1 is not trusted "
        "(clusters.<x>.ssl_ca_path): self-signed certificate in certificate chain",
    )
    reset = requests.exceptions.SSLError(ConnectionResetError(104, "Connection reset by peer"))
    assert type(classified(reset)) is HdfsUnavailable


def test_the_stack_serves_https_with_its_own_ca_kept_across_restarts(tmp_path: Path) -> None:
    lay = Layout(tmp_path)
    krb = StackKerberos(enabled=True, protection="privacy")
    ca = tmp_path / "secrets" / "hdfs-ca.pem"
    cs = (
        KitSettings()
        .cluster("a")
        .model_copy(update={"http_policy": "HTTPS_ONLY", "ssl_ca_path": ca})
    )
    d = hdfs_conf(lay, "a", cs, krb=krb)
    site = read_site_xml(d / "hdfs-site.xml")
    assert {k: site.get(k) for k in (
        "dfs.http.policy",
        "dfs.namenode.https-address",
        "dfs.datanode.https.address",
        "dfs.data.transfer.protection",
        "ignore.secure.ports.for.testing",
    )} == {
        "dfs.http.policy": "HTTPS_ONLY",
        "dfs.namenode.https-address": "127.0.0.1:29870",
        "dfs.datanode.https.address": "127.0.0.1:29864",
        "dfs.data.transfer.protection": "privacy",
        "ignore.secure.ports.for.testing": None,  # HTTPS_ONLY satisfies the DataNode instead
    }  # fmt: skip
    assert read_site_xml(d / "core-site.xml")["hadoop.rpc.protection"] == "privacy"
    ssl_server = read_site_xml(d / "ssl-server.xml")
    keystore = Path(ssl_server["ssl.server.keystore.location"])
    assert (keystore.is_file(), ssl_server["ssl.server.keystore.type"]) == (True, "pkcs12")
    assert stat.S_IMODE((d / "ssl-server.xml").stat().st_mode) == 0o600
    assert ca.read_bytes() == (tmp_path / "conf" / "hdfs-tls" / "ca.pem").read_bytes()
    first = ca.read_bytes()
    hdfs_conf(lay, "a", cs, krb=krb)  # a daemon restarted alone: the same CA, the same keystore
    assert (ca.read_bytes(), Path(ssl_server["ssl.server.keystore.location"]).is_file()) == (
        first,
        True,
    )
    assert read_site_xml(d / "ssl-server.xml") == ssl_server
    # the edge node's copy names the policy and the HTTPS address; Ferry reads it back
    files = cluster_files(cs, krb)
    got = cluster_from_conf_dir(write_conf_dir(tmp_path / "client", files))
    assert (got["http_policy"], got["namenode_http_port"], got["kerberos_protection"]) == (
        "HTTPS_ONLY",
        29870,
        "privacy",
    )
    env = client_conf_env(
        KitSettings().model_copy(update={"clusters": {"a": cs, "b": KitSettings().cluster("b")}}),
        "secure",
        {"a": tmp_path / "a", "b": tmp_path / "b", "hive": tmp_path / "h"},
    )
    assert env["FERRY_CLUSTERS__A__SSL_CA_PATH"] == str(ca)
    assert "FERRY_CLUSTERS__B__SSL_CA_PATH" not in env


def test_https_without_a_ca_path_does_not_start(tmp_path: Path) -> None:
    from ferry_kit.errors import StackError

    cs = KitSettings().cluster("b").model_copy(update={"http_policy": "HTTPS_ONLY"})
    with pytest.raises(StackError, match="http_policy HTTPS_ONLY: set the cluster's ssl_ca_path"):
        hdfs_conf(Layout(tmp_path), "b", cs, krb=StackKerberos(enabled=True))


@pytest.mark.parametrize(
    ("update", "shape"),
    [
        ({"http_policy": "HTTP_AND_HTTPS"}, "HTTP_AND_HTTPS"),
        (
            {
                "nameservice": "ns",
                "namenodes": [
                    {"id": "nn1", "rpc_port": 1, "http_port": 2},
                    {"id": "nn2", "rpc_port": 3, "http_port": 4},
                ],
            },
            "HTTPS_ONLY with HA",
        ),
        ({"host": "10.1.2.3"}, "HTTPS_ONLY on ['10.1.2.3']"),
    ],
)
def test_https_shapes_the_stack_does_not_build_do_not_start(
    tmp_path: Path, update: dict[str, object], shape: str
) -> None:
    from ferry_kit.errors import StackError

    base = {"http_policy": "HTTPS_ONLY", "ssl_ca_path": tmp_path / "ca.pem"}
    cs = (
        KitSettings()
        .cluster("a")
        .model_validate({**KitSettings().cluster("a").model_dump(), **base, **update})
    )
    with pytest.raises(StackError, match=f"{re.escape(shape)} is not built"):
        hdfs_conf(Layout(tmp_path), "a", cs, krb=StackKerberos(enabled=True))


def test_other_tls_failures_are_refusals_and_a_missing_ca_file_a_settings_error(
    tmp_path: Path,
) -> None:
    from ferry.clusters.hdfs.webhdfs import WebHdfs

    plain = ssl.SSLError(1, "[SSL: WRONG_VERSION_NUMBER] wrong version number")
    plain.reason = "WRONG_VERSION_NUMBER"
    try:
        raise requests.exceptions.SSLError("HTTPSConnectionPool(…)") from plain
    except requests.exceptions.SSLError as exc:
        err = classify(
            "WebHDFS LISTSTATUS '/'", exc, netloc="nn:1", is_datanode=False, timeout=(1, 2)
        )
    assert (type(err), str(err)) == (
        AuthenticationFailed,
        "WebHDFS LISTSTATUS '/': TLS with nn:1 failed: WRONG_VERSION_NUMBER "
        "(clusters.<x>.http_policy must be the cluster's dfs.http.policy)",
    )
    eof = requests.exceptions.SSLError(ssl.SSLEOFError(8, "EOF occurred in violation of protocol"))
    assert (
        type(classify("op", eof, netloc="nn:1", is_datanode=False, timeout=(1, 2)))
        is HdfsUnavailable
    )
    s = KitSettings()
    cs = s.cluster("a").model_copy(
        update={"http_policy": "HTTPS_ONLY", "ssl_ca_path": tmp_path / "none.pem"}
    )
    with pytest.raises(ConfigError, match=r"clusters\.a\.ssl_ca_path '.*none\.pem': no such file"):
        WebHdfs(cs, s.retry, name="a")


def test_an_ha_cluster_on_https_names_its_namenodes_https_addresses() -> None:
    cs = (
        KitSettings()
        .cluster("a")
        .model_validate(
            {
                **KitSettings().cluster("a").model_dump(),
                "http_policy": "HTTPS_ONLY",
                "nameservice": "ns",
                "namenodes": [{"id": "nn1", "rpc_port": 1, "http_port": 2}],
            }
        )
    )
    conf = cs.hadoop_client_conf()
    assert (
        conf["dfs.namenode.https-address.ns.nn1"],
        "dfs.namenode.http-address.ns.nn1" in conf,
    ) == (
        "127.0.0.1:2",
        False,
    )


def test_a_clusters_own_protections_win_over_ferrys_in_its_spark_sessions(tmp_path: Path) -> None:
    from ferry.clusters.spark import session_conf
    from ferry.clusters.spark_kerberos import write_conf_dir as write_conf_dir_of_spark

    own = {"hadoop.rpc.protection": "privacy", "dfs.data.transfer.protection": "authentication"}
    s = KitSettings(var_dir=tmp_path, kerberos=StackKerberos(enabled=True, protection="integrity"))
    a = s.cluster("a").model_copy(update={"hadoop_properties": own})
    s = s.model_copy(update={"clusters": {**s.clusters, "a": a}})
    conf = session_conf(s, "ferry-load", "a", hive=False)
    keys = ("spark.hadoop.hadoop.rpc.protection", "spark.hadoop.dfs.data.transfer.protection")
    assert [conf[k] for k in keys] == ["privacy", "authentication"]
    site = read_site_xml(write_conf_dir_of_spark(s, "a") / "core-site.xml")
    assert [site[k.removeprefix("spark.hadoop.")] for k in keys] == ["privacy", "authentication"]
