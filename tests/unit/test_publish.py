"""The shared helpers every producer of events uses: ``failed()``, ``encode_events()``,
``publish()`` (no broker: a fake producer)."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

import pytest
from tests.support.factories import manifest

from ferry.core.events import (
    FileExtracted,
    FileFailed,
    FileTransformed,
    failed,
    utc_now,
)
from ferry.core.kafka.clients import OutboundRecord
from ferry.core.kafka.publish import encode_events, publish
from ferry.core.wire.avro import EventCodec
from ferry.errors import SerializationError, TransientError
from ferry.settings import Settings, get_settings
from ferry.settings.retry import RetrySettings

T0 = datetime(2024, 5, 6, 7, 8, 9, 123000, tzinfo=UTC)
SHA = "3c" * 32
MANIFEST = manifest(
    "flights", SHA, at=T0, source_path="flights/b.csv", size_bytes=42, trace_id="a" * 32
)
FILE_ID = MANIFEST.file_id


def settings() -> Settings:
    base = get_settings()
    return base.model_copy(
        update={
            "retry": RetrySettings(max_attempts=3, initial_backoff_s=0.001, max_backoff_s=0.002),
            "kafka": base.kafka.model_copy(update={"topic_prefix": "unit"}),
        }
    )


# -- failed() --------------------------------------------------------------------------------


def test_failed_sets_every_field_it_is_given() -> None:
    fields: dict[str, Any] = {
        "stage": "transform",
        "reason": "hdfs_timeout",
        "error": "unit.extracted[1]@5: HdfsTimeout: read timed out",
        "attempt": 4,
        "manifest": MANIFEST,
        "source_topic": "unit.extracted",
        "source_partition": 1,
        "source_offset": 5,
        "raw_key": b"k",
        "raw_value": b"v",
        "failed_at": T0,
    }
    assert failed(**fields) == FileFailed(**fields)


def test_failed_defaults_attempt_one_no_source_and_failed_at_now() -> None:
    before = utc_now()
    got = failed(stage="extract", reason="empty_blank", error="flights/b.csv: no data rows")
    after = utc_now()
    assert (got.stage, got.reason, got.error, got.attempt) == (
        "extract",
        "empty_blank",
        "flights/b.csv: no data rows",
        1,
    )
    assert (got.manifest, got.source_topic, got.source_partition, got.source_offset) == (
        None,
        None,
        None,
        None,
    )
    assert (got.raw_key, got.raw_value) == (None, None)
    assert before <= got.failed_at <= after
    assert got.failed_at.tzinfo is UTC
    assert got.failed_at.microsecond % 1000 == 0  # milliseconds, what the wire keeps


def test_failed_refuses_an_attempt_below_one() -> None:
    with pytest.raises(ValueError, match="attempt must be >= 1, got 0"):
        failed(stage="load", reason="x", error="y", attempt=0)


# -- encode_events() -------------------------------------------------------------------------


def test_encode_events_routes_by_type_and_keys_by_file_id(codec: EventCodec) -> None:
    extracted, transformed = FileExtracted(MANIFEST), FileTransformed(MANIFEST)
    out = encode_events([extracted, transformed], settings(), codec, "unused")
    assert out == [
        OutboundRecord("unit.extracted", FILE_ID.encode(), codec.encode(extracted)),
        OutboundRecord("unit.transformed", FILE_ID.encode(), codec.encode(transformed)),
    ]


def test_encode_events_keys_an_event_without_file_id_by_the_fallback(codec: EventCodec) -> None:
    raw = failed(stage="transform", reason="undecodable", error="e", failed_at=T0)
    [rec] = encode_events([raw], settings(), codec, "unit.extracted-1-5")
    assert (rec.topic, rec.key) == ("unit.failed", b"unit.extracted-1-5")
    assert codec.decode(rec.value) == raw


def test_encode_events_without_file_id_or_fallback_raises(codec: EventCodec) -> None:
    raw = failed(stage="transform", reason="undecodable", error="e", failed_at=T0)
    with pytest.raises(ValueError, match="FileFailed has no file_id and no fallback key"):
        encode_events([raw], settings(), codec)


def test_encode_events_refuses_what_is_not_an_event(codec: EventCodec) -> None:
    with pytest.raises(SerializationError, match="handler returned dict, not an event") as info:
        encode_events([FileExtracted(MANIFEST), {"x": 1}], settings(), codec, "k")
    assert info.value.reason == "unencodable"


# -- publish() -------------------------------------------------------------------------------


class FlakyProducer:
    """Queues ``produce`` calls; the first ``fail_flushes`` flushes leave one record unacked."""

    def __init__(self, fail_flushes: int = 0) -> None:
        self.fail_flushes = fail_flushes
        self.produced: list[tuple[str, bytes, bytes]] = []
        self.acked: list[tuple[str, bytes, bytes]] = []
        self.flush_timeouts: list[float] = []
        self._pending: list[tuple[str, bytes, bytes]] = []

    def produce(self, topic: str, value: bytes, key: bytes, on_delivery: Any) -> None:
        self.produced.append((topic, key, value))
        self._pending.append((topic, key, value))

    def flush(self, timeout: float) -> int:
        self.flush_timeouts.append(timeout)
        if self.fail_flushes:
            self.fail_flushes -= 1
            self._pending.clear()
            return 1
        self.acked.extend(self._pending)
        self._pending.clear()
        return 0


RECORDS = [
    OutboundRecord("unit.extracted", b"k1", b"v1"),
    OutboundRecord("unit.failed", b"k2", b"v2"),
]


def test_publish_waits_for_the_acks_of_every_record() -> None:
    s = settings()
    producer = FlakyProducer()
    publish(producer, RECORDS, s)
    assert producer.acked == [("unit.extracted", b"k1", b"v1"), ("unit.failed", b"k2", b"v2")]
    assert producer.flush_timeouts == [3 * s.kafka.request_timeout_s + 1]


def test_publish_retries_the_whole_set_until_acknowledged() -> None:
    producer = FlakyProducer(fail_flushes=2)
    publish(producer, RECORDS, settings())
    assert producer.produced == [(r.topic, r.key, r.value) for r in RECORDS] * 3
    assert producer.acked == [(r.topic, r.key, r.value) for r in RECORDS]


def test_publish_raises_after_the_retry_ceiling() -> None:
    producer = FlakyProducer(fail_flushes=99)
    with pytest.raises(TransientError, match=r"1 of 2 record\(s\) to \['unit.extracted', "):
        publish(producer, RECORDS, settings())
    assert len(producer.flush_timeouts) == 3  # settings().retry.max_attempts
    assert producer.acked == []
