"""The ``spark`` and ``zookeeper`` sections: the Spark standalone cluster (a master pair in
ZooKeeper recovery mode) or each cluster's own YARN (``spark.cluster_managers``), and the
ZooKeeper the masters and Ferry's table locks use."""

from __future__ import annotations

from typing import Literal

from pydantic import Field, field_validator

from ferry.settings.base import Frozen

#: Drivers (short planning work, many small queries): C1 only, serial collector.
DRIVER_JAVA_OPTIONS = "-XX:TieredStopAtLevel=1 -XX:+UseSerialGC"
#: Executors (bulk per-record work): serial collector, and C2 only for code about ten times hotter
#: than HotSpot's tiered thresholds ask (its defaults, `java -XX:+PrintFlagsFinal` on JDK 17:
#: Tier4InvocationThreshold 5,000, Tier4MinInvocationThreshold 600, Tier4CompileThreshold 15,000,
#: Tier4BackEdgeThreshold 40,000), so that short batches do not pay C2's compile CPU
#: (docs/operations.md, "JVM options per role").
EXECUTOR_JAVA_OPTIONS = (
    "-XX:+UseSerialGC -XX:Tier4InvocationThreshold=50000 -XX:Tier4MinInvocationThreshold=10000 "
    "-XX:Tier4CompileThreshold=150000 -XX:Tier4BackEdgeThreshold=400000"
)


class ZooKeeperSettings(Frozen):
    """ZooKeeper for the Spark master pair and Ferry's Hive table locks
    (:mod:`ferry.tables.locks`). Env: ``FERRY_ZOOKEEPER__<FIELD>``.

    The server clamps every client's session timeout into [2×tickTime, maxSessionTimeout]
    (ZooKeeper Administrator's Guide, "minSessionTimeout").
    """

    host: str = Field(default="127.0.0.1", description="Address ZooKeeper binds.")
    port: int = Field(default=12181, description="ZooKeeper client port (TCP).")
    locks_path: str = Field(
        default="/ferry/locks", description="ZooKeeper path under which each Hive table's lock is."
    )
    lock_timeout_s: float = Field(
        default=900.0,
        description="Longest wait for a Hive table's lock before the batch is retried, s.",
    )
    lock_session_timeout_s: float = Field(
        default=10.0,
        description="ZooKeeper session timeout of the table-lock client, s: a dead holder's lock "
        "is freed this long after it died (clamped by the server's maxSessionTimeout).",
    )

    @property
    def connect(self) -> str:
        return f"{self.host}:{self.port}"


#: A cluster's Spark cluster manager: the standalone master pair of ``master_url``, or the
#: cluster's own YARN (its ResourceManager from ``yarn-site.xml`` in the cluster's
#: ``hadoop_conf_dir``).
ClusterManager = Literal["standalone", "yarn"]


class YarnSettings(Frozen):
    """Spark on a cluster's own YARN, client mode (docs/yarn.md). Env:
    ``FERRY_SPARK__YARN__<FIELD>``. Used for the clusters whose ``spark.cluster_managers`` entry
    is ``yarn``; executors are sized by the ``spark`` section's ``executor_*`` and
    ``app_cores_max`` as on the standalone cluster."""

    queue: str = Field(
        default="default",
        description="YARN queue of every Ferry application (spark.yarn.queue).",
    )
    archive_dir: str = Field(
        default="/ferry/spark",
        description=(
            "HDFS directory, on each YARN cluster's own HDFS, of the Spark jars archive "
            "(spark.yarn.archive): ``<archive_dir>/spark-<version>-jars.zip``, a zip of the "
            "installed pyspark's ``jars/``. The first session on a cluster uploads it when it is "
            "absent; later sessions reuse it (NodeManagers cache it between applications). "
            "Absolute path."
        ),
    )
    am_memory_mb: int = Field(
        default=256,
        ge=128,
        description=(
            "Heap of the client-mode application master (spark.yarn.am.memory), MiB: it only "
            "asks the ResourceManager for executors. YARN adds its overhead (384 MiB at least) "
            "and rounds the container up to yarn.scheduler.minimum-allocation-mb."
        ),
    )
    max_app_attempts: int = Field(
        default=2,
        ge=1,
        description=(
            "spark.yarn.maxAppAttempts: how many application masters YARN starts for one "
            "session before the session fails (the service then builds a new one)."
        ),
    )

    @field_validator("archive_dir")
    @classmethod
    def _absolute(cls, value: str) -> str:
        if not value.startswith("/"):
            raise ValueError(f"archive_dir {value!r}: an absolute HDFS path, like /ferry/spark")
        return value.rstrip("/") or "/"


