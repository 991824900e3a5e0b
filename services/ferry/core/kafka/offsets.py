"""Where Ferry asks the broker about offsets: a topic's partitions and watermarks, offsets by
timestamp, a group's committed offsets and their commit, consumer lag. One path for the gc
service's sweeps, ``ferry replay``, ``ferry status``, the tracker's lag and every topic scan.

Every call goes through a :class:`confluent_kafka.Consumer`, never an AdminClient. A consumer of
a group (:func:`group_client`) is never subscribed, so it never joins the group: its commit is a
"simple consumer" commit, accepted while the group has no member (``ferry replay`` checks that
first, with the AdminClient's group description).

Why not the AdminClient: in the hour-long soak of 2026-12-03 (confluent-kafka 2.16.1, librdkafka
2.16.0) gc's admin client, whose group-offset requests were in flight when the broker restarted,
answered ``_TIMED_OUT`` for those groups (and in a rerun ``_NOENT``/``_TRANSPORT`` for list
offsets and metadata) for as long as it lived: gc swept nothing for 40 minutes. A new admin
client after each failed turn answered, but processes renewing admin clients across broker
restarts died of SIGSEGV now and then (cf. confluentinc/librdkafka#4605, admin group requests
after timed-out FindCoordinator requests). The pipeline's consumers recovered from the same
restarts.

Errors: a call the broker did not answer in ``kafka.request_timeout_s``, or one it failed with a
retriable error, raises :class:`~ferry.errors.TransientError`; anything else
:class:`~ferry.core.kafka.admin.OpsError`. Offsets are Kafka offsets (the offset of the *next*
record to read, as committed by a consumer group); timestamps are Unix epoch milliseconds.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass

from confluent_kafka import Consumer, KafkaException, TopicPartition
from confluent_kafka.admin import OffsetSpec

from ferry.core.kafka.admin import OpsError, input_topic, kafka_failure, scan_consumer
from ferry.core.kafka.clients import client_config, group_id
from ferry.core.services import CONSUMING_STAGES
from ferry.errors import TransientError
from ferry.settings import Settings
from ferry.settings.kafka import KafkaSettings


def group_client(kafka: KafkaSettings, group: str) -> Consumer:
    """A consumer for the calls below on behalf of ``group``: never subscribed, commits only
    what :func:`alter_offsets` is given."""
    return Consumer(
        {
            **client_config(kafka),
            "group.id": group,
            "client.id": f"ferry-{group}",
            "enable.auto.commit": False,
            "enable.auto.offset.store": False,
        }
    )


@contextmanager
def _asking(what: str) -> Iterator[None]:
    try:
        yield
    except KafkaException as exc:
        raise kafka_failure(what, exc) from exc


def partitions_of(client: Consumer, kafka: KafkaSettings, topic: str) -> list[int]:
    """Partition numbers of ``topic``, sorted.

    Raises:
        OpsError: the topic does not exist. TransientError: no metadata in time.
    """
    with _asking(f"metadata of topic {topic}"):
        md = client.list_topics(topic=topic, timeout=kafka.request_timeout_s)
    tmd = md.topics.get(topic)
    if tmd is None or tmd.error is not None or not tmd.partitions:
        if tmd is not None and tmd.error is not None and tmd.error.retriable():
            raise TransientError(f"metadata of topic {topic}: {tmd.error}")
        raise OpsError(f"topic {topic} does not exist on {kafka.bootstrap_servers}")
    return sorted(tmd.partitions)


def watermarks(
    client: Consumer, kafka: KafkaSettings, topic: str, partitions: Sequence[int]
) -> dict[int, tuple[int, int]]:
    """partition → (low, high) watermark, asked of each partition's leader."""
    out = {}
    with _asking(f"watermarks of {topic}"):
        for p in partitions:
            low, high = client.get_watermark_offsets(
                TopicPartition(topic, p), timeout=kafka.request_timeout_s, cached=False
            )
            out[p] = (int(low), int(high))
    return out


