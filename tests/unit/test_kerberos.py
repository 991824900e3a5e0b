"""Kerberos settings, the Hadoop keys they give, the stack's components and how Kerberos failures
are classified (no server; tests/secure/test_kerberos_hdfs.py runs the real KDC and clusters)."""

from __future__ import annotations

import os
import socket
from pathlib import Path

import pytest
import requests
from hdfs.util import HdfsError as _CliError

from ferry.clusters.hdfs.errors import _remote_error, classify
from ferry.clusters.kerberos import check_keytab, hadoop_client_conf, process_env
from ferry.errors import AuthenticationFailed, HdfsUnavailable
from ferry.settings.spark import EXECUTOR_JAVA_OPTIONS
from ferry_kit.settings import KitSettings, StackKerberos
from ferry_kit.stack.base import Layout
from ferry_kit.stack.components import build_components
from ferry_kit.stack.hiveserver2 import initiator_jaas
from ferry_kit.stack.servers import hdfs_conf


class KerberosExchangeError(requests.RequestException):
    """Stands for requests_kerberos's error of the same name (matched by name: the package is
    an optional extra)."""


ON = StackKerberos(enabled=True, keytab=Path("var/secrets/k.keytab"))


def test_kerberos_is_off_by_default_and_adds_no_hadoop_keys() -> None:
    krb = KitSettings().kerberos
    assert (krb.enabled, hadoop_client_conf(krb)) == (False, {})


def test_paths_are_taken_from_the_repository_root_and_the_realm_is_appended() -> None:
    assert ON.keytab == Path.cwd() / "var" / "secrets" / "k.keytab"
    assert ON.krb5_conf == Path.cwd() / "var" / "conf" / "krb5" / "krb5.conf"
    assert (ON.client_principal, ON.hdfs_principal, ON.http_principal) == (
        "ferry@FERRY.LOCAL",
        "hdfs/localhost@FERRY.LOCAL",
        "HTTP/localhost@FERRY.LOCAL",
    )
    assert StackKerberos(principal="svc@EX.NET").client_principal == "svc@EX.NET"


def test_hadoop_client_keys_of_a_kerberos_cluster() -> None:
    assert hadoop_client_conf(ON) == {
        "hadoop.security.authentication": "kerberos",
        "hadoop.security.authorization": "true",
        "hadoop.rpc.protection": "authentication",
        "dfs.namenode.kerberos.principal": "hdfs/localhost@FERRY.LOCAL",
        "dfs.datanode.kerberos.principal": "hdfs/localhost@FERRY.LOCAL",
        "dfs.data.transfer.protection": "authentication",
        "dfs.block.access.token.enable": "true",
    }


def test_each_process_gets_its_own_ticket_cache_and_the_keytab() -> None:
    assert process_env(ON, pid=42) == {
        "KRB5_CONFIG": str(Path.cwd() / "var" / "conf" / "krb5" / "krb5.conf"),
        "KRB5_CLIENT_KTNAME": str(Path.cwd() / "var" / "secrets" / "k.keytab"),
        "KRB5CCNAME": f"FILE:{Path.cwd() / 'var' / 'run' / 'krb5cc_ferry'}-42",
    }


def test_a_keytab_readable_by_others_or_missing_is_refused(tmp_path: Path) -> None:
    conf = tmp_path / "krb5.conf"
    conf.write_text("")
    keytab = tmp_path / "k.keytab"
    krb = StackKerberos(enabled=True, keytab=keytab, krb5_conf=conf)
    with pytest.raises(AuthenticationFailed) as missing:
        check_keytab(krb)
    assert str(missing.value) == (
        f"kerberos.keytab '{keytab}' of ferry@FERRY.LOCAL: No such file or directory"
    )
    keytab.write_bytes(b"\x05\x02")
    keytab.chmod(0o644)
    with pytest.raises(AuthenticationFailed) as open_to_others:
        check_keytab(krb)
    assert str(open_to_others.value) == (
        f"kerberos.keytab '{keytab}' must be a regular file of mode 0600 (is -rw-r--r--)"
    )
    keytab.chmod(0o600)
    check_keytab(krb)


def _classified(exc: BaseException) -> Exception:
    return classify("WebHDFS LISTSTATUS '/'", exc, netloc="nn:1", is_datanode=False, timeout=(1, 2))


