"""The stage runner: consume one event, call its handler, produce the outputs, store the offset.

A stage is a table from input event type to a plain handler function (house style rules 1–3)::

    def transform_file(event: FileExtracted, deps: TransformDeps) -> list[Event]:
        ...                                  # idempotent on event.file_id
        return [FileTransformed(event.manifest.advance(uris={"staging": uri}, rows_out=n))]

    STAGE = Stage(name="transform", handlers={FileExtracted: transform_file})
    runner = build_runner(STAGE, deps)       # creates topics and clients; nothing at import
    runner.run()                             # until SIGTERM/SIGINT or runner.stop()

Each output event goes to ``settings.kafka.topic(event.TOPIC)`` keyed by its ``file_id``.

Guarantees (ARCHITECTURE.md "Delivery and idempotency"):

- At-least-once: a record's offset is stored only after all its output events were acknowledged
  by the broker; auto-commit then commits stored offsets only. A crash in between redelivers the
  record, so handlers must be idempotent on ``file_id``.
- Errors: :class:`TransientError` is retried with exponential backoff, full jitter and a ceiling
  (``settings.retry``, via tenacity); after ``max_attempts``, or at once for a
  :class:`PermanentError`, a :class:`FileFailed` goes to ``<prefix>.failed`` with the error's
  ``reason`` and the runner moves on. A record that cannot be decoded (not Avro, unknown schema
  fingerprint) is quarantined the same way with its raw key and value bytes and its
  topic/partition/offset, and is never redelivered after that. Any other exception from a handler
  is quarantined as ``handler_error`` (a bug must not stall the partition); :class:`ConfigError`
  and :class:`StackError` stop the runner.
- Long handlers: the handler runs in a worker thread. If it has not finished after
  ``pause_after_s``, the runner pauses every assigned partition and keeps calling ``poll()``
  (which then returns no records) so the consumer stays in its group however long the handler
  takes; it resumes them when the handler is done.
- Shutdown (SIGTERM/SIGINT or :meth:`StageRunner.stop`): no new record is taken; a running handler
  gets ``settings.kafka.shutdown_grace_s`` to finish (then its outputs are delivered and its offset
  stored) or its record is abandoned without storing its offset; ``close()`` commits the stored
  offsets and leaves the group.
- Rebalance: the runner uses the classic (eager) protocol. If the running record's partition is
  revoked, its outcome is dropped (offset not stored): the partition's new owner processes it.
  Every assigned partition is paused if a handler is running and resumed otherwise, because
  librdkafka keeps the pause flag of a revoked partition when it is assigned again.
"""

from __future__ import annotations

import logging
import signal
import threading
import time
from collections import deque
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from types import FrameType
from typing import Any, cast

from confluent_kafka import KafkaException, TopicPartition

from ferry.core.avro import EventCodec, default_codec
from ferry.core.config import Settings, get_settings
from ferry.core.errors import (
    ConfigError,
    PermanentError,
    SerializationError,
    StackError,
    TransientError,
)
from ferry.core.events import EVENT_TYPES, Event, FileFailed, event_key, utc_now
from ferry.core.kafka import (
    OutboundRecord,
    build_admin,
    build_consumer,
    build_producer,
    delivery_timeout_s,
    group_id,
    produce_and_wait,
)
from ferry.core.retry import retrying
from ferry.core.topics import ensure_topics

log = logging.getLogger(__name__)

#: A handler: (input event, the stage's dependencies) → output events. Must be idempotent.
Handler = Callable[[Any, Any], Sequence[Event]]

#: A batch handler: (input events, deps) → one result per input, in order: that file's output
#: events, or the FerryError that file met (PermanentError → quarantine it; TransientError → retry
#: that file with the next attempt). Raising instead fails the whole batch (retried if transient).
BatchResult = Sequence[Event] | PermanentError | TransientError
BatchHandler = Callable[[Sequence[Any], Any], Sequence[BatchResult]]


