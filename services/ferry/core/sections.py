"""The sections of Ferry's settings (:class:`ferry.core.config.Settings` holds one of each).

Each section is a frozen pydantic model; every field has a description with its unit and its
default for the embedded local stack (``ferry stack up``: 127.0.0.1, small JVM heaps). Env
variables name a field as ``FERRY_<SECTION>__<FIELD>`` (e.g. ``FERRY_KAFKA__TOPIC_PREFIX``).
"""

from __future__ import annotations

from pathlib import Path
from typing import Literal

from pydantic import Field, SecretStr, field_validator

from ferry.core.errors import ConfigError
from ferry.core.hdfs_sections import (
    FAILOVER_PROXY_PROVIDER as FAILOVER_PROXY_PROVIDER,
)
from ferry.core.hdfs_sections import HdfsClusterSettings as HdfsClusterSettings
from ferry.core.hdfs_sections import NameNodeSettings as NameNodeSettings
from ferry.core.secrets import resolve_secret
from ferry.core.section_base import REPO_ROOT as REPO_ROOT
from ferry.core.section_base import _Frozen

ClusterName = Literal["a", "b"]


class KafkaSettings(_Frozen):
    """Kafka broker and topic plan. Env: ``FERRY_KAFKA__<FIELD>``."""

    host: str = Field(default="127.0.0.1", description="Address the broker binds and advertises.")
    port: int = Field(
        default=19092, description="Broker client listener port (PLAINTEXT or SASL_SSL)."
    )
    controller_port: int = Field(default=19093, description="KRaft controller listener port.")
    listen_host_override: str | None = Field(
        default=None,
        description=(
            "Address the broker's listeners bind when not ``host`` (``0.0.0.0`` for a broker on "
            "two networks, docker-compose.yml); clients are always told ``host``."
        ),
    )
    bootstrap_servers_override: str | None = Field(
        default=None, description="Comma-separated bootstrap servers; defaults to host:port."
    )
    topic_prefix: str = Field(
        default="ferry", description="Topics are <prefix>.extracted, <prefix>.failed, …"
    )
    partitions: int = Field(
        default=3,
        description="Partitions per topic; the most instances of one stage that share work.",
    )
    replication_factor: int = Field(
        default=1, description="Replicas per partition (1 on the one-broker local stack)."
    )
    retention_ms: int = Field(
        default=14 * 24 * 3600 * 1000,
        description="Topic retention, ms (14 days: a week of replay with margin).",
    )
    max_poll_interval_ms: int = Field(
        default=300_000,
        description="Consumer max.poll.interval.ms, ms; long handlers pause the partition instead.",
    )
    session_timeout_ms: int = Field(
        default=10_000,
        description=(
            "Consumer session.timeout.ms, ms: how long the group coordinator waits for a member "
            "that stopped heartbeating (SIGKILL, host gone) before its partitions move to the "
            "other instances of the stage. Bounds the failover of a hot standby "
            "(docs/operations.md, 'Supervision and hot standby'); the broker accepts 6000 to "
            "300000 (group.min/max.session.timeout.ms). Heartbeats come from librdkafka's own "
            "thread, so a long Spark job does not stop them."
        ),
    )
    assignment_strategy: Literal["range", "cooperative-sticky"] = Field(
        default="cooperative-sticky",
        description=(
            "Consumer partition.assignment.strategy. cooperative-sticky (default): only the "
            "partitions that move are revoked, so when one instance of a stage dies the others "
            "finish and deliver the batch they are running and take its partitions on top; "
            "range: the classic (eager) protocol, every member gives up all its partitions at "
            "each rebalance and the batch it is running is done again by the new owner. All "
            "instances of a stage must use the same value: change it with the stage stopped."
        ),
    )
    request_timeout_s: float = Field(
        default=10.0, description="Timeout of one admin/produce/flush call, s."
    )
    revoke_grace_s: float | None = Field(
        default=None,
        ge=0,
        description=(
            "When a rebalance revokes a partition of the running batch, how long the revocation "
            "waits for the batch to finish (then delivers and commits it), s; after that its "
            "records of that partition are dropped for the new owner to redo. None: half of "
            "max_poll_interval_ms (the group waits that long for a member during a rebalance)."
        ),
    )
    shutdown_grace_s: float = Field(
        default=30.0,
        description=(
            "On SIGTERM, how long a running handler may finish its record, s; after that the "
            "record is abandoned without storing its offset (it is redelivered)."
        ),
    )
    heap_mb: int = Field(default=512, description="Broker JVM heap, MiB.")
    security_protocol: Literal["PLAINTEXT", "SASL_SSL"] = Field(
        default="PLAINTEXT",
        description=(
            "How every Ferry client (and the local stack's broker listener on ``port``) talks: "
            "PLAINTEXT, or SASL_SSL (TLS + SASL, docs/security.md)."
        ),
    )
    sasl_mechanism: Literal["SCRAM-SHA-512", "SCRAM-SHA-256", "PLAIN"] = Field(
        default="SCRAM-SHA-512", description="SASL mechanism under SASL_SSL."
    )
    sasl_username: str = Field(default="ferry", description="SASL user name under SASL_SSL.")
    sasl_password: SecretStr | None = Field(
        default=None, description="SASL password (never printed); or sasl_password_file."
    )
    sasl_password_file: Path | None = Field(
        default=None,
        description=(
            "File holding the SASL password, mode 0600 (refused otherwise); relative to the "
            "repository root. The local stack creates it (random) when missing."
        ),
    )
    ssl_ca_path: Path | None = Field(
        default=None,
        description=(
            "PEM file of the CA(s) that signed the broker certificates; relative to the "
            "repository root; none: the system's CAs. The local stack writes its CA here."
        ),
    )

    @field_validator("sasl_password_file", "ssl_ca_path")
    @classmethod
    def _from_repo_root(cls, value: Path | None) -> Path | None:
        return value if value is None or value.is_absolute() else REPO_ROOT / value

    @property
    def secure(self) -> bool:
        """Whether clients use SASL_SSL."""
        return self.security_protocol == "SASL_SSL"

    def password(self) -> SecretStr:
        """The SASL password: ``sasl_password``, else ``sasl_password_file``'s content.

        Raises:
            ConfigError: neither is set, both are, or the file is refused (mode, missing).
        """
        secret = resolve_secret(self.sasl_password, self.sasl_password_file, "kafka.sasl_password")
        if secret is None:
            raise ConfigError(
                "kafka.security_protocol is SASL_SSL but neither kafka.sasl_password nor "
                "kafka.sasl_password_file is set"
            )
        return secret

    @property
    def bootstrap_servers(self) -> str:
        return self.bootstrap_servers_override or f"{self.host}:{self.port}"

    def topic(self, name: str) -> str:
        """Full topic name of ``name``: extracted, transformed, transferred, loaded or failed."""
        return f"{self.topic_prefix}.{name}"


