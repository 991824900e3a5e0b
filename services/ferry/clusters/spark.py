"""SparkSession factory: one long-lived session per service process, configured from settings.

A session is expensive (a driver JVM plus executors on the cluster manager), so a service builds
one at start and keeps it between batches; no JVM starts per file. Clusters are named: the session
for cluster ``"b"`` has B's NameNode as its default filesystem; the ``"a"`` session with
``hive=True`` also talks to the Hive metastore and writes the warehouse on HDFS A.

Each cluster's cluster manager is configuration (``spark.cluster_managers``): the standalone
master pair (default) or the cluster's own YARN in client mode, whose keys, environment and jars
archive come from :mod:`ferry.clusters.spark_yarn`. The stages build their sessions the same way
for both.
"""

from __future__ import annotations

import logging
import threading
import time
from pathlib import Path
from typing import TYPE_CHECKING, Any

from ferry.clusters import spark_kerberos, spark_yarn
from ferry.core.runtime.heartbeat import write_spark_status
from ferry.settings import Settings

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

log = logging.getLogger(__name__)

#: ``spark.sql.codegen.hugeMethodLimit`` of every Ferry session, bytes of bytecode: HotSpot's
#: ``HugeMethodLimit`` (a larger method is never JIT-compiled). Spark's default is 65,535.
HUGE_METHOD_BYTES = 8000


