"""The embedded local stack's components: what each runs, where it logs, how it is checked.

Ten JVMs, started in this order (a component waits only for the ones in its ``requires``):

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
================  ===============================================  ============================
"""

from __future__ import annotations

import base64
import os
import shutil
import subprocess
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field
from functools import partial
from pathlib import Path
from string import Template

from ferry.core.config import REPO_ROOT, HdfsClusterSettings, Settings
from ferry.core.errors import StackError
from ferry.stack import health
from ferry.stack.process import Launch, markers

CONF_SRC = REPO_ROOT / "deploy" / "local" / "conf"

#: Module options Spark's launcher adds on Java 17 (``JavaModuleOptions``); Hadoop and Hive 2.3 need
#: the same reflective access on 17.
JAVA17_OPENS = [
    "-XX:+IgnoreUnrecognizedVMOptions",
    *(
        f"--add-opens=java.base/{pkg}=ALL-UNNAMED"
        for pkg in (
            "java.lang",
            "java.lang.invoke",
            "java.lang.reflect",
            "java.io",
            "java.net",
            "java.nio",
            "java.util",
            "java.util.concurrent",
            "java.util.concurrent.atomic",
            "jdk.internal.ref",
            "sun.nio.ch",
            "sun.nio.cs",
            "sun.security.action",
            "sun.util.calendar",
        )
    ),
]


@dataclass(frozen=True)
class Component:
    """One server process of the stack."""

    name: str
    address: str
    launch: Launch
    check: Callable[[], str]
    requires: tuple[str, ...] = ()
    ports: tuple[int, ...] = ()
    host: str = "127.0.0.1"
    prepare: Callable[[], None] = field(default=lambda: None)


def spark_home() -> Path:
    """``SPARK_HOME`` of the installed pyspark distribution (a full Spark: bin/, jars/)."""
    import pyspark

    return Path(pyspark.__file__).resolve().parent


def java() -> str:
    """The ``java`` executable: ``$JAVA_HOME/bin/java`` or the one on PATH."""
    home = os.environ.get("JAVA_HOME")
    exe = str(Path(home) / "bin" / "java") if home else shutil.which("java")
    if not exe or not Path(exe).exists():
        raise StackError("java not found: install a Java 17 JDK or set JAVA_HOME")
    return exe


def _render(template: str, dest: Path, **values: object) -> None:
    try:
        text = Template((CONF_SRC / template).read_text(encoding="utf-8")).substitute(
            {k: str(v) for k, v in values.items()}
        )
    except (KeyError, ValueError, OSError) as exc:
        raise StackError(f"cannot render config template {CONF_SRC / template}: {exc!r}") from exc
    dest.parent.mkdir(parents=True, exist_ok=True)
    dest.write_text(text, encoding="utf-8")


def _run_once(name: str, argv: list[str], log: Path, timeout_s: float = 180) -> None:
    """Run a one-shot set-up command (storage format).

    Raises:
        StackError: the command timed out or failed; the message names its log.
    """
    log.parent.mkdir(parents=True, exist_ok=True)
    with log.open("ab") as fh:
        try:
            proc = subprocess.run(  # noqa: S603 - argv from settings
                argv,
                stdout=fh,
                stderr=subprocess.STDOUT,
                stdin=subprocess.DEVNULL,
                timeout=timeout_s,
            )
        except subprocess.TimeoutExpired as exc:
            raise StackError(
                f"{name}: set-up step timed out after {timeout_s}s; see {log}"
            ) from exc
    if proc.returncode != 0:
        raise StackError(f"{name}: set-up step exited {proc.returncode}; see {log}")


