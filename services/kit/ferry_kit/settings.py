"""The kit's settings: what the local stack's servers and ``ferry up`` need besides Ferry's own.

Ferry's settings (:mod:`ferry.settings`) hold what an edge node sets. The kit starts the servers
an edge node only connects to, so it also needs their heaps, their extra ports (the DataNodes',
the JournalNodes', the ZKFCs', the KRaft controller's, the Spark web UIs'), the worker's offer,
ZooKeeper's ticks, the KDC, and supervisord's behaviour. :class:`KitSettings` extends Ferry's
:class:`~ferry.settings.Settings` with them, read from the same places under the same names
(``FERRY_SPARK__WORKER_CORES``, ``clusters.a.namenode_heap_mb`` in a profile, …); it is
registered under the ``ferry.settings`` entry point group, so Ferry's own settings ignore these
keys (and still refuse any other unknown one). A :class:`KitSettings` is a :class:`Settings`:
every product function takes it.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, cast

from pydantic import Field, field_validator, model_validator

from ferry.settings import Settings
from ferry.settings.base import Frozen, WorkPath, under_cwd
from ferry.settings.hdfs import HdfsClusterSettings, NameNodeSettings
from ferry.settings.hive import HiveServer2Settings, MetastoreSettings
from ferry.settings.kafka import KafkaSettings
from ferry.settings.kerberos import REALM_NAME, KerberosSettings
from ferry.settings.spark import EXECUTOR_JAVA_OPTIONS, SparkSettings, ZooKeeperSettings

#: The ports of each cluster's DataNode on the local stack (the NameNodes' are Ferry's
#: :data:`~ferry.settings.DEFAULT_CLUSTERS`).
STACK_CLUSTERS: dict[str, dict[str, Any]] = {
    "b": {"datanode_port": 19866, "datanode_http_port": 19864, "datanode_ipc_port": 19867},
    "a": {"datanode_port": 29866, "datanode_http_port": 29864, "datanode_ipc_port": 29867},
}


class StackNameNode(NameNodeSettings):
    """One NameNode of the local stack's HA nameservice."""

    zkfc_port: int = Field(
        default=0,
        description="RPC port of this NameNode's ZKFC (``dfs.ha.zkfc.port``; local stack only, "
        "0: Hadoop's default 8019).",
    )


class StackCluster(HdfsClusterSettings):
    """One HDFS cluster of the local stack: its NameNodes and the servers behind them."""

    namenodes: tuple[StackNameNode, ...] = Field(
        default=(),
        description="The nameservice's NameNodes, in the order clients try them (HA only).",
    )
    journalnode_ports: tuple[tuple[int, int], ...] = Field(
        default=(),
        description="(RPC, HTTP) ports of the local stack's JournalNodes (HA profile only).",
    )
    datanode_port: int = Field(description="DataNode data-transfer port.")
    datanode_http_port: int = Field(
        description=(
            "DataNode web port; WebHDFS redirects reads/writes here (``dfs.datanode.https."
            "address``'s port when ``http_policy`` is not HTTP_ONLY)."
        )
    )
    datanode_ipc_port: int = Field(description="DataNode IPC port.")
    datanode_host_override: str | None = Field(
        default=None,
        description=(
            "Address the DataNode binds and advertises when it is not ``host`` (its own machine, "
            "e.g. ``datanode-a`` in docker-compose.yml)."
        ),
    )
    namenode_heap_mb: int = Field(default=256, description="NameNode JVM heap, MiB.")
    datanode_heap_mb: int = Field(default=256, description="DataNode JVM heap, MiB.")
    journalnode_heap_mb: int = Field(default=128, description="JournalNode JVM heap, MiB.")
    zkfc_heap_mb: int = Field(default=128, description="ZKFC JVM heap, MiB.")

    @property
    def datanode_host(self) -> str:
        """Address of the DataNode: ``datanode_host_override`` or ``host``."""
        return self.datanode_host_override or self.host


