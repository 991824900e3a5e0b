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
from pathlib import Path
from xml.etree import ElementTree

import pytest
from tests.compose import compose_checks as cc

COMPOSE = cc.load_compose()
FERRY = cc.ferry_services(COMPOSE)
DOCKERFILE_TEXT = cc.DOCKERFILE.read_text(encoding="utf-8")
IMAGE_ENV = cc.dockerfile_env(DOCKERFILE_TEXT)


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
    expected = {
        # A standalone cluster must run the driver's Spark version.
        "apache/spark": pins["pyspark"],
        "apache/kafka": local["kafka.version"],
        "apache/hadoop": local["hadoop.version"],
        "ferry": project["project"]["version"],
    }
    assert cc.version_problems(COMPOSE, expected) == []


def test_one_ferry_service_per_stage_run_by_command() -> None:
    commands = sorted(tuple(svc["command"]) for name, svc in FERRY.items() if name != "scenario")
    assert commands == sorted(("run", stage) for stage in cc.STAGES)
    from ferry.run_cli import Service

    assert {s.value for s in Service} == set(cc.STAGES)


def test_ferry_services_share_one_env_anchor_and_build() -> None:
    anchor = COMPOSE["x-ferry-env"]
    for name, svc in FERRY.items():
        env = cc.service_env(svc)
        assert {k: env[k] for k in anchor} == {k: str(v) for k, v in anchor.items()}, name
        assert svc["build"] == {"context": ".", "dockerfile": cc.FERRY_DOCKERFILE}, name


@pytest.mark.parametrize("service", sorted(FERRY))
def test_ferry_env_names_are_real_settings(service: str) -> None:
    assert cc.unknown_ferry_keys(container_env(service)) == []


@pytest.mark.parametrize("service", sorted(FERRY))
def test_ferry_settings_build_from_the_container_env_and_point_into_the_stack(service: str) -> None:
    from ferry.core.config import REPO_ROOT

    s = cc.settings_from_env(container_env(service))
    assert s.kafka.bootstrap_servers == "kafka:9092"
    assert s.cluster("b").fs_url == "hdfs://hdfs-b-namenode:8020"
    assert s.cluster("b").webhdfs_url == "http://hdfs-b-namenode:9870"
    assert s.cluster("a").fs_url == "hdfs://hdfs-a-namenode:8020"
    assert s.cluster("a").webhdfs_url == "http://hdfs-a-namenode:9870"
    assert s.metastore.uri == "thrift://hive-metastore:9083"
    assert s.spark.master_url == "spark://spark-master-1:7077,spark-master-2:7077"
    assert s.paths.nas_dir == Path("/nas")
    assert cc.address_problems(COMPOSE, service, s) == []
    assert cc.checkout_path_problems(s, REPO_ROOT) == []


def test_hive_warehouse_is_where_ferry_writes_it() -> None:
    s = cc.settings_from_env(container_env("load"))
    conf = ElementTree.parse(cc.REPO / "deploy" / "docker" / "hive" / "hive-site.xml").getroot()
    props = {p.findtext("name"): p.findtext("value") for p in conf.iter("property")}
    want = f"{s.cluster('a').fs_url}{s.metastore.warehouse_path}"
    assert props["metastore.warehouse.dir"] == props["hive.metastore.warehouse.dir"] == want
    hive = COMPOSE["services"]["hive-metastore"]
    assert cc.service_env(hive)["SERVICE_NAME"] == "metastore"
    assert "./deploy/docker/hive:/hive-custom-conf:ro" in hive["volumes"]
    assert cc.service_env(hive)["HIVE_CUSTOM_CONF_DIR"] == "/hive-custom-conf"


def test_depends_on_waits_for_healthy_servers() -> None:
    assert cc.depends_on_problems(COMPOSE) == []


def test_spark_masters_in_zookeeper_recovery_and_worker_on_both() -> None:
    assert cc.spark_problems(COMPOSE) == []


def test_each_datanode_advertises_its_own_reachable_name() -> None:
    services = COMPOSE["services"]
    for cluster in ("a", "b"):
        dn = f"hdfs-{cluster}-datanode"
        env = cc.service_env(services[dn])
        assert env["HDFS-SITE.XML_dfs.datanode.hostname"] == services[dn]["hostname"] == dn
        assert env["HDFS-SITE.XML_dfs.namenode.rpc-address"] == f"hdfs-{cluster}-namenode:8020"
        nn = cc.service_env(services[f"hdfs-{cluster}-namenode"])
        assert nn["ENSURE_NAMENODE_DIR"] + "" == nn[
            "HDFS-SITE.XML_dfs.namenode.name.dir"
        ].removeprefix("file://")