@dataclass(frozen=True)
class Stage:
    """A stage: its name (``extract``, ``transform``, …) and its event-type → handler table.

    The stage consumes the topics of its handlers' event types (``cls.TOPIC``), in consumer group
    ``<topic_prefix>.<name>``.
    """

    name: str
    #: :data:`Handler` s, or :data:`BatchHandler` s when :attr:`batching`.
    handlers: Mapping[type[Any], Handler | BatchHandler]
    #: >1 makes this a batching stage: its handlers are :data:`BatchHandler` s, called with up to
    #: ``batch_size`` events collected for at most ``batch_wait_s`` seconds after the first one.
    batch_size: int = 1
    batch_wait_s: float = 0.0

    @property
    def batching(self) -> bool:
        return self.batch_size > 1

    def input_topics(self, settings: Settings) -> list[str]:
        return sorted({settings.kafka.topic(getattr(cls, "TOPIC")) for cls in self.handlers})  # noqa: B009


@dataclass(frozen=True)
class Record:
    """What the runner needs of one consumed Kafka record."""

    topic: str
    partition: int
    offset: int
    key: bytes | None
    value: bytes | None

    @classmethod
    def of(cls, msg: Any) -> Record:
        return cls(msg.topic(), msg.partition(), msg.offset(), msg.key(), msg.value())

    @property
    def where(self) -> str:
        return f"{self.topic}[{self.partition}]@{self.offset}"


class _Abandon(Exception):
    """Shutdown was requested before the next attempt: drop the record, store nothing."""


@dataclass
class RunStats:
    """Counters of one :meth:`StageRunner.run`; read them from any thread."""

    processed: int = 0  #: records whose outputs were delivered and offset stored
    quarantined: int = 0  #: of those, records that produced a FileFailed
    abandoned: int = 0  #: records dropped on shutdown or revocation (offset not stored)
    handler_calls: int = 0  #: handler attempts, retries included
    pauses: int = 0  #: times the partitions were paused for a long handler
    assignments: int = 0  #: on_assign callbacks
    revocations: int = 0  #: on_revoke/on_lost callbacks with at least one partition
    assigned: set[tuple[str, int]] = field(default_factory=set)


def _quarantine(
    stage: str, record: Record, exc: BaseException, reason: str, attempt: int, event: Event | None
) -> FileFailed:
    undecodable = event is None
    return FileFailed(
        stage=stage,
        reason=reason,
        error=f"{record.where}: {type(exc).__name__}: {exc}",
        attempt=attempt,
        failed_at=utc_now(),
        manifest=getattr(event, "manifest", None),
        source_topic=record.topic,
        source_partition=record.partition,
        source_offset=record.offset,
        raw_key=record.key if undecodable else None,
        raw_value=record.value if undecodable else None,
    )


def _decode(record: Record, codec: EventCodec) -> Event:
    """The record's event. Raises SerializationError (reason ``undecodable``/``unknown_schema``)."""
    if record.value is None:
        raise SerializationError("record has no value (tombstone)", reason="undecodable")
    return codec.decode(record.value)


def _handler_for(stage: Stage, event: Event) -> Handler | BatchHandler:
    """The stage's handler for ``event``. Raises PermanentError(reason="unexpected_event")."""
    handler = stage.handlers.get(type(event))
    if handler is None:
        raise PermanentError(
            f"stage {stage.name} has no handler for {type(event).__name__}",
            reason="unexpected_event",
        )
    return handler