def session_conf(
    settings: Settings,
    app_name: str,
    cluster: str,
    *,
    hive: bool = False,
    master: str | None = None,
) -> dict[str, str]:
    """The Spark configuration of a Ferry application, as a plain dict (tested without a JVM).

    ``master`` (a Spark master URL) replaces the cluster's manager; otherwise a cluster whose
    ``spark.cluster_managers`` entry is ``yarn`` gets the YARN keys of
    :func:`ferry.clusters.spark_yarn.session_conf`, any other the standalone ``master_url``.

    Keys are documented in Spark's "Configuration", "Spark Standalone Mode" and "Running Spark on
    YARN" pages; the HDFS client keys in hdfs-default.xml; Hive's in HiveConf.

    Raises:
        ConfigError: unknown cluster.
    """
    sp = settings.spark
    cs = settings.cluster(cluster)
    on_yarn = master is None and sp.manager(cluster) == "yarn"
    conf = {
        "spark.app.name": app_name,
        "spark.master": master or sp.master_url,
        # Share the one worker between transform and load: cap each application's cores.
        # (YARN sizes an application by its executor count instead: spark_yarn.session_conf.)
        **({} if on_yarn else {"spark.cores.max": str(sp.app_cores_max)}),
        "spark.executor.cores": str(sp.executor_cores),
        "spark.executor.memory": f"{sp.executor_memory_mb}m",
        "spark.driver.memory": f"{sp.driver_memory_mb}m",
        "spark.driver.host": sp.driver_host,
        "spark.driver.bindAddress": sp.host if sp.driver_host_override is None else "0.0.0.0",
        "spark.ui.enabled": "false",
        "spark.ui.showConsoleProgress": "false",  # progress bars only clutter the service logs
        "spark.sql.shuffle.partitions": "4",
        # A batch reads one path per file (256): over 32 paths Spark lists them with a Spark job
        # of one task per path (HadoopFSUtils.parallelListLeafFiles), 11.6 s for a 256-file
        # transform batch (bench/profile_batch.py); listed on the driver it is one NameNode call
        # per path.
        "spark.sql.sources.parallelPartitionDiscovery.threshold": "100000",
        # Adaptive execution coalesced the ~2 MB shuffle before a batch's partitionBy write into
        # ONE task, which then wrote the batch's 256 Parquet files one after another (24.7 s,
        # bench/profile_batch.py); the writes are HDFS round trips, not CPU: keep the 4 tasks.
        "spark.sql.adaptive.coalescePartitions.enabled": "false",
        "spark.sql.session.timeZone": "UTC",
        # Whole-stage code generation compiles a query stage into one Java method; HotSpot never
        # JIT-compiles a method over 8,000 bytes of bytecode (-XX:+DontCompileHugeMethods), so
        # transform's classification (flights: ~40 checks per row) ran interpreted: 19.8 s for a
        # 93 MB file's rows in local[2], 5.1 s with this limit, over which Spark compiles that
        # part expression by expression instead (Spark's SQL configuration,
        # spark.sql.codegen.hugeMethodLimit: "may be preferable to set the value to 8000" on
        # HotSpot; docs/operations.md, "Whole-stage code generation").
        "spark.sql.codegen.hugeMethodLimit": str(HUGE_METHOD_BYTES),
        "spark.hadoop.fs.defaultFS": cs.fs_url,
        # One DataNode per cluster: never look for a replacement DataNode in the write pipeline.
        "spark.hadoop.dfs.client.block.write.replace-datanode-on-failure.enable": "false",
        "spark.hadoop.dfs.replication": "1",
        # Closing an HDFS file fails until the DataNode's block report reached the NameNode; the
        # client then sleeps 400 ms and doubles (hdfs-default.xml, HDFS-7835), so each small
        # file Spark wrote cost ~0.4 s: 20 ms doubling, 10 retries (~20 s in all, the default
        # ~12 s). bench/bench_transform.py, 256-file batch: 79.7 s → 32.0 s (docs/operations.md).
        "spark.hadoop.dfs.client.block.write.locateFollowingBlock.initial.delay.ms": "20",
        "spark.hadoop.dfs.client.block.write.locateFollowingBlock.retries": "10",
        # Do not write _SUCCESS markers into staging directories; Ferry commits by rename.
        "spark.hadoop.mapreduce.fileoutputcommitter.marksuccessfuljobs": "false",
        # The cluster's own client configuration (hadoop_conf_dir), and for HA the nameservice
        # of fs_url and its NameNodes.
        **{f"spark.hadoop.{k}": v for k, v in cs.hadoop_client_conf().items()},
    }
    if cs.ha:
        # a hung NameNode costs an RPC the read timeout, then the client fails over to the next
        # (core-default.xml ipc.client.rpc-timeout.ms; default 120 s)
        conf["spark.hadoop.ipc.client.rpc-timeout.ms"] = str(
            int(settings.retry.read_timeout_s * 1000)
        )
    if hive:
        conf |= {f"spark.hadoop.{k}": v for k, v in settings.metastore.hive_properties.items()}
        conf |= {
            "spark.sql.catalogImplementation": "hive",
            "spark.hadoop.hive.metastore.uris": settings.metastore.uri,
            "spark.sql.warehouse.dir": f"{cs.fs_url}{settings.metastore.warehouse_path}",
            "spark.sql.sources.partitionOverwriteMode": "dynamic",
            "spark.hadoop.hive.exec.dynamic.partition": "true",
            "spark.hadoop.hive.exec.dynamic.partition.mode": "nonstrict",
            # Partition filters the metastore can take (docs/hive-layout.md, "Partition filters"):
            # a long IN becomes a range; a filter it still refuses (an OR over several partition
            # columns) is pruned by Spark from the partition names instead of failing the job.
            "spark.sql.hive.metastorePartitionPruningInSetThreshold": str(
                settings.metastore.filter_max_values
            ),
            "spark.sql.hive.metastorePartitionPruningFallbackOnException": "true",
            "spark.sql.hive.metastorePartitionPruningFastFallback": "true",
        }
    if on_yarn:
        conf |= spark_yarn.session_conf(settings, cluster)
    # Kerberos (docs/security.md): Hadoop's keys, the krb5.conf, the executors' token file
    krb = spark_kerberos.session_conf(settings, cluster, app_name, hive, yarn=on_yarn)
    # JVM options (SparkSettings), then the Kerberos one
    for key, mine in (
        ("spark.driver.extraJavaOptions", sp.driver_java_options),
        ("spark.executor.extraJavaOptions", sp.executor_java_options),
    ):
        java = " ".join(o for o in (mine, krb.pop(key, "")) if o)
        if java:
            conf[key] = java
    return conf | krb