def build_components(settings: Settings) -> list[Component]:
    """All components, in start order, configured from ``settings``."""
    var = settings.var_dir
    logs, run, conf, data = var / "log", var / "run", var / "conf", var / "data"
    jars = var / "jars"
    sh = spark_home()
    comps: list[Component] = []

    def launch(name: str, argv: list[str], env: dict[str, str] | None = None) -> Launch:
        return Launch(name, argv, env or {}, logs / f"{name}.log", run / f"{name}.pid", var)

    # --- ZooKeeper -------------------------------------------------------------------------
    zk = settings.zookeeper
    zk_cfg = conf / "zookeeper" / "zoo.cfg"

    def prep_zk() -> None:
        (data / "zookeeper").mkdir(parents=True, exist_ok=True)
        _render(
            "zoo.cfg.tmpl",
            zk_cfg,
            tick_time_ms=zk.tick_time_ms,
            min_session_timeout_ms=2 * zk.tick_time_ms,
            max_session_timeout_ms=zk.max_session_timeout_ms,
            data_dir=data / "zookeeper",
            port=zk.port,
            host=zk.host,
        )

    comps.append(
        Component(
            "zookeeper",
            zk.connect,
            launch(
                "zookeeper",
                [
                    java(),
                    f"-Xmx{zk.heap_mb}m",
                    *markers("zookeeper", var),
                    f"-Dlog4j2.configurationFile={CONF_SRC / 'spark-log4j2.properties'}",
                    "-cp",
                    f"{sh / 'jars'}/*",
                    "org.apache.zookeeper.server.ZooKeeperServerMain",
                    str(zk_cfg),
                ],
            ),
            check=lambda: health.zookeeper_ruok(zk.host, zk.port),
            ports=(zk.port,),
            host=zk.host,
            prepare=prep_zk,
        )
    )

    # --- Kafka (KRaft) ---------------------------------------------------------------------
    kf = settings.kafka
    kafka_props = conf / "kafka" / "server.properties"
    kafka_data = data / "kafka"
    kafka_cp = [
        "-cp",
        f"{jars / 'kafka'}/*",
        f"-Dlog4j2.configurationFile={CONF_SRC / 'kafka-log4j2.yaml'}",
    ]

    def prep_kafka() -> None:
        _render(
            "kafka-server.properties.tmpl",
            kafka_props,
            host=kf.host,
            port=kf.port,
            controller_port=kf.controller_port,
            data_dir=kafka_data,
        )
        if not (kafka_data / "meta.properties").exists():
            cluster_id = base64.urlsafe_b64encode(uuid.uuid4().bytes).decode().rstrip("=")
            _run_once(
                "kafka",
                [
                    java(),
                    "-Xmx256m",
                    *kafka_cp,
                    "kafka.tools.StorageTool",
                    "format",
                    "-t",
                    cluster_id,
                    "-c",
                    str(kafka_props),
                ],
                logs / "kafka-format.log",
            )

    comps.append(
        Component(
            "kafka",
            kf.bootstrap_servers,
            launch(
                "kafka",
                [
                    java(),
                    f"-Xmx{kf.heap_mb}m",
                    f"-Xms{kf.heap_mb}m",
                    *markers("kafka", var),
                    *kafka_cp,
                    "kafka.Kafka",
                    str(kafka_props),
                ],
            ),
            check=lambda: health.kafka_roundtrip(kf.bootstrap_servers),
            ports=(kf.port, kf.controller_port),
            host=kf.host,
            prepare=prep_kafka,
        )
    )

    # --- HDFS clusters B and A -------------------------------------------------------------
    def hdfs_conf(cluster: str, cs: HdfsClusterSettings) -> Path:
        d = conf / f"hdfs-{cluster}"
        values = dict(
            cluster=cluster,
            host=cs.host,
            base_dir=data / f"hdfs-{cluster}",
            namenode_rpc_port=cs.namenode_rpc_port,
            namenode_http_port=cs.namenode_http_port,
            datanode_port=cs.datanode_port,
            datanode_http_port=cs.datanode_http_port,
            datanode_ipc_port=cs.datanode_ipc_port,
        )
        _render("core-site.xml.tmpl", d / "core-site.xml", **values)
        _render("hdfs-site.xml.tmpl", d / "hdfs-site.xml", **values)
        shutil.copyfile(CONF_SRC / "hadoop-log4j.properties", d / "log4j.properties")
        return d

    def hadoop_argv(name: str, heap: int, cluster: str, main: str, *args: str) -> list[str]:
        return [
            java(),
            f"-Xmx{heap}m",
            *markers(name, var),
            *JAVA17_OPENS,
            f"-Dhadoop.log.dir={logs}",
            f"-Dhadoop.home.dir={jars / 'hdfs'}",
            "-cp",
            f"{conf / f'hdfs-{cluster}'}:{jars / 'hdfs-webapps'}:{jars / 'hdfs'}/*",
            main,
            *args,
        ]

    nn_main = "org.apache.hadoop.hdfs.server.namenode.NameNode"
    dn_main = "org.apache.hadoop.hdfs.server.datanode.DataNode"
    for cluster in ("b", "a"):
        cs = settings.cluster(cluster)
        nn_name = f"hdfs-{cluster}-namenode"

        def check_jars() -> None:
            for need in (jars / "hdfs", jars / "hdfs-webapps" / "webapps" / "hdfs", jars / "kafka"):
                if not need.is_dir() or not any(need.iterdir()):
                    raise StackError(
                        f"{need} is missing or empty: run `make install` "
                        "(Maven fetches the servers' jars)"
                    )

        def prep_nn(
            cluster: str = cluster, cs: HdfsClusterSettings = cs, nn_name: str = nn_name
        ) -> None:
            check_jars()
            hdfs_conf(cluster, cs)
            if not (data / f"hdfs-{cluster}" / "name" / "current" / "VERSION").exists():
                _run_once(
                    nn_name,
                    hadoop_argv(
                        f"{nn_name}-format",
                        256,
                        cluster,
                        nn_main,
                        "-format",
                        "-nonInteractive",
                        "-force",
                    ),
                    logs / f"{nn_name}-format.log",
                )

        comps.append(
            Component(
                nn_name,
                cs.fs_url,
                launch(nn_name, hadoop_argv(nn_name, cs.namenode_heap_mb, cluster, nn_main)),
                check=partial(health.namenode, f"http://{cs.host}:{cs.namenode_http_port}"),
                ports=(cs.namenode_rpc_port, cs.namenode_http_port),
                host=cs.host,
                prepare=prep_nn,
            )
        )
    for cluster in ("b", "a"):
        cs = settings.cluster(cluster)
        dn_name = f"hdfs-{cluster}-datanode"

        def prep_dn(cluster: str = cluster, cs: HdfsClusterSettings = cs) -> None:
            hdfs_conf(cluster, cs)

        comps.append(
            Component(
                dn_name,
                f"{cs.host}:{cs.datanode_port} (http {cs.datanode_http_port})",
                launch(dn_name, hadoop_argv(dn_name, cs.datanode_heap_mb, cluster, dn_main)),
                check=partial(health.datanode, f"http://{cs.host}:{cs.namenode_http_port}"),
                requires=(f"hdfs-{cluster}-namenode",),
                ports=(cs.datanode_port, cs.datanode_http_port, cs.datanode_ipc_port),
                host=cs.host,
                prepare=prep_dn,
            )
        )

    # --- Spark standalone: two masters (ZooKeeper recovery) and one worker -----------------
    sp = settings.spark
    spark_conf = conf / "spark"
    daemon_home = var / "spark-home"

    def prep_spark() -> None:
        # The worker builds executor command lines from SPARK_HOME and finds jars/ only where a
        # RELEASE file marks a distribution; the pip package has none. Give the daemons a home of
        # links into the pyspark package instead of touching the package itself.
        daemon_home.mkdir(parents=True, exist_ok=True)
        for sub in ("bin", "jars", "python"):
            link = daemon_home / sub
            if not link.is_symlink():
                link.symlink_to(sh / sub)
        (daemon_home / "RELEASE").write_text(f"Spark from the pyspark distribution at {sh}\n")
        spark_conf.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(CONF_SRC / "spark-log4j2.properties", spark_conf / "log4j2.properties")
        (data / "spark-worker").mkdir(parents=True, exist_ok=True)

    def spark_daemon(name: str, main: str, *args: str, opts: tuple[str, ...] = ()) -> list[str]:
        # What `spark-class <main>` execs (SparkClassCommandBuilder), launched directly so the pid
        # file names the JVM itself rather than a shell that execs later.
        return [
            java(),
            f"-Xmx{sp.daemon_heap_mb}m",
            *markers(name, var),
            *JAVA17_OPENS,
            "-Djdk.reflect.useDirectMethodHandle=false",
            "-Dio.netty.tryReflectionSetAccessible=true",
            *opts,
            "-cp",
            f"{spark_conf}:{sh / 'jars'}/*",
            main,
            *args,
        ]

    # SPARK_SCALA_VERSION is what bin/load-spark-env.sh exports; the executor launcher needs it.
    spark_env = {
        "SPARK_HOME": str(daemon_home),
        "SPARK_SCALA_VERSION": "2.13",
        "SPARK_CONF_DIR": str(spark_conf),
        "SPARK_LOG_DIR": str(logs),
        "SPARK_LOCAL_IP": sp.host,
        "SPARK_WORKER_DIR": str(data / "spark-worker"),
    }
    recovery = (
        "-Dspark.deploy.recoveryMode=ZOOKEEPER",
        f"-Dspark.deploy.zookeeper.url={zk.connect}",
        f"-Dspark.deploy.zookeeper.dir={sp.zookeeper_dir}",
    )
    webuis = [f"http://{sp.host}:{p}" for p in sp.master_webui_ports]
    for i, (port, ui) in enumerate(
        zip(sp.master_ports, sp.master_webui_ports, strict=True), start=1
    ):
        name = f"spark-master-{i}"
        comps.append(
            Component(
                name,
                f"spark://{sp.host}:{port} (ui {ui})",
                launch(
                    name,
                    spark_daemon(
                        name,
                        "org.apache.spark.deploy.master.Master",
                        "--host",
                        sp.host,
                        "--port",
                        str(port),
                        "--webui-port",
                        str(ui),
                        opts=recovery,
                    ),
                    spark_env,
                ),
                check=partial(health.spark_master, webuis[i - 1]),
                requires=("zookeeper",),
                ports=(port, ui),
                host=sp.host,
                prepare=prep_spark,
            )
        )
    comps.append(
        Component(
            "spark-worker",
            f"{sp.worker_cores} cores, {sp.worker_memory_mb} MiB (ui {sp.worker_webui_port})",
            launch(
                "spark-worker",
                spark_daemon(
                    "spark-worker",
                    "org.apache.spark.deploy.worker.Worker",
                    "--host",
                    sp.host,
                    "--cores",
                    str(sp.worker_cores),
                    "--memory",
                    f"{sp.worker_memory_mb}m",
                    "--webui-port",
                    str(sp.worker_webui_port),
                    "--work-dir",
                    str(data / "spark-worker"),
                    sp.master_url,
                ),
                spark_env,
            ),
            check=lambda: health.spark_worker(webuis),
            requires=("spark-master-1", "spark-master-2"),
            ports=(sp.worker_webui_port,),
            host=sp.host,
            prepare=prep_spark,
        )
    )

    # --- Hive metastore for cluster A --------------------------------------------------------
    ms = settings.metastore
    ms_conf = conf / "hive-metastore"
    a = settings.cluster("a")

    def prep_ms() -> None:
        hdfs_conf("a", a)
        ms_conf.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(conf / "hdfs-a" / "core-site.xml", ms_conf / "core-site.xml")
        shutil.copyfile(conf / "hdfs-a" / "hdfs-site.xml", ms_conf / "hdfs-site.xml")
        _render(
            "hive-site.xml.tmpl",
            ms_conf / "hive-site.xml",
            base_dir=data / "hive-metastore",
            warehouse_url=f"{a.fs_url}{ms.warehouse_path}",
            port=ms.port,
        )
        (data / "hive-metastore").mkdir(parents=True, exist_ok=True)

    comps.append(
        Component(
            "hive-metastore",
            ms.uri,
            launch(
                "hive-metastore",
                [
                    java(),
                    f"-Xmx{ms.heap_mb}m",
                    *markers("hive-metastore", var),
                    *JAVA17_OPENS,
                    f"-Dderby.system.home={data / 'hive-metastore'}",
                    f"-Dlog4j2.configurationFile={CONF_SRC / 'spark-log4j2.properties'}",
                    "-cp",
                    f"{ms_conf}:{sh / 'jars'}/*",
                    "org.apache.hadoop.hive.metastore.HiveMetaStore",
                    "-p",
                    str(ms.port),
                ],
            ),
            check=lambda: health.metastore(ms.host, ms.port),
            requires=("hdfs-a-datanode",),
            ports=(ms.port,),
            host=ms.host,
            prepare=prep_ms,
        )
    )
    return comps
