"""Static checks of the compose deployment: no Docker engine needed, run in CI.

What a Docker engine would only reveal at `docker compose up` (or worse, at the first file) is
caught here: a compose file the Compose Specification rejects, a floating image tag, a FERRY_*
variable that is no setting (pydantic-settings ignores a misspelt top-level one silently), settings
that do not build or point at hosts that are not in the stack, a Spark cluster on another version
than the driver, an image whose Python dependencies are not pyproject.toml's. Every checker also
gets a broken input below and must reject it.
"""

from __future__ import annotations

import copy
import hashlib
import importlib.metadata
import re
import tempfile
from pathlib import Path
from xml.etree import ElementTree

import pytest
from tests.compose import compose_checks as cc
from tests.compose import env_checks as ec
from tests.compose import image_checks as ic

COMPOSE = cc.load_compose()
FERRY = cc.ferry_services(COMPOSE)
DOCKERFILE_TEXT = cc.DOCKERFILE.read_text(encoding="utf-8")
IMAGE_ENV = ic.dockerfile_env(DOCKERFILE_TEXT)


def container_env(service: str) -> dict[str, str]:
    """What a Ferry container sees: the image's ENV, overridden by the service's environment."""
    return {**IMAGE_ENV, **cc.service_env(COMPOSE["services"][service])}


# --- the compose file ----------------------------------------------------------------------------


def test_vendored_schema_is_unmodified() -> None:
    readme = (Path(cc.__file__).parent / "README.md").read_text(encoding="utf-8")
    recorded = re.search(r"sha256: `([0-9a-f]{64})`", readme)
    assert recorded, "tests/compose/README.md must record the schema's sha256"
    assert hashlib.sha256(cc.SCHEMA_FILE.read_bytes()).hexdigest() == recorded.group(1)


def test_compose_file_matches_the_compose_specification() -> None:
    assert cc.schema_problems(COMPOSE, cc.load_schema()) == []


def test_every_image_is_pinned_to_an_exact_version() -> None:
    assert cc.image_problems(COMPOSE) == []


def test_image_versions_match_ferry_clients_and_the_local_stack() -> None:
    project = cc.pyproject()
    pins = dict(
        re.match(r"([A-Za-z0-9_.-]+)==(\S+)", d).groups()  # type: ignore[union-attr]
        for d in project["project"]["dependencies"]
        if "==" in d
    )
    local = cc.local_stack_versions()
    assert importlib.metadata.version("pyspark") == pins["pyspark"]
    # Every server and stage runs the one image; its Spark, Kafka and Hadoop ARE the local stack's:
    # the wheelhouse is resolved from pyproject.toml (pyspark's distribution runs the Spark daemons,
    # ZooKeeper and the metastore) and the jars are deploy/local's poms' (`make install`).
    assert local["kafka.version"] and local["hadoop.version"]
    assert cc.version_problems(COMPOSE, {"ferry": project["project"]["version"]}) == []
    assert {svc["image"] for svc in COMPOSE["services"].values()} == {
        f"ferry:{project['project']['version']}"
    }
    make = (cc.REPO / "Makefile").read_text(encoding="utf-8")
    assert "pip wheel -q --wheel-dir $(COMPOSE_CTX)/wheels . " in make
    assert "cp -rL var/jars $(COMPOSE_CTX)/jars" in make


def test_one_ferry_service_per_stage_run_by_command() -> None:
    stages = sorted(s for s in map(cc.stage_of, FERRY.values()) if s)
    assert stages == sorted(cc.STAGES)
    servers = sorted(c for c in map(cc.server_component, FERRY.values()) if c)
    from ferry_kit.stack.components import build_components

    assert set(servers) == {c.name for c in build_components(ec.settings_from_env({}))}
    from ferry.core.services import SERVICES

    assert {s.name for s in SERVICES} == set(cc.STAGES)


def test_ferry_services_share_one_env_anchor_and_build() -> None:
    anchor = COMPOSE["x-ferry-env"]
    # What a service may set for itself: a server's own bind address, cluster A's Spark.
    own = {
        "FERRY_ZOOKEEPER__HOST",
        "FERRY_SPARK__MASTER_URL_OVERRIDE",
        "FERRY_SPARK__ZOOKEEPER_DIR",
    }
    for name, svc in FERRY.items():
        env = cc.service_env(svc)
        shared = {k: str(v) for k, v in anchor.items() if k not in own}
        assert {k: env[k] for k in shared} == shared, name
    builds = [svc["build"] for svc in FERRY.values() if "build" in svc]
    assert builds == [{"context": ".", "dockerfile": cc.FERRY_DOCKERFILE}]
    assert set(FERRY) == set(COMPOSE["services"])


