"""HiveServer2 for cluster A: the Spark Thrift Server from the pyspark distribution.

``org.apache.spark.deploy.SparkSubmit --class …thriftserver.HiveThriftServer2 spark-internal``,
launched as one JVM (the pid file names it), with a ``local[1]`` master: queries run inside the
server's driver, so analysts' queries never take a core of the standalone worker that transform and
load share. Its catalogue is the stack's Hive metastore; tables are read from HDFS A. Health: a
TCP connect to the Thrift port, then a real JDBC query (``SELECT 1`` through
:func:`ferry.clusters.hiveserver2.query`).

With ``kerberos.enabled`` (profile ``kerberos``) the server is kerberized as HiveServer2 is on a
secure cluster: ``spark-submit --principal/--keytab`` logs its JVM in as the hive principal (a
``local`` master logs in; only ``standalone`` does not), with which it reads HDFS A and talks SASL
to the metastore; ``hive.server2.authentication=KERBEROS`` with the same principal and keytab
makes every JDBC client authenticate with SASL GSSAPI (Hive's "Setting Up HiveServer2",
"Authentication/Security Configuration"). The health check then connects with Ferry's ticket.

Its queries run in threads whose Hadoop user is not the keytab's login (the session's), and their
metastore connections find no ticket in that user's credentials. Java's GSS then gets its default
initiator credentials from the JAAS entry ``com.sun.security.jgss.krb5.initiate``
(``useSubjectCredsOnly=false``; the JDK's "JAAS and Java GSS-API" guide), which
:func:`initiator_jaas` points at the server's own keytab. Without it the server took whatever
ticket cache it inherited: the one of the process that started it (now kept out:
``process.server_environ``).
"""

from __future__ import annotations

import shutil
import socket
from pathlib import Path

from ferry.clusters.hiveserver2 import HiveServer2Unavailable, query
from ferry.clusters.kerberos import hadoop_client_conf
from ferry.clusters.spark_kerberos import metastore_conf
from ferry.errors import FerryError
from ferry_kit.errors import StackError
from ferry_kit.settings import KitSettings, StackKerberos
from ferry_kit.stack import health
from ferry_kit.stack.base import CONF_SRC, JAVA17_OPENS, Component, Layout, java, spark_home
from ferry_kit.stack.kdc import hive_keytab
from ferry_kit.stack.process import markers
from ferry_kit.stack.servers import hdfs_conf

#: The Thrift server's main class (``spark-hive-thriftserver_2.13`` in pyspark's jars).
THRIFT_SERVER = "org.apache.spark.sql.hive.thriftserver.HiveThriftServer2"


def hiveserver2_check(settings: KitSettings) -> str:
    """Healthy when the Thrift port accepts a connection and ``SELECT 1`` answers ``1`` over JDBC.

    Raises:
        ferry_kit.stack.health.Unhealthy: what was seen.
    """
    hs = settings.hiveserver2
    try:
        socket.create_connection((hs.host, hs.port), timeout=health.TIMEOUT_S).close()
    except OSError as exc:
        raise health.Unhealthy(f"thrift port {hs.port}: {exc}") from exc
    try:
        [result] = query(settings, "SELECT 1")
    except (HiveServer2Unavailable, FerryError, ValueError) as exc:
        raise health.Unhealthy(f"JDBC SELECT 1: {exc}") from exc
    if result.rows != (("1",),):
        raise health.Unhealthy(f"JDBC SELECT 1 answered {result.rows!r}")
    return "SELECT 1 over JDBC"


def initiator_jaas(krb: StackKerberos, keytab: Path) -> str:
    """A JAAS configuration whose ``com.sun.security.jgss.krb5.initiate`` entry logs in as
    ``krb.hive_principal`` from ``keytab`` (Krb5LoginModule: ``useKeyTab``, ``storeKey``,
    ``doNotPrompt``): the server's default credentials when a thread's Subject has none."""
    return (
        "com.sun.security.jgss.krb5.initiate {\n"
        "  com.sun.security.auth.module.Krb5LoginModule required\n"
        f'  useKeyTab=true keyTab="{keytab}" principal="{krb.hive_principal}"\n'
        "  storeKey=true doNotPrompt=true isInitiator=true;\n"
        "};\n"
    )