class SparkSettings(Frozen):
    """Spark's cluster managers: the standalone cluster (two masters in ZooKeeper recovery mode,
    one worker), the default for every cluster, or a cluster's own YARN (``cluster_managers``)."""

    host: str = Field(default="127.0.0.1", description="Address the masters and worker bind.")
    driver_host_override: str | None = Field(
        default=None,
        description=(
            "Address at which the executors reach a Ferry service's Spark driver (this machine's "
            "name on the workers' network: spark.driver.host; the driver binds all addresses "
            "then). Default: ``host`` (the local stack, one machine). An edge node sets its own "
            "name here."
        ),
    )
    master_ports: tuple[int, int] = Field(
        default=(17077, 17078), description="RPC ports of master 1 and 2 (``spark://`` URLs)."
    )
    master_url_override: str | None = Field(
        default=None,
        description=(
            "Any Spark master URL (e.g. local[2]) for the clusters on the standalone manager. "
            "For YARN set ``cluster_managers`` instead: it also stages the Spark jars and "
            "points Spark at that cluster's own configuration."
        ),
    )
    cluster_managers: dict[str, ClusterManager] = Field(
        default_factory=dict,
        description=(
            "Cluster name → ``standalone`` or ``yarn``: where the Spark work on that cluster "
            "runs (transform on ``b``, load and the Hive operations on ``a``). A cluster not "
            "named is ``standalone`` (``master_url``). ``yarn`` runs the session in client mode "
            "on that cluster's ResourceManager, read from ``yarn-site.xml`` in the cluster's "
            "``hadoop_conf_dir`` (required then). Env: "
            '``FERRY_SPARK__CLUSTER_MANAGERS=\'{"a": "yarn", "b": "yarn"}\'``.'
        ),
    )
    yarn: YarnSettings = Field(
        default_factory=YarnSettings,
        description="Spark on YARN: queue, the jars archive, the application master.",
    )
    app_cores_max: int = Field(
        default=4,
        description=(
            "spark.cores.max of each Ferry application, cores (executors of executor_cores "
            "each): task slots, not CPUs. Four slots in two executors on the 2-core development "
            "machine let the HDFS round trips of a batch's per-file writes overlap: a batch of 256 "
            "small files took 10.6 and 12.8 s against 13.2 and 17.1 s with 2 slots in two "
            "executors, the 300 MB file 33.2 and 35.3 s against 35.1 s (bench/profile_batch.py, "
            "docs/operations.md 'Task slots'). An application started when fewer slots are free "
            "gets what is free, in whole executors."
        ),
    )
    executor_cores: int = Field(
        default=2,
        ge=1,
        description=(
            "spark.executor.cores, cores: an application of app_cores_max cores runs "
            "app_cores_max / executor_cores executor JVMs on the worker; their tasks share the "
            "executor's heap (executor_memory_mb)."
        ),
    )
    executor_memory_mb: int = Field(default=640, description="spark.executor.memory, MiB.")
    driver_java_options: str = Field(
        default=DRIVER_JAVA_OPTIONS,
        description=(
            "JVM options of every Ferry driver (spark.driver.extraJavaOptions; the Kerberos "
            "option is added). Default: C1 compiler only, serial collector. On 2 cores shared "
            "by the stack and four Spark applications, C2 compilation and G1's threads took "
            "48% of the Spark JVMs' CPU during a hot-standby takeover; docs/operations.md "
            "'JVM options' has the figures. Empty: the JVM's defaults."
        ),
    )
    executor_java_options: str = Field(
        default=EXECUTOR_JAVA_OPTIONS,
        description=(
            "JVM options of every Ferry executor (spark.executor.extraJavaOptions; the Kerberos "
            "option is added). Default: serial collector, C2 only for code run 10 times more "
            "often than the JVM's thresholds ask: the per-record loops of a big file get C2, "
            "a batch of small files stays on C1. Measured on 2 cores (docs/operations.md, "
            "'JVM options per role'): transform of a 300 MB file 30.6 s against 63.6 s with "
            "C1 only and 36.8 s with C2 at the JVM's thresholds; a batch of 64 small files "
            "5.0 s against 4.9 s; the hot-standby takeover within the C1 figures. Empty: the "
            "JVM's defaults."
        ),
    )
    driver_memory_mb: int = Field(default=768, description="Driver JVM heap, MiB.")

    @property
    def driver_host(self) -> str:
        """``driver_host_override``, else ``host``."""
        return self.driver_host_override or self.host

    def manager(self, cluster: str) -> ClusterManager:
        """The cluster manager of cluster ``cluster``: its ``cluster_managers`` entry, else
        ``standalone``."""
        return self.cluster_managers.get(cluster, "standalone")

    @property
    def master_url(self) -> str:
        """``spark://h:p1,h:p2``: the client tries both masters and follows the ALIVE one."""
        if self.master_url_override:
            return self.master_url_override
        return "spark://" + ",".join(f"{self.host}:{p}" for p in self.master_ports)
