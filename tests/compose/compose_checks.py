"""Checks of the compose deployment that need no Docker engine.

Each ``*_problems`` function takes parsed input (a compose mapping, Dockerfile text, …) and returns
a list of human-readable problems, empty when all is well, so that tests can feed them broken inputs
and prove they fail (a check that cannot fail is a defect). Used by ``test_compose_static.py``;
the image's Dockerfile and .dockerignore are checked by ``image_checks.py``.

Sources of the rules: the Compose Specification (schema vendored as ``compose-spec.json``, see
README.md here), ``services/ferry/settings/__init__.py`` (settings names: prefix ``FERRY_``, nested
delimiter ``__``), ``deploy/local/pom.xml`` (server versions of the local stack) and pyproject.toml.
"""

from __future__ import annotations

import json
import re
import tomllib
from collections.abc import Mapping
from pathlib import Path
from typing import Any
from xml.etree import ElementTree

import yaml

from ferry_kit.settings import StackSpark

REPO = Path(__file__).resolve().parents[2]
COMPOSE_FILE = REPO / "docker-compose.yml"
DOCKERFILE = REPO / "deploy" / "docker" / "Dockerfile"
DOCKERIGNORE = REPO / "deploy" / "docker" / "Dockerfile.dockerignore"
SCHEMA_FILE = Path(__file__).resolve().parent / "compose-spec.json"
PYPROJECT = REPO / "pyproject.toml"
LOCAL_POM = REPO / "deploy" / "local" / "pom.xml"

#: The Dockerfile path the Ferry services build from (relative to the compose file).
FERRY_DOCKERFILE = "deploy/docker/Dockerfile"
#: The services, one compose service each, chosen by ``ferry run <service>``.
STAGES = ("extract", "transform", "transfer", "load", "tracker", "gc")

#: An exact version tag: X.Y.Z, optionally with a variant suffix (``-scala2.13-java17-ubuntu``).
_EXACT_TAG = re.compile(r"^v?\d+\.\d+\.\d+(?:[-.+][A-Za-z0-9._-]+)?$")


# --- loading --------------------------------------------------------------------------------------


def load_compose(path: Path = COMPOSE_FILE) -> dict[str, Any]:
    """The compose file as a mapping (YAML anchors and ``<<`` merge keys resolved)."""
    data = yaml.safe_load(path.read_text(encoding="utf-8"))
    if not isinstance(data, dict):
        raise ValueError(f"{path}: top level must be a mapping")
    return data


def load_schema(path: Path = SCHEMA_FILE) -> dict[str, Any]:
    return json.loads(path.read_text(encoding="utf-8"))


def pyproject() -> dict[str, Any]:
    return tomllib.loads(PYPROJECT.read_text(encoding="utf-8"))


def local_stack_versions(pom: Path = LOCAL_POM) -> dict[str, str]:
    """``<properties>`` of deploy/local/pom.xml, e.g. ``{"kafka.version": "4.1.1", ...}``."""
    root = ElementTree.parse(pom).getroot()
    ns = {"m": root.tag[1:].split("}")[0]} if root.tag.startswith("{") else {}
    props = root.find("m:properties", ns) if ns else root.find("properties")
    if props is None:
        return {}
    return {child.tag.split("}")[-1]: (child.text or "").strip() for child in props}


# --- schema ---------------------------------------------------------------------------------------


def schema_problems(compose: Mapping[str, Any], schema: Mapping[str, Any]) -> list[str]:
    """Violations of the Compose Specification JSON schema, one line each."""
    from jsonschema import Draft201909Validator

    # The snapshot declares draft 2019-09 under a URI jsonschema does not recognise
    # ("http://json-schema.org/draft/2019-09/schema#"), so name the draft explicitly.
    Draft201909Validator.check_schema(schema)
    validator = Draft201909Validator(schema)
    return [
        f"{'/'.join(str(p) for p in err.absolute_path) or '<root>'}: {err.message}"
        for err in sorted(
            validator.iter_errors(compose), key=lambda e: list(map(str, e.absolute_path))
        )
    ]


# --- images ---------------------------------------------------------------------------------------


def split_image(ref: str) -> tuple[str, str | None, str | None]:
    """``(repository, tag, digest)`` of an image reference (a registry port is not a tag)."""
    digest = None
    if "@" in ref:
        ref, digest = ref.split("@", 1)
    last = ref.rsplit("/", 1)[-1]
    if ":" in last:
        repo, tag = ref.rsplit(":", 1)
        return repo, tag, digest
    return ref, None, digest


def image_problems(compose: Mapping[str, Any]) -> list[str]:
    """Every service names an image with an exact version tag: no ``latest``, no bare name, no
    floating ``3.9``, no ``${VAR}`` that could change it at run time."""
    problems = []
    for name, svc in (compose.get("services") or {}).items():
        ref = (svc or {}).get("image")
        if not ref:
            problems.append(f"service {name}: no image (a built service must still name its tag)")
            continue
        if "$" in ref:
            problems.append(f"service {name}: image {ref!r} is interpolated, not pinned")
            continue
        _, tag, digest = split_image(ref)
        if tag is None and digest is None:
            problems.append(f"service {name}: image {ref!r} has no tag (means latest)")
        elif tag is not None and not _EXACT_TAG.match(tag):
            problems.append(
                f"service {name}: image {ref!r} tag {tag!r} is not an exact version X.Y.Z"
            )
    return problems


