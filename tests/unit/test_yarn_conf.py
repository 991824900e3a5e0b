"""Spark on the clusters' own YARN (issue 48): the settings, the Spark keys of a YARN session,
the jars archive staged once, and the local stack's yarn-site.xml (profile ``yarn``). Pure
functions: the YARN daemons themselves run in tests/yarn."""

from __future__ import annotations

import zipfile
from pathlib import Path

import pytest
from tests.support.hdfs_fake import FakeHdfs

from ferry.clusters import spark_yarn
from ferry.clusters.spark import session_conf
from ferry.errors import ConfigError
from ferry.settings.spark import SparkSettings, YarnSettings
from ferry_kit.settings import KitSettings, StackYarn
from ferry_kit.stack.client_conf import service_profile, yarn_files
from ferry_kit.stack.components import build_components
from ferry_kit.stack.yarn_conf import (
    ZK_STATE_STORE,
    capacity_scheduler,
    client_site,
    nodemanager_site,
    resourcemanager_site,
)
from ferry_kit.supervise.control import service_environment


def _profile(name: str) -> dict[str, object]:
    from ferry.settings.sources import _deep_merge, _read_yaml, profile_files

    data: dict[str, object] = {}
    for path in profile_files(name):
        data = _deep_merge(data, _read_yaml(path, "FERRY_PROFILE"))
    return data


def _yarn_settings(tmp_path: Path, **extra: object) -> KitSettings:
    """Settings with both clusters on YARN and a client configuration directory holding a
    yarn-site.xml each (what ``ferry stack up`` writes)."""
    clusters = {}
    for name in ("a", "b"):
        d = tmp_path / f"cluster-{name}"
        d.mkdir(parents=True)
        (d / "core-site.xml").write_text(
            "<configuration><property><name>fs.defaultFS</name>"
            f"<value>hdfs://nn-{name}:8020</value></property></configuration>"
        )
        (d / "hdfs-site.xml").write_text("<configuration/>")
        (d / "yarn-site.xml").write_text("<configuration/>")
        clusters[name] = {"hadoop_conf_dir": str(d)}
    spark = {"cluster_managers": {"a": "yarn", "b": "yarn"}, **extra}
    return KitSettings(clusters=clusters, spark=spark, var_dir=tmp_path / "var")


# -- settings ---------------------------------------------------------------------------------


def test_every_cluster_is_standalone_unless_named() -> None:
    sp = SparkSettings(cluster_managers={"a": "yarn"})
    assert (sp.manager("a"), sp.manager("b")) == ("yarn", "standalone")
    assert SparkSettings().manager("a") == "standalone"
    with pytest.raises(ValueError, match="literal_error|Input should be"):
        SparkSettings(cluster_managers={"a": "mesos"})  # type: ignore[dict-item]


def test_archive_dir_must_be_absolute() -> None:
    assert YarnSettings(archive_dir="/apps/spark/").archive_dir == "/apps/spark"
    with pytest.raises(ValueError, match="absolute HDFS path"):
        YarnSettings(archive_dir="apps/spark")


def test_cluster_managers_from_the_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("FERRY_SPARK__CLUSTER_MANAGERS", '{"b": "yarn"}')
    monkeypatch.setenv("FERRY_SPARK__YARN__QUEUE", "etl")
    s = KitSettings()
    assert (s.spark.manager("a"), s.spark.manager("b"), s.spark.yarn.queue) == (
        "standalone",
        "yarn",
        "etl",
    )


# -- the Spark keys of a session --------------------------------------------------------------


def test_standalone_session_is_unchanged_by_default() -> None:
    conf = session_conf(KitSettings(), "ferry-load", "a", hive=True)
    assert conf["spark.master"] == "spark://127.0.0.1:17077,127.0.0.1:17078"
    assert conf["spark.cores.max"] == "4"
    assert not any(k.startswith("spark.yarn.") for k in conf)


