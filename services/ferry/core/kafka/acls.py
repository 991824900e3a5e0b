"""The Kafka ACLs each Ferry service needs, and nothing more (docs/security.md, "Kafka ACLs").

One table (:func:`grants`) drawn from what each process does on the broker (topics it reads and
writes, the consumer groups it joins or commits for, the topics it creates). ``ferry kafka acls``
prints it for a cluster's administrators, or applies it with an administrator's credentials
(:func:`apply`); the local stack's secure profile applies it at start.

Topics are ``<prefix>.<name>`` (:meth:`KafkaSettings.topic`). Every service may DESCRIBE every
topic under the prefix (each checks at start that the plan's topics exist: metadata only);
creating them is the operator's (``ferry`` CLI user), or the stack's, except the topics a
service owns: gc's ``<prefix>.gc`` and the tracker's faust changelogs ``<prefix>.tracker-…``.
An idempotent producer needs WRITE on a topic only (Kafka 3.0 and later, KIP-679). READ, WRITE
and ALTER imply DESCRIBE; ALTER_CONFIGS implies DESCRIBE_CONFIGS (Kafka's authorizer).
"""

from __future__ import annotations

from dataclasses import dataclass

from confluent_kafka import KafkaException
from confluent_kafka.admin import (
    AclBinding,
    AclOperation,
    AclPermissionType,
    AdminClient,
    ResourcePatternType,
    ResourceType,
)

from ferry.core.kafka.admin import admin_result
from ferry.errors import ConfigError
from ferry.settings.kafka import KafkaSettings

#: The operator's user (the CLI: replay, quarantine, status; topic creation) when no service runs.
OPERATOR = "operator"
#: Consumer groups of the scans (:func:`ferry.core.kafka.admin.scan_consumer`): never joined,
#: but librdkafka asks for their coordinator.
SCAN_GROUP_PREFIX = "ferry-ops-scan-"


@dataclass(frozen=True, order=True)
class Grant:
    """One ALLOW entry: ``operation`` on ``resource`` (``topic`` or ``group``) named ``name``,
    ``prefixed`` (every name starting with it) or literal."""

    resource: str
    name: str
    operation: str
    prefixed: bool = False

    def line(self) -> str:
        """``READ on topic ferry.extracted`` / ``READ on group prefix ferry.gc.``."""
        kind = f"{self.resource} prefix" if self.prefixed else self.resource
        return f"{self.operation} on {kind} {self.name}"


def _topic(op: str, name: str, prefixed: bool = False) -> Grant:
    return Grant("topic", name, op, prefixed)


def _group(op: str, name: str, prefixed: bool = False) -> Grant:
    return Grant("group", name, op, prefixed)


def grants(kafka: KafkaSettings, lineage_topic: str = "openlineage") -> dict[str, list[Grant]]:
    """Service (and :data:`OPERATOR`) → its grants, sorted, for the prefix of ``kafka``.

    ``lineage_topic``: the short name of the lineage topic (``lineage.kafka_topic``), which the
    four stages write when ``lineage.transport`` is ``kafka``.
    """
    t = kafka.topic
    p = kafka.topic_prefix + "."
    common = [_topic("DESCRIBE", p, prefixed=True), _group("DESCRIBE", SCAN_GROUP_PREFIX, True)]
    lineage = [_topic("WRITE", t(lineage_topic))]

    def stage(name: str, reads: list[str], writes: list[str]) -> list[Grant]:
        return [
            *common,
            *lineage,
            *(_topic("READ", t(r)) for r in reads),
            *(_topic("WRITE", t(w)) for w in writes),
            _group("READ", kafka.topic_prefix + "." + name),
        ]

    table = {
        "extract": [*common, *lineage, *(_topic("WRITE", t(n)) for n in ("extracted", "failed"))],
        # the waiting room: parks records in <p>.waiting, reads them back, releases them to the
        # stage's own input topic (ferry.core.runtime.waiting)
        "transform": stage(
            "transform", ["extracted", "waiting"], ["transformed", "failed", "waiting", "extracted"]
        ),
        "transfer": stage("transfer", ["transformed"], ["transferred", "failed"]),
        "load": stage(
            "load", ["transferred", "waiting"], ["loaded", "failed", "waiting", "transferred"]
        ),
        "tracker": [
            *common,
            *(_topic("READ", t(n)) for n in ("extracted", "transformed", "transferred")),
            *(_topic("READ", t(n)) for n in ("loaded", "failed", "waiting")),
            _group("READ", t("tracker")),
            _group("DESCRIBE", p, prefixed=True),  # consumer lag of every stage's group
            # faust's changelogs and its assignor's topic: <p>.tracker-…
            *(_topic(op, t("tracker-"), True) for op in ("CREATE", "READ", "WRITE")),
        ],
        "gc": [
            *common,
            _topic("READ", t("loaded")),
            _topic("READ", t("failed")),
            *(_topic(op, t("gc")) for op in ("CREATE", "READ", "WRITE", "ALTER_CONFIGS")),
            _group("READ", t("gc")),
            _group("READ", t("gc") + ".", prefixed=True),  # one group per retention class
        ],
        OPERATOR: [
            *common,
            *(_topic(op, p, True) for op in ("CREATE", "READ", "WRITE")),
            *(_group(op, p, True) for op in ("READ", "DESCRIBE")),
        ],
    }
    return {who: sorted(set(gs)) for who, gs in table.items()}


def bindings(principal: str, items: list[Grant]) -> list[AclBinding]:
    """``items`` as ALLOW bindings of ``User:<principal>`` from any host."""
    return [
        AclBinding(
            ResourceType.TOPIC if g.resource == "topic" else ResourceType.GROUP,
            g.name,
            ResourcePatternType.PREFIXED if g.prefixed else ResourcePatternType.LITERAL,
            f"User:{principal}",
            "*",
            AclOperation[g.operation],
            AclPermissionType.ALLOW,
        )
        for g in items
    ]


def users(kafka: KafkaSettings) -> dict[str, str]:
    """Service (and :data:`OPERATOR`) → SASL user: ``kafka.service_users``, else
    ``kafka.sasl_username`` (a service without a user of its own shares the operator's)."""
    out = {OPERATOR: kafka.sasl_username}
    for name in grants(kafka):
        if name != OPERATOR:
            u = kafka.service_users.get(name)
            out[name] = u.sasl_username if u else kafka.sasl_username
    return out


def apply(admin: AdminClient, kafka: KafkaSettings, lineage_topic: str = "openlineage") -> int:
    """Create every binding of :func:`grants` for :func:`users` (creating an existing ACL is a
    no-op on the broker). ``admin`` must log in as a user allowed to ALTER the cluster. Returns
    how many bindings were sent.

    Raises:
        TransientError: no answer within ``kafka.request_timeout_s``, or an error the broker
            says to retry.
        ConfigError: the broker refused them (no authorizer, or not an administrator).
    """
    who = users(kafka)
    todo = [b for name, gs in grants(kafka, lineage_topic).items() for b in bindings(who[name], gs)]
    timeout = kafka.request_timeout_s
    try:
        futures = admin.create_acls(todo, request_timeout=timeout)
    except KafkaException as exc:
        raise ConfigError(f"broker refused the ACLs of user {kafka.user!r}: {exc}") from exc
    for future in futures.values():
        admin_result(future, timeout, f"create_acls as user {kafka.user!r}", refusal=ConfigError)
    return len(todo)