def test_no_ticket_stops_the_process_and_an_unreachable_kdc_is_retried() -> None:
    gss = "ctx init failed: Can't find client principal ferry@FERRY.LOCAL in cache collection"
    no_ticket = _classified(KerberosExchangeError(gss))
    assert type(no_ticket) is AuthenticationFailed
    assert str(no_ticket) == f"WebHDFS LISTSTATUS '/': Kerberos: {gss}"
    kdc_down = _classified(KerberosExchangeError("Cannot contact any KDC for realm 'FERRY.LOCAL'"))
    assert type(kdc_down) is HdfsUnavailable
    # an error caused by it (requests wraps it) is judged the same
    try:
        try:
            raise KerberosExchangeError(gss)
        except KerberosExchangeError as inner:
            raise requests.ConnectionError("while sending") from inner
    except requests.ConnectionError as outer:
        assert type(_classified(outer)) is AuthenticationFailed


def test_http_401_stops_the_process() -> None:
    err = _remote_error("WebHDFS MKDIRS '/x'", _CliError("Authentication failure. Check your …"))
    assert (type(err), str(err)) == (
        AuthenticationFailed,
        "WebHDFS MKDIRS '/x': HTTP 401, the server refused Ferry's credentials",
    )


def test_hdfs_config_carries_the_kerberos_keys_only_when_on(tmp_path: Path) -> None:
    lay = Layout(tmp_path)
    cs = KitSettings().cluster("a")
    plain = hdfs_conf(lay, "a", cs, krb=StackKerberos())
    for f in ("core-site.xml", "hdfs-site.xml"):
        assert "<value>kerberos</value>" not in (plain / f).read_text()
        assert "hadoop.security" not in (plain / f).read_text()
    secure = hdfs_conf(lay, "a", cs, conf_name="secure", krb=ON)
    core, site = ((secure / f).read_text() for f in ("core-site.xml", "hdfs-site.xml"))
    keytab = tmp_path / "conf" / "krb5" / "hdfs.keytab"
    for line in (
        "<name>hadoop.security.authentication</name><value>kerberos</value>",
        "<name>dfs.data.transfer.protection</name><value>authentication</value>",
    ):
        assert line in core and line in site
    for line in (
        f"<name>dfs.namenode.keytab.file</name><value>{keytab}</value>",
        "<name>dfs.web.authentication.kerberos.principal</name><value>*</value>",
        "<name>hadoop.http.authentication.type</name><value>kerberos</value>",
        "<name>hadoop.http.authentication.token.validity</name><value>36000</value>",
        "<name>ignore.secure.ports.for.testing</name><value>true</value>",
    ):
        assert line in site


def test_the_kdc_starts_first_and_the_namenodes_wait_for_it(tmp_path: Path) -> None:
    plain = KitSettings(var_dir=tmp_path)
    assert "kdc" not in [c.name for c in build_components(plain)]
    secure = KitSettings(var_dir=tmp_path, kerberos=ON)
    comps = {c.name: c for c in build_components(secure)}
    assert next(iter(comps)) == "kdc"
    assert [comps[f"hdfs-{x}-namenode"].requires for x in ("a", "b")] == [("kdc",), ("kdc",)]
    krb5_conf = tmp_path / "conf" / "krb5" / "krb5.conf"  # under var_dir (Settings' default)
    assert secure.kerberos.krb5_conf == krb5_conf
    assert f"-Djava.security.krb5.conf={krb5_conf}" in comps["hdfs-a-datanode"].launch.argv


def test_spark_sessions_get_the_keys_a_kerberos_driver_and_its_executors_need(
    tmp_path: Path,
) -> None:
    from ferry.clusters.spark import session_conf

    plain = session_conf(KitSettings(var_dir=tmp_path), "ferry-load", "a", hive=True)
    assert not [k for k in plain if "kerberos" in k or "extraClassPath" in k or "Token" in k]
    conf = session_conf(KitSettings(var_dir=tmp_path, kerberos=ON), "ferry-load", "a", hive=True)
    java = f"-Djava.security.krb5.conf={tmp_path / 'conf' / 'krb5' / 'krb5.conf'}"
    token = conf["spark.executorEnv.HADOOP_TOKEN_FILE_LOCATION"]
    host = socket.gethostname()
    shared = tmp_path / "run" / "spark-kerberos"
    assert token == str(shared / f"ferry-load-a-{host}-{os.getpid()}.token")
    assert {k: v for k, v in conf.items() if k in KERBEROS_SPARK_KEYS} == {
        "spark.hadoop.hadoop.security.authentication": "kerberos",
        "spark.hadoop.dfs.namenode.kerberos.principal": "hdfs/localhost@FERRY.LOCAL",
        "spark.hadoop.hive.metastore.sasl.enabled": "true",
        "spark.hadoop.hive.metastore.kerberos.principal": "hive/localhost@FERRY.LOCAL",
        "spark.driver.extraJavaOptions": f"-XX:TieredStopAtLevel=1 -XX:+UseSerialGC {java}",
        "spark.executor.extraJavaOptions": f"{EXECUTOR_JAVA_OPTIONS} {java}",
        "spark.driver.extraClassPath": str(shared / "conf-a"),
        "spark.executor.extraClassPath": str(shared / "conf-a"),
    }
    bare = {"driver_java_options": "", "executor_java_options": ""}
    alone = session_conf(
        KitSettings(var_dir=tmp_path, kerberos=ON, spark=bare), "l", "a", hive=True
    )
    assert alone["spark.driver.extraJavaOptions"] == java
    assert alone["spark.executor.extraJavaOptions"] == java
    transform = session_conf(KitSettings(var_dir=tmp_path, kerberos=ON), "t", "b", hive=False)
    assert "spark.hadoop.hive.metastore.sasl.enabled" not in transform


