"""The gc topic ``<prefix>.gc``: every ``FileLoaded`` and ``FileFailed``, kept as long as the
longest retention needs them.

The sweeps need each outcome event until its longest retention has passed (90 days for rejects
by default), longer than ``kafka.retention_ms`` keeps the ``loaded`` and ``failed`` topics (14
days; keeping those longer would make every ``ferry quarantine list`` read months of events).
So the gc service copies each record of ``<prefix>.loaded`` and ``<prefix>.failed``, with its key,
value and timestamp (the event's time, which the sweeps compare with their retention), to its own
topic ``<prefix>.gc``, whose ``retention.ms`` is the longest retention plus ``retention.grace``.

Copying is at least once: source offsets (consumer group ``<prefix>.gc``) are committed only
after the broker acknowledged the copies, so a crash copies a record twice, which the sweeps
absorb (removing a copy twice finds it gone).
"""

from __future__ import annotations

import logging
import threading
import time
from typing import Any

from confluent_kafka import (
    OFFSET_STORED,
    Consumer,
    KafkaError,
    KafkaException,
    Producer,
    TopicPartition,
)
from confluent_kafka.admin import (
    AdminClient,
    AlterConfigOpType,
    ConfigEntry,
    ConfigResource,
)
from tenacity import Retrying, retry_if_exception_type, stop_after_delay, wait_fixed

from ferry.core.events import FileFailed, FileLoaded
from ferry.core.kafka.admin import admin_result
from ferry.core.kafka.clients import client_config, delivery_timeout_s, group_id
from ferry.core.kafka.offsets import partitions_of
from ferry.core.kafka.topics import ensure_topics
from ferry.errors import ConfigError, TransientError
from ferry.settings.kafka import KafkaSettings

log = logging.getLogger(__name__)

#: Short name of the gc topic (``<prefix>.gc``) and of the copier's consumer group.
GC = "gc"

#: The topics copied: the outcomes of files.
SOURCES = (FileLoaded.TOPIC, FileFailed.TOPIC)


def ensure_gc_topic(admin: AdminClient, kafka: KafkaSettings, retention_ms: int) -> str:
    """Create ``<prefix>.gc`` with ``retention.ms = retention_ms`` (partitions and replicas as
    the topic plan: :func:`ferry.core.kafka.topics.ensure_topics`), or raise the retention of an
    existing one that keeps less (never lowered: another gc service of the same prefix may need
    it). Returns the topic's full name once the broker describes the topic (a topic just created
    is not in every broker's metadata yet).

    Raises:
        TransientError: the broker did not answer in time, or did not know the topic within
            ``kafka.request_timeout_s``. ConfigError: it refused.
    """
    topic = kafka.topic(GC)
    timeout = kafka.request_timeout_s
    created = ensure_topics(admin, kafka, (GC,), retention_ms)[topic] == "created"
    # A topic just created (here or by another gc service) is known to the controller before
    # every broker's metadata has it: its configuration is asked for until it is visible.
    current = _retention_ms(admin, topic, timeout)
    if created:
        log.info("gc: created topic %s (retention.ms %d)", topic, current)
        return topic
    if 0 <= current < retention_ms:
        entry = ConfigEntry(
            "retention.ms", str(retention_ms), incremental_operation=AlterConfigOpType.SET
        )
        change = ConfigResource(ConfigResource.Type.TOPIC, topic, incremental_configs=[entry])
        admin_result(
            admin.incremental_alter_configs([change], request_timeout=timeout)[change],
            timeout,
            f"alter retention.ms of {topic}",
            refusal=ConfigError,
        )
        log.info("gc: retention.ms of %s raised from %d to %d", topic, current, retention_ms)
    return topic


class _NotYetVisible(Exception):
    """The broker does not know the topic yet (UNKNOWN_TOPIC_OR_PART)."""


def _retention_ms(admin: AdminClient, topic: str, timeout: float) -> int:
    """The topic's ``retention.ms``, asked again every 0.2 s while the broker answers
    UNKNOWN_TOPIC_OR_PART, for at most ``timeout`` seconds.

    Raises:
        TransientError: no answer, or the topic still unknown after ``timeout`` seconds.
    """
    resource = ConfigResource(ConfigResource.Type.TOPIC, topic)
    what = f"describe topic {topic}"
    try:
        for attempt in Retrying(
            retry=retry_if_exception_type(_NotYetVisible),
            stop=stop_after_delay(timeout),
            wait=wait_fixed(0.2),
            reraise=True,
        ):
            with attempt:
                future = admin.describe_configs([resource], request_timeout=timeout)[resource]
                described = admin_result(
                    future,
                    timeout,
                    what,
                    refusal=ConfigError,
                    codes={KafkaError.UNKNOWN_TOPIC_OR_PART: _NotYetVisible},
                )
    except _NotYetVisible as exc:
        raise TransientError(f"{what}: still unknown to the broker after {timeout:.0f}s") from exc
    return int(described["retention.ms"].value)