class StackKafka(KafkaSettings):
    """The local stack's broker."""

    controller_port: int = Field(default=19093, description="KRaft controller listener port.")
    listen_host_override: str | None = Field(
        default=None,
        description=(
            "Address the broker's listeners bind when not ``host`` (``0.0.0.0`` for a broker on "
            "two networks, docker-compose.yml); clients are always told ``host``."
        ),
    )
    heap_mb: int = Field(default=512, description="Broker JVM heap, MiB.")


class StackZooKeeper(ZooKeeperSettings):
    """The local stack's ZooKeeper. ``tick_time_ms`` and ``max_session_timeout_ms`` bound the
    masters' ZooKeeper session, which is what decides failover time: the server clamps every
    client's session timeout into [2×tick, max_session_timeout] (ZooKeeper Administrator's Guide,
    "minSessionTimeout")."""

    tick_time_ms: int = Field(
        default=500, description="ZooKeeper tickTime, ms; the shortest session granted is 2×."
    )
    max_session_timeout_ms: int = Field(
        default=6000,
        description="Longest session the server grants, ms; masters' failover ≈ this + election.",
    )
    heap_mb: int = Field(default=128, description="ZooKeeper JVM heap, MiB.")


class StackSpark(SparkSettings):
    """The local stack's Spark masters and worker."""

    master_webui_ports: tuple[int, int] = Field(
        default=(18080, 18081), description="HTTP ports of master 1 and 2: web UI and /json."
    )
    worker_webui_port: int = Field(default=18082, description="HTTP port of the worker's web UI.")
    worker_cores: int = Field(
        default=32,
        description=(
            "Core slots the worker offers. Each Ferry application takes up to spark.cores.max "
            "(app_cores_max, 4): transform, load, a hot-standby instance of each (ferry up "
            "--replicas) and a verifying session (demo, tests) need 20. With too few a second "
            "transform instance got no executor and its warm-up waited 300 s ('Initial job has "
            "not accepted any resources', tests/e2e/test_supervision.py, stop 11). Slots are not "
            "CPU reservations: 32 slots on 2 cores is fine for this latency-bound work."
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


class StackMetastore(MetastoreSettings):
    """The local stack's Hive metastore."""

    heap_mb: int = Field(default=512, description="Metastore JVM heap, MiB.")


class StackHiveServer2(HiveServer2Settings):
    """The local stack's HiveServer2 (the Spark Thrift Server)."""

    driver_memory_mb: int = Field(default=512, description="Thrift server driver JVM heap, MiB.")


class StackKerberos(KerberosSettings):
    """The local stack's KDC and the Kerberos behaviour of its servers."""

    kdc_host: str = Field(default="127.0.0.1", description="Local stack's KDC address.")
    kdc_port: int = Field(default=17088, description="Local stack's KDC port (TCP and UDP).")
    realm_kdcs: dict[str, str] = Field(
        default_factory=dict,
        description=(
            '``{realm: "host:port"}``: the KDC of each realm that another host serves, '
            "written into krb5.conf's ``[realms]`` (others are served at ``kdc_host:kdc_port``). "
            "The local stack's KDC makes no database for these realms, only its own half of the "
            "trust with each (compose: a KDC per cluster network, docs/compose.md)."
        ),
    )
    domain_realm: dict[str, str] = Field(
        default_factory=dict,
        description=(
            "``{host: realm}`` added to krb5.conf's ``[domain_realm]``: hosts whose services are "
            "in another realm (a client asks that realm for ``HTTP/<host>``). ``service_host`` "
            "and 127.0.0.1 are in ``realm``."
        ),
    )
    trust_password_file: WorkPath | None = Field(
        default=None,
        description=(
            "Local stack only: a file, readable by the KDC alone, holding the password of the "
            "cross-realm ``krbtgt`` principals shared with the realms of ``realm_kdcs``; both "
            "KDCs derive the same keys from it. Required when a trusted realm is in "
            "``realm_kdcs``."
        ),
    )
    ticket_lifetime_s: int = Field(
        default=86400,
        ge=60,
        description=(
            "Local stack only: the longest ticket the KDC issues to ``principal`` (kadmin "
            "``-maxlife``), in seconds; the tests use 120 to see tickets renewed."
        ),
    )
    http_token_validity_s: int = Field(
        default=36000,
        ge=10,
        description=(
            "Local stack only: how long the NameNodes' signed ``hadoop.auth`` cookie spares a "
            "client SPNEGO (``hadoop.http.authentication.token.validity``; Hadoop's default "
            "36000 s). The tests use 30, so clients re-authenticate with renewed tickets."
        ),
    )

    delegation_token_renew_interval_s: int | None = Field(
        default=None,
        ge=10,
        description=(
            "Local stack only: how long an HDFS delegation token lives unless renewed "
            "(``dfs.namenode.delegation.token.renew-interval``; None: Hadoop's 86400). The YARN "
            "tier uses 60, so a Spark session on YARN outlives its first tokens within a test."
        ),
    )
    delegation_token_max_lifetime_s: int | None = Field(
        default=None,
        ge=10,
        description=(
            "Local stack only: the longest an HDFS delegation token can be renewed "
            "(``dfs.namenode.delegation.token.max-lifetime``; None: Hadoop's 604800, 7 days)."
        ),
    )

    @model_validator(mode="after")
    def _token_lifetimes(self) -> StackKerberos:
        renew, most = self.delegation_token_renew_interval_s, self.delegation_token_max_lifetime_s
        if renew is not None and most is not None and most < renew:
            raise ValueError(
                f"delegation_token_max_lifetime_s {most} is shorter than "
                f"delegation_token_renew_interval_s {renew}"
            )
        return self

    @property
    def yarn_principal(self) -> str:
        """The ResourceManagers' and NodeManagers' principal (``yarn.resourcemanager.principal``,
        ``yarn.nodemanager.principal``): ``yarn/<service_host>``, short name ``yarn``."""
        return f"yarn/{self.service_host}@{self.realm}"

    @field_validator("realm_kdcs")
    @classmethod
    def _kdc_addresses(cls, value: dict[str, str]) -> dict[str, str]:
        for realm, address in value.items():
            if not REALM_NAME.fullmatch(realm):
                raise ValueError(f"realm_kdcs {realm!r}: a realm is upper case, like A.EXAMPLE.COM")
            host, _, port = address.rpartition(":")
            if not host or not port.isdigit():
                raise ValueError(f"realm_kdcs[{realm}] {address!r}: expected host:port")
        return value

    @field_validator("domain_realm")
    @classmethod
    def _host_realms(cls, value: dict[str, str]) -> dict[str, str]:
        bad = {h: r for h, r in value.items() if not REALM_NAME.fullmatch(r) or not h.strip()}
        if bad:
            raise ValueError(f"domain_realm {bad}: a host name maps to an upper-case realm")
        return value


class StackResourceManager(Frozen):
    """One YARN ResourceManager of the local stack (profile ``yarn``) and its five ports
    (yarn-default.xml: ``yarn.resourcemanager.address``, ``.scheduler.address``,
    ``.resource-tracker.address``, ``.admin.address``, ``.webapp.address``)."""

    id: str = Field(default="rm1", description="RM id (``yarn.resourcemanager.ha.rm-ids``).")
    host: str = Field(default="127.0.0.1", description="Address the ResourceManager binds.")
    port: int = Field(description="Client RPC port: applications are submitted here.")
    scheduler_port: int = Field(description="Scheduler RPC port: application masters ask here.")
    tracker_port: int = Field(description="Resource tracker RPC port: NodeManagers report here.")
    admin_port: int = Field(description="Admin RPC port (``yarn rmadmin``).")
    web_port: int = Field(description="HTTP port: web UI and the REST API (/ws/v1/cluster).")

    @property
    def web_url(self) -> str:
        return f"http://{self.host}:{self.web_port}"


class StackYarn(Frozen):
    """The YARN of one cluster on the local stack (profile ``yarn``): one ResourceManager, or an
    HA pair kept by the stack's ZooKeeper (two ``resourcemanagers``), and one NodeManager.
    Env: ``FERRY_YARN__<A|B>__<FIELD>``; the profile gives them (``profiles/yarn.yaml``)."""

    resourcemanagers: tuple[StackResourceManager, ...] = Field(
        description="The ResourceManager(s); two: an HA pair with automatic failover."
    )
    nodemanager_port: int = Field(description="NodeManager RPC port (yarn.nodemanager.address).")
    nodemanager_localizer_port: int = Field(
        description="NodeManager localizer port (yarn.nodemanager.localizer.address)."
    )
    nodemanager_web_port: int = Field(
        description="NodeManager HTTP port (yarn.nodemanager.webapp.address)."
    )
    resourcemanager_heap_mb: int = Field(default=256, description="ResourceManager heap, MiB.")
    nodemanager_heap_mb: int = Field(default=256, description="NodeManager heap, MiB.")
    nodemanager_memory_mb: int = Field(
        default=4096,
        description=(
            "Memory the NodeManager offers to containers, MiB (yarn.nodemanager.resource."
            "memory-mb): an application master (768) and two executors (1024 each) per Ferry "
            "application. An offer, not a reservation."
        ),
    )
    nodemanager_vcores: int = Field(
        default=4, description="Virtual cores the NodeManager offers (on a 2-core machine)."
    )
    minimum_allocation_mb: int = Field(
        default=256,
        description="yarn.scheduler.minimum-allocation-mb: containers are rounded up to it, MiB.",
    )

    @model_validator(mode="after")
    def _ids(self) -> StackYarn:
        ids = [rm.id for rm in self.resourcemanagers]
        if not 1 <= len(ids) <= 2 or len(set(ids)) != len(ids):
            raise ValueError(f"one ResourceManager or an HA pair with distinct ids, not {ids}")
        return self

    @property
    def ha(self) -> bool:
        """Two ResourceManagers: an HA pair."""
        return len(self.resourcemanagers) > 1


class SuperviseSettings(Frozen):
    """``ferry up``: Ferry's services under supervisord. Env: ``FERRY_SUPERVISE__<FIELD>``.

    A service that exits after running ``start_secs`` is restarted at once; one that exits sooner
    is a failed start, retried after 1 s, 2 s, 3 s, … (supervisord's backoff grows by one second
    per attempt) until ``start_retries`` retries failed, then it stays FATAL (the crash-loop
    limit) and ``ferry up`` / ``ferry ps`` name it.
    """

    home: WorkPath = Field(
        default=Path("var"),
        description=(
            "Where supervisord keeps its files (default: ``<var_dir>``): conf/supervisord.conf, "
            "run/supervisord.sock, "
            "run/supervisord.pid, log/supervisord.log and one log/<process>.log per service."
        ),
    )
    start_secs: int = Field(
        default=10, ge=1, description="Seconds a service must stay up to count as started."
    )
    start_retries: int = Field(
        default=3, ge=0, description="Failed starts in a row retried before FATAL (crash loop)."
    )
    stop_margin_s: int = Field(
        default=15,
        ge=1,
        description=(
            "stopwaitsecs = kafka.shutdown_grace_s + this, s: after SIGTERM a service may finish "
            "its running record and leave its group before supervisord sends SIGKILL."
        ),
    )
    rpc_timeout_s: float = Field(
        default=10.0, description="Timeout of one XML-RPC call to supervisord, s."
    )
    health_timeout_s: float = Field(
        default=5.0, description="Timeout of one health probe (Kafka admin, HTTP), s."
    )


#: The stack's servers: what Ferry's executors run with (``EXECUTOR_JAVA_OPTIONS``: the serial
#: collector, C2 only for code about ten times hotter than HotSpot's thresholds ask). A development
#: stack's servers start often and serve little: C2's compiles and G1's threads were most of their
#: CPU. Measured on the 2-core machine (2026-12-07; `ferry stack up`, then
#: tests/e2e/test_compressed.py and test_quarantine_loop.py; CPU seconds per process sampled every
#: 3 s from /proc), JVM defaults → these → C1 only: the servers 151 → 87 → 64 CPU s (NameNodes
#: 31 → 17 → 13, HiveServer2 31 → 18 → 14, broker 30 → 16 → 11), `stack up` 57 → 39 → 29 s, the
#: whole run 242 → 177 → 170 s. C2 stays for a long run's hot loops (a big file through the
#: DataNodes). Real clusters keep their own JVM options.
SERVER_JAVA_OPTIONS = EXECUTOR_JAVA_OPTIONS


class KitSettings(Settings):
    """Ferry's settings and the kit's: build with :func:`get_kit_settings`.

    Raises:
        ConfigError: a value is missing or invalid (as :class:`~ferry.settings.Settings`).
    """

    clusters: dict[str, StackCluster] = Field(  # type: ignore[assignment]
        default_factory=lambda: {},
        description=(
            "HDFS clusters by name. Env: FERRY_CLUSTERS__<A|B>__<FIELD>; a partial value is "
            "merged onto that cluster's defaults (DEFAULT_CLUSTERS and STACK_CLUSTERS)."
        ),
    )
    kafka: StackKafka = Field(
        default_factory=StackKafka, description="Kafka broker and topic plan."
    )
    zookeeper: StackZooKeeper = Field(
        default_factory=StackZooKeeper, description="ZooKeeper of the Spark master pair."
    )
    spark: StackSpark = Field(
        default_factory=StackSpark, description="Spark standalone cluster and app sizes."
    )
    metastore: StackMetastore = Field(
        default_factory=StackMetastore, description="Hive metastore of cluster A."
    )
    hiveserver2: StackHiveServer2 = Field(
        default_factory=StackHiveServer2, description="HiveServer2 (JDBC) of cluster A."
    )
    kerberos: StackKerberos = Field(
        default_factory=StackKerberos, description="Kerberos of the HDFS clusters (off)."
    )
    supervise: SuperviseSettings = Field(
        default_factory=SuperviseSettings, description="ferry up: the services under supervisord."
    )
    server_java_options: str = Field(
        default=SERVER_JAVA_OPTIONS,
        description=(
            "JVM options of every server the stack launches (NameNodes, DataNodes, JournalNodes, "
            "ZKFCs, the broker, ZooKeeper, the Spark masters and worker, the metastore, "
            "HiveServer2, the ResourceManagers and NodeManagers), before each one's own; "
            "whitespace-separated; empty: the JVM's defaults. Env: FERRY_SERVER_JAVA_OPTIONS."
        ),
    )
    yarn: dict[str, StackYarn] = Field(
        default_factory=dict,
        description=(
            "Cluster name → the YARN the local stack runs for it (profile ``yarn``); none by "
            "default. Ferry finds it through ``yarn-site.xml`` in the cluster's client "
            "configuration directory."
        ),
    )

    @model_validator(mode="before")
    @classmethod
    def _stack_defaults(cls, data: Any) -> Any:
        """The DataNodes' ports of :data:`STACK_CLUSTERS` under what is given for each cluster,
        and supervisord's home ``<var_dir>`` unless given."""
        if not isinstance(data, dict):
            return data
        clusters = data.get("clusters")
        given = dict(clusters) if isinstance(clusters, dict) else {}
        for name, ports in STACK_CLUSTERS.items():
            mine = given.get(name, {})
            if not isinstance(mine, dict):
                mine = mine.model_dump(exclude_unset=True)
            given[name] = {**ports, **mine}
        supervise = data.get("supervise") or {}
        if not isinstance(supervise, dict):
            supervise = supervise.model_dump(exclude_unset=True)
        home = {"home": under_cwd(Path(data.get("var_dir") or "var"))}
        return {**data, "clusters": given, "supervise": {**home, **supervise}}

    def cluster(self, name: str) -> StackCluster:
        """Settings of cluster ``"a"`` or ``"b"`` (as :meth:`Settings.cluster`)."""
        return cast(StackCluster, super().cluster(name))


def get_kit_settings() -> KitSettings:
    """The kit's settings, read anew from the environment and the YAML files (as
    :func:`ferry.settings.get_settings` reads Ferry's).

    Raises:
        ConfigError: invalid environment or settings file.
    """
    from pydantic import ValidationError
    from pydantic_settings import SettingsError

    from ferry.errors import ConfigError

    try:
        return KitSettings()
    except (ValidationError, SettingsError) as exc:
        raise ConfigError(f"invalid Ferry settings: {exc}") from exc
