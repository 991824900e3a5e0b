"""Each cluster's own YARN on the local stack (profile ``yarn``:
services/kit/ferry_kit/profiles/yarn.yaml): a ResourceManager, or an HA pair of them kept by the
stack's ZooKeeper (the embedded elector, recovery from ``ZKRMStateStore``), and one NodeManager,
all from the Maven Central ``hadoop-yarn-server-*`` 3.5.0 jars in ``var/jars/yarn``.

Components ``yarn-<cluster>-<rm id>`` (``yarn-a-rm1``, ``yarn-a-rm2``, ``yarn-b-rm1``) and
``yarn-<cluster>-nodemanager``, group ``yarn``. Each daemon reads its own configuration directory
``conf/yarn-<cluster>-<role>`` (core-site.xml and hdfs-site.xml of its cluster, its
``yarn-site.xml`` from :mod:`ferry_kit.stack.yarn_conf`, ``capacity-scheduler.xml``); the
clients find the RMs through ``yarn-site.xml`` in the cluster's client configuration directory
(:mod:`ferry_kit.stack.client_conf`).

Health (the RM's REST API, ``/ws/v1/cluster``): a ResourceManager answers ``info`` with
``haState`` ACTIVE or STANDBY (the second of a pair: one of the two ACTIVE and the other
STANDBY), and the ACTIVE one's detail lists its RUNNING applications (``ferry status``: each
Spark session of transform and load is one, named ``ferry-transform``/``ferry-load``); the
NodeManager is healthy once the active RM counts at least one active node (``metrics``).
"""

from __future__ import annotations

import shutil
from functools import partial
from pathlib import Path
from typing import Any

import requests

from ferry_kit.errors import StackError
from ferry_kit.settings import KitSettings, StackResourceManager, StackYarn
from ferry_kit.stack import health
from ferry_kit.stack.base import CONF_SRC, JAVA17_OPENS, Component, Layout, java
from ferry_kit.stack.client_conf import cluster_files, write_conf_dir
from ferry_kit.stack.kdc import yarn_keytab
from ferry_kit.stack.process import markers
from ferry_kit.stack.yarn_conf import capacity_scheduler, nodemanager_site, resourcemanager_site

RESOURCEMANAGER_MAIN = "org.apache.hadoop.yarn.server.resourcemanager.ResourceManager"
NODEMANAGER_MAIN = "org.apache.hadoop.yarn.server.nodemanager.NodeManager"


def rm_info(rm: StackResourceManager) -> dict[str, Any]:
    """``clusterInfo`` of ``rm`` (``GET /ws/v1/cluster/info``, which a standby RM answers itself
    instead of redirecting to the active one).

    Raises:
        health.Unhealthy: no answer, a redirect, or no ``clusterInfo``.
    """
    url = f"{rm.web_url}/ws/v1/cluster/info"
    try:
        resp = requests.get(
            url,
            timeout=(health.TIMEOUT_S, health.TIMEOUT_S),
            allow_redirects=False,
            headers={"Accept": "application/json"},
        )
        resp.raise_for_status()
        info = resp.json().get("clusterInfo")
    except (requests.RequestException, ValueError, AttributeError) as exc:
        raise health.Unhealthy(f"GET {url}: {exc}") from exc
    if resp.status_code != 200 or not isinstance(info, dict):
        raise health.Unhealthy(f"GET {url}: HTTP {resp.status_code}, no clusterInfo")
    return info


def rm_state(rm: StackResourceManager) -> str:
    """``haState`` of ``rm`` (ACTIVE, STANDBY, INITIALIZING …; a ResourceManager without HA
    reports ACTIVE), or ``down`` when it does not answer."""
    try:
        return str(rm_info(rm).get("haState", ""))
    except health.Unhealthy:
        return "down"


def active_rm(yarn: StackYarn) -> StackResourceManager | None:
    """The ResourceManager of ``yarn`` that reports ACTIVE, or None."""
    return next((rm for rm in yarn.resourcemanagers if rm_state(rm) == "ACTIVE"), None)


def running_apps(rm: StackResourceManager) -> list[dict[str, Any]]:
    """The RUNNING applications ``rm`` knows (``GET /ws/v1/cluster/apps?states=RUNNING``: each
    with ``id``, ``name``, ``queue``, ``allocatedMB`` …); ask the active RM.

    Raises:
        health.Unhealthy: no answer.
    """
    apps = (
        health._get_json(  # noqa: SLF001 - the stack's one JSON getter, with its timeout
            f"{rm.web_url}/ws/v1/cluster/apps?states=RUNNING"
        ).get("apps")
        or {}
    )
    return list(apps.get("app") or [])