class ZooKeeperSettings(_Frozen):
    """ZooKeeper for the Spark master pair and Ferry's Hive table locks
    (:mod:`ferry.clusters.locks`). Env: ``FERRY_ZOOKEEPER__<FIELD>``.

    ``tick_time_ms`` and ``max_session_timeout_ms`` bound the masters' ZooKeeper session, which is
    what decides failover time: the server clamps every client's session timeout into
    [2×tick, max_session_timeout] (ZooKeeper Administrator's Guide, "minSessionTimeout").
    """

    host: str = Field(default="127.0.0.1", description="Address ZooKeeper binds.")
    port: int = Field(default=12181, description="ZooKeeper client port (TCP).")
    tick_time_ms: int = Field(
        default=500, description="ZooKeeper tickTime, ms; the shortest session granted is 2×."
    )
    max_session_timeout_ms: int = Field(
        default=6000,
        description="Longest session the server grants, ms; masters' failover ≈ this + election.",
    )
    heap_mb: int = Field(default=128, description="ZooKeeper JVM heap, MiB.")
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
        "is freed this long after it died (clamped by the server's max_session_timeout_ms).",
    )

    @property
    def connect(self) -> str:
        return f"{self.host}:{self.port}"


class SparkSettings(_Frozen):
    """Spark standalone cluster (two masters in ZooKeeper recovery mode, one worker)."""

    host: str = Field(default="127.0.0.1", description="Address the masters and worker bind.")
    master_ports: tuple[int, int] = Field(
        default=(17077, 17078), description="RPC ports of master 1 and 2 (``spark://`` URLs)."
    )
    master_webui_ports: tuple[int, int] = Field(
        default=(18080, 18081), description="HTTP ports of master 1 and 2: web UI and /json."
    )
    worker_webui_port: int = Field(default=18082, description="HTTP port of the worker's web UI.")
    worker_cores: int = Field(
        default=16,
        description=(
            "Core slots the worker offers. Each Ferry application takes up to spark.cores.max "
            "(app_cores_max, 2): transform, load, a hot-standby instance of each (ferry up "
            "--replicas) and a verifying session (demo, tests) need 10. With 8 a second transform "
            "instance got no executor and its warm-up waited 300 s ('Initial job has not accepted "
            "any resources', tests/e2e/test_supervision.py, stop 11). Slots are not CPU "
            "reservations: 16 slots on 2 cores is fine for this I/O-bound work."
        ),
    )
    worker_memory_mb: int = Field(
        default=10240,
        description=(
            "Memory the worker offers to executors, MiB: 16 executors of executor_memory_mb "
            "(640). An offer, not an allocation; executor heaps grow as used."
        ),
    )
    daemon_heap_mb: int = Field(
        default=256, description="Heap of each master and the worker JVM, MiB."
    )
    zookeeper_dir: str = Field(
        default="/ferry/spark", description="ZooKeeper path of the masters' recovery state."
    )
    master_url_override: str | None = Field(
        default=None, description="Any Spark master URL (e.g. yarn, local[2])."
    )
    app_cores_max: int = Field(
        default=2,
        description=(
            "spark.cores.max of each Ferry application, cores (executors of executor_cores "
            "each). Two let a big file's splits and a batch's scan run on both cores of the "
            "development "
            "machine (bench/profile_batch.py); transform and load then hold 4 of the worker's 8 "
            "slots, and an application started when fewer slots are free gets what is free."
        ),
    )
    executor_cores: int = Field(
        default=1,
        ge=1,
        description=(
            "spark.executor.cores, cores: an application of app_cores_max cores runs "
            "app_cores_max / executor_cores executor JVMs on the worker."
        ),
    )
    executor_memory_mb: int = Field(default=640, description="spark.executor.memory, MiB.")
    driver_java_options: str = Field(
        default="-XX:TieredStopAtLevel=1 -XX:+UseSerialGC",
        description=(
            "JVM options of every Ferry driver (spark.driver.extraJavaOptions; the Kerberos "
            "option is added). Default: C1 compiler only, serial collector. On 2 cores shared "
            "by the stack and four Spark applications, C2 compilation and G1's threads took "
            "48% of the Spark JVMs' CPU during a hot-standby takeover; docs/operations.md "
            "'JVM options' has the figures. Empty: the JVM's defaults."
        ),
    )
    executor_java_options: str = Field(
        default="-XX:TieredStopAtLevel=1 -XX:+UseSerialGC",
        description=(
            "JVM options of every Ferry executor (spark.executor.extraJavaOptions; the Kerberos "
            "option is added). Default as for drivers: with the JVM's defaults in drivers and "
            "executors a hot-standby takeover took 33-41 s, with these 20-29 s (2 cores). C1 "
            "code is slower per row: a 300 MB file's load took 66 s instead of 50 s; on a host "
            "with spare cores, or for big files, '-XX:+UseSerialGC' keeps C2 "
            "(docs/operations.md, 'JVM options')."
        ),
    )
    driver_memory_mb: int = Field(default=768, description="Driver JVM heap, MiB.")

    @property
    def master_url(self) -> str:
        """``spark://h:p1,h:p2``: the client tries both masters and follows the ALIVE one."""
        if self.master_url_override:
            return self.master_url_override
        return "spark://" + ",".join(f"{self.host}:{p}" for p in self.master_ports)


