"""The sections of Ferry's settings (:class:`ferry.core.config.Settings` holds one of each).

Each section is a frozen pydantic model; every field has a description with its unit and its
default for the embedded local stack (``ferry stack up``: 127.0.0.1, small JVM heaps). Env
variables name a field as ``FERRY_<SECTION>__<FIELD>`` (e.g. ``FERRY_KAFKA__TOPIC_PREFIX``).
"""

from __future__ import annotations

from pathlib import Path
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field

ClusterName = Literal["a", "b"]

#: Repository root (``services/ferry/core/config.py`` → three levels up from ``services``).
REPO_ROOT = Path(__file__).resolve().parents[3]


class _Frozen(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")


class HdfsClusterSettings(_Frozen):
    """One HDFS cluster: a NameNode and one DataNode, with WebHDFS on.

    Env: ``FERRY_CLUSTERS__<A|B>__<FIELD>``.
    """

    host: str = Field(
        default="127.0.0.1", description="Address the NameNode and DataNode bind and advertise."
    )
    namenode_rpc_port: int = Field(description="NameNode RPC port (``hdfs://`` URLs).")
    namenode_http_port: int = Field(description="NameNode HTTP port: WebHDFS and /jmx.")
    datanode_port: int = Field(description="DataNode data-transfer port.")
    datanode_http_port: int = Field(
        description="DataNode HTTP port; WebHDFS redirects reads/writes here."
    )
    datanode_ipc_port: int = Field(description="DataNode IPC port.")
    webhdfs_url_override: str | None = Field(
        default=None,
        description=(
            "WebHDFS base URL clients use instead of the NameNode's own (e.g. through a proxy)."
        ),
    )
    datanode_address_map: dict[str, str] = Field(
        default_factory=dict,
        description=(
            "host:port → host:port rewrites applied to WebHDFS redirects, for DataNodes that "
            "advertise an address this client cannot reach (NAT, gateways, fault proxies)."
        ),
    )
    namenode_heap_mb: int = Field(default=256, description="NameNode JVM heap, MiB.")
    datanode_heap_mb: int = Field(default=256, description="DataNode JVM heap, MiB.")

    @property
    def fs_url(self) -> str:
        """``hdfs://host:port`` of the NameNode, for Spark and Hadoop clients."""
        return f"hdfs://{self.host}:{self.namenode_rpc_port}"

    @property
    def webhdfs_url(self) -> str:
        """``http://host:port`` of the NameNode's WebHDFS endpoint (or its override)."""
        return self.webhdfs_url_override or f"http://{self.host}:{self.namenode_http_port}"


class KafkaSettings(_Frozen):
    """Kafka broker and topic plan. Env: ``FERRY_KAFKA__<FIELD>``."""

    host: str = Field(default="127.0.0.1", description="Address the broker binds and advertises.")
    port: int = Field(default=19092, description="Broker PLAINTEXT listener port.")
    controller_port: int = Field(default=19093, description="KRaft controller listener port.")
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
    session_timeout_ms: int = Field(default=45_000, description="Consumer session.timeout.ms, ms.")
    request_timeout_s: float = Field(
        default=10.0, description="Timeout of one admin/produce/flush call, s."
    )
    shutdown_grace_s: float = Field(
        default=30.0,
        description=(
            "On SIGTERM, how long a running handler may finish its record, s; after that the "
            "record is abandoned without storing its offset (it is redelivered)."
        ),
    )
    heap_mb: int = Field(default=512, description="Broker JVM heap, MiB.")

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
        default=8,
        description=(
            "Core slots the worker offers. Each Ferry application takes spark.cores.max=1, and "
            "transform, load and a verifying session (demo, tests) run at once; slots are not CPU "
            "reservations, so 8 slots on 2 cores is fine for this I/O-bound work and leaves room "
            "for a standby instance of each Spark stage."
        ),
    )
    worker_memory_mb: int = Field(
        default=6144, description="Memory the worker offers to executors, MiB."
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
        default=1, description="spark.cores.max of each Ferry application, cores."
    )
    executor_memory_mb: int = Field(default=640, description="spark.executor.memory, MiB.")
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


