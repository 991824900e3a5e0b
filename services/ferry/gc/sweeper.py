"""One retention class's sweep of the gc topic: the records older than the class's retention
that it has not swept yet, read by offset range, each one's due copies removed.

Where a class stands is the committed offset of its consumer group ``<prefix>.gc.<label>``
(``14d``, ``90d``, ``0s``: a new retention value starts a new group, which starts at the oldest
retained record, so shortening a retention applies it to files loaded before). A sweep:

1. finds, per partition, the first record at or after ``now - retention`` (Kafka's ListOffsets
   by timestamp): every record before it is due;
2. reads the records from the committed offset up to there (:func:`ferry.core.kafka.admin.scan`,
   no group membership), removes each one's due copies;
3. commits how far it got (also when it stops early: a cluster that does not answer ends the sweep
   at that record, which the next sweep starts with).

A class whose broker calls failed :data:`RENEW_AFTER` sweeps in a row asks through a new client
(``renew``): in one run of the broker-restart test (a fresh clone's ``make test-shared``,
2026-12-03) a class's consumer kept answering ``_TRANSPORT`` for metadata and
``_UNKNOWN_PARTITION`` for watermarks for three minutes after the broker was back, while a new
client answered at once.

Cost per sweep: a few broker calls per partition (:mod:`ferry.core.kafka.offsets`) plus the
records that became due since the last sweep, and for each of those one listing of the file's
own directory per zone; up to ``retention.parallel_files`` records are swept at once. Nothing
grows with the number of files kept: zones are never listed.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from datetime import timedelta
from itertools import islice
from typing import Any

from confluent_kafka import Consumer, KafkaException
from confluent_kafka.admin import OffsetSpec

from ferry.core.kafka.admin import scan
from ferry.core.kafka.clients import group_id
from ferry.core.kafka.offsets import (
    alter_offsets,
    committed_offsets,
    list_offsets,
    partitions_of,
    watermarks,
)
from ferry.core.wire.avro import EventCodec
from ferry.errors import SerializationError, TransientError
from ferry.gc.metrics import GcMetrics
from ferry.gc.plan import class_label, due_zones
from ferry.gc.remover import Remover
from ferry.settings.kafka import KafkaSettings
from ferry.settings.retention import RetentionSettings

log = logging.getLogger(__name__)


#: Sweeps in a row whose broker calls failed before the class's client is replaced.
RENEW_AFTER = 3

#: The outcome of a record not tried because an earlier record of its file failed (never
#: reached: the earlier one's failure ends the round first, in offset order).
_NOT_TRIED = TransientError("not tried: an earlier record of its file was not swept")


def class_group(kafka: KafkaSettings, klass: timedelta) -> str:
    """The consumer group whose committed offsets say where class ``klass`` stands."""
    return group_id(kafka, f"gc.{class_label(klass)}")


class Sweeper:
    """The sweep of one retention class ``klass`` over ``topic`` (``<prefix>.gc``), reading with
    ``consumer`` (see :func:`ferry.core.kafka.admin.scan`), asking the broker where it stands
    and committing through ``client`` (:mod:`ferry.core.kafka.offsets`: no AdminClient).

    ``renew``: makes a new ``client`` (:func:`ferry.core.kafka.offsets.group_client` of
    :attr:`group`),
    used after :data:`RENEW_AFTER` sweeps in a row failed on the broker; None: never renewed.
    """

    def __init__(
        self,
        klass: timedelta,
        kafka: KafkaSettings,
        retention: RetentionSettings,
        client: Consumer,
        topic: str,
        codec: EventCodec,
        remover: Remover,
        metrics: GcMetrics,
        consumer: Consumer | None = None,
        *,
        renew: Callable[[], Consumer] | None = None,
    ) -> None:
        self.klass = klass
        self.label = class_label(klass)
        self.group = class_group(kafka, klass)
        self.kafka = kafka
        self.retention = retention
        self.topic = topic
        #: asks the broker on behalf of :attr:`group`
        #: (:func:`~ferry.core.kafka.offsets.group_client`)
        self._client = client
        self._codec = codec
        self._remover = remover
        self._metrics = metrics
        #: the reading consumer all classes share (sweeps run one after the other); None: one
        #: made per sweep
        self._consumer = consumer
        self._renew = renew
        #: sweeps in a row whose broker calls failed
        self.broker_failures = 0
        #: clients replaced so far
        self.renewals = 0

    def _ask_broker(self, now_ms: int) -> dict[int, tuple[int, int]]:
        """:meth:`bounds`, counting failed sweeps in a row and renewing the client after
        :data:`RENEW_AFTER` of them."""
        try:
            out = self.bounds(now_ms)
        except TransientError:
            self.broker_failures += 1
            if self._renew is not None and self.broker_failures >= RENEW_AFTER:
                self._renew_client()
            raise
        self.broker_failures = 0
        return out

    def close(self) -> None:
        """Close the class's broker client (not the shared reading consumer)."""
        self._client.close()

    def _renew_client(self) -> None:
        assert self._renew is not None
        log.warning(
            "gc %s: the broker failed %d sweeps in a row; asking through a new client",
            self.label,
            self.broker_failures,
        )
        old, self._client = self._client, self._renew()
        self.broker_failures = 0
        self.renewals += 1
        self._metrics.renewals.labels(self.label).inc()
        try:
            old.close()
        except (KafkaException, RuntimeError) as exc:  # closed already, or the broker is gone
            log.debug("gc %s: closing the old client: %s", self.label, exc)

    def bounds(self, now_ms: int) -> dict[int, tuple[int, int]]:
        """partition → (first record not swept yet, first record not due yet).

        Raises:
            TransientError: the broker did not answer.
        """
        kafka, admin = self.kafka, self._client
        parts = partitions_of(admin, kafka, self.topic)
        marks = watermarks(admin, kafka, self.topic, parts)
        cutoff = now_ms - int(self.klass.total_seconds() * 1000)
        due = list_offsets(
            admin, kafka, self.topic, {p: OffsetSpec.for_timestamp(max(cutoff, 0)) for p in parts}
        )
        committed = committed_offsets(admin, kafka, self.group, self.topic, parts)
        out = {}
        for p in parts:
            low, high = marks[p]
            end = high if due[p] < 0 else min(due[p], high)
            given = committed[p]
            start = low if given is None else given
            if start < low:
                self._metrics.expired_unswept.labels(self.label).inc(low - start)
                log.error(
                    "gc %s: %d record(s) of %s[%d] expired before their sweep (offsets %d..%d): "
                    "their files' copies were left behind (was gc down longer than "
                    "retention.grace?)",
                    self.label,
                    low - start,
                    self.topic,
                    p,
                    start,
                    low,
                )
                start = low
            out[p] = (start, max(start, end))
        return out

    def sweep(self, now_ms: int, stop: threading.Event) -> int:
        """Sweep what is due at ``now_ms``; return the records swept.

        Records are taken in rounds of ``8 × retention.parallel_files``; within a round up to
        ``retention.parallel_files`` records have their copies removed at once (each removal is a
        few NameNode round trips that wait on the network: one at a time, a sweep fell behind
        10,000 files an hour in the long soak, docs/operations.md "Long soak"). A partition's
        progress is the records before its first one not done, so a record is never skipped.

        Raises:
            TransientError: the broker or a cluster stopped answering; what was done is
                committed, the rest is swept next time.
        """
        bounds = self._ask_broker(now_ms)
        done = {p: start for p, (start, _end) in bounds.items()}
        todo = {p: b for p, b in bounds.items() if b[1] > b[0]}
        threads = self.retention.parallel_files
        swept = 0
        try:
            records = scan(self.kafka, self.topic, todo, stop=stop.is_set, consumer=self._consumer)
            with ThreadPoolExecutor(threads, f"ferry-gc-{self.label}") as pool:
                while round_ := list(islice(records, 8 * threads)):
                    for rec, failure in zip(round_, self._round(pool, round_, now_ms), strict=True):
                        if failure is not None:
                            raise failure
                        done[rec.partition] = rec.offset + 1
                        swept += 1
        except KafkaException as exc:
            raise TransientError(f"gc {self.label}: reading {self.topic}: {exc}") from exc
        finally:
            self._commit(done, swept)
        return swept

    def _round(
        self, pool: ThreadPoolExecutor, round_: list[Any], now_ms: int
    ) -> list[TransientError | None]:
        """Sweep ``round_``: the records of one file (one key: the gc topic is keyed by file id,
        so they share a partition) one after the other in offset order, different files at once.
        Order matters: a ``FileFailed`` keeps its copies when the file ran again since, which it
        can tell only before the later ``FileLoaded``'s sweep removes them. Returns each record's
        TransientError or None; a record after a failed one of its file is not tried."""
        lanes: dict[Any, list[int]] = {}
        for i, rec in enumerate(round_):
            key = rec.key if rec.key is not None else (rec.partition, rec.offset)
            lanes.setdefault(key, []).append(i)
        outcomes: list[TransientError | None] = [_NOT_TRIED] * len(round_)

        def lane(indexes: list[int]) -> None:
            for i in indexes:
                outcomes[i] = self._sweep_one(round_[i], now_ms)
                if outcomes[i] is not None:
                    return

        list(pool.map(lane, lanes.values()))
        return outcomes

    def _sweep_one(self, rec: Any, now_ms: int) -> TransientError | None:
        """Sweep one scanned record; its TransientError is returned (the caller stops at it in
        offset order), any other failure logged, counted and the record skipped."""
        where = f"{rec.partition}@{rec.offset}"
        try:
            self._sweep_record(rec.value, rec.timestamp_ms, now_ms, where)
        except TransientError as exc:
            return exc
        except Exception:  # noqa: BLE001 - a bug skips its record, never stops the sweep
            log.exception("gc %s: %s[%s] failed; skipped", self.label, self.topic, where)
            self._metrics.errors.labels("record").inc()
        return None

    def _sweep_record(self, value: bytes | None, event_ms: int, now_ms: int, where: str) -> None:
        try:
            event = self._codec.decode(value or b"")
        except SerializationError as exc:
            log.warning("gc %s: %s[%s] skipped: %s", self.label, self.topic, where, exc)
            return
        zones = due_zones(event, self.retention, self.klass)
        if zones:
            self._remover.remove(event, zones, event_ms, now_ms, self.label)
        self._metrics.records.labels(self.label).inc()

    def _commit(self, done: dict[int, int], swept: int) -> None:
        """Commit ``done`` (also unchanged offsets: a group that commits nothing for
        ``offsets.retention.minutes`` would lose its place)."""
        try:
            alter_offsets(self._client, self.kafka, self.group, self.topic, done)
        except Exception:
            log.warning("gc %s: progress (%d record(s)) not committed", self.label, swept)
            raise


__all__ = ["Sweeper"]