def process_record(
    record: Record,
    stage: Stage,
    deps: Any,
    codec: EventCodec,
    settings: Settings,
    should_stop: threading.Event,
    stats: RunStats | None = None,
) -> list[OutboundRecord] | None:
    """Decode a record, run its handler under the retry policy, and encode what to produce.

    Returns:
        the records to produce (outputs, or one FileFailed to ``<prefix>.failed``), or ``None``
        when shutdown was requested before the work finished (store nothing).

    Raises:
        ConfigError, StackError: from the handler; the runner stops.
    """
    stats = stats if stats is not None else RunStats()
    event: Event | None = None
    outputs: Sequence[Event]
    attempts = 0
    try:
        event = _decode(record, codec)
        # A non-batching stage's table holds plain Handlers (see Stage.handlers).
        handler = cast("Handler", _handler_for(stage, event))

        def attempt() -> Sequence[Event]:
            nonlocal attempts
            if should_stop.is_set():
                raise _Abandon
            attempts += 1
            stats.handler_calls += 1
            return handler(event, deps)

        try:
            outputs = retrying(settings.retry, should_stop)(attempt)
        except TransientError as exc:
            if should_stop.is_set():
                return None
            outputs = [_quarantine(stage.name, record, exc, exc.reason, attempts, event)]
        except PermanentError as exc:
            outputs = [_quarantine(stage.name, record, exc, exc.reason, attempts, event)]
        return _encode(outputs, record, codec, settings, stage, event, attempts)
    except _Abandon:
        return None
    except (ConfigError, StackError):
        raise
    except PermanentError as exc:  # undecodable input, or no handler for its type
        reason = exc.reason
        failure: BaseException = exc
    except Exception as exc:  # noqa: BLE001 - a handler bug quarantines this file, not the partition
        log.exception("stage %s: handler failed on %s", stage.name, record.where)
        reason, failure = "handler_error", exc
    attempts = max(attempts, 1)
    quarantined = _quarantine(stage.name, record, failure, reason, attempts, event)
    return _encode([quarantined], record, codec, settings, stage, event, attempts)


def process_batch(
    records: Sequence[Record],
    stage: Stage,
    deps: Any,
    codec: EventCodec,
    settings: Settings,
    should_stop: threading.Event,
    stats: RunStats | None = None,
) -> list[OutboundRecord] | None:
    """Batch counterpart of :func:`process_record`: decode every record, call the stage's batch
    handler once per event type with all of them, retry only the files that met a
    :class:`TransientError` (whole-batch errors retry the whole batch), quarantine the rest.

    Returns the records to produce for the whole batch, or ``None`` on shutdown (store nothing).

    Raises:
        ConfigError, StackError: from the handler; the runner stops.
    """
    stats = stats if stats is not None else RunStats()
    out: list[OutboundRecord] = []
    by_type: dict[type[Any], list[tuple[Record, Event]]] = {}
    for record in records:
        decoded: Event | None = None
        try:
            decoded = _decode(record, codec)
            _handler_for(stage, decoded)
        except PermanentError as exc:
            failed = _quarantine(stage.name, record, exc, exc.reason, 1, decoded)
            out += _encode([failed], record, codec, settings, stage, decoded, 1)
            continue
        by_type.setdefault(type(decoded), []).append((record, decoded))

    for etype, items in by_type.items():
        # A batching stage's table holds BatchHandlers (see Stage.handlers).
        handler = cast(BatchHandler, stage.handlers[etype])
        ran = _run_batch_handler(stage, handler, items, deps, settings, should_stop, stats)
        if ran is None:
            return None
        results, tries = ran
        for i, (record, event) in enumerate(items):
            res = results[i]
            if isinstance(res, BaseException) and not isinstance(
                res, (PermanentError, TransientError)
            ):
                res = PermanentError(
                    f"batch handler returned {type(res).__name__}: {res}", reason="handler_error"
                )
            if isinstance(res, (PermanentError, TransientError)):
                outputs: Sequence[Event] = [
                    _quarantine(stage.name, record, res, res.reason, tries[i], event)
                ]
            else:
                outputs = res
            out += _encode(outputs, record, codec, settings, stage, event, tries[i])
    return out


