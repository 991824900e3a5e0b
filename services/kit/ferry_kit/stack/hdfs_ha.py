"""Cluster A as an HA pair on the local stack (profile ``ha``:
services/kit/ferry_kit/profiles/ha.yaml): three JournalNodes, two NameNodes, one ZKFC per
NameNode on
the stack's ZooKeeper, automatic failover, fencing by SIGKILL of the old active NameNode's process
(``ferry stack fence``, the one-machine form of ``sshfence``: see :func:`fencing_method`), and the
DataNode reporting to both NameNodes.

First start (Hadoop's "HDFS High Availability Using the Quorum Journal Manager", "Deployment
details"): the JournalNodes start; the first NameNode is formatted (``-format`` also formats the
shared edits on the JournalNodes) and starts; the second copies its namespace with
``-bootstrapStandby``; the first ZKFC runs ``-formatZK`` once; both ZKFCs start and elect an
active NameNode. Each NameNode and its ZKFC read ``conf/hdfs-<cluster>-<nn id>`` (with
``dfs.ha.namenode.id``: both NameNodes are on 127.0.0.1, so Hadoop cannot tell them apart by
address); each JournalNode its own ``conf/hdfs-<cluster>-jn<i>``; the DataNode, the metastore and
HiveServer2 the client configuration in ``conf/hdfs-<cluster>``.
"""

from __future__ import annotations

import shlex
import socket
import sys
from collections.abc import Callable
from functools import partial

from ferry.settings.hdfs import NameNodeSettings
from ferry_kit.settings import KitSettings, StackCluster, StackNameNode
from ferry_kit.stack import health
from ferry_kit.stack.base import Component, Layout, run_once
from ferry_kit.stack.servers import DATANODE_MAIN, NAMENODE_MAIN, check_jars, hadoop_argv, hdfs_conf

JOURNALNODE_MAIN = "org.apache.hadoop.hdfs.qjournal.server.JournalNode"
ZKFC_MAIN = "org.apache.hadoop.hdfs.tools.DFSZKFailoverController"


def fencing_method(lay: Layout, cluster: str) -> str:
    """``dfs.ha.fencing.methods`` of the HA stack: ``shell(<python> -m ferry stack fence …)``,
    which SIGKILLs the target NameNode's process (found by pid file and markers) if it listens on
    the target's RPC port, and succeeds once it is gone, was not running or was not listening
    (:func:`ferry_kit.stack.process.fence`).

    Why not ``shell(/bin/true)``: Hadoop's "HDFS High Availability Using the Quorum Journal
    Manager" (Fencing) — the JournalNodes stop an unfenced old active from writing, but it serves
    out-of-date reads until it next tries to write. A NameNode SIGSTOPped while active and then
    continued answered listings from before the failover: a Hive count over HiveServer2, whose HDFS
    client was still on it, missed the 20 files loaded through the new active (CI, HA scenario 2).
    ``$target_namenodeid`` and ``$target_port`` are set by Hadoop's ShellCommandFencer
    (``NNHAServiceTarget``, ``HAServiceTarget.getFencingParameters``)."""
    return (
        f"shell({shlex.quote(sys.executable)} -m ferry stack fence "
        f"--var-dir {shlex.quote(str(lay.var))} --port $target_port "
        f"hdfs-{cluster}-$target_namenodeid)"
    )


