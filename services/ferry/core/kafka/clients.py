"""Kafka client settings and the one produce-and-wait helper every stage uses.

Nothing here connects at import: :func:`build_consumer`, :func:`build_producer` and
:func:`build_admin` create clients when a stage's ``build()`` calls them.

Delivery guarantees (docs/architecture.md, "Delivery and idempotency"): the producer is idempotent
(``enable.idempotence=true``, ``acks=all``); the consumer auto-commits only offsets the runner has
*stored* (``enable.auto.commit=true``, ``enable.auto.offset.store=false``), and the runner stores
an offset only after the record's output events were acknowledged (:func:`produce_and_wait`).

Security (docs/security.md): with ``kafka.security_protocol: SASL_SSL`` every client built here
(:func:`client_config`) speaks TLS and logs in with SASL; the password is read from settings when
a client is built and is in no log line or error message.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from confluent_kafka import Consumer, KafkaError, KafkaException, Producer
from confluent_kafka.admin import AdminClient

from ferry.core.kafka.ratelimit import RateLimitFilter
from ferry.errors import ConfigError, TransientError
from ferry.settings.kafka import KafkaSettings

log = logging.getLogger(__name__)

#: Where librdkafka's own log lines go (instead of ``%3|…|FAIL|…`` on stderr): the Python logger
#: ``ferry.librdkafka``, one line per distinct message per minute (:class:`RateLimitFilter`).
#: While a broker is down librdkafka logs a failed connect every reconnect backoff (~50 ms at
#: first) per client; the filter turns that into one line a minute with a suppressed count.
LIBRDKAFKA_LOG = logging.getLogger("ferry.librdkafka")
if not any(isinstance(f, RateLimitFilter) for f in LIBRDKAFKA_LOG.filters):
    LIBRDKAFKA_LOG.addFilter(RateLimitFilter(interval_s=60.0))


def client_logging() -> dict[str, Any]:
    """The librdkafka settings that route a client's log into :data:`LIBRDKAFKA_LOG`.

    confluent-kafka calls the ``logger`` from ``poll()``/``flush()``; ``log.connection.close``
    is off so an idle connection closed by the broker is not reported as an error.
    """
    return {"logger": LIBRDKAFKA_LOG, "log.connection.close": False}


#: librdkafka error codes that mean "this client will never get in" rather than "not yet":
#: a refused SASL login (``_AUTHENTICATION``) or a TLS failure (``_SSL``: unknown CA, bad host).
_LOGIN_ERRORS = frozenset({KafkaError._AUTHENTICATION, KafkaError._SSL})
#: What the broker answers a client its ACLs do not allow (Kafka's authorizer): never retried.
AUTHORIZATION_ERRORS = frozenset(
    {
        KafkaError.TOPIC_AUTHORIZATION_FAILED,
        KafkaError.GROUP_AUTHORIZATION_FAILED,
        KafkaError.CLUSTER_AUTHORIZATION_FAILED,
        KafkaError.TRANSACTIONAL_ID_AUTHORIZATION_FAILED,
    }
)

#: bootstrap servers → the last login/TLS error a client of this process saw there (see
#: :func:`login_failure`); written from librdkafka's callback threads, read after a failure.
_login_failures: dict[str, str] = {}


def _error_cb(bootstrap: str) -> Any:
    """librdkafka ``error_cb`` remembering a login/TLS error (its text names the mechanism and
    the cause, never the password), so a failed start can say why in one line."""

    def on_error(err: KafkaError) -> None:
        if err.code() in _LOGIN_ERRORS:
            _login_failures[bootstrap] = err.str()
        LIBRDKAFKA_LOG.warning("kafka client error: %s", err.str())

    return on_error


def refuse_unauthorized(
    err: KafkaError, kafka: KafkaSettings, topic: str | None, group: str
) -> None:
    """Raise the one-line :class:`ConfigError` of a consumer error that is the broker's ACLs
    refusing ``kafka.user`` (:data:`AUTHORIZATION_ERRORS`), naming the ACL it lacks (READ on the
    topic, or on the consumer group ``group``); return for any other error. librdkafka reports
    these as non-fatal consumer errors: without this a consumer would poll, refused, forever."""
    code = err.code()
    if code not in AUTHORIZATION_ERRORS:
        return
    if code == KafkaError.GROUP_AUTHORIZATION_FAILED or not topic:
        acl = f"READ on group {group}"
    else:
        acl = f"READ on topic {topic}"
    raise ConfigError(f"kafka refused user {kafka.user!r}: {err.str()} (ACL: {acl})")


def login_failure(kafka: KafkaSettings) -> str | None:
    """The last refused login or TLS error a client saw on ``kafka``'s brokers, or ``None``."""
    return _login_failures.get(kafka.bootstrap_servers)


def security_config(kafka: KafkaSettings) -> dict[str, Any]:
    """librdkafka settings of ``kafka.security_protocol``: nothing for PLAINTEXT; for SASL_SSL the
    mechanism, user, password (from :meth:`KafkaSettings.password`), CA file and host name
    verification. The returned dict holds the password: never log it.

    Raises:
        ConfigError: SASL_SSL without a usable password (see :meth:`KafkaSettings.password`), or
            ``ssl_ca_path`` is not a file.
    """
    if not kafka.secure:
        return {}
    cfg: dict[str, Any] = {
        "security.protocol": "SASL_SSL",
        "sasl.mechanisms": kafka.sasl_mechanism,
        "sasl.username": kafka.user,
        "sasl.password": kafka.password().get_secret_value(),
        "ssl.endpoint.identification.algorithm": "https",
    }
    if kafka.ssl_ca_path is not None:
        if not kafka.ssl_ca_path.is_file():  # else librdkafka refuses the client, less clearly
            raise ConfigError(f"kafka.ssl_ca_path: {kafka.ssl_ca_path} is not a file")
        cfg["ssl.ca.location"] = str(kafka.ssl_ca_path)
    return cfg


