"""The waiting room: where a file waits while its dataset's definition is invalid.

A batching stage (transform, load) that meets a file whose dataset has no valid definition now
(the handler's result is :class:`~ferry.errors.DatasetNotReady`) neither retries nor
quarantines it: :func:`ferry.core.runtime.processing.process_batch` *parks* its input record,
byte for byte, on ``<prefix>.waiting`` (keyed by ``file_id``; a compacted topic, so a file may wait
longer than any retention) and the stage goes on with the other files. Its offset is stored as
usual: the parked copy is the durable one.

:meth:`WaitingRoom.release` puts every parked record of this stage whose dataset is ready again
back on the stage's input topic (same key, same bytes), then writes an empty value under its key
(the file left the room; compaction keeps only that). The stage runs it from its idle loop
(:meth:`WaitingRoom.tick`): at start, whenever a reload made a dataset valid, and every
``recheck_s`` seconds (a file parked just as its definition was fixed is released by the next
recheck). Releasing twice (two instances, a crash between the two writes) only makes the
stage see the file twice, which every stage is idempotent for.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from typing import Any

from ferry.core.kafka.admin import input_topic, scan
from ferry.core.kafka.clients import OutboundRecord, build_admin, build_producer
from ferry.core.kafka.offsets import topic_bounds
from ferry.core.kafka.publish import publish
from ferry.core.kafka.topics import ensure_topics
from ferry.core.wire.avro import EventCodec
from ferry.errors import FerryError, SerializationError
from ferry.settings import Settings

log = logging.getLogger(__name__)

#: Short name of the topic (full name ``settings.kafka.topic(WAITING)``).
WAITING = "waiting"


def parked(settings: Settings, key: bytes, value: bytes | None) -> OutboundRecord:
    """The record that parks an input record (``key``, ``value``) in the waiting room."""
    return OutboundRecord(settings.kafka.topic(WAITING), key, value or b"")


class WaitingRoom:
    """Releases one stage's parked files when their dataset is ready (see the module docstring).

    Args:
        stage: ``transform`` or ``load``; only parked records of its input event type are its.
        refresh_s: least seconds between two :meth:`tick` calls that do anything.
        recheck_s: a release runs at least this often (s).
    """

    def __init__(
        self,
        settings: Settings,
        stage: str,
        codec: EventCodec,
        *,
        refresh_s: float = 2.0,
        recheck_s: float = 30.0,
        producer: Any = None,
        admin: Any = None,
    ) -> None:
        self.settings = settings
        self.stage = stage
        self.codec = codec
        self.refresh_s = refresh_s
        self.recheck_s = recheck_s
        self.topic = settings.kafka.topic(WAITING)
        self.input = input_topic(settings, stage)
        self._admin = admin or build_admin(settings.kafka)
        self._producer = producer or build_producer(settings.kafka, f"ferry-{stage}-waiting")
        ensure_topics(self._admin, settings.kafka, (WAITING,), retry=settings.retry)
        self._last_tick = self._last_release = float("-inf")
        self.released = 0

    def tick(self, refresh: Callable[[], bool], ready: Callable[[str], bool]) -> int:
        """Called from the stage's idle loop: every ``refresh_s`` s, ``refresh()`` (reload the
        definitions; true when a dataset became ready) and, when that said so or
        ``recheck_s`` passed, :meth:`release`. Never raises a Kafka error (logged; next tick)."""
        now = time.monotonic()
        if now - self._last_tick < self.refresh_s:
            return 0
        self._last_tick = now
        try:
            due = refresh() or now - self._last_release >= self.recheck_s
            if not due:
                return 0
            self._last_release = now
            return self.release(ready)
        except FerryError as exc:
            log.warning("stage %s: waiting files not released now: %s", self.stage, exc)
        except Exception:  # noqa: BLE001 - the stage's loop must go on (Stage.tick)
            log.exception("stage %s: reloading definitions or releasing files failed", self.stage)
        return 0

    def release(self, ready: Callable[[str], bool]) -> int:
        """Put this stage's parked files whose dataset is ``ready(name)`` back on its input
        topic; returns how many.

        Raises:
            TransientError: the broker did not answer (nothing is lost: the room is unchanged
                or a file is released twice).
        """
        kafka = self.settings.kafka
        marks = topic_bounds(kafka, self.topic)
        latest: dict[bytes, bytes] = {}
        for rec in scan(kafka, self.topic, marks):
            if rec.key is not None:
                latest[rec.key] = rec.value or b""
        back: list[OutboundRecord] = []
        datasets: set[str] = set()
        for key, value in latest.items():
            if not value:
                continue  # released already
            try:
                event = self.codec.decode(value)
            except SerializationError:
                continue
            manifest = getattr(event, "manifest", None)
            if kafka.topic(event.TOPIC) != self.input or manifest is None:
                continue  # another stage's
            dataset = manifest.dataset
            if ready(dataset):
                back.append(OutboundRecord(self.input, key, value))
                datasets.add(dataset)
        if not back:
            return 0
        publish(self._producer, back, self.settings)
        publish(self._producer, [parked(self.settings, r.key, None) for r in back], self.settings)
        self.released += len(back)
        log.info(
            "stage %s: released %d waiting file(s) of %s: their definitions are valid now",
            self.stage,
            len(back),
            ", ".join(sorted(datasets)),
        )
        return len(back)


__all__ = ["WAITING", "WaitingRoom", "parked"]