KERBEROS_SPARK_KEYS = {
    "spark.hadoop.hadoop.security.authentication",
    "spark.hadoop.dfs.namenode.kerberos.principal",
    "spark.hadoop.hive.metastore.sasl.enabled",
    "spark.hadoop.hive.metastore.kerberos.principal",
    "spark.driver.extraJavaOptions",
    "spark.executor.extraJavaOptions",
    "spark.driver.extraClassPath",
    "spark.executor.extraClassPath",
}


def test_the_kerberos_metastore_runs_sasl_with_its_keytab(tmp_path: Path) -> None:
    comps = {c.name: c for c in build_components(KitSettings(var_dir=tmp_path, kerberos=ON))}
    ms = comps["hive-metastore"]
    ms.prepare()
    site = (tmp_path / "conf" / "hive-metastore" / "hive-site.xml").read_text()
    keytab = tmp_path / "conf" / "krb5" / "hive.keytab"
    for line in (
        "<name>hive.metastore.sasl.enabled</name><value>true</value>",
        "<name>hive.metastore.kerberos.principal</name><value>hive/localhost@FERRY.LOCAL</value>",
        f"<name>hive.metastore.kerberos.keytab.file</name><value>{keytab}</value>",
    ):
        assert line in site
    core = (tmp_path / "conf" / "hive-metastore" / "core-site.xml").read_text()
    assert "<name>hadoop.security.authentication</name><value>kerberos</value>" in core


def test_each_thread_negotiates_with_its_own_spnego_state() -> None:
    """Threads sharing one HTTPKerberosAuth checked the NameNode's mutual-authentication token
    against each other's GSSAPI context (MutualAuthenticationError in the secure e2e run)."""
    import threading

    from ferry.clusters.kerberos import _PerThreadAuth

    made: list[object] = []

    class Auth:
        def __init__(self) -> None:
            made.append(self)

        def __call__(self, request: object) -> tuple[object, object]:
            return self, request

    auth = _PerThreadAuth(Auth)
    mine = [auth("r1"), auth("r2")]
    other: list[tuple[object, object]] = []
    t = threading.Thread(target=lambda: other.append(auth("r3")))
    t.start()
    t.join()
    assert len(made) == 2
    assert [m[0] for m in mine] == [made[0], made[0]] and other == [(made[1], "r3")]


