"""Builders of the Spark standalone daemons: two masters in ZooKeeper recovery mode and one worker,
all run from the installed pyspark distribution.
"""

from __future__ import annotations

import shutil
from functools import partial

from ferry_kit.settings import KitSettings
from ferry_kit.stack import health
from ferry_kit.stack.base import CONF_SRC, JAVA17_OPENS, Component, Layout, java, spark_home
from ferry_kit.stack.process import markers


class SparkDaemons:
    """What the masters and the worker share: their SPARK_HOME, conf dir, environment and JVM
    command line."""

    def __init__(self, settings: KitSettings, lay: Layout) -> None:
        self.settings = settings
        self.sp = settings.spark
        self.lay = lay
        self.sh = spark_home()
        self.conf = lay.conf / "spark"
        self.home = lay.var / "spark-home"
        self.work_dir = lay.data / "spark-worker"
        # SPARK_SCALA_VERSION is what bin/load-spark-env.sh exports; the executor launcher needs it.
        self.env = {
            "SPARK_HOME": str(self.home),
            "SPARK_SCALA_VERSION": "2.13",
            "SPARK_CONF_DIR": str(self.conf),
            "SPARK_LOG_DIR": str(lay.logs),
            "SPARK_LOCAL_IP": self.sp.host,
            "SPARK_WORKER_DIR": str(self.work_dir),
        }
        self.webuis = [f"http://{self.sp.host}:{p}" for p in self.sp.master_webui_ports]

    def prepare(self) -> None:
        """Create the daemons' SPARK_HOME, conf dir (log4j2) and the worker's work dir."""
        # The worker builds executor command lines from SPARK_HOME and finds jars/ only where a
        # RELEASE file marks a distribution; the pip package has none. Give the daemons a home of
        # links into the pyspark package instead of touching the package itself.
        self.home.mkdir(parents=True, exist_ok=True)
        for sub in ("bin", "jars", "python"):
            link = self.home / sub
            if not link.is_symlink():
                link.symlink_to(self.sh / sub)
        (self.home / "RELEASE").write_text(f"Spark from the pyspark distribution at {self.sh}\n")
        self.conf.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(CONF_SRC / "spark-log4j2.properties", self.conf / "log4j2.properties")
        self.work_dir.mkdir(parents=True, exist_ok=True)

    def argv(self, name: str, main: str, *args: str, opts: tuple[str, ...] = ()) -> list[str]:
        """What `spark-class <main>` execs (SparkClassCommandBuilder), launched directly so the pid
        file names the JVM itself rather than a shell that execs later."""
        return [
            java(),
            f"-Xmx{self.sp.daemon_heap_mb}m",
            *markers(name, self.lay.var),
            *JAVA17_OPENS,
            "-Djdk.reflect.useDirectMethodHandle=false",
            "-Dio.netty.tryReflectionSetAccessible=true",
            *opts,
            "-cp",
            f"{self.conf}:{self.sh / 'jars'}/*",
            main,
            *args,
        ]

    def master(self, i: int) -> Component:
        """Master ``i`` (1 or 2), recovery through ZooKeeper; health: ``/json`` ALIVE or STANDBY."""
        sp = self.sp
        port, ui = sp.master_ports[i - 1], sp.master_webui_ports[i - 1]
        name = f"spark-master-{i}"
        recovery = (
            "-Dspark.deploy.recoveryMode=ZOOKEEPER",
            f"-Dspark.deploy.zookeeper.url={self.settings.zookeeper.connect}",
            f"-Dspark.deploy.zookeeper.dir={sp.zookeeper_dir}",
        )
        argv = self.argv(
            name,
            "org.apache.spark.deploy.master.Master",
            "--host",
            sp.host,
            "--port",
            str(port),
            "--webui-port",
            str(ui),
            opts=recovery,
        )
        return Component(
            name,
            f"spark://{sp.host}:{port} (ui {ui})",
            self.lay.launch(name, argv, self.env),
            check=partial(health.spark_master, self.webuis[i - 1]),
            requires=("zookeeper",),
            ports=(port, ui),
            host=sp.host,
            prepare=self.prepare,
            group="spark",
        )

    def worker(self) -> Component:
        """The worker, registered with both masters; health: registered at the ALIVE master."""
        sp = self.sp
        argv = self.argv(
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
            str(self.work_dir),
            sp.master_url,
        )
        webuis = self.webuis
        return Component(
            "spark-worker",
            f"{sp.worker_cores} cores, {sp.worker_memory_mb} MiB (ui {sp.worker_webui_port})",
            self.lay.launch("spark-worker", argv, self.env),
            check=lambda: health.spark_worker(webuis),
            requires=("spark-master-1", "spark-master-2"),
            ports=(sp.worker_webui_port,),
            host=sp.host,
            prepare=self.prepare,
            group="spark",
        )


def spark_cluster(settings: KitSettings, lay: Layout) -> list[Component]:
    """The two masters and the worker, in start order."""
    daemons = SparkDaemons(settings, lay)
    return [daemons.master(1), daemons.master(2), daemons.worker()]
