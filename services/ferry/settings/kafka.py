"""The ``kafka`` section: the broker, the topic plan and the clients' security."""

from __future__ import annotations

from typing import Literal

from pydantic import Field, SecretStr

from ferry.errors import ConfigError
from ferry.settings.base import Frozen, WorkPath
from ferry.settings.secrets import resolve_secret


class KafkaUser(Frozen):
    """One service's SASL user (``kafka.service_users.<service>``)."""

    sasl_username: str = Field(description="SASL user name of the service.")
    sasl_password: SecretStr | None = Field(
        default=None, description="Its password (never printed)."
    )
    sasl_password_file: WorkPath | None = Field(
        default=None, description="Or a file holding it, mode 0600 (refused otherwise)."
    )


class KafkaSettings(Frozen):
    """Kafka broker and topic plan. Env: ``FERRY_KAFKA__<FIELD>``."""

    host: str = Field(default="127.0.0.1", description="Address the broker binds and advertises.")
    port: int = Field(
        default=19092, description="Broker client listener port (PLAINTEXT or SASL_SSL)."
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
    sasl_password_file: WorkPath | None = Field(
        default=None,
        description=(
            "File holding the SASL password, mode 0600 (refused otherwise); relative to the "
            "working directory. The local stack creates it (random) when missing."
        ),
    )
    service_users: dict[str, KafkaUser] = Field(
        default_factory=dict,
        description=(
            "Per-service SASL users (service name → user), for a broker that grants each service "
            "only its own topics and groups (docs/security.md, 'Kafka ACLs'); a service not "
            "listed, the CLI and the tracker's lag reader use sasl_username."
        ),
    )
    service: str | None = Field(
        default=None,
        description=(
            "The service this process runs (set by ``ferry run <service>``): picks its entry in "
            "service_users."
        ),
    )
    ssl_ca_path: WorkPath | None = Field(
        default=None,
        description=(
            "PEM file of the CA(s) that signed the broker certificates; relative to the "
            "working directory; none: the system's CAs. The local stack writes its CA here."
        ),
    )

    @property
    def secure(self) -> bool:
        """Whether clients use SASL_SSL."""
        return self.security_protocol == "SASL_SSL"

    def _own_user(self) -> tuple[KafkaUser, str] | None:
        if self.service is None or self.service not in self.service_users:
            return None
        return self.service_users[self.service], f"kafka.service_users.{self.service}"

    @property
    def user(self) -> str:
        """The SASL user of this process: its service's in ``service_users``, else
        ``sasl_username``."""
        own = self._own_user()
        return own[0].sasl_username if own else self.sasl_username

    def password(self) -> SecretStr:
        """The SASL password of :attr:`user`: ``sasl_password``, else ``sasl_password_file``'s
        content (of the service's entry in ``service_users`` when it has one).

        Raises:
            ConfigError: neither is set, both are, or the file is refused (mode, missing).
        """
        own = self._own_user()
        if own is not None:
            u, where = own
            value, path = u.sasl_password, u.sasl_password_file
        else:
            where, value, path = "kafka", self.sasl_password, self.sasl_password_file
        secret = resolve_secret(value, path, f"{where}.sasl_password")
        if secret is None:
            raise ConfigError(
                f"kafka.security_protocol is SASL_SSL but neither {where}.sasl_password nor "
                f"{where}.sasl_password_file is set"
            )
        return secret

    @property
    def bootstrap_servers(self) -> str:
        return self.bootstrap_servers_override or f"{self.host}:{self.port}"

    def topic(self, name: str) -> str:
        """Full topic name of ``name``: extracted, transformed, transferred, loaded or failed."""
        return f"{self.topic_prefix}.{name}"
