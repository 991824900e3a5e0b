"""Builders of the stack's non-Spark servers: ZooKeeper, the Kafka broker, each HDFS cluster's
NameNode and DataNode, and the Hive metastore. Each returns one :class:`Component`; nothing is
started or written until the manager calls its ``prepare``.
"""

from __future__ import annotations

import base64
import shutil
import uuid
from collections.abc import Callable
from functools import partial
from pathlib import Path
from typing import Any

from ferry.clusters.kerberos import hadoop_client_conf, spnego_auth
from ferry.core.kafka.clients import security_config
from ferry.errors import FerryError
from ferry.settings.client_conf import xml_properties
from ferry_kit.errors import StackError
from ferry_kit.settings import KitSettings, StackCluster, StackKerberos
from ferry_kit.stack import hdfs_tls, health, kafka_secure
from ferry_kit.stack.base import (
    CONF_SRC,
    JAVA17_OPENS,
    Component,
    Layout,
    java,
    render,
    run_once,
    spark_home,
)
from ferry_kit.stack.kdc import hdfs_server_conf, hive_keytab
from ferry_kit.stack.process import markers

NAMENODE_MAIN = "org.apache.hadoop.hdfs.server.namenode.NameNode"
DATANODE_MAIN = "org.apache.hadoop.hdfs.server.datanode.DataNode"


def zookeeper(settings: KitSettings, lay: Layout) -> Component:
    """ZooKeeper (pyspark's jars) for the Spark masters' recovery; health: ``ruok`` → ``imok``."""
    zk = settings.zookeeper
    cfg = lay.conf / "zookeeper" / "zoo.cfg"

    def prepare() -> None:
        (lay.data / "zookeeper").mkdir(parents=True, exist_ok=True)
        render(
            "zoo.cfg.tmpl",
            cfg,
            tick_time_ms=zk.tick_time_ms,
            min_session_timeout_ms=2 * zk.tick_time_ms,
            max_session_timeout_ms=zk.max_session_timeout_ms,
            data_dir=lay.data / "zookeeper",
            port=zk.port,
            host=zk.host,
        )

    argv = [
        java(),
        f"-Xmx{zk.heap_mb}m",
        *markers("zookeeper", lay.var),
        f"-Dlog4j2.configurationFile={CONF_SRC / 'spark-log4j2.properties'}",
        "-cp",
        f"{spark_home() / 'jars'}/*",
        "org.apache.zookeeper.server.ZooKeeperServerMain",
        str(cfg),
    ]
    return Component(
        "zookeeper",
        zk.connect,
        lay.launch("zookeeper", argv),
        check=lambda: health.zookeeper_ruok(zk.host, zk.port),
        ports=(zk.port,),
        host=zk.host,
        prepare=prepare,
        group="zookeeper",
    )


def kafka_cluster_id() -> str:
    """A KRaft cluster id: 16 random bytes, base64url without padding (22 characters), never
    starting with ``-`` — as Kafka's ``Uuid.randomUuid`` does, since the storage tool's argument
    parser reads a leading ``-`` as an option (1 start in 64 failed: "expected one argument")."""
    while True:
        cid = base64.urlsafe_b64encode(uuid.uuid4().bytes).decode().rstrip("=")
        if not cid.startswith("-"):
            return cid


def _kafka_check(settings: KitSettings, lay: Layout) -> str:
    """Produce and consume one record; on SASL_SSL as the broker's own user (the authorizer's
    super user), then grant the ACLs of the settings' prefix (:func:`kafka_secure.grant`)."""
    kf = settings.kafka
    if not kf.secure:
        return health.kafka_roundtrip(kf.bootstrap_servers, security_config(kf))
    out = health.kafka_roundtrip(
        kf.bootstrap_servers, security_config(kafka_secure.admin_settings(kf, lay))
    )
    try:
        return f"{out}, {kafka_secure.grant(settings)} ACLs of prefix {kf.topic_prefix}"
    except FerryError as exc:
        raise health.Unhealthy(f"ACLs: {exc}") from exc


def kafka(settings: KitSettings, lay: Layout) -> Component:
    """The Kafka broker, KRaft combined mode (Maven: kafka_2.13); storage formatted on first
    start; health: produce + consume one record."""
    kf = settings.kafka
    props = lay.conf / "kafka" / "server.properties"
    data = kafka_secure.data_dir(lay) if kf.secure else lay.data / "kafka"
    classpath = [
        "-cp",
        f"{lay.jars / 'kafka'}/*",
        f"-Dlog4j2.configurationFile={CONF_SRC / 'kafka-log4j2.yaml'}",
    ]

    def prepare() -> None:
        scram: list[str] = []
        if kf.secure:  # certificates, SCRAM users, SASL_SSL listener (docs/security.md)
            scram = kafka_secure.prepare(kf, lay, props)
        else:
            render(
                "kafka-server.properties.tmpl",
                props,
                host=kf.host,
                listen_host=kf.listen_host_override or kf.host,
                port=kf.port,
                controller_port=kf.controller_port,
                data_dir=data,
            )
        if not (data / "meta.properties").exists():
            cluster_id = kafka_cluster_id()
            run_once(
                "kafka",
                [
                    java(),
                    "-Xmx256m",
                    *classpath,
                    "kafka.tools.StorageTool",
                    "format",
                    "-t",
                    cluster_id,
                    "-c",
                    str(props),
                    *scram,
                ],
                lay.logs / "kafka-format.log",
            )

    argv = [
        java(),
        f"-Xmx{kf.heap_mb}m",
        f"-Xms{kf.heap_mb}m",
        *markers("kafka", lay.var),
        *classpath,
        "kafka.Kafka",
        str(props),
    ]
    return Component(
        "kafka",
        kf.bootstrap_servers,
        lay.launch("kafka", argv),
        check=lambda: _kafka_check(settings, lay),
        ports=(kf.port, kf.controller_port),
        host=kf.host,
        prepare=prepare,
        group="kafka",
    )