def image_version(ref: str) -> str:
    """The ``X.Y.Z`` starting an image's tag (``4.3.0-scala2.13-java17-ubuntu`` → ``4.3.0``)."""
    _, tag, _ = split_image(ref)
    m = re.match(r"v?(\d+\.\d+\.\d+)", tag or "")
    return m.group(1) if m else ""


def version_problems(compose: Mapping[str, Any], expected: Mapping[str, str]) -> list[str]:
    """Images whose version differs from the one Ferry's clients or the local stack use.

    ``expected`` maps an image repository (``apache/spark``) to its required ``X.Y.Z``. A Spark
    standalone cluster must run the driver's version (pyspark); Kafka and Hadoop follow the local
    stack (deploy/local/pom.xml) so both deployments test the same servers.
    """
    problems = []
    seen = set()
    for name, svc in (compose.get("services") or {}).items():
        ref = (svc or {}).get("image") or ""
        repo, _, _ = split_image(ref)
        if repo in expected:
            seen.add(repo)
            got = image_version(ref)
            if got != expected[repo]:
                problems.append(
                    f"service {name}: {ref} is version {got or '?'}, expected {expected[repo]}"
                )
    problems += [f"no service uses {repo}" for repo in sorted(set(expected) - seen)]
    return problems


def service_env(svc: Mapping[str, Any]) -> dict[str, str]:
    """A service's ``environment`` as a dict (list form ``K=V`` accepted)."""
    env = svc.get("environment") or {}
    if isinstance(env, list):
        return dict(item.split("=", 1) if "=" in item else (item, "") for item in env)
    return {str(k): "" if v is None else str(v) for k, v in env.items()}


def ferry_services(compose: Mapping[str, Any]) -> dict[str, dict[str, Any]]:
    """Services running Ferry's one image (``ferry:<version>``): every server and every stage."""
    return {
        name: svc
        for name, svc in (compose.get("services") or {}).items()
        if str((svc or {}).get("image", "")).startswith("ferry:")
    }


def stage_of(svc: Mapping[str, Any]) -> str | None:
    """The stage a service runs: ``command: [run, <stage>]`` or an entrypoint that execs
    ``ferry run <stage>``; None for a server (``stack run-one``) or the test driver."""
    cmd = [str(c) for c in svc.get("command") or []]
    if cmd[:1] == ["run"] and len(cmd) == 2:
        return cmd[1]
    found = re.search(r"\bferry run (\w+)", " ".join(str(e) for e in svc.get("entrypoint") or []))
    return found.group(1) if found else None


def server_component(svc: Mapping[str, Any]) -> str | None:
    """The stack component a server service runs (``command: [stack, run-one, <component>]``)."""
    cmd = [str(c) for c in svc.get("command") or []]
    return cmd[2] if cmd[:2] == ["stack", "run-one"] and len(cmd) == 3 else None


# --- topology -------------------------------------------------------------------------------------


def _hosts(addresses: str) -> list[str]:
    """Host names in ``h:p,h:p`` or ``scheme://h:p,h:p/...``."""
    rest = addresses.split("://", 1)[-1].split("/", 1)[0]
    return [part.rsplit(":", 1)[0] for part in rest.split(",") if part]


def depends_closure(compose: Mapping[str, Any], name: str) -> set[str]:
    services = compose.get("services") or {}
    seen: set[str] = set()
    todo = [name]
    while todo:
        deps = (services.get(todo.pop()) or {}).get("depends_on") or {}
        for dep in deps:
            if dep not in seen:
                seen.add(dep)
                todo.append(dep)
    return seen


