"""The gc service's Kafka side on the real broker: its topic and retention, the copy of the
outcome topics (keys, values and the events' timestamps kept), and a retention class's sweep by
offset range (ListOffsets by timestamp, offsets committed for a group with no member)."""

from __future__ import annotations

import threading
import time
from datetime import timedelta
from typing import Any

import pytest
from confluent_kafka import Producer
from confluent_kafka.admin import ConfigResource
from tests.support.factories import numbered

from ferry.core.events import FileLoaded, failed
from ferry.core.kafka.admin import scan, scan_consumer
from ferry.core.kafka.clients import build_admin
from ferry.core.kafka.offsets import committed_offsets, group_client, topic_bounds
from ferry.core.kafka.topics import ensure_topics
from ferry.core.wire.avro import EventCodec, default_codec
from ferry.gc.copier import Copier, ensure_gc_topic
from ferry.gc.metrics import GcMetrics
from ferry.gc.sweeper import Sweeper, class_group
from ferry.settings import Settings
from ferry.settings.retention import RetentionSettings

pytestmark = [pytest.mark.integration, pytest.mark.stack("kafka")]

DAY_MS = 86_400_000


@pytest.fixture
def codec(stack: Settings) -> EventCodec:
    return default_codec(stack.paths.schemas_dir)


@pytest.fixture
def ks(stack: Settings, unique: Any) -> Settings:
    base = unique.settings(stack)
    return base.model_copy(update={"kafka": base.kafka.model_copy(update={"partitions": 2})})


def _retention_ms(admin: Any, topic: str) -> int:
    res = ConfigResource(ConfigResource.Type.TOPIC, topic)
    return int(admin.describe_configs([res])[res].result(timeout=10)["retention.ms"].value)


def test_the_gc_topic_keeps_what_the_longest_retention_needs_and_is_never_lowered(ks: Settings):
    admin = build_admin(ks.kafka)
    topic = ensure_gc_topic(admin, ks.kafka, 5 * DAY_MS)
    assert topic == f"{ks.kafka.topic_prefix}.gc"
    assert _retention_ms(admin, topic) == 5 * DAY_MS
    ensure_gc_topic(admin, ks.kafka, 97 * DAY_MS)
    assert _retention_ms(admin, topic) == 97 * DAY_MS
    ensure_gc_topic(admin, ks.kafka, 3 * DAY_MS)
    assert _retention_ms(admin, topic) == 97 * DAY_MS


def _produce(ks: Settings, topic: str, records: list[tuple[bytes, bytes, int]]) -> None:
    """Produce with the given timestamps (ms; the broker refuses ones far in the future)."""
    producer = Producer({"bootstrap.servers": ks.kafka.bootstrap_servers})
    errors: list[Any] = []
    for key, value, ts in records:
        producer.produce(
            ks.kafka.topic(topic),
            key=key,
            value=value,
            timestamp=ts,
            on_delivery=lambda err, _msg: errors.append(err) if err else None,
        )
    assert producer.flush(10) == 0
    assert errors == []


def test_outcomes_are_copied_with_their_keys_and_times_once(ks: Settings, codec: EventCodec):
    admin = build_admin(ks.kafka)
    ensure_topics(admin, ks.kafka)
    # Kept 7 days: records 3 days and 1 day old stay (with 1 day, the broker's retention check,
    # every 5 minutes, could delete them between the copy and the scan).
    topic = ensure_gc_topic(admin, ks.kafka, 7 * DAY_MS)
    now = int(time.time() * 1000)
    m1, m2 = numbered("flights", 1), numbered("weather", 2)
    loaded = [(m1.file_id.encode(), codec.encode(FileLoaded(m1, table="t")), now - 3 * DAY_MS)]
    failure = failed(stage="load", reason="x", error="y", manifest=m2)
    _produce(ks, "loaded", loaded)
    _produce(ks, "failed", [(m2.file_id.encode(), codec.encode(failure), now - DAY_MS)])
    copier = Copier(ks.kafka, topic)
    try:
        stop = threading.Event()
        deadline = time.monotonic() + 30
        copied = 0
        while copied < 2 and time.monotonic() < deadline:
            copied += copier.pump(2.0, stop)
        assert copied == 2
        assert copier.pump(1.0, stop) == 0  # committed: nothing twice
    finally:
        copier.close()
    got = {(r.key, r.timestamp_ms) for r in scan(ks.kafka, topic, topic_bounds(ks.kafka, topic))}
    assert got == {(m1.file_id.encode(), now - 3 * DAY_MS), (m2.file_id.encode(), now - DAY_MS)}


class _Remover:
    def __init__(self) -> None:
        self.removed: list[tuple[str, list[str], int]] = []
        self.metrics = GcMetrics()

    def remove(self, event: Any, zones: list[str], event_ms: int, now_ms: int, label: str) -> Any:
        self.removed.append((event.file_id, zones, event_ms))
        return []


def test_a_class_sweeps_the_records_older_than_its_retention_once(ks: Settings, codec: EventCodec):
    admin = build_admin(ks.kafka)
    topic = ensure_gc_topic(admin, ks.kafka, 30 * DAY_MS)
    now = int(time.time() * 1000)
    files = [numbered("flights", n, uris={"landing": "hdfs://b/l"}) for n in range(4)]
    ages = [20, 15, 13, 1]  # days since each file's load
    _produce(
        ks,
        "gc",
        [
            (m.file_id.encode(), codec.encode(FileLoaded(m, table="t")), now - age * DAY_MS)
            for m, age in zip(files, ages, strict=True)
        ],
    )
    retention = RetentionSettings(landing="14d")
    remover = _Remover()
    klass = timedelta(days=14)
    sweeper = Sweeper(
        klass,
        ks.kafka,
        retention,
        group_client(ks.kafka, class_group(ks.kafka, klass)),
        topic,
        codec,
        remover,  # type: ignore[arg-type]
        remover.metrics,
        scan_consumer(ks.kafka),  # one reader for every sweep, as the gc service has
    )
    stop = threading.Event()
    assert sweeper.sweep(now, stop) == 2
    assert sorted(r[0] for r in remover.removed) == sorted(m.file_id for m in files[:2])
    assert all(zones == ["landing"] for _fid, zones, _ms in remover.removed)
    assert sweeper.sweep(now, stop) == 0  # committed: never twice
    client = group_client(ks.kafka, sweeper.group)
    committed = committed_offsets(client, ks.kafka, sweeper.group, topic, [0, 1])
    client.close()
    assert sum(v or 0 for v in committed.values()) == 2
    assert sweeper.sweep(now + 2 * DAY_MS, stop) == 1  # the 13-day-old one is 15 days old now
    assert remover.removed[-1][0] == files[2].file_id
    # The reader is reused sweep after sweep (records due in both partitions, then one, then none).
    more = [numbered("flights", n, uris={"landing": "hdfs://b/l"}) for n in range(10, 16)]
    _produce(
        ks,
        "gc",
        [
            (m.file_id.encode(), codec.encode(FileLoaded(m, table="t")), now - DAY_MS // 2 + i)
            for i, m in enumerate(more)
        ],
    )
    # The cutoff (sweep time - 14 days) passes files[3] (1 day old) first, then more[i] at + i + 1.
    later = now + 14 * DAY_MS - DAY_MS // 2
    assert [sweeper.sweep(later + k, stop) for k in (0, 2, 4, 6, 100)] == [1, 2, 2, 2, 0]
    assert sorted(r[0] for r in remover.removed) == sorted(m.file_id for m in files + more)