class Copier:
    """Copies new records of ``<prefix>.loaded`` and ``<prefix>.failed`` to ``<prefix>.gc``.

    One consumer, assigned every partition of both topics (no group membership: one gc service
    per prefix), reading from the offsets its group ``<prefix>.gc`` committed (the earliest
    retained record the first time); one idempotent producer.
    """

    def __init__(self, kafka: KafkaSettings, topic: str) -> None:
        self.kafka = kafka
        self.topic = topic
        self._consumer = Consumer(
            {
                **client_config(kafka),
                "client.id": "ferry-gc",
                "group.id": group_id(kafka, GC),
                "enable.auto.commit": False,
                "enable.auto.offset.store": False,
                "auto.offset.reset": "earliest",
                "enable.partition.eof": False,
                "queued.max.messages.kbytes": 4096,
            }
        )
        self._producer = Producer(
            {
                **client_config(kafka),
                "client.id": "ferry-gc",
                "enable.idempotence": True,
                "acks": "all",
                "linger.ms": 20,
                "request.timeout.ms": int(kafka.request_timeout_s * 1000),
                "delivery.timeout.ms": int(delivery_timeout_s(kafka) * 1000),
            }
        )
        self._assigned: set[tuple[str, int]] = set()

    def _assign(self) -> None:
        """Assign every source partition at its committed offset, when the set of partitions is
        not the one assigned (the first time, after a failed copy, or partitions added)."""
        parts = {
            (self.kafka.topic(t), p)
            for t in SOURCES
            for p in partitions_of(self._consumer, self.kafka, self.kafka.topic(t))
        }
        if parts != self._assigned:
            self._consumer.assign([TopicPartition(t, p, OFFSET_STORED) for t, p in sorted(parts)])
            self._assigned = parts

    def pump(self, max_s: float, stop: threading.Event) -> int:
        """Copy what arrived, for at most ``max_s`` seconds; return the records copied.

        Raises:
            TransientError: copies not acknowledged, or offsets not committed (positions are
                reset to the committed offsets: nothing is skipped).
        """
        self._assign()
        end = time.monotonic() + max_s
        copied = 0
        while time.monotonic() < end and not stop.is_set():
            msgs = [m for m in self._consumer.consume(500, 0.5) if m.error() is None]
            if not msgs:
                break
            try:
                self._copy(msgs)
            except TransientError:
                self._assigned = set()  # back to the committed offsets at the next pump
                raise
            copied += len(msgs)
        return copied

    def _copy(self, msgs: list[Any]) -> None:
        failures: list[str] = []

        def on_delivery(err: Any, msg: Any) -> None:
            if err is not None:
                failures.append(f"{msg.topic()}[{msg.partition()}]: {err}")

        last: dict[tuple[str, int], int] = {}
        for msg in msgs:
            _kind, ts = msg.timestamp()
            try:
                self._producer.produce(
                    self.topic,
                    key=msg.key(),
                    value=msg.value(),
                    timestamp=ts if ts > 0 else 0,
                    on_delivery=on_delivery,
                )
            except (BufferError, KafkaException) as exc:
                self._producer.flush(delivery_timeout_s(self.kafka))
                raise TransientError(f"gc: cannot queue a copy for {self.topic}: {exc}") from exc
            last[(msg.topic(), msg.partition())] = msg.offset()
        left = self._producer.flush(delivery_timeout_s(self.kafka) + 1)
        if left or failures:
            raise TransientError(
                f"gc: {left} copies to {self.topic} unacknowledged; rejected: {failures}"
            )
        offsets = [TopicPartition(t, p, o + 1) for (t, p), o in last.items()]
        try:
            self._consumer.commit(offsets=offsets, asynchronous=False)
        except KafkaException as exc:
            raise TransientError(f"gc: commit of {offsets} failed: {exc}") from exc

    def close(self) -> None:
        self._consumer.close()
        self._producer.flush(self.kafka.request_timeout_s)


__all__ = ["GC", "SOURCES", "Copier", "ensure_gc_topic"]