def ha_server_conf(
    settings: KitSettings, cs: StackCluster, cluster: str, lay: Layout
) -> dict[str, str]:
    """The HA server keys every daemon of ``cluster`` shares (hdfs-default.xml,
    core-default.xml): shared edits on the JournalNodes, automatic failover through the stack's
    ZooKeeper, fencing by :func:`fencing_method`, and a ZKFC health check that declares a NameNode
    dead after 10 s without an answer (a SIGSTOPped NameNode keeps its ZKFC's ZooKeeper session
    alive: only this check moves the active role)."""
    journals = ";".join(f"{cs.host}:{rpc}" for rpc, _ in cs.journalnode_ports)
    return {
        "dfs.namenode.shared.edits.dir": f"qjournal://{journals}/{cs.nameservice}",
        "dfs.ha.automatic-failover.enabled": "true",
        "ha.zookeeper.quorum": settings.zookeeper.connect,
        "ha.zookeeper.parent-znode": f"/ferry/hadoop-ha-{cluster}",
        "ha.zookeeper.session-timeout.ms": str(settings.zookeeper.max_session_timeout_ms),
        "dfs.ha.fencing.methods": fencing_method(lay, cluster),
        "ha.health-monitor.check-interval.ms": "1000",
        "ha.health-monitor.rpc-timeout.ms": "10000",
        "ha.failover-controller.cli-check.rpc-timeout.ms": "10000",
        # Before it yields the active role, the ZKFC of a NameNode that stopped answering asks
        # that NameNode's /stacks for a thread dump (HDFS-6184) for up to 20 s (hdfs-default.xml);
        # a hung NameNode never answers, so that was 20 of a SIGSTOP failover's 37 s
        "dfs.ha.zkfc.nn.http.timeout.ms": "2000",
        # the standby reads the JournalNodes' edits every 2 s (default 60 s), so it is close
        # behind when it becomes active
        "dfs.ha.tail-edits.period": "2s",
        "dfs.ha.log-roll.period": "30s",
        # each NameNode's ZKFC port, suffixed (a NAMENODE_SPECIFIC_KEY): the ZKFCs and
        # `haadmin -failover` find every ZKFC from the same file
        **{
            f"dfs.ha.zkfc.port.{cs.nameservice}.{nn.id}": str(nn.zkfc_port or 8019)
            for nn in cs.namenodes
        },
    }


def namenode_state(http_address: str) -> str:
    """``active``, ``standby`` … of the NameNode at ``http_address`` (``/jmx``
    ``NameNodeStatus.State``).

    Raises:
        health.Unhealthy: no answer, or no state.
    """
    jmx = health._get_json(  # noqa: SLF001 - the stack's one JSON getter, with its timeout
        f"http://{http_address}/jmx?qry=Hadoop:service=NameNode,name=NameNodeStatus"
    )
    state = str((jmx.get("beans") or [{}])[0].get("State", ""))
    if not state:
        raise health.Unhealthy(f"NameNode {http_address}: no HA state in /jmx")
    return state


def active_namenode(cs: StackCluster) -> NameNodeSettings | None:
    """The NameNode of ``cs`` whose /jmx says ``active``, or None (none answers active)."""
    for nn in cs.namenode_list:
        try:
            if namenode_state(nn.http_address) == "active":
                return nn
        except health.Unhealthy:
            continue
    return None


def _ha_datanode_check(cs: StackCluster) -> str:
    nn = active_namenode(cs)
    if nn is None:
        raise health.Unhealthy("no NameNode is active yet")
    return f"{health.datanode(f'http://{nn.http_address}')} at active {nn.id}"


def _tcp(host: str, port: int) -> str:
    try:
        socket.create_connection((host, port), timeout=health.TIMEOUT_S).close()
    except OSError as exc:
        raise health.Unhealthy(f"{host}:{port}: {exc}") from exc
    return "listening"


def _conf(
    lay: Layout, cluster: str, cs: StackCluster, name: str, extra: dict[str, str]
) -> Callable[[], None]:
    """A ``prepare`` that renders daemon ``name``'s own configuration directory."""

    def prepare() -> None:
        hdfs_conf(lay, cluster, cs, conf_name=name, extra=extra)

    return prepare