# --- HDFS -----------------------------------------------------------------------------------


def _ha_client_timeouts(cs: StackCluster) -> dict[str, str]:
    """HA client keys, plus (HA only) a 15 s Hadoop RPC timeout for the stack's daemons (the
    metastore, HiveServer2): a hung NameNode then costs a call 15 s before the client fails over
    to the other (core-default.xml ``ipc.client.rpc-timeout.ms``, default 120 s)."""
    conf = cs.hadoop_client_conf()
    return {**conf, "ipc.client.rpc-timeout.ms": "15000"} if conf else {}


def hdfs_conf(
    lay: Layout,
    cluster: str,
    cs: StackCluster,
    *,
    conf_name: str | None = None,
    extra: dict[str, str] | None = None,
    krb: StackKerberos | None = None,
) -> Path:
    """Render cluster ``cluster``'s core-site.xml, hdfs-site.xml and log4j.properties into
    ``conf/<conf_name>`` (default ``hdfs-<cluster>``) with ``extra`` hdfs-site keys (an HA
    daemon's own ids and directories) and, with ``krb.enabled``, the Kerberos keys of the
    clients (:func:`ferry.clusters.kerberos.hadoop_client_conf`, in both files) and of the daemons
    (:func:`ferry_kit.stack.kdc.hdfs_server_conf`), and for a cluster on HTTPS its keys and
    ``ssl-server.xml`` (:mod:`ferry_kit.stack.hdfs_tls`); returns that directory."""
    d = lay.conf / (conf_name or f"hdfs-{cluster}")
    secure: dict[str, str] = {}
    if krb is not None and krb.enabled:
        secure = {**hadoop_client_conf(krb), **hdfs_server_conf(krb, lay)}
    secure = hdfs_tls.prepare(lay, cs, d, secure)
    values = dict(
        cluster=cluster,
        host=cs.host,
        datanode_host=cs.datanode_host,
        fs_url=cs.fs_url,
        base_dir=lay.data / f"hdfs-{cluster}",
        namenode_rpc_port=cs.namenode_rpc_port,
        namenode_http_port=cs.namenode_http_port,
        datanode_port=cs.datanode_port,
        datanode_http_port=cs.datanode_http_port,
        datanode_ipc_port=cs.datanode_ipc_port,
        extra_properties=xml_properties({**_ha_client_timeouts(cs), **secure, **(extra or {})}),
        core_properties=xml_properties(hadoop_client_conf(krb) if krb is not None else {}),
    )
    render("core-site.xml.tmpl", d / "core-site.xml", **values)
    render("hdfs-site.xml.tmpl", d / "hdfs-site.xml", **values)
    shutil.copyfile(CONF_SRC / "hadoop-log4j.properties", d / "log4j.properties")
    return d


def hadoop_argv(
    lay: Layout,
    name: str,
    heap_mb: int,
    cluster: str,
    main: str,
    *args: str,
    conf_name: str | None = None,
    krb: StackKerberos | None = None,
) -> list[str]:
    """The JVM command line of a Hadoop daemon (or one-shot tool) of ``cluster``, its
    configuration from ``conf/<conf_name>`` (default ``hdfs-<cluster>``); with ``krb.enabled``
    the JVM reads ``krb.krb5_conf``."""
    kerberos = [f"-Djava.security.krb5.conf={krb.krb5_conf}"] if krb and krb.enabled else []
    return [
        java(),
        f"-Xmx{heap_mb}m",
        *kerberos,
        *markers(name, lay.var),
        *JAVA17_OPENS,
        f"-Dhadoop.log.dir={lay.logs}",
        f"-Dhadoop.home.dir={lay.jars / 'hdfs'}",
        "-cp",
        f"{lay.conf / (conf_name or f'hdfs-{cluster}')}:{lay.jars / 'hdfs-webapps'}:"
        f"{lay.jars / 'hdfs'}/*",
        main,
        *args,
    ]


def check_jars(lay: Layout) -> None:
    for need in (
        lay.jars / "hdfs",
        lay.jars / "hdfs-webapps" / "webapps" / "hdfs",
        lay.jars / "kafka",
    ):
        if not need.is_dir() or not any(need.iterdir()):
            raise StackError(
                f"{need} is missing or empty: run `make install` (Maven fetches the servers' jars)"
            )


