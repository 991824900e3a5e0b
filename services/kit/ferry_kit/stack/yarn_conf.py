"""The ``yarn-site.xml`` of the local stack's YARN (profile ``yarn``), as plain dicts: what its
clients read (Ferry's Spark drivers, the application masters, the NodeManagers) and what each
ResourceManager and NodeManager adds for itself. Pure functions of the settings; the daemons are
:mod:`ferry_kit.stack.yarn`.

Keys and defaults are yarn-default.xml's (Hadoop 3.5.0); the HA ones are those of Hadoop's
"ResourceManager High Availability", the state store's those of "ResourceManager Restart",
the queue's those of "Hadoop: Capacity Scheduler", the Kerberos ones those of "Hadoop in Secure
Mode" (YARN's principals and keytabs) and "YARN Application Security" (the ResourceManager's
proxy-user privileges for long-running applications).
"""

from __future__ import annotations

from pathlib import Path

from ferry_kit.settings import KitSettings, StackResourceManager, StackYarn

#: The state store of an HA pair: applications survive a failover (ZooKeeper holds them).
ZK_STATE_STORE = "org.apache.hadoop.yarn.server.resourcemanager.recovery.ZKRMStateStore"


def rm_addresses(rm: StackResourceManager) -> dict[str, str]:
    """``{"address": "h:p", "scheduler.address": …, …}``: the five service addresses of ``rm``
    (suffixes of ``yarn.resourcemanager.``)."""
    return {
        "address": f"{rm.host}:{rm.port}",
        "scheduler.address": f"{rm.host}:{rm.scheduler_port}",
        "resource-tracker.address": f"{rm.host}:{rm.tracker_port}",
        "admin.address": f"{rm.host}:{rm.admin_port}",
        "webapp.address": f"{rm.host}:{rm.web_port}",
    }


def client_site(yarn: StackYarn, cluster: str, principal: str | None = None) -> dict[str, str]:
    """``yarn-site.xml`` as the cluster's clients get it (its client configuration directory).

    One ResourceManager: its addresses. An HA pair: ``yarn.resourcemanager.ha.enabled``, the
    ``cluster-id``, ``ha.rm-ids`` and each RM's hostname and addresses suffixed with its id, so
    every client (Spark's YarnClient, the application master, the NodeManager) fails over to
    whichever RM is active (``ConfiguredRMFailoverProxyProvider``). Both: a client retries an
    RM every second, not every 30 s (``yarn.resourcemanager.connect.retry-interval.ms``, which
    also bounds the failover sleeps unless ``yarn.client.failover-sleep-*`` are set).

    ``principal``: the ResourceManagers' Kerberos principal on a Kerberos cluster
    (``yarn.resourcemanager.principal``): clients authenticate to it, and Spark names it the
    renewer of the HDFS delegation tokens it gives the application."""
    conf = {
        "yarn.resourcemanager.connect.retry-interval.ms": "1000",
        "yarn.client.failover-sleep-base-ms": "500",
        "yarn.client.failover-sleep-max-ms": "2000",
    }
    if principal is not None:
        conf["yarn.resourcemanager.principal"] = principal
    if not yarn.ha:
        rm = yarn.resourcemanagers[0]
        conf["yarn.resourcemanager.hostname"] = rm.host
        conf |= {f"yarn.resourcemanager.{k}": v for k, v in rm_addresses(rm).items()}
        return conf
    conf |= {
        "yarn.resourcemanager.ha.enabled": "true",
        "yarn.resourcemanager.cluster-id": f"cluster-{cluster}",
        "yarn.resourcemanager.ha.rm-ids": ",".join(rm.id for rm in yarn.resourcemanagers),
    }
    for rm in yarn.resourcemanagers:
        conf[f"yarn.resourcemanager.hostname.{rm.id}"] = rm.host
        conf |= {f"yarn.resourcemanager.{k}.{rm.id}": v for k, v in rm_addresses(rm).items()}
    return conf


def kerberos_principal(settings: KitSettings) -> str | None:
    """The YARN daemons' principal when the stack runs Kerberos, else None."""
    krb = settings.kerberos
    return krb.yarn_principal if krb.enabled else None