@pytest.mark.parametrize("service", sorted(FERRY))
def test_ferry_env_names_are_real_settings(service: str) -> None:
    assert ec.unknown_ferry_keys(container_env(service)) == []


@pytest.mark.parametrize("service", sorted(FERRY))
def test_ferry_settings_build_from_the_container_env_and_point_into_the_stack(service: str) -> None:
    from tests.support.paths import REPO_ROOT

    s = ec.settings_from_env(container_env(service))
    assert s.kafka.bootstrap_servers == "kafka:9092"
    assert s.cluster("b").fs_url == "hdfs://namenode-b:8020"
    assert s.cluster("b").webhdfs_url == "http://namenode-b:9870"
    assert s.cluster("b").datanode_host == "datanode-b"
    assert s.cluster("a").fs_url == "hdfs://namenode-a:8020"
    assert s.cluster("a").webhdfs_url == "http://namenode-a:9870"
    assert s.cluster("a").datanode_host == "datanode-a"
    assert s.metastore.uri == "thrift://hive-metastore:9083"
    # Cluster A's Spark (load, and the driver that counts Hive rows) or cluster B's pair.
    spark_a = {"spark-master-a", "spark-worker-a", "load", "scenario"}
    assert s.spark.master_url == (
        "spark://spark-master-a:7077"
        if service in spark_a
        else "spark://spark-master-1:7077,spark-master-2:7077"
    )
    assert s.paths.nas_dir == Path("/nas")
    assert cc.address_problems(COMPOSE, service, s) == []
    assert ic.checkout_path_problems(s, REPO_ROOT) == []


def test_hive_warehouse_is_where_ferry_writes_it() -> None:
    from ferry_kit.stack.base import Layout
    from ferry_kit.stack.servers import hive_metastore

    s = ec.settings_from_env(container_env("load"))
    ms = ec.settings_from_env(container_env("hive-metastore"))
    # The metastore container renders its hive-site.xml with the stack's own code.
    with tempfile.TemporaryDirectory() as var:
        hive_metastore(ms, Layout(Path(var))).prepare()
        conf = ElementTree.parse(Path(var) / "conf" / "hive-metastore" / "hive-site.xml")
    props = {p.findtext("name"): p.findtext("value") for p in conf.getroot().iter("property")}
    want = f"{s.cluster('a').fs_url}{s.metastore.warehouse_path}"
    assert props["hive.metastore.warehouse.dir"] == want == "hdfs://namenode-a:8020/warehouse"
    hive = COMPOSE["services"]["hive-metastore"]
    assert cc.server_component(hive) == "hive-metastore"
    assert hive["networks"] == ["cluster-a"]


def test_depends_on_waits_for_healthy_servers() -> None:
    assert cc.depends_on_problems(COMPOSE) == []


def test_spark_masters_in_zookeeper_recovery_and_worker_on_both() -> None:
    assert cc.spark_problems(COMPOSE) == []


def test_each_datanode_advertises_its_own_reachable_name() -> None:
    from ferry_kit.stack.base import Layout
    from ferry_kit.stack.servers import hdfs_conf

    services = COMPOSE["services"]
    for cluster in ("a", "b"):
        dn, nn = f"datanode-{cluster}", f"namenode-{cluster}"
        assert cc.server_component(services[dn]) == f"hdfs-{cluster}-datanode"
        assert cc.server_component(services[nn]) == f"hdfs-{cluster}-namenode"
        s = ec.settings_from_env(container_env(dn))
        with tempfile.TemporaryDirectory() as var:
            d = hdfs_conf(Layout(Path(var)), cluster, s.cluster(cluster))
            conf = ElementTree.parse(d / "hdfs-site.xml").getroot()
        props = {p.findtext("name"): p.findtext("value") for p in conf.iter("property")}
        assert props["dfs.datanode.hostname"] == services[dn]["hostname"] == dn
        assert props["dfs.datanode.address"] == f"{dn}:9866"
        assert (
            props["dfs.namenode.rpc-address"] == f"{nn}:8020" == f"{services[nn]['hostname']}:8020"
        )


def test_nas_is_a_bind_mount_of_var_compose_nas() -> None:
    readers = {n for n, svc in FERRY.items() if cc.stage_of(svc) == "extract"} | {"scenario"}
    assert readers == {"extract", "scenario"}
    for name in readers:
        assert "./var/compose-nas:/nas" in FERRY[name]["volumes"], name


# --- the image ---------------------------------------------------------------------------------


def test_dockerfile_installs_pyproject_dependencies_as_non_root() -> None:
    assert ic.dockerfile_problems(DOCKERFILE_TEXT, cc.pyproject()) == []


