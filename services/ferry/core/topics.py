"""The topic plan: ``<prefix>.extracted`` … ``<prefix>.failed``, created at start-up, idempotently.

Every topic has ``settings.kafka.partitions`` partitions (the most instances of one stage that can
share work), ``replication_factor`` replicas and ``retention_ms`` retention; records are keyed by
``file_id`` so one file's events stay in order on one partition.
"""

from __future__ import annotations

import concurrent.futures
import logging

from confluent_kafka import KafkaError, KafkaException
from confluent_kafka.admin import AdminClient, NewTopic

from ferry.core.config import KafkaSettings
from ferry.core.errors import ConfigError, TransientError
from ferry.core.events import TOPIC_NAMES

log = logging.getLogger(__name__)


def topic_plan(kafka: KafkaSettings, names: tuple[str, ...] = TOPIC_NAMES) -> list[NewTopic]:
    """The NewTopic specs of the plan, full names via ``kafka.topic(name)``."""
    return [
        NewTopic(
            kafka.topic(name),
            num_partitions=kafka.partitions,
            replication_factor=kafka.replication_factor,
            config={"retention.ms": str(kafka.retention_ms), "cleanup.policy": "delete"},
        )
        for name in names
    ]


def ensure_topics(
    admin: AdminClient, kafka: KafkaSettings, names: tuple[str, ...] = TOPIC_NAMES
) -> dict[str, str]:
    """Create the plan's topics that do not exist yet; existing ones are left as they are.

    Returns:
        full topic name → ``"created"`` or ``"exists"``.

    Raises:
        TransientError: the broker did not answer within ``kafka.request_timeout_s`` or
            returned a retriable error.
        ConfigError: the broker refused a topic for good (e.g. replication factor larger than
            the number of brokers, invalid config).
    """
    timeout = kafka.request_timeout_s
    try:
        futures = admin.create_topics(
            topic_plan(kafka, names), operation_timeout=timeout, request_timeout=timeout
        )
    except KafkaException as exc:
        raise TransientError(f"create_topics on {kafka.bootstrap_servers} failed: {exc}") from exc
    outcome: dict[str, str] = {}
    for topic, future in futures.items():
        try:
            future.result(timeout=timeout + 1)
            outcome[topic] = "created"
        except concurrent.futures.TimeoutError as exc:
            raise TransientError(
                f"creating topic {topic} on {kafka.bootstrap_servers}: no answer within {timeout}s"
            ) from exc
        except KafkaException as exc:
            err: KafkaError = exc.args[0]
            if err.code() == KafkaError.TOPIC_ALREADY_EXISTS:
                outcome[topic] = "exists"
            elif err.retriable() or err.code() in (KafkaError._TIMED_OUT, KafkaError._TRANSPORT):
                raise TransientError(f"creating topic {topic}: {err}") from exc
            else:
                raise ConfigError(f"broker refused topic {topic}: {err}") from exc
    log.info("topic plan on %s: %s", kafka.bootstrap_servers, outcome)
    return outcome