def _spnego(settings: KitSettings) -> Callable[[], Any] | None:
    """What makes the health checks' SPNEGO auth on a Kerberos cluster (called at check time:
    the keytab exists once the KDC's ``prepare`` ran), else None."""
    if not settings.kerberos.enabled:
        return None
    return partial(spnego_auth, settings.kerberos)


def namenode(settings: KitSettings, lay: Layout, cluster: str) -> Component:
    """The NameNode of ``cluster`` (Maven: hadoop-hdfs 3.5.0), formatted on first start; health:
    WebHDFS GETFILESTATUS."""
    cs = settings.cluster(cluster)
    krb = settings.kerberos
    name = f"hdfs-{cluster}-namenode"

    def prepare() -> None:
        check_jars(lay)
        hdfs_conf(lay, cluster, cs, krb=krb)
        if not (lay.data / f"hdfs-{cluster}" / "name" / "current" / "VERSION").exists():
            run_once(
                name,
                hadoop_argv(
                    lay,
                    f"{name}-format",
                    256,
                    cluster,
                    NAMENODE_MAIN,
                    "-format",
                    "-nonInteractive",
                    "-force",
                    krb=krb,
                ),
                lay.logs / f"{name}-format.log",
            )

    argv = hadoop_argv(lay, name, cs.namenode_heap_mb, cluster, NAMENODE_MAIN, krb=krb)
    return Component(
        name,
        cs.fs_url,
        lay.launch(name, argv),
        check=hdfs_tls.web_check(health.namenode, cs, _spnego(settings)),
        requires=("kdc",) if krb.enabled else (),
        ports=(cs.namenode_rpc_port, cs.namenode_http_port),
        host=cs.host,
        prepare=prepare,
        group="hdfs",
    )


def datanode(settings: KitSettings, lay: Layout, cluster: str) -> Component:
    """The DataNode of ``cluster``; health: its NameNode sees ≥ 1 live DataNode, no safe mode."""
    cs = settings.cluster(cluster)
    krb = settings.kerberos
    name = f"hdfs-{cluster}-datanode"

    def prepare() -> None:
        hdfs_conf(lay, cluster, cs, krb=krb)

    argv = hadoop_argv(lay, name, cs.datanode_heap_mb, cluster, DATANODE_MAIN, krb=krb)
    return Component(
        name,
        f"{cs.host}:{cs.datanode_port} ({cs.web_scheme} {cs.datanode_http_port})",
        lay.launch(name, argv),
        check=hdfs_tls.web_check(health.datanode, cs, _spnego(settings)),
        requires=(f"hdfs-{cluster}-namenode",),
        ports=(cs.datanode_port, cs.datanode_http_port, cs.datanode_ipc_port),
        host=cs.host,
        prepare=prepare,
        group="hdfs",
    )


def hive_metastore(settings: KitSettings, lay: Layout) -> Component:
    """The Hive metastore of cluster A (HiveMetaStore, Derby inside, pyspark's jars), warehouse on
    HDFS A; health: Thrift ``get_all_databases``."""
    ms = settings.metastore
    ms_conf = lay.conf / "hive-metastore"
    a = settings.cluster("a")
    data = lay.data / "hive-metastore"

    krb = settings.kerberos
    sasl = (
        {
            "hive.metastore.sasl.enabled": "true",
            "hive.metastore.kerberos.principal": krb.hive_principal,
            "hive.metastore.kerberos.keytab.file": str(hive_keytab(lay)),
        }
        if krb.enabled
        else {}
    )

    def prepare() -> None:
        hdfs_conf(lay, "a", a, krb=krb)
        ms_conf.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(lay.conf / "hdfs-a" / "core-site.xml", ms_conf / "core-site.xml")
        shutil.copyfile(lay.conf / "hdfs-a" / "hdfs-site.xml", ms_conf / "hdfs-site.xml")
        render(
            "hive-site.xml.tmpl",
            ms_conf / "hive-site.xml",
            base_dir=data,
            warehouse_url=f"{a.fs_url}{ms.warehouse_path}",
            port=ms.port,
            extra_properties=xml_properties(sasl),
        )
        data.mkdir(parents=True, exist_ok=True)

    argv = [
        java(),
        f"-Xmx{ms.heap_mb}m",
        *([f"-Djava.security.krb5.conf={krb.krb5_conf}"] if krb.enabled else []),
        *markers("hive-metastore", lay.var),
        *JAVA17_OPENS,
        f"-Dderby.system.home={data}",
        f"-Dlog4j2.configurationFile={CONF_SRC / 'spark-log4j2.properties'}",
        "-cp",
        f"{ms_conf}:{spark_home() / 'jars'}/*",
        "org.apache.hadoop.hive.metastore.HiveMetaStore",
        "-p",
        str(ms.port),
    ]
    return Component(
        "hive-metastore",
        ms.uri,
        lay.launch("hive-metastore", argv),
        check=partial(health.tcp_open if krb.enabled else health.metastore, ms.host, ms.port),
        requires=("hdfs-a-datanode",),
        ports=(ms.port,),
        host=ms.host,
        prepare=prepare,
        group="hive",
    )