def _run_batch_handler(
    stage: Stage,
    handler: BatchHandler,
    items: Sequence[tuple[Record, Event]],
    deps: Any,
    settings: Settings,
    should_stop: threading.Event,
    stats: RunStats,
) -> tuple[dict[int, Any], list[int]] | None:
    """Call ``handler`` on ``items`` under the retry policy, re-calling it with only the files
    that met a TransientError. Returns (result per item index, handler calls per item), or
    ``None`` on shutdown."""
    results: dict[int, BatchResult] = {}
    pending = list(range(len(items)))
    tries = [0] * len(items)  #: handler calls each file took part in (its FileFailed.attempt)

    def attempt() -> None:
        nonlocal pending
        if should_stop.is_set():
            raise _Abandon
        for i in pending:
            tries[i] += 1
            results.pop(i, None)  # a per-file error of an earlier attempt is stale now
        stats.handler_calls += 1
        got = list(handler([items[i][1] for i in pending], deps))
        if len(got) != len(pending):
            raise PermanentError(
                f"batch handler of {stage.name} returned {len(got)} results "
                f"for {len(pending)} events",
                reason="handler_error",
            )
        still = []
        for i, res in zip(pending, got, strict=True):
            results[i] = res
            if isinstance(res, TransientError):
                still.append(i)
        pending = still
        if pending:
            raise TransientError(f"{len(pending)} file(s) of the batch failed transiently")

    try:
        retrying(settings.retry, should_stop)(attempt)
    except _Abandon:
        return None
    except TransientError as exc:
        if should_stop.is_set():
            return None
        for i in pending:
            results.setdefault(i, exc)
    except (ConfigError, StackError):
        raise
    except PermanentError as exc:
        for i in range(len(items)):
            if i in pending:
                results[i] = exc
    except Exception as exc:  # noqa: BLE001 - a handler bug quarantines the batch, not the stage
        log.exception("stage %s: batch handler failed", stage.name)
        bug = PermanentError(f"{type(exc).__name__}: {exc}", reason="handler_error")
        for i in pending:
            results[i] = bug
    return results, tries


def _encode(
    outputs: Sequence[Event],
    record: Record,
    codec: EventCodec,
    settings: Settings,
    stage: Stage,
    event: Event | None,
    attempts: int,
) -> list[OutboundRecord]:
    fallback = _fallback_key(record)
    try:
        out = []
        for ev in outputs:
            if type(ev).__dict__.get("SCHEMA") not in EVENT_TYPES:
                raise SerializationError(
                    f"handler returned {type(ev).__name__}, not an event", reason="unencodable"
                )
            out.append(
                OutboundRecord(
                    settings.kafka.topic(ev.TOPIC),
                    event_key(ev, fallback).encode(),
                    codec.encode(ev),
                )
            )
        return out
    except SerializationError as exc:
        failed = _quarantine(stage.name, record, exc, exc.reason, attempts, event)
        return [
            OutboundRecord(
                settings.kafka.topic(failed.TOPIC),
                event_key(failed, fallback).encode(),
                codec.encode(failed),
            )
        ]


def _fallback_key(record: Record) -> str:
    if record.key:
        try:
            return record.key.decode("utf-8")
        except UnicodeDecodeError:
            pass  # not a file_id: fall through to the record's coordinates
    return f"{record.topic}-{record.partition}-{record.offset}"


