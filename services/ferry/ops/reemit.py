"""Replay one file while its stage runs: re-emit the file's input event.

``ferry replay <stage> --file ID`` finds the file's LATEST event on the stage's input topic (a
topic is keyed by ``file_id``, so all of a file's events sit in one partition), decodes it with the
schema it was written with, and produces it again — re-encoded with the current schema — to the
same topic, keyed by the same ``file_id``. The running stage consumes it like any new event; since
every stage is idempotent on ``file_id`` (docs/architecture.md, "Delivery and idempotency"), the
file's outputs are rebuilt and nothing that was right changes. No offset moves, so no outage is
needed; moving a consumer group's offsets stays the tool for bulk replays
(:mod:`ferry.ops.replay`).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from ferry.core.kafka.admin import input_topic, scan
from ferry.core.kafka.offsets import topic_bounds
from ferry.core.kafka.publish import encode_events, publish
from ferry.core.wire.avro import EventCodec
from ferry.errors import SerializationError
from ferry.settings import Settings


@dataclass(frozen=True)
class FoundEvent:
    """A file's latest decodable event on a topic, and where it was read."""

    file_id: str
    topic: str
    partition: int
    offset: int
    event: Any

    @property
    def where(self) -> str:
        return f"{self.topic}[{self.partition}]@{self.offset}"


@dataclass(frozen=True)
class ReemitPlan:
    """What :func:`reemit` will produce: one event per file found; ``missing`` file ids have no
    decodable event on ``topic``."""

    stage: str
    topic: str
    found: tuple[FoundEvent, ...]
    missing: tuple[str, ...]


def find_latest_events(
    settings: Settings, stage: str, file_ids: Sequence[str], codec: EventCodec
) -> ReemitPlan:
    """Scan ``stage``'s input topic (every retained record) for each file's latest event.

    Records whose key is not a wanted file id are skipped without decoding; a wanted record that
    cannot be decoded (not Avro, unknown schema) is passed over, so an older good event is used.

    Raises:
        ConfigError: unknown stage or ``extract`` (it has no input topic).
        OpsError: the input topic does not exist.
        TransientError: the broker did not answer, or stopped delivering before the end.
    """
    kafka = settings.kafka
    topic = input_topic(settings, stage)
    marks = topic_bounds(kafka, topic)
    wanted = set(file_ids)
    latest: dict[str, FoundEvent] = {}
    for rec in scan(kafka, topic, marks):
        try:
            fid = rec.key.decode("utf-8") if rec.key else None
        except UnicodeDecodeError:
            continue
        if fid not in wanted or rec.value is None:
            continue
        try:
            event = codec.decode(rec.value)
        except SerializationError:
            continue
        latest[fid] = FoundEvent(fid, topic, rec.partition, rec.offset, event)
    found = tuple(latest[f] for f in dict.fromkeys(file_ids) if f in latest)
    missing = tuple(f for f in dict.fromkeys(file_ids) if f not in latest)
    return ReemitPlan(stage, topic, found, missing)


def reemit(producer: Any, settings: Settings, codec: EventCodec, plan: ReemitPlan) -> int:
    """Produce each found event again (current schema, same key) and wait for the acks.

    Returns:
        the number of events produced.

    Raises:
        TransientError: not acknowledged after the retry policy's attempts.
    """
    records = encode_events([f.event for f in plan.found], settings, codec)
    if records:
        publish(producer, records, settings)
    return len(records)


__all__ = ["FoundEvent", "ReemitPlan", "find_latest_events", "reemit"]