def test_nas_is_a_bind_mount_of_var_compose_nas() -> None:
    for name, svc in FERRY.items():
        assert "./var/compose-nas:/nas" in svc["volumes"], name


# --- the image ---------------------------------------------------------------------------------


def test_dockerfile_installs_pyproject_dependencies_as_non_root() -> None:
    assert cc.dockerfile_problems(DOCKERFILE_TEXT, cc.pyproject()) == []


def test_build_context_leaves_out_venv_and_local_state() -> None:
    assert cc.dockerignore_problems(cc.DOCKERIGNORE.read_text(encoding="utf-8")) == []


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
    assert cc.unknown_ferry_keys({key: "x", "OTHER": "y"}) == [key]


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
    assert cc.unknown_ferry_keys({key: "x"}) == []


def test_a_cluster_naming_only_its_host_keeps_its_default_ports() -> None:
    s = cc.settings_from_env({"FERRY_CLUSTERS__A__HOST": "hdfs-a-namenode"})
    assert s.cluster("a").fs_url == "hdfs://hdfs-a-namenode:28020"
    assert s.cluster("b").fs_url == "hdfs://127.0.0.1:18020"


def test_address_check_rejects_foreign_hosts_and_a_wrong_driver_host() -> None:
    env = {
        **container_env("load"),
        "FERRY_METASTORE__HOST": "metastore.example",
        "FERRY_SPARK__HOST": "extract",
    }
    problems = cc.address_problems(COMPOSE, "load", cc.settings_from_env(env))
    assert any("metastore host 'metastore.example'" in p for p in problems), problems
    assert any("FERRY_SPARK__HOST" in p for p in problems), problems
    no_dep = copy.deepcopy(COMPOSE)
    del no_dep["services"]["load"]["depends_on"]["hive-metastore"]
    problems = cc.address_problems(no_dep, "load", cc.settings_from_env(container_env("load")))
    assert any("does not depend on it" in p for p in problems), problems


def test_path_check_rejects_checkout_defaults() -> None:
    from ferry.core.config import REPO_ROOT

    env = {k: v for k, v in container_env("tracker").items() if k != "FERRY_TRACKER__DATA_DIR"}
    problems = cc.checkout_path_problems(cc.settings_from_env(env), REPO_ROOT)
    assert any(p.startswith("tracker.data_dir") for p in problems), problems


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
    bad["services"]["spark-master-2"]["environment"]["SPARK_MASTER_OPTS"] = (
        "-Dspark.deploy.zookeeper.url=zookeeper:2181"
    )
    bad["services"]["spark-worker"]["command"][-1] = "spark://spark-master-1:7077"
    problems = cc.spark_problems(bad)
    assert any("spark-master-2" in p and "recoveryMode" in p for p in problems)
    assert any("spark-worker" in p for p in problems)


@pytest.mark.parametrize(
    ("old", "new", "expect"),
    [
        (
            "pip install --no-cache-dir .",
            "pip install --no-cache-dir . pyspark==4.1.0",
            "not only the project",
        ),
        ("pip install --no-cache-dir .", "pip install -r requirements.txt .", "pyproject.toml's"),
        ("pip install --no-cache-dir .", "pip install --no-deps .", "pyproject.toml's"),
        ("pip install --no-cache-dir .", "echo no install", "no `pip install .`"),
        ("USER ferry", "USER root", "non-root"),
        ("USER ferry", "", "non-root"),
        ('ENTRYPOINT ["ferry"]', "ENTRYPOINT ferry", "ENTRYPOINT"),
        ("openjdk-17-jre-headless", "openjdk-11-jre-headless", "Java 17"),
        ("FROM python:3.11-slim-bookworm", "FROM python:3.12-slim", "python:3.11-slim-bookworm"),
        ("FERRY_PATHS__SCHEMAS_DIR=", "FERRY_PATHS__SCHEMA_DIR=", "FERRY_PATHS__SCHEMA_DIR"),
        ("COPY datasets ./datasets", "", "COPY datasets"),
    ],
)
def test_dockerfile_check_rejects(old: str, new: str, expect: str) -> None:
    assert old in DOCKERFILE_TEXT
    problems = cc.dockerfile_problems(DOCKERFILE_TEXT.replace(old, new), cc.pyproject())
    assert any(expect in p for p in problems), problems


def test_dockerfile_check_rejects_a_project_needing_another_python() -> None:
    project = {"project": {"requires-python": ">=3.12"}}
    assert any("3.11" in p for p in cc.dockerfile_problems(DOCKERFILE_TEXT, project))


def test_dockerignore_check_rejects_a_context_with_the_venv() -> None:
    assert cc.dockerignore_problems("*\n!.venv\n!services/\n") != []
    assert cc.dockerignore_problems("__pycache__\n") != []
