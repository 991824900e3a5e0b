"""Admin look-ups the operations commands share: stage input topics, group members, topic
scans, and the one way to wait on an AdminClient's answer (:func:`admin_result`). Offsets,
watermarks and lag are asked through a consumer instead (:mod:`ferry.core.kafka.offsets`, which
says why).

Every broker call has a timeout (``settings.kafka.request_timeout_s``); a call that does not
answer in time raises :class:`TransientError`, a refusal that retrying cannot fix raises
:class:`OpsError`. Offsets are Kafka offsets (the offset of the *next* record to read, as
committed by a consumer group); timestamps are Unix epoch milliseconds.
"""

from __future__ import annotations

import concurrent.futures
import logging
import time
import uuid
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass
from typing import Any

from confluent_kafka import (
    Consumer,
    KafkaError,
    KafkaException,
    TopicPartition,
)
from confluent_kafka.admin import AdminClient

from ferry.core.kafka.clients import client_config
from ferry.core.services import STAGES, service
from ferry.errors import ConfigError, FerryError, TransientError
from ferry.settings import Settings
from ferry.settings.kafka import KafkaSettings

log = logging.getLogger(__name__)


class OpsError(FerryError):
    """An operations command cannot do what was asked (the message says why and what to do)."""

    reason = "ops"


def input_topic(settings: Settings, stage: str) -> str:
    """Full name of ``stage``'s input topic (``transform`` → ``<prefix>.extracted``).

    Raises:
        ConfigError: unknown stage, or ``extract`` (it reads the NAS directory, not a topic).
    """
    if stage not in STAGES:
        raise ConfigError(f"unknown stage {stage!r}; stages: {', '.join(STAGES)}")
    cls = service(stage).input
    if cls is None:
        raise ConfigError(
            f"stage {stage} has no input topic (it reads the NAS directory "
            f"{settings.paths.nas_dir}); re-drop a file there to extract it again"
        )
    return settings.kafka.topic(cls.TOPIC)


def admin_result(
    future: concurrent.futures.Future[Any],
    timeout_s: float,
    what: str,
    *,
    refusal: Callable[[str], FerryError] = OpsError,
    codes: Mapping[int, type[Exception]] | None = None,
) -> Any:
    """The result of an AdminClient future (``create_topics``, ``create_acls``,
    ``describe_configs``, ``list_offsets``, …), waited for at most ``timeout_s`` + 1 s (the
    request's own timeout, then a second for the answer to arrive): the one way Ferry waits on
    the broker's admin answers.

    Raises:
        TransientError: no answer in time, or an error the broker says to retry (and librdkafka's
            ``_TIMED_OUT``/``_TRANSPORT``), ``"<what>: …"``.
        codes[code]: an error whose code the caller handles itself (e.g. TOPIC_ALREADY_EXISTS),
            before the classification above.
        refusal: any other error, built from ``"<what>: <error>"`` (default :class:`OpsError`).
    """
    try:
        return future.result(timeout=timeout_s + 1)
    except concurrent.futures.TimeoutError as exc:
        raise TransientError(f"{what}: no answer within {timeout_s:.0f}s") from exc
    except KafkaException as exc:
        err = exc.args[0] if exc.args else None
        if isinstance(err, KafkaError) and codes and err.code() in codes:
            raise codes[err.code()](f"{what}: {err}") from exc
        raise kafka_failure(what, exc, refusal) from exc


def kafka_failure(
    what: str, exc: KafkaException, refusal: Callable[[str], FerryError] = OpsError
) -> FerryError:
    """The error to raise for ``exc`` met while doing ``what``: TransientError when the broker
    did not answer in time, could not be reached or said to retry; ``refusal`` (OpsError)
    otherwise."""
    err = exc.args[0] if exc.args else None
    if isinstance(err, KafkaError) and (
        err.retriable() or err.code() in (KafkaError._TIMED_OUT, KafkaError._TRANSPORT)
    ):
        return TransientError(f"{what}: {err}")
    return refusal(f"{what}: {exc}")


@dataclass(frozen=True)
class Member:
    """One active member of a consumer group."""

    member_id: str
    client_id: str
    host: str
    #: (topic, partition) pairs assigned to the member, sorted.
    partitions: tuple[tuple[str, int], ...] = ()