def list_offsets(
    client: Consumer, kafka: KafkaSettings, topic: str, specs: Mapping[int, OffsetSpec]
) -> dict[int, int]:
    """partition → the offset of the first record with timestamp ≥ the spec's, ``-1`` when
    there is none (only ``OffsetSpec.for_timestamp`` specs; Kafka ListOffsets semantics)."""
    if not specs:
        return {}
    # OffsetSpec.for_timestamp(ts) is a TimestampSpec holding ``timestamp``
    asked = [
        TopicPartition(topic, p, int(spec.timestamp))  # type: ignore[attr-defined]
        for p, spec in specs.items()
    ]
    with _asking(f"list_offsets {topic}"):
        got = client.offsets_for_times(asked, timeout=kafka.request_timeout_s)
    for tp in got:
        if tp.error is not None:
            raise TransientError(f"list_offsets {topic}[{tp.partition}]: {tp.error}")
    return {tp.partition: int(tp.offset) for tp in got}


def committed_offsets(
    client: Consumer, kafka: KafkaSettings, group: str, topic: str, partitions: Sequence[int]
) -> dict[int, int | None]:
    """partition → offset committed by ``group`` (the client's own group) on ``topic``, ``None``
    where it has none."""
    with _asking(f"committed offsets of group {group}"):
        got = client.committed(
            [TopicPartition(topic, p) for p in partitions], timeout=kafka.request_timeout_s
        )
    out: dict[int, int | None] = dict.fromkeys(partitions)
    for tp in got:
        if tp.error is not None:
            raise TransientError(f"committed offsets of group {group}: {tp.error}")
        if tp.offset >= 0:
            out[tp.partition] = int(tp.offset)
    return out


def alter_offsets(
    client: Consumer, kafka: KafkaSettings, group: str, topic: str, new: Mapping[int, int]
) -> None:
    """Commit ``new`` (partition → offset) for ``group`` (the client's own group), waiting for
    the broker's answer. librdkafka's synchronous commit takes no timeout: it waits for the
    group's coordinator, each request bounded by ``socket.timeout.ms``; the commit follows reads
    that just succeeded, so it waits only for a broker lost in between.

    Raises:
        OpsError: the broker refused an offset. TransientError: the commit failed retriably.
    """
    if not new:
        return
    with _asking(f"commit offsets of group {group}"):
        done = client.commit(
            offsets=[TopicPartition(topic, p, o) for p, o in new.items()], asynchronous=False
        )
    for tp in done or []:
        if tp.error is not None:
            raise OpsError(f"broker refused the offsets of group {group}: {tp.error}")


def topic_bounds(
    kafka: KafkaSettings, topic: str, client: Consumer | None = None
) -> dict[int, tuple[int, int]]:
    """partition → (low, high) watermark of every partition of ``topic``: what
    :func:`~ferry.core.kafka.admin.scan` reads to see the whole topic. ``client``: a consumer of
    the caller's, else a scan consumer made and closed here.

    Raises:
        OpsError: the topic does not exist. TransientError: no answer in time.
    """
    own = client is None
    client = client if client is not None else scan_consumer(kafka)
    try:
        return watermarks(client, kafka, topic, partitions_of(client, kafka, topic))
    finally:
        if own:
            client.close()


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


def _group_lag(kafka: KafkaSettings, group: str, topics: Sequence[str]) -> list[PartitionLag]:
    """Lag of ``group`` on each partition of ``topics`` (topics that do not exist are skipped),
    asked through one consumer of the group, closed at the end."""
    client = group_client(kafka, group)
    out: list[PartitionLag] = []
    try:
        for topic in topics:
            try:
                parts = partitions_of(client, kafka, topic)
            except OpsError:
                continue
            marks = watermarks(client, kafka, topic, parts)
            committed = committed_offsets(client, kafka, group, topic, parts)
            for p in parts:
                lo, hi = marks[p]
                out.append(PartitionLag(group, topic, p, committed[p], hi, lo))
    finally:
        client.close()
    return out


def consumer_lag(settings: Settings) -> list[PartitionLag]:
    """Lag of every stage group (``<prefix>.<stage>``) on its input topic, per partition.

    Topics that do not exist yet are skipped.

    Raises:
        TransientError: the broker did not answer in time.
    """
    kafka = settings.kafka
    out: list[PartitionLag] = []
    for stage in CONSUMING_STAGES:
        out += _group_lag(kafka, group_id(kafka, stage), [input_topic(settings, stage)])
    return out


def group_lag(settings: Settings, group: str, topics: Sequence[str]) -> int:
    """Records ``group`` has not consumed yet on ``topics`` (sum over partitions of high watermark
    minus committed offset; a partition without a committed offset counts from its low
    watermark). Topics that do not exist yet count 0.

    Raises:
        TransientError: the broker did not answer in time.
    """
    return sum(pl.lag for pl in _group_lag(settings.kafka, group, topics))