def test_yarn_session_keys(tmp_path: Path) -> None:
    s = _yarn_settings(tmp_path, executor_cores=2, app_cores_max=4)
    conf = session_conf(s, "ferry-transform", "b")
    version = spark_yarn.spark_version()
    assert {k: conf[k] for k in conf if k.startswith("spark.yarn.")} == {
        "spark.yarn.queue": "default",
        "spark.yarn.archive": f"hdfs://nn-b:8020/ferry/spark/spark-{version}-jars.zip",
        "spark.yarn.am.memory": "256m",
        "spark.yarn.maxAppAttempts": "2",
        "spark.yarn.am.extraJavaOptions": "-XX:TieredStopAtLevel=1 -XX:+UseSerialGC",
    }
    assert conf["spark.master"] == "yarn"
    assert conf["spark.submit.deployMode"] == "client"
    assert conf["spark.executor.instances"] == "2"  # app_cores_max / executor_cores
    assert (conf["spark.executor.cores"], conf["spark.executor.memory"]) == ("2", "640m")
    assert conf["spark.dynamicAllocation.enabled"] == "false"
    assert "spark.cores.max" not in conf  # a standalone key
    # the rest is the same as on the standalone cluster: the cluster's HDFS as default FS
    assert conf["spark.hadoop.fs.defaultFS"] == "hdfs://nn-b:8020"
    # one executor at least, whatever the cores
    small = _yarn_settings(tmp_path / "s", executor_cores=4, app_cores_max=2, yarn={"queue": "q"})
    conf = session_conf(small, "ferry-load", "a", hive=True)
    assert (conf["spark.executor.instances"], conf["spark.yarn.queue"]) == ("1", "q")


def test_an_explicit_master_wins_over_yarn(tmp_path: Path) -> None:
    conf = session_conf(_yarn_settings(tmp_path), "ferry-rejects", "b", master="local[1]")
    assert conf["spark.master"] == "local[1]"
    assert not any(k.startswith("spark.yarn.") for k in conf)


def test_yarn_needs_the_clusters_yarn_site(tmp_path: Path) -> None:
    s = KitSettings(spark={"cluster_managers": {"b": "yarn"}})
    with pytest.raises(ConfigError, match=r"clusters\.b\.hadoop_conf_dir is not set"):
        spark_yarn.conf_env(s, "b")
    s = _yarn_settings(tmp_path)
    assert spark_yarn.conf_env(s, "a") == {
        "HADOOP_CONF_DIR": str(tmp_path / "cluster-a"),
        "YARN_CONF_DIR": str(tmp_path / "cluster-a"),
    }
    (tmp_path / "cluster-a" / "yarn-site.xml").unlink()
    with pytest.raises(ConfigError, match=r"yarn-site\.xml does not exist"):
        spark_yarn.conf_env(s, "a")


def _kerberized(s: KitSettings, tmp_path: Path) -> KitSettings:
    krb = s.kerberos.model_copy(
        update={"enabled": True, "keytab": tmp_path / "ferry.keytab", "principal": "ferry"}
    )
    return s.model_copy(update={"kerberos": krb})


def test_kerberos_on_yarn_is_sparks_own_token_manager_with_the_keytab(tmp_path: Path) -> None:
    s = _kerberized(_yarn_settings(tmp_path), tmp_path)
    conf = session_conf(s, "ferry-load", "a", hive=True)
    assert conf["spark.master"] == "yarn"
    assert conf["spark.kerberos.principal"] == "ferry@FERRY.LOCAL"
    assert conf["spark.kerberos.keytab"] == str(tmp_path / "ferry.keytab")
    assert conf["spark.hadoop.hive.metastore.sasl.enabled"] == "true"
    assert conf["spark.driver.extraJavaOptions"].endswith(
        f"-Djava.security.krb5.conf={s.kerberos.krb5_conf}"
    )
    # the containers get their tokens and configuration from YARN, never an edge-node path
    assert "spark.executorEnv.HADOOP_TOKEN_FILE_LOCATION" not in conf
    assert "spark.executor.extraClassPath" not in conf
    assert "krb5" not in conf.get("spark.executor.extraJavaOptions", "")


def test_kerberos_on_the_standalone_cluster_keeps_the_token_file(tmp_path: Path) -> None:
    s = _kerberized(_yarn_settings(tmp_path), tmp_path)
    conf = session_conf(s, "ferry-load", "a", master="spark://127.0.0.1:7077")
    assert "spark.kerberos.keytab" not in conf
    assert conf["spark.executorEnv.HADOOP_TOKEN_FILE_LOCATION"].endswith(".token")
    assert conf["spark.executor.extraClassPath"] == conf["spark.driver.extraClassPath"]


# -- the jars archive ---------------------------------------------------------------------------


def _jars(tmp_path: Path) -> Path:
    jars = tmp_path / "jars"
    jars.mkdir()
    for name in ("spark-core.jar", "hadoop-client-api.jar"):
        (jars / name).write_bytes(name.encode() * 100)
    (jars / "README.txt").write_text("not a jar")
    return jars


