"""Admin look-ups the operations commands share: stage input topics, watermarks, committed
offsets, offsets by timestamp, group members, offset moves, topic scans and consumer lag.

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
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from confluent_kafka import (
    Consumer,
    ConsumerGroupTopicPartitions,
    KafkaError,
    KafkaException,
    TopicPartition,
)
from confluent_kafka.admin import AdminClient, OffsetSpec

from ferry.core.kafka.clients import client_config, group_id
from ferry.core.services import CONSUMING_STAGES, STAGES, service
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


def partitions_of(admin: AdminClient, kafka: KafkaSettings, topic: str) -> list[int]:
    """Partition numbers of ``topic``, sorted.

    Raises:
        OpsError: the topic does not exist. TransientError: no metadata in time.
    """
    try:
        md = admin.list_topics(topic=topic, timeout=kafka.request_timeout_s)
    except KafkaException as exc:
        raise TransientError(f"metadata of topic {topic}: {exc}") from exc
    tmd = md.topics.get(topic)
    if tmd is None or tmd.error is not None or not tmd.partitions:
        raise OpsError(f"topic {topic} does not exist on {kafka.bootstrap_servers}")
    return sorted(tmd.partitions)


def list_offsets(
    admin: AdminClient, kafka: KafkaSettings, topic: str, specs: Mapping[int, OffsetSpec]
) -> dict[int, int]:
    """partition → offset answering each :class:`OffsetSpec` (earliest, latest, for_timestamp).

    For ``for_timestamp(ts)`` the offset is that of the first record with timestamp ≥ ``ts``,
    or ``-1`` when there is none (Kafka ListOffsets semantics).
    """
    if not specs:
        return {}
    futures = admin.list_offsets(
        {TopicPartition(topic, p): spec for p, spec in specs.items()},
        request_timeout=kafka.request_timeout_s,
    )
    return {
        tp.partition: int(admin_result(f, kafka.request_timeout_s, f"list_offsets {topic}").offset)
        for tp, f in futures.items()
    }


def watermarks(
    admin: AdminClient, kafka: KafkaSettings, topic: str, partitions: Sequence[int]
) -> dict[int, tuple[int, int]]:
    """partition → (low, high) watermark: the oldest retained offset and the next offset."""
    low = list_offsets(admin, kafka, topic, {p: OffsetSpec.earliest() for p in partitions})
    high = list_offsets(admin, kafka, topic, {p: OffsetSpec.latest() for p in partitions})
    return {p: (low[p], high[p]) for p in partitions}


def committed_offsets(
    admin: AdminClient, kafka: KafkaSettings, group: str, topic: str, partitions: Sequence[int]
) -> dict[int, int | None]:
    """partition → offset committed by ``group`` on ``topic``, ``None`` where it has none."""
    request = [ConsumerGroupTopicPartitions(group, [TopicPartition(topic, p) for p in partitions])]
    futures = admin.list_consumer_group_offsets(request, request_timeout=kafka.request_timeout_s)
    res = admin_result(
        futures[group], kafka.request_timeout_s, f"committed offsets of group {group}"
    )
    out: dict[int, int | None] = {p: None for p in partitions}
    for tp in res.topic_partitions:
        if tp.topic == topic and tp.offset >= 0:
            out[tp.partition] = int(tp.offset)
    return out


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


def alter_offsets(
    admin: AdminClient, kafka: KafkaSettings, group: str, topic: str, new: Mapping[int, int]
) -> None:
    """Commit ``new`` (partition → offset) for ``group`` on ``topic``.

    Raises:
        OpsError: the broker refused (e.g. the group has active members:
            ``UNKNOWN_MEMBER_ID``/``REBALANCE_IN_PROGRESS``), with the partition named.
    """
    if not new:
        return
    request = [
        ConsumerGroupTopicPartitions(group, [TopicPartition(topic, p, o) for p, o in new.items()])
    ]
    futures = admin.alter_consumer_group_offsets(request, request_timeout=kafka.request_timeout_s)
    res = admin_result(futures[group], kafka.request_timeout_s, f"alter offsets of group {group}")
    errors = [f"{topic}[{tp.partition}]: {tp.error}" for tp in res.topic_partitions if tp.error]
    if errors:
        raise OpsError(f"broker refused the offsets of group {group}: " + "; ".join(errors))


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


@dataclass(frozen=True)
class PartitionLag:
    """One partition of one group's input topic: ``lag = high - committed`` (committed = low
    when the group has committed nothing, since stage groups start at the earliest offset)."""

    group: str
    topic: str
    partition: int
    committed: int | None
    high: int
    low: int

    @property
    def lag(self) -> int:
        start = self.committed if self.committed is not None else self.low
        return max(0, self.high - start)


def consumer_lag(admin: AdminClient, settings: Settings) -> list[PartitionLag]:
    """Lag of every stage group (``<prefix>.<stage>``) on its input topic, per partition.

    Topics that do not exist yet are skipped.
    """
    kafka = settings.kafka
    out: list[PartitionLag] = []
    for stage in CONSUMING_STAGES:
        topic = input_topic(settings, stage)
        try:
            parts = partitions_of(admin, kafka, topic)
        except OpsError:
            continue
        group = group_id(kafka, stage)
        marks = watermarks(admin, kafka, topic, parts)
        committed = committed_offsets(admin, kafka, group, topic, parts)
        for p in parts:
            lo, hi = marks[p]
            out.append(PartitionLag(group, topic, p, committed[p], hi, lo))
    return out


def group_lag(admin: AdminClient, settings: Settings, group: str, topics: Sequence[str]) -> int:
    """Records ``group`` has not consumed yet on ``topics`` (sum over partitions of high watermark
    minus committed offset; a partition without a committed offset counts from its low
    watermark). Topics that do not exist yet count 0.

    Raises:
        TransientError: the broker did not answer in time.
    """
    kafka = settings.kafka
    total = 0
    for topic in topics:
        try:
            parts = partitions_of(admin, kafka, topic)
        except OpsError:
            continue
        marks = watermarks(admin, kafka, topic, parts)
        committed = committed_offsets(admin, kafka, group, topic, parts)
        for p in parts:
            lo, hi = marks[p]
            total += PartitionLag(group, topic, p, committed[p], hi, lo).lag
    return total


__all__ = [
    "Member",
    "OpsError",
    "PartitionLag",
    "ScannedRecord",
    "active_members",
    "admin_result",
    "alter_offsets",
    "committed_offsets",
    "consumer_lag",
    "group_lag",
    "input_topic",
    "list_offsets",
    "partitions_of",
    "scan",
    "scan_consumer",
    "watermarks",
]