def active_members(admin: AdminClient, kafka: KafkaSettings, group: str) -> list[Member]:
    """The members of ``group`` now (empty for an empty or unknown group)."""
    futures = admin.describe_consumer_groups([group], request_timeout=kafka.request_timeout_s)
    desc = admin_result(futures[group], kafka.request_timeout_s, f"describe group {group}")
    return [
        Member(
            m.member_id,
            m.client_id,
            m.host,
            tuple(
                sorted(
                    (tp.topic, tp.partition)
                    for tp in (m.assignment.topic_partitions if m.assignment else [])
                )
            ),
        )
        for m in desc.members or []
    ]


@dataclass(frozen=True)
class ScannedRecord:
    """One record read by :func:`scan`. ``timestamp_ms`` is the record's Kafka timestamp."""

    topic: str
    partition: int
    offset: int
    timestamp_ms: int
    key: bytes | None
    value: bytes | None


def scan(
    kafka: KafkaSettings,
    topic: str,
    bounds: Mapping[int, tuple[int, int]],
    *,
    stop: Callable[[], bool] | None = None,
    idle_timeout_s: float | None = None,
    consumer: Consumer | None = None,
) -> Iterator[ScannedRecord]:
    """Read ``topic``'s records in ``[low, high)`` of each partition in ``bounds`` (partition →
    (low, high)), without joining a consumer group or committing anything.

    Records come in offset order within a partition; partitions interleave. ``stop()`` is checked
    after each record and ends the scan early when true. ``consumer``: a consumer of the caller's
    (from :func:`scan_consumer`) to read with, unassigned at the end and kept open, so a service
    that scans every minute reuses one client instead of making and closing one each time.

    Raises:
        TransientError: no record arrived for ``idle_timeout_s`` (default: the request timeout)
            while records were still expected; the message names the partitions left.
    """
    todo = {p: (lo, hi) for p, (lo, hi) in bounds.items() if hi > lo}
    if not todo:
        return
    idle = idle_timeout_s if idle_timeout_s is not None else max(kafka.request_timeout_s, 10.0)
    own = consumer is None
    consumer = consumer if consumer is not None else scan_consumer(kafka)
    try:
        parts = [TopicPartition(topic, p, lo) for p, (lo, _hi) in todo.items()]
        consumer.assign(parts)
        consumer.resume(parts)  # librdkafka keeps a pause flag across assignments (a reused one)
        last = time.monotonic()
        while todo:
            msgs = consumer.consume(500, 0.5)
            if not msgs:
                # offsets may have gaps (transaction markers): done once the position passed high
                for tp in consumer.position([TopicPartition(topic, p) for p in list(todo)]):
                    if tp.offset >= 0 and tp.offset >= todo[tp.partition][1]:
                        del todo[tp.partition]
                if todo and time.monotonic() - last > idle:
                    left = {p: f"{lo}..{hi}" for p, (lo, hi) in todo.items()}
                    raise TransientError(
                        f"scan of {topic}: no records for {idle:.0f}s; left {left}"
                    )
                continue
            last = time.monotonic()
            for msg in msgs:
                err = msg.error()
                if err is not None:
                    if err.fatal():
                        raise TransientError(f"scan of {topic}: {err}")
                    continue
                p, off = msg.partition(), msg.offset()
                if p is None or off is None or p not in todo or off >= todo[p][1]:
                    continue
                _ts_type, ts = msg.timestamp()
                yield ScannedRecord(topic, p, off, ts, msg.key(), msg.value())
                if off + 1 >= todo[p][1]:
                    del todo[p]
                    consumer.pause([TopicPartition(topic, p)])  # read no further there
                if stop is not None and stop():
                    return
    finally:
        if own:
            consumer.close()
        else:
            consumer.unassign()


def scan_consumer(kafka: KafkaSettings) -> Consumer:
    """A consumer for :func:`scan`: it never joins its (random) group, commits nothing."""
    return Consumer(
        {
            **client_config(kafka),
            "group.id": f"ferry-ops-scan-{uuid.uuid4().hex[:8]}",  # never joins: assign() only
            "enable.auto.commit": False,
            "enable.partition.eof": False,
        }
    )


__all__ = [
    "Member",
    "OpsError",
    "ScannedRecord",
    "active_members",
    "admin_result",
    "input_topic",
    "scan",
    "scan_consumer",
]