def test_archive_is_a_flat_zip_of_the_jars_reused_once_written(tmp_path: Path) -> None:
    dest = spark_yarn.write_archive(_jars(tmp_path), tmp_path / "out" / "spark-jars.zip")
    with zipfile.ZipFile(dest) as zf:
        assert sorted(zf.namelist()) == ["hadoop-client-api.jar", "spark-core.jar"]
        assert {i.compress_type for i in zf.infolist()} == {zipfile.ZIP_STORED}
    mtime = dest.stat().st_mtime_ns
    assert spark_yarn.write_archive(tmp_path / "nowhere", dest) == dest  # reused, not rebuilt
    assert dest.stat().st_mtime_ns == mtime
    with pytest.raises(ConfigError, match="no jars"):
        spark_yarn.write_archive(tmp_path / "out", tmp_path / "other.zip")


def test_archive_is_uploaded_once_then_reused(tmp_path: Path) -> None:
    s = _yarn_settings(tmp_path)
    hdfs = FakeHdfs("b")
    path = f"/ferry/spark/spark-{spark_yarn.spark_version()}-jars.zip"
    assert spark_yarn.ensure_archive(s, "b", hdfs, _jars(tmp_path)) == (path, True)
    local = s.var_dir / "spark" / Path(path).name
    assert hdfs.files[path] == local.read_bytes()
    writes = [c for c in hdfs.calls if c[0] != "status"]
    # the second session (another service, a restart) finds it: nothing read, nothing written
    assert spark_yarn.ensure_archive(s, "b", hdfs, tmp_path / "no-jars") == (path, False)
    assert [c for c in hdfs.calls if c[0] != "status"] == writes


def test_archive_staged_by_another_session_meanwhile_is_used(tmp_path: Path) -> None:
    s = _yarn_settings(tmp_path)
    hdfs = FakeHdfs("b")
    path = spark_yarn.archive_path(s)
    real_upload = hdfs.upload_stream

    def racing_upload(p: str, chunks: object, **kw: object) -> object:
        hdfs.files[p] = b"another session's zip"  # it renamed its archive in first
        return real_upload(p, chunks, **kw)  # type: ignore[arg-type]

    hdfs.upload_stream = racing_upload  # type: ignore[method-assign]
    assert spark_yarn.ensure_archive(s, "b", hdfs, _jars(tmp_path)) == (path, False)
    assert hdfs.files[path] == b"another session's zip"


# -- the local stack's YARN (profile yarn) ----------------------------------------------------


def test_yarn_profile_settings_and_ports() -> None:
    data = _profile("yarn")
    s = KitSettings(**data)  # type: ignore[arg-type]
    a, b = s.yarn["a"], s.yarn["b"]
    assert (a.ha, b.ha) == (True, False)
    assert [rm.id for rm in a.resourcemanagers] == ["rm1", "rm2"]
    assert (s.spark.manager("a"), s.spark.manager("b")) == ("yarn", "yarn")
    ports = [
        s.kafka.port,
        s.kafka.controller_port,
        s.zookeeper.port,
        s.metastore.port,
        s.hiveserver2.port,
        s.tracker.web_port,
        s.retention.metrics_port,
        *s.spark.master_ports,
        *s.spark.master_webui_ports,
        s.spark.worker_webui_port,
    ]
    for cs in s.clusters.values():
        ports += [
            cs.namenode_rpc_port,
            cs.namenode_http_port,
            cs.datanode_port,
            cs.datanode_http_port,
            cs.datanode_ipc_port,
        ]
    for y in (a, b):
        ports += [y.nodemanager_port, y.nodemanager_localizer_port, y.nodemanager_web_port]
        for rm in y.resourcemanagers:
            ports += [rm.port, rm.scheduler_port, rm.tracker_port, rm.admin_port, rm.web_port]
    assert len(ports) == len(set(ports)), "a port used twice"
    assert all(p < 32768 for p in ports), "below Linux's ephemeral range"
    # none of the default stack's ports nor the ha profile's: the tiers run side by side
    others = [KitSettings(), KitSettings(**_profile("ha"))]  # type: ignore[arg-type]
    for o in others:
        assert set(ports).isdisjoint(
            {o.kafka.port, o.zookeeper.port, o.metastore.port, o.hiveserver2.port}
            | {o.cluster(c).namenode_rpc_port for c in ("a", "b")}
            | {o.cluster(c).datanode_port for c in ("a", "b")}
        )
    # a service beside that stack reads yarn-services: the same values, key for key
    assert service_profile("yarn") == "yarn-services"
    assert service_profile("yarn,yarn-kerberos") == "yarn-services"  # Kerberos: core-site says
    for section, values in _profile("yarn-services").items():
        assert data[section] == values, section