def hiveserver2(settings: KitSettings, lay: Layout) -> Component:
    """The HiveServer2 component (group ``hive``), after the metastore."""
    hs = settings.hiveserver2
    ms = settings.metastore
    a = settings.cluster("a")
    conf = lay.conf / "hiveserver2"
    data = lay.data / "hiveserver2"

    krb = settings.kerberos

    def prepare() -> None:
        if krb.enabled and hs.principal != krb.hive_principal:
            raise StackError(
                f"hiveserver2 on Kerberos runs as {krb.hive_principal}: set hiveserver2.principal "
                f"to it (is {hs.principal!r}; the kerberos profile does)"
            )
        hdfs_conf(lay, "a", a, krb=krb)
        conf.mkdir(parents=True, exist_ok=True)
        data.mkdir(parents=True, exist_ok=True)
        for name in ("core-site.xml", "hdfs-site.xml"):
            shutil.copyfile(lay.conf / "hdfs-a" / name, conf / name)
        shutil.copyfile(CONF_SRC / "spark-log4j2.properties", conf / "log4j2.properties")
        if krb.enabled:
            (conf / "jaas.conf").write_text(initiator_jaas(krb, hive_keytab(lay)), encoding="utf-8")

    spark_conf = {
        "spark.master": "local[1]",
        "spark.app.name": "ferry-hiveserver2",
        "spark.ui.enabled": "false",
        "spark.driver.host": hs.host,
        "spark.driver.bindAddress": hs.host,
        "spark.sql.catalogImplementation": "hive",
        "spark.sql.session.timeZone": "UTC",
        "spark.sql.shuffle.partitions": "2",
        # No file-listing cache: load replaces partitions under the server; every query lists anew.
        "spark.sql.hive.filesourcePartitionFileCacheSize": "0",
        "spark.sql.warehouse.dir": f"{a.fs_url}{ms.warehouse_path}",
        "spark.hadoop.hive.metastore.uris": ms.uri,
        "spark.hadoop.fs.defaultFS": a.fs_url,
        **{f"spark.hadoop.{k}": v for k, v in a.hadoop_client_conf().items()},
        "spark.local.dir": str(data),
        **(
            {
                "spark.kerberos.principal": krb.hive_principal,
                "spark.kerberos.keytab": str(hive_keytab(lay)),
                **{f"spark.hadoop.{k}": v for k, v in hadoop_client_conf(krb).items()},
                **{f"spark.hadoop.{k}": v for k, v in metastore_conf(krb).items()},
            }
            if krb.enabled
            else {}
        ),
    }
    hive_conf = {
        "hive.server2.thrift.port": str(hs.port),
        "hive.server2.thrift.bind.host": hs.host,
        "hive.server2.transport.mode": "binary",
        "hive.server2.enable.doAs": "false",
        **(
            {
                "hive.server2.authentication": "KERBEROS",
                "hive.server2.authentication.kerberos.principal": krb.hive_principal,
                "hive.server2.authentication.kerberos.keytab": str(hive_keytab(lay)),
            }
            if krb.enabled
            else {}
        ),
    }
    argv = [
        java(),
        f"-Xmx{hs.driver_memory_mb}m",
        *(
            [
                f"-Djava.security.krb5.conf={krb.krb5_conf}",
                f"-Djava.security.auth.login.config={conf / 'jaas.conf'}",
                "-Djavax.security.auth.useSubjectCredsOnly=false",
            ]
            if krb.enabled
            else []
        ),
        *markers("hiveserver2", lay.var),
        *JAVA17_OPENS,
        "-Djdk.reflect.useDirectMethodHandle=false",
        "-Dio.netty.tryReflectionSetAccessible=true",
        f"-Dderby.system.home={data}",
        "-cp",
        f"{conf}:{spark_home() / 'jars'}/*",
        "org.apache.spark.deploy.SparkSubmit",
        "--class",
        THRIFT_SERVER,
        *(x for k, v in spark_conf.items() for x in ("--conf", f"{k}={v}")),
        "spark-internal",
        *(x for k, v in hive_conf.items() for x in ("--hiveconf", f"{k}={v}")),
    ]
    env = {
        "SPARK_HOME": str(spark_home()),
        "SPARK_SCALA_VERSION": "2.13",
        "SPARK_CONF_DIR": str(conf),
        "SPARK_LOCAL_IP": hs.host,
    }
    return Component(
        "hiveserver2",
        f"jdbc:hive2://{hs.host}:{hs.port}/default",
        lay.launch("hiveserver2", argv, env),
        check=lambda: hiveserver2_check(settings),
        requires=("hive-metastore", *(("kdc",) if krb.enabled else ())),
        ports=(hs.port,),
        host=hs.host,
        prepare=prepare,
        group="hive",
    )