def ha_components(settings: KitSettings, lay: Layout, cluster: str) -> list[Component]:
    """JournalNodes, NameNodes, ZKFCs and the DataNode of HA ``cluster``, in start order."""
    cs = settings.cluster(cluster)
    # its own directory: a DataNode formatted for the one-NameNode cluster would refuse the HA one
    base = lay.data / f"hdfs-{cluster}-ha"
    shared = ha_server_conf(settings, cs, cluster, lay)
    prefix = f"hdfs-{cluster}"
    comps: list[Component] = []
    jn_names: list[str] = []
    for i, (rpc, http) in enumerate(cs.journalnode_ports, start=1):
        name = f"{prefix}-jn{i}"
        jn_names.append(name)
        own = {
            **shared,
            "dfs.journalnode.rpc-address": f"{cs.host}:{rpc}",
            "dfs.journalnode.http-address": f"{cs.host}:{http}",
            "dfs.journalnode.edits.dir": str(base / f"journal{i}"),
        }
        comps.append(
            Component(
                name,
                f"{cs.host}:{rpc} (http {http})",
                lay.launch(
                    name,
                    hadoop_argv(
                        lay, name, cs.journalnode_heap_mb, cluster, JOURNALNODE_MAIN, conf_name=name
                    ),
                ),
                check=partial(_tcp, cs.host, rpc),
                ports=(rpc, http),
                host=cs.host,
                prepare=_conf(lay, cluster, cs, name, own),
                group="hdfs",
            )
        )
    first = cs.namenodes[0]
    for nn in cs.namenodes:
        name = f"{prefix}-{nn.id}"
        own = {
            **shared,
            "dfs.ha.namenode.id": nn.id,
            "dfs.namenode.name.dir": f"file://{base / f'name-{nn.id}'}",
        }

        def prepare(nn: StackNameNode = nn, name: str = name, own: dict[str, str] = own) -> None:
            check_jars(lay)
            hdfs_conf(lay, cluster, cs, conf_name=name, extra=own)
            if (base / f"name-{nn.id}" / "current" / "VERSION").exists():
                return
            step = ["-format", "-nonInteractive", "-force"] if nn is first else []
            step = step or ["-bootstrapStandby", "-nonInteractive", "-force"]
            run_once(
                name,
                hadoop_argv(
                    lay, f"{name}-init", 256, cluster, NAMENODE_MAIN, *step, conf_name=name
                ),
                lay.logs / f"{name}-init.log",
            )

        comps.append(
            Component(
                name,
                f"hdfs://{cs.nameservice} {nn.id} {nn.rpc_address} (http {nn.http_port})",
                lay.launch(
                    name,
                    hadoop_argv(
                        lay, name, cs.namenode_heap_mb, cluster, NAMENODE_MAIN, conf_name=name
                    ),
                ),
                check=partial(namenode_state, nn.http_address),
                requires=(*jn_names, *(() if nn is first else (f"{prefix}-{first.id}",))),
                ports=(nn.rpc_port, nn.http_port),
                host=nn.host,
                prepare=prepare,
                group="hdfs",
            )
        )
    zkfc_names: list[str] = []
    for nn in cs.namenodes:
        name = f"{prefix}-zkfc-{nn.id}"
        nn_conf = f"{prefix}-{nn.id}"
        port = nn.zkfc_port or 8019

        def prepare_zkfc(is_first: bool = nn is first, nn_conf: str = nn_conf) -> None:
            marker = base / "zkfc-formatted"
            if not is_first or marker.exists():
                return
            run_once(
                f"{prefix}-zkfc",
                hadoop_argv(
                    lay,
                    f"{prefix}-zkfc-format",
                    128,
                    cluster,
                    ZKFC_MAIN,
                    "-formatZK",
                    "-nonInteractive",
                    "-force",
                    conf_name=nn_conf,
                ),
                lay.logs / f"{prefix}-zkfc-format.log",
            )
            marker.write_text("formatted\n", encoding="utf-8")

        comps.append(
            Component(
                name,
                f"{nn.host}:{port} → {nn.id}",
                lay.launch(
                    name,
                    hadoop_argv(lay, name, cs.zkfc_heap_mb, cluster, ZKFC_MAIN, conf_name=nn_conf),
                ),
                check=partial(_tcp, nn.host, port),
                requires=("zookeeper", nn_conf, *zkfc_names[:1]),
                ports=(port,),
                host=nn.host,
                prepare=prepare_zkfc,
                group="hdfs",
            )
        )
        zkfc_names.append(name)
    name = f"{prefix}-datanode"
    comps.append(
        Component(
            name,
            f"{cs.host}:{cs.datanode_port} (http {cs.datanode_http_port})",
            lay.launch(
                name,
                hadoop_argv(lay, name, cs.datanode_heap_mb, cluster, DATANODE_MAIN, conf_name=name),
            ),
            check=partial(_ha_datanode_check, cs),
            requires=tuple(zkfc_names),
            ports=(cs.datanode_port, cs.datanode_http_port, cs.datanode_ipc_port),
            host=cs.host,
            prepare=_conf(
                lay, cluster, cs, name, {"dfs.datanode.data.dir": f"file://{base / 'data'}"}
            ),
            group="hdfs",
        )
    )
    return comps


__all__ = [
    "active_namenode",
    "fencing_method",
    "ha_components",
    "ha_server_conf",
    "namenode_state",
]