class TransferSettings(_Frozen):
    """The transfer service (B → A over WebHDFS). Env: ``FERRY_TRANSFER__<FIELD>``.

    Cluster A is a separate cluster behind a network path Ferry does not own: NameNode restarts,
    failovers and gateway blips of a minute or two are routine there, and every file in flight
    would fail the same way, so transfer retries a transient failure for at least
    ``outage_window_s`` before quarantining the file (``retry.max_attempts`` alone gives up
    after ~15 s of backoff). The consumer stays in its group meanwhile (the runner pauses and
    polls).
    """

    outage_window_s: float = Field(
        default=150.0,
        description=(
            "Shortest time a transient failure is retried before quarantine, s "
            "(covers a 2-minute outage)."
        ),
    )
    max_backoff_s: float = Field(
        default=10.0,
        description="Longest single backoff of transfer, s: resumes within this after A is back.",
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


class ExtractSettings(_Frozen):
    """The extract service (NAS poller). Env: ``FERRY_EXTRACT__<FIELD>``."""

    poll_interval_s: float = Field(
        default=1.0, description="Seconds between two scans of the NAS directory."
    )
    after_extract: Literal["archive", "delete", "keep"] = Field(
        default="archive",
        description=(
            "What happens to a NAS file once its FileExtracted is acknowledged: moved under "
            "<nas_dir>/.ferry/archive/, deleted, or kept (kept files are re-extracted after a "
            "restart; harmless, every stage is idempotent on file_id)."
        ),
    )
    chunk_bytes: int = Field(default=1 << 20, description="Read/upload chunk size, bytes.")
    workers: int = Field(
        default=4,
        ge=1,
        description=(
            "Files landed at once. Each landing is a few WebHDFS round trips, so one at a time "
            "left transform waiting (demo: ~3 files/s with 1); each file stays independent."
        ),
    )


class BatchSettings(_Frozen):
    """A batching stage (transform, load): one Spark job per batch of files."""

    batch_size: int = Field(
        default=256,
        description=(
            "Most files in one Spark job. A job's fixed cost dominates small daily files "
            "(measured on the 2-core machine: spark-submit of one daily file 12.7-14.6 s, one job "
            "over 365 files 18.6 s), so batches are big."
        ),
    )
    batch_wait_s: float = Field(
        default=3.0,
        description="Longest a batch gathers after its first file, s; it starts sooner when no "
        "further file arrives within the stage's linger (0.2 s): a lone file does not wait.",
    )


class LoadSettings(BatchSettings):
    """The load stage. Env: ``FERRY_LOAD__<FIELD>``."""

    target_file_mb: int = Field(
        default=128,
        ge=1,
        description=(
            "Size the Parquet files load writes into a Hive partition aim at, MiB: a batch's rows "
            "of one partition go into ceil(partition size / this) files (docs/hive-layout.md)."
        ),
    )


class TrackerSettings(_Frozen):
    """The tracker service (per-file state, stuck detection, HTTP). Env: ``FERRY_TRACKER__<FIELD>``.

    A file is *stuck* when it has waited in a stage (since the event that handed it to that stage)
    longer than that stage's SLA in ``sla_s``.
    """

    web_host: str = Field(
        default="127.0.0.1", description="Address the tracker's HTTP server binds."
    )
    web_port: int = Field(
        default=16066, description="Tracker HTTP port: /files, /stuck, /metrics, /."
    )
    sla_s: dict[str, float] = Field(
        default_factory=lambda: {"transform": 1800.0, "transfer": 900.0, "load": 1800.0},
        description="Longest time a file may wait in a stage (transform, transfer, load), s.",
    )
    data_dir: Path = Field(
        default=REPO_ROOT / "var" / "tracker",
        description="Faust data directory (one sub-directory per topic prefix).",
    )
    lag_refresh_s: float = Field(
        default=15.0,
        description="How often the tracker reads consumer lag (/metrics, /healthz), s.",
    )
    health_stall_s: float = Field(
        default=120.0,
        description="/healthz turns 503 when the tracker is behind and consumed nothing this "
        "long, s.",
    )
    health_broker_s: float = Field(
        default=60.0,
        description="/healthz turns 503 when no lag read reached the broker for this long, s.",
    )
    store_url: str = Field(
        default="rocksdb://",
        description="Faust table store: rocksdb:// (RocksDB via rocksdict, kept in data_dir) or "
        "memory:// (rebuilt from the changelog at every start).",
    )
    loaded_retention_s: float = Field(
        default=7 * 86400.0,
        description="Loaded files' detail is dropped this long after their load, s (their "
        "counts are kept); 0 keeps every file.",
    )
    retention_sweep_s: float = Field(
        default=60.0, description="Least time between two retention sweeps of a partition, s."
    )
    page_refresh_s: float = Field(
        default=5.0, description="How often the HTML pages refresh their figures, s."
    )


#: Ports of the local stack's two clusters; partial settings of a cluster are merged onto these.