def _rm_check(yarn: StackYarn, rm: StackResourceManager) -> str:
    info = rm_info(rm)
    state = str(info.get("haState", ""))
    if info.get("state") != "STARTED" or state not in ("ACTIVE", "STANDBY"):
        raise health.Unhealthy(f"{rm.id}: state {info.get('state')}, haState {state!r}")
    if yarn.ha and rm is yarn.resourcemanagers[-1]:
        pair = sorted(rm_state(r) for r in yarn.resourcemanagers)
        if pair != ["ACTIVE", "STANDBY"]:
            raise health.Unhealthy(f"HA pair not one ACTIVE and one STANDBY: {pair}")
    if state != "ACTIVE":
        return f"{rm.id} {state}"
    return f"{rm.id} {state}; running: {apps_line(running_apps(rm))}"


def apps_line(apps: list[dict[str, Any]]) -> str:
    """``application_…_0001 ferry-load (queue default), …``, or ``none``: what ``ferry status``
    says an ACTIVE ResourceManager runs (issue 48: the application of each Spark session)."""
    named = [f"{a.get('id')} {a.get('name')} (queue {a.get('queue')})" for a in apps]
    return ", ".join(sorted(named)) or "none"


def _nodemanager_check(yarn: StackYarn) -> str:
    """The NodeManager answers (``/ws/v1/node/info``) and the ACTIVE ResourceManager lists it
    RUNNING with a health report from this process (``lastHealthUpdate`` ≥ its
    ``nmStartupTime``, ms): a NodeManager started again after a kill is healthy only once it has
    registered anew. The RM keeps the lost process's registration for
    ``yarn.nm.liveness-monitor.expiry-interval-ms`` (10 min): counting its active nodes passed
    while the new process had not even opened its port (tests/yarn, 2026-12-07)."""
    rm = active_rm(yarn)
    if rm is None:
        raise health.Unhealthy("no ResourceManager is ACTIVE")
    host = yarn.resourcemanagers[0].host
    info = health._get_json(  # noqa: SLF001 - the stack's one JSON getter, with its timeout
        f"http://{host}:{yarn.nodemanager_web_port}/ws/v1/node/info"
    ).get("nodeInfo", {})
    node_id, started = info.get("id"), int(info.get("nmStartupTime", 0))
    node = (
        health._get_json(f"{rm.web_url}/ws/v1/cluster/nodes/{node_id}").get("node", {})  # noqa: SLF001
        if node_id
        else {}
    )
    if node.get("state") != "RUNNING" or int(node.get("lastHealthUpdate", 0)) < started:
        raise health.Unhealthy(
            f"{rm.id} has not heard from NodeManager {node_id} since it started "
            f"(state {node.get('state')}, last health report {node.get('lastHealthUpdate')}, "
            f"started {started})"
        )
    return f"{node_id} RUNNING at {rm.id}, {node.get('availMemoryMB')} MB free"


def check_jars(lay: Layout) -> None:
    """Raises StackError when ``var/jars/yarn`` is missing (``make install`` fetches it)."""
    need = lay.jars / "yarn"
    if not need.is_dir() or not any(need.glob("hadoop-yarn-server-*.jar")):
        raise StackError(f"{need} is missing or empty: run `make install` (Maven fetches it)")


def write_daemon_conf(
    settings: KitSettings, lay: Layout, cluster: str, name: str, yarn_site: dict[str, str]
) -> Path:
    """Render daemon ``name``'s configuration directory ``conf/<name>``: its cluster's client
    core-site.xml and hdfs-site.xml (the NodeManager fetches the Spark archive from that HDFS),
    ``yarn_site``, ``capacity-scheduler.xml`` and log4j.properties. Returns it."""
    d = lay.conf / name
    files = cluster_files(settings.cluster(cluster), settings.kerberos)
    files |= {
        "yarn-site.xml": yarn_site,
        "capacity-scheduler.xml": capacity_scheduler(settings.spark.yarn.queue),
    }
    write_conf_dir(d, files)
    shutil.copyfile(CONF_SRC / "hadoop-log4j.properties", d / "log4j.properties")
    return d