def test_the_kerberos_hiveserver2_logs_in_as_hive_and_takes_kerberos_from_jdbc_clients(
    tmp_path: Path,
) -> None:
    """The Spark Thrift Server on Kerberos: spark-submit logs the JVM in from the hive keytab
    (HDFS A, the metastore over SASL) and hive.server2.authentication=KERBEROS with the same
    principal and keytab; it starts after the KDC."""
    settings = KitSettings(
        var_dir=tmp_path, kerberos=ON, hiveserver2={"principal": "hive/localhost@FERRY.LOCAL"}
    )
    hs2 = {c.name: c for c in build_components(settings)}["hiveserver2"]
    argv = hs2.launch.argv
    keytab = str(tmp_path / "conf" / "krb5" / "hive.keytab")
    confs = dict(argv[i + 1].split("=", 1) for i, a in enumerate(argv) if a == "--conf")
    hive = dict(argv[i + 1].split("=", 1) for i, a in enumerate(argv) if a == "--hiveconf")
    assert {k: confs[k] for k in sorted(confs) if "kerberos" in k or "sasl" in k} == {
        "spark.hadoop.dfs.datanode.kerberos.principal": "hdfs/localhost@FERRY.LOCAL",
        "spark.hadoop.dfs.namenode.kerberos.principal": "hdfs/localhost@FERRY.LOCAL",
        "spark.hadoop.hive.metastore.kerberos.principal": "hive/localhost@FERRY.LOCAL",
        "spark.hadoop.hive.metastore.sasl.enabled": "true",
        "spark.kerberos.keytab": keytab,
        "spark.kerberos.principal": "hive/localhost@FERRY.LOCAL",
    }
    assert confs["spark.hadoop.hadoop.security.authentication"] == "kerberos"
    assert {k: v for k, v in hive.items() if k.startswith("hive.server2.authentication")} == {
        "hive.server2.authentication": "KERBEROS",
        "hive.server2.authentication.kerberos.principal": "hive/localhost@FERRY.LOCAL",
        "hive.server2.authentication.kerberos.keytab": keytab,
    }
    assert f"-Djava.security.krb5.conf={settings.kerberos.krb5_conf}" in argv
    assert hs2.requires == ("hive-metastore", "kdc")
    # its query threads' metastore connections: default credentials from its own keytab
    jaas = tmp_path / "conf" / "hiveserver2" / "jaas.conf"
    assert [a for a in argv if "auth.login.config" in a or "useSubjectCredsOnly" in a] == [
        f"-Djava.security.auth.login.config={jaas}",
        "-Djavax.security.auth.useSubjectCredsOnly=false",
    ]
    assert initiator_jaas(settings.kerberos, Path(keytab)) == (
        "com.sun.security.jgss.krb5.initiate {\n"
        "  com.sun.security.auth.module.Krb5LoginModule required\n"
        f'  useKeyTab=true keyTab="{keytab}" principal="hive/localhost@FERRY.LOCAL"\n'
        "  storeKey=true doNotPrompt=true isInitiator=true;\n"
        "};\n"
    )


def test_a_server_never_inherits_a_kerberos_clients_ticket_cache_or_keytab(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    from ferry_kit.stack.process import server_environ

    monkeypatch.setenv("KRB5CCNAME", "FILE:/tmp/krb5cc_ferry-1")
    monkeypatch.setenv("KRB5_CLIENT_KTNAME", "/var/secrets/ferry.keytab")
    monkeypatch.setenv("KRB5_CONFIG", "/etc/krb5.conf")
    env = server_environ()
    assert ("KRB5CCNAME" in env, "KRB5_CLIENT_KTNAME" in env) == (False, False)
    assert env["KRB5_CONFIG"] == "/etc/krb5.conf"


def test_a_kerberos_hiveserver2_without_its_principal_in_the_settings_does_not_start(
    tmp_path: Path,
) -> None:
    """Its clients would log in without Kerberos and be refused: said at start, not by a health
    check that never passes."""
    from ferry_kit.errors import StackError

    hs2 = {c.name: c for c in build_components(KitSettings(var_dir=tmp_path, kerberos=ON))}[
        "hiveserver2"
    ]
    with pytest.raises(
        StackError,
        match=r"hiveserver2 on Kerberos runs as hive/localhost@FERRY.LOCAL: set "
        r"hiveserver2.principal to it \(is None",
    ):
        hs2.prepare()


def test_a_process_removes_its_own_ticket_cache_when_it_exits(tmp_path: Path) -> None:
    """A container's health check is one such process every few seconds: no cache may stay."""
    import subprocess
    import sys

    keytab, conf = tmp_path / "ferry.keytab", tmp_path / "krb5.conf"
    keytab.write_bytes(b"\x05\x02")
    keytab.chmod(0o600)
    conf.write_text("[libdefaults]\n")
    code = (
        "import os\n"
        "from ferry.clusters.kerberos import configure_process\n"
        "from ferry.settings.kerberos import KerberosSettings\n"
        f"krb = KerberosSettings(enabled=True, keytab={str(keytab)!r}, krb5_conf={str(conf)!r},"
        f" ccache={str(tmp_path / 'cc')!r})\n"
        "configure_process(krb)\n"
        "configure_process(krb)\n"
        "cache = os.environ['KRB5CCNAME'].removeprefix('FILE:')\n"
        "open(cache, 'w').write('tickets')\n"
        "print(cache)\n"
    )
    proc = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=60, check=True
    )
    cache = Path(proc.stdout.strip())
    assert cache.parent == tmp_path and cache.name.startswith("cc-")
    assert not cache.exists()
    assert sorted(p.name for p in tmp_path.iterdir()) == ["ferry.keytab", "krb5.conf"]