def build_session(
    settings: Settings,
    app_name: str,
    cluster: str,
    *,
    hive: bool = False,
    master: str | None = None,
) -> SparkSession:
    """Create (or return this process's) SparkSession for ``cluster``.

    On YARN (:func:`session_conf` says ``spark.master=yarn``) the driver's environment gets the
    cluster's ``HADOOP_CONF_DIR``/``YARN_CONF_DIR`` before its JVM starts, and the Spark jars
    archive is staged on the cluster's HDFS if absent (:func:`ferry.clusters.spark_yarn.
    ensure_archive`).

    Raises:
        ferry.errors.ConfigError: unknown cluster name; YARN without the cluster's
            ``yarn-site.xml``.
        ferry.errors.TransientError: YARN: the cluster's HDFS did not answer while the archive
            was checked or staged.
    """
    import os

    from pyspark.sql import SparkSession

    # Without it Spark resolves the hostname and may pick a non-loopback interface for the driver.
    os.environ.setdefault("SPARK_LOCAL_IP", settings.spark.host)
    conf = session_conf(settings, app_name, cluster, hive=hive, master=master)
    if conf["spark.master"] == "yarn":
        _yarn_driver(settings, cluster)
    if settings.kerberos.enabled:
        _kerberos_driver(settings, app_name, cluster, conf, tokens=conf["spark.master"] != "yarn")
    builder = SparkSession.builder
    for key, value in conf.items():
        builder = builder.config(key, value)
    if hive:
        builder = builder.enableHiveSupport()
    return builder.getOrCreate()


def _yarn_driver(settings: Settings, cluster: str) -> None:
    """The driver's side of a YARN session: the cluster's configuration directory in the
    environment the driver JVM is started with (pyspark starts it with this process's
    environment), and the jars archive on the cluster's HDFS."""
    import os

    from ferry.clusters.hdfs.webhdfs import WebHdfs

    os.environ.update(spark_yarn.conf_env(settings, cluster))
    with WebHdfs.for_cluster(cluster, settings) as hdfs:
        path, uploaded = spark_yarn.ensure_archive(settings, cluster, hdfs)
    log.info(
        "Spark on YARN of cluster %s: jars archive %s (%s)",
        cluster,
        path,
        "uploaded now" if uploaded else "staged before",
    )


def _kerberos_driver(
    settings: Settings, app_name: str, cluster: str, conf: dict[str, str], *, tokens: bool
) -> None:
    """Start the driver's JVM with ``conf`` (its class path and Java options are read at launch),
    log it in from the keytab and (``tokens``: not on YARN, where Spark obtains them) write the
    executors' token file, before the SparkContext exists
    (:func:`ferry.clusters.spark_kerberos.prepare_driver`).

    The process's ticket cache gets a ticket first (:func:`ferry.clusters.kerberos.ticket_cache`):
    a local-mode context's own delegation token manager logs in from the cache the JVM inherits
    (``KRB5CCNAME``; Spark's ``HadoopDelegationTokenManager.doLogin`` without
    ``spark.kerberos.keytab``), and an empty cache fails it ("Unable to obtain password from
    user")."""
    from pyspark import SparkConf, SparkContext

    from ferry.clusters.kerberos import ticket_cache

    ticket_cache(settings.kerberos)
    spark_kerberos.write_conf_dir(settings, cluster)
    # pyspark's own start of the gateway (what SparkContext() does first), with the conf the
    # context gets: spark-submit receives it as --conf, as for any session
    SparkContext._ensure_initialized(conf=SparkConf(loadDefaults=False).setAll(list(conf.items())))
    spark_kerberos.prepare_driver(SparkContext._jvm, settings, cluster, app_name, tokens=tokens)


def drop_stopped_context() -> bool:
    """Stop and forget pyspark's active SparkContext if its JVM side has stopped; returns whether
    one was dropped.

    A session build can fail after the context was made: on the standalone cluster the
    SparkContext's constructor waits for the application's registration, and when every master
    stays unresponsive past Spark's registration retries (3 × 20 s) the context stops itself
    and the SparkSession around it fails ("Cannot call methods on a stopped SparkContext").
    pyspark still holds that context as the active one, and every later ``getOrCreate`` returns
    it: the stage never got a session again until its process was restarted (issue 47's second
    hour, seed 693378033: load held its files for 9 minutes after its start met both masters
    killed). Never raises."""
    from pyspark import SparkContext

    sc = SparkContext._active_spark_context
    if sc is None:
        return False
    try:
        stopped = sc._jsc is None or bool(sc._jsc.sc().isStopped())
    except Exception:  # noqa: BLE001 - the JVM side is gone: as good as stopped
        stopped = True
    if not stopped:
        return False
    log.warning("dropping a SparkContext that stopped while its session was built")
    try:
        sc.stop()
    except Exception:  # noqa: BLE001 - stopping a dead context may fail; forget it anyway
        log.warning("stopping the dead SparkContext failed", exc_info=True)
    with SparkContext._lock:
        if SparkContext._active_spark_context is sc:
            SparkContext._active_spark_context = None
    return True