def yarn_argv(
    lay: Layout, name: str, heap_mb: int, main: str, krb5_conf: Path | None = None
) -> list[str]:
    """The JVM command line of YARN daemon ``name``: its configuration directory first on the
    class path, then ``var/jars/yarn``; ``krb5_conf``: the stack's krb5.conf (Kerberos)."""
    return [
        java(),
        f"-Xmx{heap_mb}m",
        *markers(name, lay.var),
        *JAVA17_OPENS,
        *([f"-Djava.security.krb5.conf={krb5_conf}"] if krb5_conf is not None else []),
        f"-Dhadoop.log.dir={lay.logs}",
        f"-Dyarn.log.dir={lay.logs}",
        f"-Dhadoop.home.dir={lay.jars / 'yarn'}",
        "-cp",
        f"{lay.conf / name}:{lay.jars / 'yarn'}/*",
        main,
    ]


def _java_home() -> str:
    """``JAVA_HOME`` of the ``java`` the stack runs: the NodeManager starts containers with
    ``$JAVA_HOME/bin/java``."""
    return str(Path(java()).resolve().parent.parent)


def yarn_components(settings: KitSettings, lay: Layout) -> list[Component]:
    """The ResourceManager(s) and the NodeManager of every cluster in ``settings.yarn``, in start
    order."""
    comps: list[Component] = []
    keytab = yarn_keytab(lay) if settings.kerberos.enabled else None
    krb5 = settings.kerberos.krb5_conf if keytab is not None else None
    for cluster, yarn in settings.yarn.items():
        rm_names: list[str] = []
        for rm in yarn.resourcemanagers:
            name = f"yarn-{cluster}-{rm.id}"
            site = resourcemanager_site(settings, cluster, rm, keytab)

            def prepare(
                name: str = name, site: dict[str, str] = site, cluster: str = cluster
            ) -> None:
                check_jars(lay)
                write_daemon_conf(settings, lay, cluster, name, site)

            comps.append(
                Component(
                    name,
                    f"{rm.host}:{rm.port} (http {rm.web_port})",
                    lay.launch(
                        name,
                        yarn_argv(
                            lay, name, yarn.resourcemanager_heap_mb, RESOURCEMANAGER_MAIN, krb5
                        ),
                    ),
                    check=partial(_rm_check, yarn, rm),
                    # the second of a pair starts once the first is up, so rm1 is active first
                    requires=(("zookeeper",) if yarn.ha else ())
                    + (("kdc",) if keytab is not None else ())
                    + tuple(rm_names),
                    ports=tuple(rm_addresses_ports(rm)),
                    host=rm.host,
                    prepare=prepare,
                    group="yarn",
                )
            )
            rm_names.append(name)
        name = f"yarn-{cluster}-nodemanager"
        data = lay.data / name
        nm_site = nodemanager_site(settings, cluster, data, keytab)

        def prepare_nm(
            name: str = name,
            site: dict[str, str] = nm_site,
            data: Path = data,
            cluster: str = cluster,
        ) -> None:
            check_jars(lay)
            for sub in ("local", "logs"):
                (data / sub).mkdir(parents=True, exist_ok=True)
            write_daemon_conf(settings, lay, cluster, name, site)

        host = yarn.resourcemanagers[0].host
        comps.append(
            Component(
                name,
                f"{host}:{yarn.nodemanager_port} (http {yarn.nodemanager_web_port})",
                lay.launch(
                    name,
                    yarn_argv(lay, name, yarn.nodemanager_heap_mb, NODEMANAGER_MAIN, krb5),
                    env={"JAVA_HOME": _java_home()},
                ),
                check=partial(_nodemanager_check, yarn),
                requires=(*rm_names, f"hdfs-{cluster}-datanode"),
                ports=(
                    yarn.nodemanager_port,
                    yarn.nodemanager_localizer_port,
                    yarn.nodemanager_web_port,
                ),
                host=host,
                prepare=prepare_nm,
                group="yarn",
            )
        )
    return comps


def rm_addresses_ports(rm: StackResourceManager) -> list[int]:
    """The five ports of ``rm``."""
    return [rm.port, rm.scheduler_port, rm.tracker_port, rm.admin_port, rm.web_port]


__all__ = [
    "NODEMANAGER_MAIN",
    "RESOURCEMANAGER_MAIN",
    "active_rm",
    "apps_line",
    "rm_addresses_ports",
    "rm_info",
    "rm_state",
    "running_apps",
    "write_daemon_conf",
    "yarn_components",
]
