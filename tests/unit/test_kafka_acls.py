"""Least-privilege Kafka (docs/security.md, "Kafka ACLs"): each service's user and ACLs, the
one-line errors of a refused topic or group, and topics created only when missing."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from confluent_kafka import KafkaError
from confluent_kafka.admin import AclOperation, ResourcePatternType, ResourceType

from ferry.core.kafka.acls import OPERATOR, bindings, grants, users
from ferry.core.kafka.clients import OutboundRecord, produce_and_wait, refuse_unauthorized
from ferry.core.kafka.topics import ensure_topics
from ferry.errors import ConfigError, TransientError
from ferry.settings.kafka import KafkaSettings, KafkaUser


def with_users(tmp_path: Path) -> KafkaSettings:
    (tmp_path / "extract.pw").write_text("pw-extract-0123456789\n")
    (tmp_path / "extract.pw").chmod(0o600)
    return KafkaSettings(
        topic_prefix="p",
        sasl_username="ops",
        sasl_password="pw-ops-0123456789",
        service_users={
            "extract": KafkaUser(
                sasl_username="ferry-extract", sasl_password_file=tmp_path / "extract.pw"
            )
        },
    )


def test_a_service_logs_in_as_its_own_user_and_the_rest_as_the_operator(tmp_path: Path) -> None:
    k = with_users(tmp_path)
    ext = k.model_copy(update={"service": "extract"})
    load = k.model_copy(update={"service": "load"})
    assert (ext.user, ext.password().get_secret_value()) == (
        "ferry-extract",
        "pw-extract-0123456789",
    )
    assert (load.user, load.password().get_secret_value()) == ("ops", "pw-ops-0123456789")
    assert (k.user, k.password().get_secret_value()) == ("ops", "pw-ops-0123456789")
    assert users(k) == {
        OPERATOR: "ops",
        "extract": "ferry-extract",
        "transform": "ops",
        "transfer": "ops",
        "load": "ops",
        "tracker": "ops",
        "gc": "ops",
    }


def test_each_stage_may_read_its_input_and_write_its_outputs_only() -> None:
    g = {
        who: [x.line() for x in items]
        for who, items in grants(KafkaSettings(topic_prefix="p")).items()
    }
    assert g["extract"] == [
        "DESCRIBE on group prefix ferry-ops-scan-",
        "DESCRIBE on topic prefix p.",
        "WRITE on topic p.extracted",
        "WRITE on topic p.failed",
        "WRITE on topic p.openlineage",
    ]
    assert g["transfer"] == [
        "DESCRIBE on group prefix ferry-ops-scan-",
        "READ on group p.transfer",
        "DESCRIBE on topic prefix p.",
        "WRITE on topic p.failed",
        "WRITE on topic p.openlineage",
        "WRITE on topic p.transferred",
        "READ on topic p.transformed",
    ]
    assert g["gc"] == [
        "DESCRIBE on group prefix ferry-ops-scan-",
        "READ on group p.gc",
        "READ on group prefix p.gc.",
        "DESCRIBE on topic prefix p.",
        "READ on topic p.failed",
        "ALTER_CONFIGS on topic p.gc",
        "CREATE on topic p.gc",
        "READ on topic p.gc",
        "WRITE on topic p.gc",
        "READ on topic p.loaded",
    ]
    # nobody but the operator and gc (its own topic) and the tracker (its changelogs) creates
    creators = {who for who, lines in g.items() for line in lines if line.startswith("CREATE")}
    assert creators == {OPERATOR, "gc", "tracker"}
    assert [x for x in g["tracker"] if x.startswith(("CREATE", "WRITE"))] == [
        "CREATE on topic prefix p.tracker-",
        "WRITE on topic prefix p.tracker-",
    ]


def test_bindings_are_allow_entries_for_the_user_from_any_host() -> None:
    (b,) = bindings(
        "ferry-load",
        [g for g in grants(KafkaSettings())["load"] if g.line() == "READ on group ferry.load"],
    )
    assert (b.restype, b.name, b.resource_pattern_type, b.principal, b.host, b.operation) == (
        ResourceType.GROUP,
        "ferry.load",
        ResourcePatternType.LITERAL,
        "User:ferry-load",
        "*",
        AclOperation.READ,
    )


def test_a_refused_topic_or_group_is_one_line_naming_the_acl(tmp_path: Path) -> None:
    k = with_users(tmp_path).model_copy(update={"service": "extract"})
    with pytest.raises(ConfigError) as topic:
        refuse_unauthorized(
            KafkaError(KafkaError.TOPIC_AUTHORIZATION_FAILED), k, "p.transformed", "p.transfer"
        )  # type: ignore[arg-type]
    assert str(topic.value) == (
        "kafka refused user 'ferry-extract': Broker: Topic authorization failed "
        "(ACL: READ on topic p.transformed)"
    )
    with pytest.raises(ConfigError) as group:
        refuse_unauthorized(
            KafkaError(KafkaError.GROUP_AUTHORIZATION_FAILED),
            k,
            None,
            "p.transfer",
        )  # type: ignore[arg-type]
    assert str(group.value).endswith("(ACL: READ on group p.transfer)")
    assert refuse_unauthorized(KafkaError(KafkaError._TRANSPORT), k, "p.x", "p.g") is None  # type: ignore[arg-type]


class _Msg:
    def __init__(self, topic: str) -> None:
        self._topic = topic

    def topic(self) -> str:
        return self._topic

    def partition(self) -> int:
        return 0


class _Producer:
    """Acknowledges at flush with ``err`` for every record."""

    def __init__(self, err: Any) -> None:
        self.err, self.pending = err, []

    def produce(self, topic: str, value: bytes, key: bytes, on_delivery: Any) -> None:
        self.pending.append((topic, on_delivery))

    def flush(self, timeout: float) -> int:
        for topic, cb in self.pending:
            cb(self.err, _Msg(topic))
        self.pending = []
        return 0


def test_a_write_the_acls_refuse_is_a_config_error_not_a_retry() -> None:
    recs = [OutboundRecord("p.loaded", b"k", b"v")]
    with pytest.raises(ConfigError) as refused:
        produce_and_wait(
            _Producer(KafkaError(KafkaError.TOPIC_AUTHORIZATION_FAILED)),
            recs,
            1.0,
            "ferry-transfer",
        )  # type: ignore[arg-type]
    assert str(refused.value) == (
        "kafka refused user 'ferry-transfer' writing topic p.loaded (ACL: WRITE on topic p.loaded)"
    )
    with pytest.raises(TransientError):
        produce_and_wait(_Producer(KafkaError(KafkaError._MSG_TIMED_OUT)), recs, 1.0)  # type: ignore[arg-type]


class _Metadata:
    def __init__(self, topics: set[str]) -> None:
        self.topics = dict.fromkeys(topics)


class _Admin:
    def __init__(self, existing: set[str]) -> None:
        self.existing, self.asked = existing, []

    def list_topics(self, timeout: float) -> _Metadata:
        return _Metadata(self.existing)

    def create_topics(self, specs: list[Any], **kw: Any) -> dict[str, Any]:
        self.asked += [s.topic for s in specs]
        raise AssertionError("no topic should be created")


def test_existing_topics_are_not_created_again() -> None:
    k = KafkaSettings(topic_prefix="p")
    names = ("extracted", "failed")
    admin = _Admin({"p.extracted", "p.failed", "other"})
    assert ensure_topics(admin, k, names) == {"p.extracted": "exists", "p.failed": "exists"}  # type: ignore[arg-type]
    assert admin.asked == []
