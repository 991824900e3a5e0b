"""The embedded local stack's components: what each runs, where it logs, how it is checked.

Eleven JVMs, started in this order (a component waits only for the ones in its ``requires``):

================  ===============================================  ============================
component         main class (source)                              health check
================  ===============================================  ============================
zookeeper         ZooKeeperServerMain (pyspark's jars)             ``ruok`` → ``imok``
kafka             kafka.Kafka, KRaft combined (Maven: kafka_2.13)  produce + consume
hdfs-b-namenode   NameNode (Maven: hadoop-hdfs 3.5.0)              WebHDFS GETFILESTATUS
hdfs-a-namenode   NameNode                                         WebHDFS GETFILESTATUS
hdfs-b-datanode   DataNode                                         NN: ≥1 live DN, no safe mode
hdfs-a-datanode   DataNode                                         NN: ≥1 live DN, no safe mode
spark-master-1/2  deploy.master.Master, recoveryMode=ZOOKEEPER     /json status ALIVE|STANDBY
spark-worker      deploy.worker.Worker → spark://m1,m2             registered at ALIVE master
hive-metastore    HiveMetaStore, Derby inside (pyspark's jars)     Thrift get_all_databases
hiveserver2       Spark Thrift Server, local[1] (pyspark's jars)   JDBC ``SELECT 1``
================  ===============================================  ============================

Each component is built by its own function (:mod:`ferry_kit.stack.servers`,
:mod:`ferry_kit.stack.spark_daemons`); :func:`build_components` is the table that lists them in
start
order. :func:`select` picks a subset by component or group name (``zookeeper``, ``kafka``,
``hdfs``, ``spark``, ``hive``, ``all``) and adds what it requires, transitively.

With ``kerberos.enabled`` (profile ``kerberos``), ``kdc`` (MIT krb5kdc, Debian's krb5-kdc;
health: ``kinit -k``) starts first, the NameNodes and DataNodes run with Kerberos, the Hive
metastore with SASL (health: TCP connect), and hiveserver2 logs in from the hive keytab and takes
Kerberos from its JDBC clients (:mod:`ferry_kit.stack.kdc`, :mod:`ferry_kit.stack.hiveserver2`).

With ``clusters.a.nameservice`` set (profile ``ha``), cluster A is an HA pair instead of one
NameNode: hdfs-a-jn1..3 (JournalNode), hdfs-a-nn1/nn2 (NameNode; health: /jmx HA state, so
``ferry stack status`` shows which is active), hdfs-a-zkfc-nn1/nn2 (DFSZKFailoverController) and
hdfs-a-datanode (:mod:`ferry_kit.stack.hdfs_ha`).

With ``yarn`` set (profile ``yarn``), each cluster named there gets its own YARN, group ``yarn``:
yarn-a-rm1/rm2 (an HA pair of ResourceManagers on ZooKeeper; health: ``/ws/v1/cluster/info``
haState ACTIVE or STANDBY), yarn-b-rm1, and yarn-<x>-nodemanager (health: the active RM counts
an active node) (:mod:`ferry_kit.stack.yarn`). When every cluster's Spark runs on YARN
(``spark.cluster_managers``), the standalone masters and worker are not started.
"""

from __future__ import annotations

from collections.abc import Iterable

from ferry_kit.errors import StackError
from ferry_kit.settings import KitSettings
from ferry_kit.stack.base import Component, Layout
from ferry_kit.stack.hdfs_ha import ha_components
from ferry_kit.stack.hiveserver2 import hiveserver2
from ferry_kit.stack.kdc import kdc
from ferry_kit.stack.servers import datanode, hive_metastore, kafka, namenode, zookeeper
from ferry_kit.stack.spark_daemons import spark_cluster
from ferry_kit.stack.yarn import yarn_components

__all__ = ["build_components", "select"]


def build_components(settings: KitSettings) -> list[Component]:
    """All components, in start order, configured from ``settings``.

    Raises:
        StackError: no ``java`` executable (the command lines are built here).
    """
    lay = Layout(settings.var_dir, tuple(settings.server_java_options.split()))
    if settings.cluster("a").ha:
        hdfs = [namenode(settings, lay, "b"), datanode(settings, lay, "b")]
        hdfs += ha_components(settings, lay, "a")
    else:
        hdfs = [namenode(settings, lay, c) for c in ("b", "a")]
        hdfs += [datanode(settings, lay, c) for c in ("b", "a")]
    on_yarn = [c for c in settings.clusters if settings.spark.manager(c) == "yarn"]
    standalone = len(on_yarn) < len(settings.clusters)
    return [
        *([kdc(settings, lay)] if settings.kerberos.enabled else []),
        zookeeper(settings, lay),
        kafka(settings, lay),
        *hdfs,
        *(spark_cluster(settings, lay) if standalone else []),
        *yarn_components(settings, lay),
        hive_metastore(settings, lay),
        hiveserver2(settings, lay),
    ]


def select(components: list[Component], wanted: Iterable[str]) -> list[Component]:
    """The components named in ``wanted`` (component names, group names or ``"all"``) and every
    component they require, transitively, in the order of ``components`` (start order).

    Raises:
        StackError: a name is neither a component, a group nor ``"all"``.
    """
    by_name = {c.name: c for c in components}
    todo: list[str] = []
    for name in wanted:
        if name == "all":
            todo += by_name
        elif name in by_name:
            todo.append(name)
        elif members := [c.name for c in components if c.group == name]:
            todo += members
        else:
            groups = sorted({c.group for c in components if c.group})
            raise StackError(
                f"no stack component or group {name!r}; components: {list(by_name)}, "
                f"groups: {groups} and 'all'"
            )
    chosen: set[str] = set()
    while todo:
        name = todo.pop()
        if name not in chosen:
            chosen.add(name)
            todo += by_name[name].requires
    return [c for c in components if c.name in chosen]