def test_yarn_profile_components_replace_the_standalone_cluster() -> None:
    names = [c.name for c in build_components(KitSettings(**_profile("yarn")))]  # type: ignore[arg-type]
    assert names[names.index("hdfs-a-datanode") + 1 :] == [
        "yarn-a-rm1",
        "yarn-a-rm2",
        "yarn-a-nodemanager",
        "yarn-b-rm1",
        "yarn-b-nodemanager",
        "hive-metastore",
        "hiveserver2",
    ]
    assert not any(n.startswith("spark-") for n in names)
    default = [c.name for c in build_components(KitSettings())]
    assert "spark-master-1" in default and not any(n.startswith("yarn-") for n in default)


def _stack_yarn() -> KitSettings:
    return KitSettings(**_profile("yarn"))  # type: ignore[arg-type]


def test_client_yarn_site_of_one_resourcemanager() -> None:
    s = _stack_yarn()
    site = client_site(s.yarn["b"], "b")
    assert site["yarn.resourcemanager.address"] == "127.0.0.1:31032"
    assert site["yarn.resourcemanager.scheduler.address"] == "127.0.0.1:31030"
    assert site["yarn.resourcemanager.resource-tracker.address"] == "127.0.0.1:31031"
    assert site["yarn.resourcemanager.webapp.address"] == "127.0.0.1:31088"
    assert "yarn.resourcemanager.ha.enabled" not in site
    assert site["yarn.resourcemanager.connect.retry-interval.ms"] == "1000"
    assert yarn_files(s, "b") == {"yarn-site.xml": site}
    assert yarn_files(KitSettings(), "b") == {}


def test_client_yarn_site_of_an_ha_pair() -> None:
    site = client_site(_stack_yarn().yarn["a"], "a")
    assert site["yarn.resourcemanager.ha.enabled"] == "true"
    assert site["yarn.resourcemanager.ha.rm-ids"] == "rm1,rm2"
    assert site["yarn.resourcemanager.cluster-id"] == "cluster-a"
    assert site["yarn.resourcemanager.address.rm1"] == "127.0.0.1:30032"
    assert site["yarn.resourcemanager.address.rm2"] == "127.0.0.1:30132"
    assert site["yarn.resourcemanager.webapp.address.rm2"] == "127.0.0.1:30188"
    assert "yarn.resourcemanager.address" not in site
    assert "yarn.resourcemanager.ha.id" not in site  # a daemon's own key, never a client's


def test_resourcemanager_site_of_the_pair_and_of_the_single() -> None:
    s = _stack_yarn()
    rm2 = s.yarn["a"].resourcemanagers[1]
    site = resourcemanager_site(s, "a", rm2)
    assert site["yarn.resourcemanager.ha.id"] == "rm2"
    assert site["yarn.resourcemanager.ha.automatic-failover.embedded"] == "true"
    assert site["hadoop.zk.address"] == site["yarn.resourcemanager.zk-address"] == "127.0.0.1:30181"
    assert site["yarn.resourcemanager.recovery.enabled"] == "true"
    assert site["yarn.resourcemanager.store.class"] == ZK_STATE_STORE
    assert site["yarn.scheduler.minimum-allocation-mb"] == "256"
    single = resourcemanager_site(s, "b", s.yarn["b"].resourcemanagers[0])
    assert not any("ha." in k or "zk" in k or "recovery" in k for k in single)


def test_nodemanager_site(tmp_path: Path) -> None:
    site = nodemanager_site(_stack_yarn(), "a", tmp_path)
    assert site["yarn.nodemanager.resource.memory-mb"] == "4096"
    assert site["yarn.nodemanager.resource.cpu-vcores"] == "4"
    assert site["yarn.nodemanager.vmem-check-enabled"] == "false"
    assert site["yarn.nodemanager.address"] == "127.0.0.1:30042"
    assert site["yarn.nodemanager.local-dirs"] == str(tmp_path / "local")
    assert site["yarn.resourcemanager.ha.rm-ids"] == "rm1,rm2"  # it follows the active RM


