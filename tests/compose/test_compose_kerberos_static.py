"""Static checks of the two-realm overlay (docker-compose.kerberos.yml): no Docker engine, run in
CI. A wrong realm, volume or KDC here shows at `up` only as a health check that never passes or a
stage that stops on its first file; caught here instead."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from tests.compose import compose_checks as cc
from tests.compose import env_checks as ec
from tests.compose import image_checks as ic

OVERLAY_FILE = cc.REPO / "docker-compose.kerberos.yml"
BASE = cc.load_compose()
OVERLAY = cc.load_compose(OVERLAY_FILE)
IMAGE_ENV = ic.dockerfile_env(cc.DOCKERFILE.read_text(encoding="utf-8"))
KRB5_DIR = "/var/lib/ferry/conf/krb5"
SPARK_DIR = "/var/lib/ferry/run/spark-kerberos"
REALM = {"a": "A.FERRY.LOCAL", "b": "B.FERRY.LOCAL"}
#: The services of each realm (cluster A's servers, load and the scenario; B's and the stages
#: that log in there), and those that run no Kerberos client at all.
IN_REALM = {
    "a": {"kdc-a", "namenode-a", "datanode-a", "hive-metastore", "hiveserver2", "load", "scenario"},
    "b": {"kdc-b", "namenode-b", "datanode-b", "extract", "transform", "transfer", "gc"},
}


def merged(service: str) -> dict[str, Any]:
    """The service as `docker compose -f docker-compose.yml -f docker-compose.kerberos.yml` runs
    it: the overlay's environment and depends_on added key by key, volumes replaced by target."""
    base = dict(BASE["services"].get(service, {}))
    over = OVERLAY["services"].get(service, {})
    svc = {**base, **{k: v for k, v in over.items() if k not in ("environment", "volumes")}}
    svc["environment"] = {**cc.service_env(base), **cc.service_env(over)}
    svc["depends_on"] = {**base.get("depends_on", {}), **over.get("depends_on", {})}
    mounts = {v.split(":")[1]: v for v in base.get("volumes", [])}
    mounts |= {v.split(":")[1]: v for v in over.get("volumes", [])}
    svc["volumes"] = list(mounts.values())
    return svc


def env_of(service: str, conf_dirs: bool = False) -> dict[str, str]:
    """The container's environment; without the client configuration directories (their files
    exist only in the running project) unless ``conf_dirs``."""
    env = {**IMAGE_ENV, **merged(service)["environment"]}
    return env if conf_dirs else {k: v for k, v in env.items() if not k.endswith("_CONF_DIR")}


def mount(service: str, target: str) -> str | None:
    """``source[:ro]`` of the volume ``service`` mounts at ``target``, or None."""
    for v in merged(service)["volumes"]:
        source, at, *mode = v.split(":")
        if at == target:
            return ":".join([source, *mode])
    return None


def test_the_overlay_matches_the_compose_specification() -> None:
    assert cc.schema_problems(OVERLAY, cc.load_schema()) == []
    assert set(OVERLAY["services"]) - set(BASE["services"]) == {"kdc-a", "kdc-b"}
    assert OVERLAY["secrets"] == {
        "kerberos-trust": {"file": "./var/compose-secrets/kerberos-trust.password"}
    }


@pytest.mark.parametrize("cluster", ["a", "b"])
def test_each_realms_services_log_in_there_with_that_realms_files(cluster: str) -> None:
    other = "b" if cluster == "a" else "a"
    for service in sorted(IN_REALM[cluster]):
        env = env_of(service)
        assert ec.unknown_ferry_keys(env) == [], service
        s = ec.settings_from_env(env)
        krb = s.kerberos
        assert (krb.enabled, krb.realm, krb.client_principal) == (
            True,
            REALM[cluster],
            f"ferry@{REALM[cluster]}",
        ), service
        assert (krb.service_host, krb.kdc_host) == (f"namenode-{cluster}", f"kdc-{cluster}")
        assert krb.trusted_realms == [REALM[other]], service
        assert krb.realm_kdcs == {REALM[other]: f"kdc-{other}:17088"}, service
        assert krb.domain_realm == {
            f"namenode-{other}": REALM[other],
            f"datanode-{other}": REALM[other],
        }
        assert (str(krb.keytab.parent), str(krb.krb5_conf.parent)) == (KRB5_DIR, KRB5_DIR)
        kdc = service == f"kdc-{cluster}"
        assert mount(service, KRB5_DIR) == (f"krb5-{cluster}" if kdc else f"krb5-{cluster}:ro")
        if not kdc:
            assert merged(service)["depends_on"][f"kdc-{cluster}"] == {
                "condition": "service_healthy"
            }


@pytest.mark.parametrize("cluster", ["a", "b"])
def test_each_kdc_makes_the_http_principal_of_every_host_of_its_realm(cluster: str) -> None:
    from ferry_kit.stack import kdc

    s = ec.settings_from_env(env_of(f"kdc-{cluster}"))
    assert kdc._principals(s) == [
        f"hdfs/namenode-{cluster}@{REALM[cluster]}",
        f"HTTP/namenode-{cluster}@{REALM[cluster]}",
        f"HTTP/127.0.0.1@{REALM[cluster]}",
        f"HTTP/datanode-{cluster}@{REALM[cluster]}",
    ]