def client_config(kafka: KafkaSettings) -> dict[str, Any]:
    """What every librdkafka client of Ferry shares: bootstrap servers, security
    (:func:`security_config`), connect timeout, error callback and logging."""
    return {
        "bootstrap.servers": kafka.bootstrap_servers,
        "socket.connection.setup.timeout.ms": _ms(kafka.request_timeout_s),
        "error_cb": _error_cb(kafka.bootstrap_servers),
        **security_config(kafka),
        **client_logging(),
    }


def group_id(kafka: KafkaSettings, stage: str) -> str:
    """Consumer group of a stage: ``<topic_prefix>.<stage>`` (e.g. ``ferry.transform``)."""
    return f"{kafka.topic_prefix}.{stage}"


def _ms(seconds: float) -> int:
    return max(1, int(seconds * 1000))


def delivery_timeout_s(kafka: KafkaSettings) -> float:
    """How long one produced message may take to be acknowledged or fail for good, s.

    Three request timeouts, so a broker that answers late still gets retried by librdkafka;
    :func:`produce_and_wait` waits this long (plus 1 s) so every message is settled when it returns.
    """
    return 3 * kafka.request_timeout_s


def producer_config(kafka: KafkaSettings, client_id: str = "ferry") -> dict[str, Any]:
    """librdkafka settings of Ferry's idempotent producer."""
    return {
        **client_config(kafka),
        "client.id": client_id,
        "enable.idempotence": True,
        "acks": "all",
        "linger.ms": 5,
        "request.timeout.ms": _ms(kafka.request_timeout_s),
        "delivery.timeout.ms": _ms(delivery_timeout_s(kafka)),
    }


def consumer_config(kafka: KafkaSettings, group: str, client_id: str = "ferry") -> dict[str, Any]:
    """librdkafka settings of a stage consumer in consumer group ``group``.

    ``auto.offset.reset=earliest``: a new group starts at the oldest retained event, so nothing
    produced before a stage's first start is skipped.
    """
    return {
        **client_config(kafka),
        "client.id": client_id,
        "group.id": group,
        "enable.auto.commit": True,
        "enable.auto.offset.store": False,
        "auto.commit.interval.ms": 1000,
        "auto.offset.reset": "earliest",
        "max.poll.interval.ms": kafka.max_poll_interval_ms,
        "session.timeout.ms": kafka.session_timeout_ms,
        "partition.assignment.strategy": kafka.assignment_strategy,
        "heartbeat.interval.ms": max(100, min(3000, kafka.session_timeout_ms // 3)),
    }


def build_producer(kafka: KafkaSettings, client_id: str = "ferry") -> Producer:
    """An idempotent producer (see :func:`producer_config`). Connects lazily."""
    return Producer(producer_config(kafka, client_id))


def build_consumer(kafka: KafkaSettings, group: str, client_id: str = "ferry") -> Consumer:
    """A stage consumer (see :func:`consumer_config`). Connects on subscribe/poll."""
    return Consumer(consumer_config(kafka, group, client_id))


def build_admin(kafka: KafkaSettings) -> AdminClient:
    """An admin client; every call made through :mod:`ferry.core.kafka.topics` has a timeout."""
    return AdminClient(client_config(kafka))


@dataclass(frozen=True)
class OutboundRecord:
    """One record to produce: topic (full name), key and value bytes; ``source`` is the input
    record's (topic, partition) it answers, when there is one (the runner drops the outputs of a
    partition revoked while its batch ran; not compared)."""

    topic: str
    key: bytes
    value: bytes
    source: tuple[str, int] | None = field(default=None, compare=False)


def produce_and_wait(
    producer: Producer, records: Sequence[OutboundRecord], timeout_s: float, user: str = "ferry"
) -> None:
    """Produce ``records`` and return only once the broker acknowledged every one (``acks=all``).

    Args:
        timeout_s: how long to wait for acknowledgements, s; use
            ``delivery_timeout_s(kafka) + 1`` so every message is settled on return.

    Raises:
        TransientError: a record could not be queued, was rejected, or was not acknowledged in
            ``timeout_s``; the message names the topic. Callers retry or stop without storing
            their input offset, so a failure here never loses an event (it may duplicate one).
        ConfigError: the broker's ACLs do not let ``user`` (the client's SASL user, for the
            message) write a record's topic: one line naming the ACL; retrying cannot help.
    """
    failures: list[str] = []
    refused: list[str] = []

    def on_delivery(err: Any, msg: Any) -> None:
        if err is not None:
            failures.append(f"{msg.topic()}[{msg.partition()}]: {err}")
            if isinstance(err, KafkaError) and err.code() in AUTHORIZATION_ERRORS:
                refused.append(msg.topic())

    for rec in records:
        try:
            producer.produce(rec.topic, value=rec.value, key=rec.key, on_delivery=on_delivery)
        except (BufferError, KafkaException) as exc:
            producer.flush(timeout_s)
            raise TransientError(f"cannot queue a record for topic {rec.topic}: {exc}") from exc
    remaining = producer.flush(timeout_s)
    if remaining:
        raise TransientError(
            f"{remaining} of {len(records)} record(s) to {sorted({r.topic for r in records})} "
            f"not acknowledged within {timeout_s:.1f}s"
        )
    if refused:
        topic = sorted(refused)[0]
        raise ConfigError(
            f"kafka refused user {user!r} writing topic {topic} (ACL: WRITE on topic {topic})"
        )
    if failures:
        raise TransientError("broker rejected record(s): " + "; ".join(failures))
