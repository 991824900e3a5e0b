"""The one way Ferry puts events on Kafka: encode them, then produce and wait for the acks.

Every event goes to ``settings.kafka.topic(event.TOPIC)`` (``FileTransformed`` →
``<prefix>.transformed``), keyed by its ``file_id`` (UTF-8), or by a caller's fallback key when it
has none (a ``FileFailed`` about an input that could not be decoded). The stage runner
(:mod:`ferry.core.runtime.runner`), the extract service (:mod:`ferry.stages.extract.service`) and
the
quarantine release (:mod:`ferry.ops.quarantine`) all go through :func:`encode_events` and
:func:`publish`.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import Any

from ferry.core.events import EVENT_TYPES, event_key
from ferry.core.kafka.clients import OutboundRecord, delivery_timeout_s, produce_and_wait
from ferry.core.retry import retrying
from ferry.core.wire.avro import EventCodec
from ferry.errors import SerializationError
from ferry.settings import Settings


def encode_events(
    events: Iterable[Any], settings: Settings, codec: EventCodec, fallback_key: str | None = None
) -> list[OutboundRecord]:
    """One :class:`OutboundRecord` per event, in order: topic ``settings.kafka.topic(ev.TOPIC)``,
    key ``event_key(ev, fallback_key)`` as UTF-8 bytes, value ``codec.encode(ev)``.

    Raises:
        SerializationError: reason ``unencodable``: an item is not an instance of one of
            :data:`ferry.core.events.EVENT_TYPES` (a handler bug), or an event does not match its
            Avro schema.
        ValueError: an event has no ``file_id`` and ``fallback_key`` is ``None``.
    """
    out = []
    for ev in events:
        if type(ev).__dict__.get("SCHEMA") not in EVENT_TYPES:
            raise SerializationError(
                f"handler returned {type(ev).__name__}, not an event", reason="unencodable"
            )
        out.append(
            OutboundRecord(
                settings.kafka.topic(ev.TOPIC),
                event_key(ev, fallback_key).encode(),
                codec.encode(ev),
            )
        )
    return out


def publish(producer: Any, records: Sequence[OutboundRecord], settings: Settings) -> None:
    """Produce ``records`` and return once the broker acknowledged every one, retrying the whole
    set under ``settings.retry`` (:func:`ferry.core.retry.retrying`).

    Each attempt is :func:`ferry.core.kafka.clients.produce_and_wait` with a timeout of
    ``delivery_timeout_s(settings.kafka) + 1`` seconds. A retried attempt may produce a record
    twice; consumers are idempotent on ``file_id``.

    Args:
        producer: a confluent-kafka ``Producer`` (or a fake with ``produce`` and ``flush``).

    Raises:
        TransientError: a record was still unacknowledged or rejected after
            ``settings.retry.max_attempts`` attempts; callers must not store their input offset
            (or move their input file) then.
        ConfigError: the broker's ACLs refuse the user a topic (never retried).
    """
    timeout = delivery_timeout_s(settings.kafka) + 1
    retrying(settings.retry, what="publish")(
        produce_and_wait, producer, records, timeout, settings.kafka.user
    )


__all__ = ["encode_events", "publish"]