class SparkHolder:
    """Lazily builds the stage's SparkSession and rebuilds it after a failure stopped it.
    Thread-safe: a stage's takeover batch (ferry.core.runtime.runner) runs its jobs from a second
    thread on the same session (Spark schedules jobs of several threads in one application)."""

    def __init__(
        self,
        settings: Settings,
        app_name: str,
        cluster: str,
        hive: bool = False,
        status: Path | None = None,
    ) -> None:
        """``status``: where to name each session's Spark application for ``ferry ps``
        (:func:`ferry.core.runtime.heartbeat.spark_status_path`); ``None``: nowhere."""
        self.settings, self.app_name, self.cluster, self.hive = settings, app_name, cluster, hive
        self.status = status
        self._spark: Any = None
        self._built_at = 0.0
        self._lock = threading.RLock()

    def get(self) -> Any:
        with self._lock:
            return self._get()

    @property
    def built(self) -> bool:
        """A session exists (it may still have died since; :meth:`get` rebuilds it then)."""
        return self._spark is not None

    def _get(self) -> Any:
        if self._spark is not None and self._spark.sparkContext._jsc.sc().isStopped():
            self._reset()
        krb = self.settings.kerberos
        if (
            self._spark is not None
            and krb.enabled
            and self.settings.spark.manager(self.cluster) != "yarn"
            and time.monotonic() - self._built_at > krb.session_max_age_s
        ):
            # the executors' HDFS delegation token would expire: a new session fetches a new one
            # (on YARN Spark obtains new tokens itself: spark_kerberos.session_conf)
            log.info("%s: rebuilding the Spark session for a new delegation token", self.app_name)
            self._spark.stop()
            self._spark = None
        if self._spark is None:
            try:
                self._spark = build_session(
                    self.settings, self.app_name, self.cluster, hive=self.hive
                )
            except Exception:  # any failure (py4j, a ConfigError): forget a dead context, re-raise
                drop_stopped_context()
                raise
            self._built_at = time.monotonic()
            sc = self._spark.sparkContext
            log.info("%s: Spark application %s on %s", self.app_name, sc.applicationId, sc.master)
            if self.status is not None:
                write_spark_status(self.status, sc.applicationId, sc.master)
        return self._spark

    def warm(self) -> Any:
        """Build the session now and make it ready for a batch: one tiny job (the application
        gets its executor) and, for a Hive session, one metastore call (the Hive client).
        Returns the session. The start of a stage's ``warm_up``: what every instance does
        before it joins its consumer group (transform then runs a synthetic batch:
        :mod:`ferry.stages.transform.warmup`).

        Raises whatever building the session raises (no master, no metastore).
        """
        spark = self.get()
        spark.range(1).count()
        if self.hive:
            spark.catalog.listDatabases()
        return spark

    def reset(self) -> bool:
        """Stop the session if its context died (the application was removed by a master, the
        masters were unresponsive past Spark's registration retries, the JVM is gone): the next
        :meth:`get` builds a new one.

        Returns:
            ``True`` when the context had died (a failed job then says nothing about its files:
            the stages raise :class:`~ferry.errors.SparkUnavailable`), ``False`` when the session
            is alive or there was none.
        """
        with self._lock:
            return self._reset()

    def _reset(self) -> bool:
        if self._spark is None:
            return False
        try:
            if not self._spark.sparkContext._jsc.sc().isStopped():
                return False
            log.warning("%s: the SparkContext stopped; a new session is built", self.app_name)
            self._spark.stop()
        except Exception:  # noqa: BLE001 - the JVM side is gone: drop the handle, rebuild later
            log.warning("%s: dropping a broken SparkSession", self.app_name, exc_info=True)
        self._spark = None
        return True