def resourcemanager_site(
    settings: KitSettings, cluster: str, rm: StackResourceManager, keytab: Path | None = None
) -> dict[str, str]:
    """``yarn-site.xml`` of ResourceManager ``rm`` of ``cluster``: the client keys, the
    scheduler's limits (containers from ``minimum_allocation_mb`` up to one whole NodeManager),
    and for an HA pair: its own ``ha.id`` (both RMs are on 127.0.0.1, so Hadoop cannot tell them
    apart by address), automatic failover through the embedded elector on the stack's
    ZooKeeper (``hadoop.zk.address``), recovery from ``ZKRMStateStore``, a ZooKeeper session of
    ``zookeeper.max_session_timeout_ms`` (the server clamps it there anyway), and 2 s instead of
    10 s before a new active RM schedules new containers after recovery.

    With Kerberos (``keytab``: of :func:`kerberos_principal`): the RM logs in from it, and it
    gets new HDFS delegation tokens for an application as its user when the old ones near their
    max lifetime (``proxy-user-privileges``; the NameNodes allow ``yarn`` as a proxy user): an
    application master restarted after that (a NodeManager lost) still localizes its files."""
    yarn = settings.yarn[cluster]
    principal = kerberos_principal(settings)
    conf = {
        **client_site(yarn, cluster, principal),
        "yarn.scheduler.minimum-allocation-mb": str(yarn.minimum_allocation_mb),
        "yarn.scheduler.maximum-allocation-mb": str(yarn.nodemanager_memory_mb),
        "yarn.scheduler.maximum-allocation-vcores": str(yarn.nodemanager_vcores),
    }
    if yarn.ha:
        conf |= {
            "yarn.resourcemanager.ha.id": rm.id,
            "yarn.resourcemanager.ha.automatic-failover.enabled": "true",
            "yarn.resourcemanager.ha.automatic-failover.embedded": "true",
            "yarn.resourcemanager.ha.automatic-failover.zk-base-path": "/ferry/yarn/leader",
            "hadoop.zk.address": settings.zookeeper.connect,
            # its old name too: the embedded elector of 3.5.0 reads only that one
            # ("Embedded automatic failover is enabled, but yarn.resourcemanager.zk-address is
            # not set" with hadoop.zk.address alone)
            "yarn.resourcemanager.zk-address": settings.zookeeper.connect,
            "yarn.resourcemanager.zk-timeout-ms": str(settings.zookeeper.max_session_timeout_ms),
            "yarn.resourcemanager.recovery.enabled": "true",
            "yarn.resourcemanager.store.class": ZK_STATE_STORE,
            "yarn.resourcemanager.zk-state-store.parent-path": f"/ferry/yarn/rmstore-{cluster}",
            "yarn.resourcemanager.work-preserving-recovery.scheduling-wait-ms": "2000",
        }
    if principal is not None:
        if keytab is None:
            raise ValueError("a Kerberos ResourceManager needs its keytab")
        conf |= {
            "yarn.resourcemanager.keytab": str(keytab),
            "yarn.resourcemanager.proxy-user-privileges.enabled": "true",
        }
    return conf


def capacity_scheduler(queue: str = "default") -> dict[str, str]:
    """``capacity-scheduler.xml``: one queue with the whole cluster, and up to half of it for
    application masters (the default 10% of a 4 GiB NodeManager admits one master at a time:
    a hot-standby instance's application would wait for the first to end)."""
    return {
        "yarn.scheduler.capacity.root.queues": queue,
        f"yarn.scheduler.capacity.root.{queue}.capacity": "100",
        f"yarn.scheduler.capacity.root.{queue}.maximum-capacity": "100",
        "yarn.scheduler.capacity.maximum-am-resource-percent": "0.5",
    }


def nodemanager_site(
    settings: KitSettings, cluster: str, data: Path, keytab: Path | None = None
) -> dict[str, str]:
    """``yarn-site.xml`` of ``cluster``'s NodeManager: the client keys, its own ports, what it
    offers (``nodemanager_memory_mb``, ``nodemanager_vcores``), no virtual-memory check (the JVMs'
    reserved address space is many times their use), its local and log directories under
    ``data``, and a disk check that tolerates a full development disk up to 99%.

    With Kerberos (``keytab``): its principal and keytab. The containers still run as the
    NodeManager's own user (the default ``DefaultContainerExecutor``): a real secure cluster runs
    them as the application's user with ``LinuxContainerExecutor``, whose setuid
    ``container-executor`` binary comes with a Hadoop distribution, not with the Maven jars
    (docs/yarn.md)."""
    yarn = settings.yarn[cluster]
    host = yarn.resourcemanagers[0].host
    principal = kerberos_principal(settings)
    secure = {}
    if principal is not None:
        if keytab is None:
            raise ValueError("a Kerberos NodeManager needs its keytab")
        secure = {"yarn.nodemanager.principal": principal, "yarn.nodemanager.keytab": str(keytab)}
    return {
        **client_site(yarn, cluster, principal),
        **secure,
        "yarn.nodemanager.hostname": host,
        "yarn.nodemanager.address": f"{host}:{yarn.nodemanager_port}",
        "yarn.nodemanager.localizer.address": f"{host}:{yarn.nodemanager_localizer_port}",
        "yarn.nodemanager.webapp.address": f"{host}:{yarn.nodemanager_web_port}",
        "yarn.nodemanager.resource.memory-mb": str(yarn.nodemanager_memory_mb),
        "yarn.nodemanager.resource.cpu-vcores": str(yarn.nodemanager_vcores),
        "yarn.nodemanager.vmem-check-enabled": "false",
        "yarn.nodemanager.local-dirs": str(data / "local"),
        "yarn.nodemanager.log-dirs": str(data / "logs"),
        "yarn.nodemanager.disk-health-checker.max-disk-utilization-per-disk-percentage": "99",
    }


__all__ = [
    "ZK_STATE_STORE",
    "capacity_scheduler",
    "client_site",
    "kerberos_principal",
    "nodemanager_site",
    "resourcemanager_site",
    "rm_addresses",
]