def address_problems(compose: Mapping[str, Any], name: str, settings: Any) -> list[str]:
    """Where the settings of Ferry service ``name`` point: every server host is a compose service,
    the ones its stage needs are started (healthy) before it, and the NAS is a mounted volume."""
    services = compose.get("services") or {}
    svc = services.get(name) or {}
    problems = []
    used = {
        "kafka": _hosts(settings.kafka.bootstrap_servers),
        "clusters.a": [settings.cluster("a").host, settings.cluster("a").datanode_host],
        "clusters.b": [settings.cluster("b").host, settings.cluster("b").datanode_host],
        "metastore": [settings.metastore.host],
        "zookeeper": [settings.zookeeper.host],
        "spark master": _hosts(settings.spark.master_url),
    }
    for what, hosts in used.items():
        problems += [
            f"{name}: {what} host {h!r} is not a compose service"
            for h in hosts
            if h not in services and h != "0.0.0.0"  # a server binding all its networks
        ]
    closure = depends_closure(compose, name)
    stage = stage_of(svc)
    # What a stage (or the test driver) needs started first; a server waits only for its own.
    needs = {"kafka": used["kafka"]} if stage or name == "scenario" else {}
    if stage in ("extract", "transform", "transfer"):
        needs["clusters.b"] = used["clusters.b"]
    if stage in ("transfer", "load"):
        needs["clusters.a"] = used["clusters.a"]
    if stage in ("transform", "load"):
        needs["spark master"] = used["spark master"]
    if stage == "load":
        needs["metastore"] = used["metastore"]
    for what, hosts in needs.items():
        problems += [
            f"{name}: needs {what} at {h!r} but does not depend on it (directly or through others)"
            for h in hosts
            if h in services and h not in closure
        ]
    spark_host = getattr(settings.spark, "host", None)
    entry = " ".join(str(e) for e in svc.get("entrypoint") or [])
    if stage in ("transform", "load") and not svc.get("hostname"):
        # Scalable (no fixed hostname): the driver advertises its container's own address.
        if "FERRY_SPARK__HOST=$$(hostname -i)" not in entry or spark_host in services:
            problems.append(
                f"{name}: FERRY_SPARK__HOST={spark_host!r}: a replica's Spark driver must "
                "advertise its own address (entrypoint: FERRY_SPARK__HOST=$(hostname -i))"
            )
    elif (stage in ("transform", "load") or name == "scenario") and spark_host != svc.get(
        "hostname"
    ):
        problems.append(
            f"{name}: FERRY_SPARK__HOST={spark_host!r} must be the container's hostname "
            f"{svc.get('hostname')!r} (the Spark driver binds and advertises it)"
        )
    if stage != "extract" and name != "scenario":
        return problems  # only extract and the test driver read the NAS
    nas = str(settings.paths.nas_dir)
    targets = [
        str(v).split(":")[1] for v in svc.get("volumes") or [] if isinstance(v, str) and ":" in v
    ]
    if nas not in targets:
        problems.append(f"{name}: NAS dir {nas} is not a mounted volume (mounts: {targets})")
    return problems


def depends_on_problems(compose: Mapping[str, Any]) -> list[str]:
    """``depends_on`` uses the long form; a dependency with a health check is waited for healthy;
    every server (``stack run-one``) has a health check, so ``up --wait`` means 'working'."""
    services = compose.get("services") or {}
    problems = []
    for name, svc in services.items():
        svc = svc or {}
        if server_component(svc) and not svc.get("healthcheck"):
            problems.append(f"service {name}: no healthcheck")
        deps = svc.get("depends_on")
        if deps is None:
            continue
        if isinstance(deps, list):
            problems.append(f"service {name}: depends_on must use the long form with a condition")
            continue
        for dep, spec in deps.items():
            if dep not in services:
                problems.append(f"service {name}: depends on unknown service {dep}")
                continue
            cond = (spec or {}).get("condition")
            if (services[dep] or {}).get("healthcheck") and cond != "service_healthy":
                problems.append(
                    f"service {name}: waits for {dep} with {cond!r}, not service_healthy"
                )
    return problems


def spark_problems(compose: Mapping[str, Any]) -> list[str]:
    """Spark clusters of ``stack run-one spark-master-N`` services, grouped by their ZooKeeper
    recovery path (``FERRY_SPARK__ZOOKEEPER_DIR``; recovery is always ZOOKEEPER,
    ferry_kit.stack.spark_daemons): the pair of the default path has two masters; each master binds
    its own hostname; every worker and Spark stage names ``spark://`` + its cluster's masters."""

    services = compose.get("services") or {}
    default_dir = StackSpark().zookeeper_dir
    problems = []
    clusters: dict[str, list[str]] = {}
    for name, svc in services.items():
        comp = server_component(svc or {})
        if not comp or not comp.startswith("spark-master-"):
            continue
        env = service_env(svc)
        if env.get("FERRY_SPARK__HOST") != svc.get("hostname"):
            problems.append(
                f"{name}: FERRY_SPARK__HOST must be its hostname {svc.get('hostname')!r}"
            )
        zk_dir = env.get("FERRY_SPARK__ZOOKEEPER_DIR", default_dir)
        clusters.setdefault(zk_dir, []).append(f"{svc.get('hostname')}:7077")
    if len(clusters.get(default_dir, [])) != 2:
        problems.append(
            f"expected 2 Spark masters recovering through {default_dir}, found {clusters}"
        )
    urls = {d: "spark://" + ",".join(sorted(m)) for d, m in clusters.items()}
    for name, svc in services.items():
        svc = svc or {}
        if server_component(svc) != "spark-worker" and stage_of(svc) not in ("transform", "load"):
            continue
        env = service_env(svc)
        want = urls.get(env.get("FERRY_SPARK__ZOOKEEPER_DIR", default_dir))
        got = env.get("FERRY_SPARK__MASTER_URL_OVERRIDE")
        if got != want:
            problems.append(f"{name}: FERRY_SPARK__MASTER_URL_OVERRIDE={got!r}, expected {want!r}")
    return problems