class StageRunner:
    """Runs one stage's consume → handle → produce → store loop. Build with :func:`build_runner`.

    Args:
        consumer, producer: confluent-kafka clients (or fakes with the same methods).
        pause_after_s: a handler still running after this long gets its partitions paused;
            keep it well below ``max.poll.interval.ms``.
        poll_timeout_s: the longest single ``poll()`` wait, s.
    """

    def __init__(
        self,
        stage: Stage,
        deps: Any,
        *,
        consumer: Any,
        producer: Any,
        codec: EventCodec,
        settings: Settings,
        pause_after_s: float = 1.0,
        poll_timeout_s: float = 0.5,
    ) -> None:
        self.stage = stage
        self.deps = deps
        self.stats = RunStats()
        self._consumer = consumer
        self._producer = producer
        self._codec = codec
        self._settings = settings
        self._pause_after_s = min(pause_after_s, settings.kafka.max_poll_interval_ms / 5000)
        self._poll_timeout_s = poll_timeout_s
        self._stop = threading.Event()
        self._busy = False
        self._current: set[tuple[str, int]] = set()
        self._current_revoked = False
        self._buffer: deque[Any] = deque()

    # -- control -----------------------------------------------------------------------------
    def stop(self) -> None:
        """Ask the loop to finish (thread- and signal-safe); :meth:`run` returns soon after."""
        self._stop.set()

    def run(self, install_signal_handlers: bool = True) -> RunStats:
        """Consume until :meth:`stop` (or SIGTERM/SIGINT when ``install_signal_handlers`` and
        called from the main thread). Closes the consumer (committing stored offsets) on return.

        Raises:
            TransientError: output events could not be delivered after every retry (the input
                offset is not stored; a restart redelivers the record).
            ConfigError, StackError: raised by a handler.
            KafkaException: a fatal consumer error.
        """
        previous = self._install_signals() if install_signal_handlers else {}
        topics = self.stage.input_topics(self._settings)
        self._consumer.subscribe(
            topics, on_assign=self._on_assign, on_revoke=self._on_revoke, on_lost=self._on_revoke
        )
        log.info("stage %s consuming %s", self.stage.name, topics)
        try:
            while not self._stop.is_set():
                msgs = self._next_batch()
                if not msgs:
                    continue
                outbound = self._handle(msgs)
                if outbound is None or self._current_revoked:
                    self.stats.abandoned += len(msgs)
                    continue
                self._deliver(outbound)
                for msg in msgs:
                    self._store_offset(msg)
                self.stats.processed += len(msgs)
                self.stats.quarantined += sum(
                    r.topic == self._settings.kafka.topic("failed") for r in outbound
                )
        finally:
            for signum, handler in previous.items():
                signal.signal(signum, handler)
            self._consumer.close()
            self._producer.flush(self._settings.kafka.request_timeout_s)
        return self.stats

    # -- the loop's steps --------------------------------------------------------------------
    def _next_batch(self) -> list[Any]:
        """One record, or for a batching stage up to ``batch_size`` records gathered for at most
        ``batch_wait_s`` after the first."""
        first = self._next_message()
        if first is None or not self.stage.batching:
            return [] if first is None else [first]
        batch = [first]
        deadline = time.monotonic() + self.stage.batch_wait_s
        while len(batch) < self.stage.batch_size and not self._stop.is_set():
            if time.monotonic() >= deadline:
                break
            msg = self._next_message()
            if msg is not None:
                batch.append(msg)
        return batch

    def _next_message(self) -> Any:
        while self._buffer:
            msg = self._buffer.popleft()
            if (msg.topic(), msg.partition()) in self.stats.assigned:
                return msg
        msg = self._consumer.poll(self._poll_timeout_s)
        if msg is None:
            return None
        err = msg.error()
        if err is not None:
            if err.fatal():
                raise KafkaException(err)
            log.warning("stage %s: consumer error: %s", self.stage.name, err)
            return None
        return msg

    def _handle(self, msgs: list[Any]) -> list[OutboundRecord] | None:
        """Run :func:`process_record` (or :func:`process_batch`) in a worker thread; keep polling
        (paused) while it runs."""
        records = [Record.of(m) for m in msgs]
        record = records[0]
        box: dict[str, Any] = {}
        done = threading.Event()

        def work() -> None:
            try:
                if self.stage.batching:
                    box["result"] = process_batch(
                        records,
                        self.stage,
                        self.deps,
                        self._codec,
                        self._settings,
                        self._stop,
                        self.stats,
                    )
                    return
                box["result"] = process_record(
                    record,
                    self.stage,
                    self.deps,
                    self._codec,
                    self._settings,
                    self._stop,
                    self.stats,
                )
            except BaseException as exc:  # noqa: BLE001 - handed to the loop thread and re-raised
                box["error"] = exc
            finally:
                done.set()

        self._busy, self._current, self._current_revoked = (
            True,
            {(r.topic, r.partition) for r in records},
            False,
        )
        worker = threading.Thread(target=work, name=f"ferry-{self.stage.name}-handler", daemon=True)
        worker.start()
        paused = False
        abandon_at: float | None = None
        try:
            if not done.wait(self._pause_after_s):
                self._pause()
                paused = True
                while not done.is_set():
                    extra = self._consumer.poll(min(self._poll_timeout_s, 0.2))
                    if extra is not None and extra.error() is None:
                        self._buffer.append(extra)  # from a partition assigned meanwhile
                    if self._stop.is_set():
                        abandon_at = (
                            abandon_at or time.monotonic() + self._settings.kafka.shutdown_grace_s
                        )
                        if time.monotonic() >= abandon_at:
                            log.warning(
                                "stage %s: abandoning %s at shutdown", self.stage.name, record.where
                            )
                            return None
        finally:
            self._busy = False
            if paused and not self._stop.is_set():
                self._resume()
        if "error" in box:
            raise box["error"]
        result: list[OutboundRecord] | None = box["result"]
        return result

    def _deliver(self, outbound: list[OutboundRecord]) -> None:
        """Produce and wait for acks, retried by ``settings.retry``; raises TransientError after."""
        timeout = delivery_timeout_s(self._settings.kafka) + 1
        retrying(self._settings.retry)(produce_and_wait, self._producer, outbound, timeout)

    def _store_offset(self, msg: Any) -> None:
        try:
            self._consumer.store_offsets(message=msg)
        except KafkaException as exc:  # partition revoked meanwhile: its new owner redoes it
            self.stats.abandoned += 1
            log.warning(
                "stage %s: offset of %s not stored (%s); it will be redelivered",
                self.stage.name,
                Record.of(msg).where,
                exc,
            )

    # -- partitions --------------------------------------------------------------------------
    def _pause(self) -> None:
        parts = self._consumer.assignment()
        if parts:
            self._consumer.pause(parts)
        self.stats.pauses += 1

    def _resume(self) -> None:
        parts = self._consumer.assignment()
        if parts:
            self._consumer.resume(parts)

    def _on_assign(self, consumer: Any, partitions: list[TopicPartition]) -> None:
        self.stats.assignments += 1
        self.stats.assigned |= {(p.topic, p.partition) for p in partitions}
        log.info(
            "stage %s: partitions assigned: %s (busy: %s)",
            self.stage.name,
            sorted((p.topic, p.partition) for p in partitions),
            self._busy,
        )
        consumer.assign(partitions)
        if not partitions:
            return
        # librdkafka keeps a partition's pause flag across revoke and re-assign (librdkafka issue
        # #1849): a partition paused for a long handler, revoked, and handed back once the
        # handler is done would stay paused for good. Set the flag explicitly on every assign.
        if self._busy:
            consumer.pause(partitions)
        else:
            consumer.resume(partitions)

    def _on_revoke(self, consumer: Any, partitions: list[TopicPartition]) -> None:
        revoked = {(p.topic, p.partition) for p in partitions}
        if revoked:
            self.stats.revocations += 1
        self.stats.assigned -= revoked
        if self._busy and self._current & revoked:
            self._current_revoked = True
        log.info("stage %s: partitions revoked: %s", self.stage.name, sorted(revoked))

    def _install_signals(self) -> dict[int, Any]:
        if threading.current_thread() is not threading.main_thread():
            return {}

        def on_signal(signum: int, frame: FrameType | None) -> None:
            log.info("stage %s: signal %d, stopping", self.stage.name, signum)
            self.stop()

        return {s: signal.signal(s, on_signal) for s in (signal.SIGTERM, signal.SIGINT)}


def build_runner(
    stage: Stage, deps: Any, settings: Settings | None = None, *, client_id: str | None = None
) -> StageRunner:
    """Wire a stage: create the topic plan (idempotent), the consumer, the producer and the codec.

    Raises:
        TransientError: the broker did not answer the topic creation in time.
        ConfigError: bad settings or schemas, or the broker refused a topic.
    """
    settings = settings or get_settings()
    kafka = settings.kafka
    ensure_topics(build_admin(kafka), kafka)
    cid = client_id or f"ferry-{stage.name}"
    return StageRunner(
        stage,
        deps,
        consumer=build_consumer(kafka, group_id(kafka, stage.name), cid),
        producer=build_producer(kafka, cid),
        codec=default_codec(settings.paths.schemas_dir),
        settings=settings,
    )


__all__ = [
    "Handler",
    "Record",
    "RunStats",
    "Stage",
    "StageRunner",
    "build_runner",
    "process_batch",
    "process_record",
]