def test_kerberos_yarn_daemons_log_in_as_yarn_and_clients_know_the_principal(
    tmp_path: Path,
) -> None:
    s = KitSettings(**_profile("yarn,yarn-kerberos"))  # type: ignore[arg-type]
    keytab = tmp_path / "yarn.keytab"
    assert s.kerberos.kdc_port == 30750  # its own, beside the secure tier's KDC (17088)
    principal = "yarn/localhost@FERRY.LOCAL"
    rm = resourcemanager_site(s, "a", s.yarn["a"].resourcemanagers[0], keytab)
    assert rm["yarn.resourcemanager.principal"] == principal
    assert rm["yarn.resourcemanager.keytab"] == str(keytab)
    assert rm["yarn.resourcemanager.proxy-user-privileges.enabled"] == "true"
    nm = nodemanager_site(s, "b", tmp_path, keytab)
    assert nm["yarn.nodemanager.principal"] == principal
    assert nm["yarn.nodemanager.keytab"] == str(keytab)
    assert yarn_files(s, "b")["yarn-site.xml"]["yarn.resourcemanager.principal"] == principal
    with pytest.raises(ValueError, match="needs its keytab"):
        resourcemanager_site(s, "b", s.yarn["b"].resourcemanagers[0])
    # without Kerberos no key of it
    plain = _stack_yarn()
    site = resourcemanager_site(plain, "b", plain.yarn["b"].resourcemanagers[0])
    assert not any("principal" in k or "keytab" in k or "proxy-user" in k for k in site)


def test_kerberos_stack_namenodes_take_short_token_lifetimes_and_yarn_as_proxy(
    tmp_path: Path,
) -> None:
    from ferry_kit.stack.base import Layout
    from ferry_kit.stack.kdc import hdfs_server_conf

    s = KitSettings(**_profile("yarn,yarn-kerberos"))  # type: ignore[arg-type]
    conf = hdfs_server_conf(s.kerberos, Layout(tmp_path))
    assert conf["dfs.namenode.delegation.token.renew-interval"] == "60000"
    assert conf["dfs.namenode.delegation.token.max-lifetime"] == "120000"
    assert conf["hadoop.proxyuser.yarn.hosts"] == "*"
    secure = KitSettings(**_profile("secure"))  # type: ignore[arg-type]
    assert not any(
        "delegation.token" in k for k in hdfs_server_conf(secure.kerberos, Layout(tmp_path))
    )


def test_a_token_max_lifetime_shorter_than_its_renew_interval_is_refused() -> None:
    from pydantic import ValidationError

    from ferry_kit.settings import StackKerberos

    with pytest.raises(ValidationError, match="max_lifetime_s 30 is shorter"):
        StackKerberos(delegation_token_renew_interval_s=60, delegation_token_max_lifetime_s=30)
    ok = StackKerberos(delegation_token_renew_interval_s=60, delegation_token_max_lifetime_s=60)
    assert ok.delegation_token_max_lifetime_s == 60


def test_capacity_scheduler_queue() -> None:
    conf = capacity_scheduler("etl")
    assert conf["yarn.scheduler.capacity.root.queues"] == "etl"
    assert conf["yarn.scheduler.capacity.root.etl.capacity"] == "100"


def test_stack_yarn_wants_one_or_two_distinct_resourcemanagers() -> None:
    rm = {"port": 1, "scheduler_port": 2, "tracker_port": 3, "admin_port": 4, "web_port": 5}
    nm = {"nodemanager_port": 6, "nodemanager_localizer_port": 7, "nodemanager_web_port": 8}
    assert StackYarn(resourcemanagers=({"id": "rm1", **rm},), **nm).ha is False  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="distinct ids"):
        StackYarn(resourcemanagers=({"id": "rm1", **rm}, {"id": "rm1", **rm}), **nm)  # type: ignore[arg-type]


def test_ferry_up_gives_services_on_yarn_the_clusters_client_configuration() -> None:
    s = _stack_yarn()
    env = service_environment(s, {"FERRY_PROFILE": "yarn", "PATH": "/bin"})
    clients = s.var_dir / "conf" / "clients"
    assert env["FERRY_CLUSTERS__A__HADOOP_CONF_DIR"] == str(clients / "cluster-a")
    assert env["FERRY_CLUSTERS__B__HADOOP_CONF_DIR"] == str(clients / "cluster-b")
    assert env["FERRY_PROFILE"] == "yarn-services"
    assert "PATH" not in env
    # the standalone stack's services keep reading the profile, as before
    plain = service_environment(KitSettings(), {"FERRY_PROFILE": "ha"})
    assert plain["FERRY_PROFILE"] == "ha"
    assert not any(k.endswith("HADOOP_CONF_DIR") for k in plain)