class MetastoreSettings(_Frozen):
    """Hive metastore (Thrift, Derby inside) for cluster A."""

    host: str = Field(default="127.0.0.1", description="Address the metastore binds.")
    port: int = Field(default=19083, description="Metastore Thrift port (``thrift://`` URI).")
    heap_mb: int = Field(default=512, description="Metastore JVM heap, MiB.")
    warehouse_path: str = Field(default="/warehouse", description="Warehouse directory on HDFS A.")
    filter_max_values: int = Field(
        default=100,
        ge=1,
        description=(
            "Most partition values a Spark job sends the metastore as one ``col IN (…)`` filter; "
            "more become ``col >= min AND col <= max`` and Spark drops the extra partitions "
            "itself (``spark.sql.hive.metastorePartitionPruningInSetThreshold``, Spark's default "
            "1000). A Derby-backed metastore, as in the local stack, fails an IN of 256 dates "
            "with 'Statement too complex' (a load batch touching 256 days did)."
        ),
    )

    @property
    def uri(self) -> str:
        return f"thrift://{self.host}:{self.port}"


class HiveServer2Settings(_Frozen):
    """HiveServer2 (the Spark Thrift Server) on cluster A's side: JDBC for analysts and for the
    demo's reconciliation. Env: ``FERRY_HIVESERVER2__<FIELD>``."""

    host: str = Field(default="127.0.0.1", description="Bind and connect address.")
    port: int = Field(default=19084, description="Thrift (binary) port: jdbc:hive2://host:port.")
    driver_memory_mb: int = Field(default=512, description="Thrift server driver JVM heap, MiB.")
    user: str = Field(default="ferry", description="User name sent by the JDBC clients.")
    query_timeout_s: float = Field(
        default=120.0, description="Login and query timeout of each JDBC call, s."
    )