def test_build_context_leaves_out_venv_and_local_state() -> None:
    assert ic.dockerignore_problems(cc.DOCKERIGNORE.read_text(encoding="utf-8")) == []


def test_makefile_compose_targets() -> None:
    make = (cc.REPO / "Makefile").read_text(encoding="utf-8")
    for target, command in (
        ("compose-up", "docker compose up"),
        ("compose-down", "docker compose down"),
        ("compose-test", "tests/compose"),
    ):
        body = re.search(rf"^{target}:.*\n((?:\t.*\n)+)", make, re.M)
        assert body and command in body.group(1), target


# --- the checkers reject broken inputs ------------------------------------------------------------


def test_schema_check_rejects_an_unknown_key_and_a_bad_condition() -> None:
    bad = copy.deepcopy(COMPOSE)
    bad["services"]["kafka"]["imagee"] = "apache/kafka:4.1.1"
    bad["services"]["extract"]["depends_on"]["kafka"]["condition"] = "service_ready"
    problems = cc.schema_problems(bad, cc.load_schema())
    assert any("kafka" in p for p in problems) and any("extract" in p for p in problems), problems


@pytest.mark.parametrize(
    "ref",
    [
        "zookeeper",
        "zookeeper:latest",
        "zookeeper:3.9",
        "${IMG}",
        "registry:5000/zookeeper",
        "apache/spark:python3",
    ],
)
def test_image_check_rejects_unpinned(ref: str) -> None:
    assert cc.image_problems({"services": {"x": {"image": ref}}}) != []


@pytest.mark.parametrize(
    "ref",
    [
        "zookeeper:3.9.4",
        "registry:5000/team/zk:3.9.4",
        "apache/spark:4.3.0-scala2.13-java17-ubuntu",
        "zk@sha256:" + "a" * 64,
    ],
)
def test_image_check_accepts_pinned(ref: str) -> None:
    assert cc.image_problems({"services": {"x": {"image": ref}}}) == []


def test_image_check_rejects_a_service_without_image() -> None:
    assert cc.image_problems({"services": {"x": {"build": "."}}}) != []


def test_version_check_rejects_a_spark_cluster_on_another_version() -> None:
    compose = {"services": {"m": {"image": "apache/spark:4.1.2-scala2.13-java17-ubuntu"}}}
    assert cc.version_problems(compose, {"apache/spark": "4.3.0"}) != []
    assert cc.version_problems({"services": {}}, {"apache/spark": "4.3.0"}) == [
        "no service uses apache/spark"
    ]


@pytest.mark.parametrize(
    "key",
    [
        "FERRY_VARDIR",
        "FERRY_KAFKA__BOOTSTRAP_SERVER",
        "FERRY_CLUSTERS__A__HOSTNAME",
        "FERRY_SPARK__MASTER_URL",
        "FERRY_PATHS__SCHEMA_DIR",
        "FERRY_KAFKA_PORT",
    ],
)
def test_env_check_rejects_bogus_ferry_keys(key: str) -> None:
    assert ec.unknown_ferry_keys({key: "x", "OTHER": "y"}) == [key]


@pytest.mark.parametrize(
    "key",
    [
        "FERRY_CONFIG",
        "FERRY_KAFKA",
        "FERRY_CLUSTERS__C__HOST",
        "FERRY_CLUSTERS__A__DATANODE_ADDRESS_MAP",
        "FERRY_TRACKER__SLA_S__LOAD",
    ],
)
def test_env_check_accepts_real_names(key: str) -> None:
    assert ec.unknown_ferry_keys({key: "x"}) == []


def test_a_cluster_naming_only_its_host_keeps_its_default_ports() -> None:
    s = ec.settings_from_env({"FERRY_CLUSTERS__A__HOST": "hdfs-a-namenode"})
    assert s.cluster("a").fs_url == "hdfs://hdfs-a-namenode:28020"
    assert s.cluster("b").fs_url == "hdfs://127.0.0.1:18020"


def test_address_check_rejects_foreign_hosts_and_a_wrong_driver_host() -> None:
    env = {
        **container_env("load"),
        "FERRY_METASTORE__HOST": "metastore.example",
        "FERRY_SPARK__HOST": "extract",
    }
    problems = cc.address_problems(COMPOSE, "load", ec.settings_from_env(env))
    assert any("metastore host 'metastore.example'" in p for p in problems), problems
    assert any("FERRY_SPARK__HOST" in p for p in problems), problems
    no_dep = copy.deepcopy(COMPOSE)
    del no_dep["services"]["load"]["depends_on"]["hive-metastore"]
    problems = cc.address_problems(no_dep, "load", ec.settings_from_env(container_env("load")))
    assert any("does not depend on it" in p for p in problems), problems