def test_only_the_kdcs_read_the_trusts_password() -> None:
    readers = {n for n, svc in OVERLAY["services"].items() if "secrets" in svc}
    assert readers == {"kdc-a", "kdc-b"}
    for kdc in readers:
        env = env_of(kdc)
        assert env["FERRY_KERBEROS__TRUST_PASSWORD_FILE"] == "/run/secrets/kerberos-trust"


@pytest.mark.parametrize(
    ("driver", "worker", "volume"),
    [("transform", "spark-worker", "spark-b"), ("load", "spark-worker-a", "spark-a")],
)
def test_a_spark_driver_and_its_worker_share_the_executors_files(
    driver: str, worker: str, volume: str
) -> None:
    s = ec.settings_from_env(env_of(driver))
    assert str(s.kerberos.spark_files_dir) == SPARK_DIR
    assert (mount(driver, SPARK_DIR), mount(worker, SPARK_DIR)) == (volume, f"{volume}:ro")
    realm = "a" if volume == "spark-a" else "b"
    assert mount(worker, KRB5_DIR) == f"krb5-{realm}:ro"


def test_the_hdfs_servers_are_checked_with_a_ticket() -> None:
    for service in ("namenode-a", "datanode-a", "namenode-b", "datanode-b"):
        component = cc.server_component(merged(service))
        assert merged(service)["healthcheck"]["test"] == [
            "CMD",
            "ferry",
            "stack",
            "check",
            component,
        ]


def test_the_kerberos_project_has_its_own_name_and_nas() -> None:
    env_file = cc.REPO / "deploy" / "docker" / "kerberos.env"
    lines = [ln for ln in env_file.read_text().splitlines() if ln and not ln.startswith("#")]
    assert lines == ["COMPOSE_PROJECT_NAME=ferry-kerberos"]
    for service in ("extract", "gc", "scenario"):
        assert mount(service, "/nas") == "./var/compose-nas-kerberos"


def test_the_merge_replaces_a_volume_by_its_target_and_adds_environment() -> None:
    env = merged("extract")["environment"]
    assert (env["FERRY_KAFKA__HOST"], env["FERRY_KERBEROS__REALM"]) == ("kafka", REALM["b"])
    assert mount("extract", "/nas") == "./var/compose-nas-kerberos"
    assert Path(mount("extract", KRB5_DIR) or "").name == "krb5-b:ro"


CLIENTS = "/var/lib/ferry/conf/clients"


def test_each_stage_reads_its_clusters_own_client_configuration_from_their_volume() -> None:
    reads = {
        "extract": ["b"],
        "transform": ["b"],
        "transfer": ["a", "b"],
        "gc": ["a", "b"],
        "load": ["a", "hive"],
        "scenario": ["a", "hive"],
    }
    for service, names in reads.items():
        env = env_of(service, conf_dirs=True)
        dirs = {k: v for k, v in env.items() if k.endswith("_CONF_DIR")}
        want = {
            "FERRY_METASTORE__HIVE_CONF_DIR"
            if n == "hive"
            else f"FERRY_CLUSTERS__{n.upper()}__HADOOP_CONF_DIR": f"{CLIENTS}/"
            + ("hive" if n == "hive" else f"cluster-{n}")
            for n in names
        }
        assert dirs == want, service
        for path in dirs.values():
            volume = "clients-hive" if path.endswith("hive") else f"clients-{path[-1]}"
            assert mount(service, path) == f"{volume}:ro", service
    writers = {"namenode-a": "cluster-a", "namenode-b": "cluster-b", "hive-metastore": "hive"}
    for service, name in writers.items():
        assert mount(service, f"{CLIENTS}/{name}") == f"clients-{name.removeprefix('cluster-')}"


def test_the_files_a_namenode_writes_give_a_stage_its_clusters_principals(tmp_path: Path) -> None:
    from ferry_kit.stack.client_conf import write_own_client_conf

    namenode = ec.settings_from_env({**env_of("namenode-b"), "FERRY_VAR_DIR": str(tmp_path)})
    written = write_own_client_conf(namenode, "hdfs-b-namenode")
    assert written == tmp_path / "conf" / "clients" / "cluster-b"
    env = {**env_of("transform"), "FERRY_CLUSTERS__B__HADOOP_CONF_DIR": str(written)}
    props = ec.settings_from_env(env).cluster("b").hadoop_properties
    assert (
        props["dfs.namenode.kerberos.principal"],
        props["hadoop.security.auth_to_local"],
    ) == (
        f"hdfs/namenode-b@{REALM['b']}",
        "RULE:[1:$1@$0](ferry@A\\.FERRY\\.LOCAL)s/@.*//\nDEFAULT",
    )
    assert write_own_client_conf(namenode, "hdfs-b-datanode") is None