class RetrySettings(_Frozen):
    """Retry policy for network calls: exponential backoff with full jitter and a ceiling."""

    max_attempts: int = Field(
        default=6, description="Attempts per file per stage before quarantine."
    )
    initial_backoff_s: float = Field(default=0.5, description="First backoff, s.")
    max_backoff_s: float = Field(default=30.0, description="Longest single backoff, s.")
    connect_timeout_s: float = Field(
        default=5.0, description="TCP connect timeout of every HTTP call, s."
    )
    read_timeout_s: float = Field(
        default=30.0, description="Socket read timeout of every HTTP call, s."
    )
    min_window_s: float = Field(
        default=0.0,
        description=(
            "Keep retrying a transient failure until both max_attempts attempts were made and this "
            "many seconds passed since the first, s (0: attempts only). Lets a stage ride out an "
            "outage of known length instead of quarantining every file in flight."
        ),
    )


class PathSettings(_Frozen):
    """Where data lives on the NAS and on each cluster."""

    nas_dir: Path = Field(
        default=REPO_ROOT / "var" / "nas",
        description="NAS drop directory (one sub-dir per dataset).",
    )
    landing_path: str = Field(default="/ferry/landing", description="Landing directory on HDFS B.")
    staging_path: str = Field(
        default="/ferry/staging", description="Parquet staging directory on HDFS B."
    )
    rejects_path: str = Field(
        default="/ferry/rejects", description="Rejected rows (with reasons) on HDFS B."
    )
    incoming_path: str = Field(
        default="/ferry/incoming", description="Transferred files on HDFS A."
    )
    datasets_dir: Path = Field(
        default=REPO_ROOT / "datasets", description="Dataset definitions (YAML)."
    )
    schemas_dir: Path = Field(
        default=REPO_ROOT / "schemas",
        description=(
            "Avro schemas (ferry.<Name>.avsc) and released versions under released/<version>/."
        ),
    )