def test_path_check_rejects_checkout_defaults() -> None:
    from tests.support.paths import REPO_ROOT

    # Local paths default under var_dir, which defaults under the working directory: a
    # container without FERRY_VAR_DIR (and without the tracker's own) writes into a checkout path.
    drop = ("FERRY_VAR_DIR", "FERRY_TRACKER__DATA_DIR")
    env = {k: v for k, v in container_env("tracker").items() if k not in drop}
    problems = ic.checkout_path_problems(ec.settings_from_env(env), REPO_ROOT)
    flagged = {p.split(" = ")[0] for p in problems}
    assert {"var_dir", "tracker.data_dir", "kerberos.ccache"} <= flagged, problems


def test_depends_on_check_rejects_short_form_started_and_missing_healthcheck() -> None:
    bad = copy.deepcopy(COMPOSE)
    bad["services"]["spark-worker"]["depends_on"] = ["spark-master-1"]
    bad["services"]["extract"]["depends_on"]["kafka"]["condition"] = "service_started"
    del bad["services"]["zookeeper"]["healthcheck"]
    problems = cc.depends_on_problems(bad)
    assert any("spark-worker" in p and "long form" in p for p in problems)
    assert any("extract" in p and "kafka" in p for p in problems)
    assert any("zookeeper: no healthcheck" in p for p in problems)


def test_spark_check_rejects_missing_recovery_and_a_worker_on_one_master() -> None:
    bad = copy.deepcopy(COMPOSE)
    # Master 2 recovering elsewhere leaves the pair without a standby.
    bad["services"]["spark-master-2"]["environment"] = {
        **cc.service_env(bad["services"]["spark-master-2"]),
        "FERRY_SPARK__ZOOKEEPER_DIR": "/elsewhere",
    }
    bad["services"]["spark-worker"]["environment"] = {
        **cc.service_env(bad["services"]["spark-worker"]),
        "FERRY_SPARK__MASTER_URL_OVERRIDE": "spark://spark-master-a:7077",
    }
    problems = cc.spark_problems(bad)
    assert any("expected 2 Spark masters" in p for p in problems), problems
    assert any("spark-worker" in p for p in problems), problems


@pytest.mark.parametrize(
    ("old", "new", "expect"),
    [
        (
            "/tmp/wheels/*.whl;",
            "/tmp/wheels/*.whl pyspark==4.1.0;",
            "pyproject.toml's",
        ),
        ("-q --no-index --find-links", "-q --find-links", "--no-index"),
        ("/tmp/wheels/*.whl;", "-r requirements.txt;", "pyproject.toml's"),
        ("pip install -q --no-index --find-links", "echo no install", "the wheelhouse"),
        ("COPY var/compose-context/jars/", "COPY jars/", "var/compose-context/jars"),
        ("USER ferry", "USER root", "non-root"),
        ("USER ferry", "", "non-root"),
        ('ENTRYPOINT ["ferry"]', "ENTRYPOINT ferry", "ENTRYPOINT"),
        ("openjdk-17-jre-headless", "openjdk-11-jre-headless", "Java 17"),
        ("FROM debian:bookworm-slim", "FROM python:3.12-slim", "debian:bookworm-slim"),
        ("FERRY_PATHS__DATASETS_DIR=", "FERRY_PATHS__DATASET_DIR=", "FERRY_PATHS__DATASET_DIR"),
        ("COPY datasets /opt/ferry/datasets", "", "COPY datasets"),
        (
            "COPY datasets /opt/ferry/datasets",
            "COPY services ./services\nCOPY datasets /opt/ferry/datasets",
            "from its wheel",
        ),
        ("/tmp/wheels/*.whl;", "/tmp/wheels/*.whl -e .;", "from its wheel"),
    ],
)
def test_dockerfile_check_rejects(old: str, new: str, expect: str) -> None:
    assert old in DOCKERFILE_TEXT
    problems = ic.dockerfile_problems(DOCKERFILE_TEXT.replace(old, new), cc.pyproject())
    assert any(expect in p for p in problems), problems


def test_dockerfile_check_rejects_a_project_needing_another_python() -> None:
    project = {"project": {"requires-python": ">=3.12"}}
    assert any("3.11" in p for p in ic.dockerfile_problems(DOCKERFILE_TEXT, project))


def test_dockerignore_check_rejects_a_context_with_the_venv() -> None:
    assert ic.dockerignore_problems("*\n!.venv\n!services/\n") != []
    assert ic.dockerignore_problems("__pycache__\n") != []
