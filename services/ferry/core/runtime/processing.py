"""What a stage does with consumed records: decode, call its handler under the retry policy, and
encode what to produce. One path for every stage: a record is a batch of one.

A stage is a table from input event type to a handler::

    def transform_file(event: FileExtracted, deps: TransformDeps) -> list[Event]:
        ...                                  # idempotent on event.file_id
        return [FileTransformed(event.manifest.advance(uris={"staging": uri}, rows_out=n))]

    STAGE = Stage(name="transform", handlers={FileExtracted: transform_file})

A non-batching stage's handlers are plain :data:`Handler` s; :meth:`Stage.batch_handler` adapts
each into a :data:`BatchHandler` that calls it once per event and turns that event's
:class:`TransientError` or :class:`PermanentError` into its result, so :func:`process_batch`
serves both kinds of stage.

Errors, per file (a file is one input record):

- :class:`TransientError` is retried under ``settings.retry`` (:func:`ferry.core.retry.retrying`),
  re-calling the handler with only the files that met one; after ``max_attempts``, or at once for
  a :class:`PermanentError`, the file gets a :class:`FileFailed` on ``<prefix>.failed`` with the
  error's ``reason`` and ``attempt`` = how many handler calls it took part in.
- A record that cannot be decoded (not Avro, unknown schema fingerprint, truncated, a tombstone:
  a stranger's bytes, cases C05 and C24), or whose event type has no handler
  (``unexpected_event``), is quarantined at once with attempt 1 and the stage goes on with the
  next record (its offset is stored once the FileFailed is acknowledged); an undecodable one
  carries its raw key and value bytes and is keyed by its coordinates (:func:`fallback_key`).
  Every FileFailed carries the record's topic, partition and offset.
- Any other exception from a handler is quarantined as ``handler_error`` (a bug must not stall the
  partition); a :class:`ConfigError` is raised (the runner stops).
- An output that is not an event, or does not match its schema, quarantines the file as
  ``unencodable``.
- :class:`DatasetNotReady` (the file's dataset has no valid definition now) neither retries nor
  quarantines: the input record is parked in the waiting room (:mod:`ferry.core.runtime.waiting`).
- :class:`ClusterCondition` (a quota exceeded, safe mode, no space: the cluster's, not the
  file's; case C22), and a cluster out of reach (an :class:`~ferry.errors.HdfsUnavailable`,
  :class:`~ferry.errors.DataNodeUnreachable` or :class:`~ferry.errors.SparkUnavailable`, made a
  condition of its own reason by :func:`~ferry.errors.outage_condition`: issue 47's nemesis)
  hold the file: it is retried
  whatever ``max_attempts`` says, with backoffs of at most ``retry.condition_backoff_s``, until
  it goes on or ``retry.condition_window_s`` passed since the batch's first attempt (then it is
  quarantined with the condition's reason). Its input offset is not stored meanwhile (the runner
  keeps polling, paused), and the condition is on the stage's board
  (:mod:`ferry.core.runtime.conditions`: ``ferry ps``, ``ferry status``, the tracker's gauges)
  while it holds a file.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Sequence
from dataclasses import replace
from typing import Any, cast

from ferry.core.events import Event, FileFailed, failed
from ferry.core.kafka.clients import OutboundRecord
from ferry.core.kafka.publish import encode_events
from ferry.core.retry import retrying
from ferry.core.runtime.conditions import conditions_path
from ferry.core.runtime.observe import FileObserver, Settled, notify
from ferry.core.runtime.stage import (
    BatchHandler,
    BatchResult,
    HandlerBug,
    Record,
    RunStats,
    Stage,
    settle,
)
from ferry.core.runtime.waiting import parked
from ferry.core.wire.avro import EventCodec
from ferry.errors import (
    OUTAGES,
    ClusterCondition,
    DatasetNotReady,
    PermanentError,
    SerializationError,
    TransientError,
    outage_condition,
)
from ferry.settings import Settings

log = logging.getLogger(__name__)


class _Abandon(Exception):
    """Shutdown was requested before the next attempt: drop the records, store nothing."""


def process_batch(
    records: Sequence[Record],
    stage: Stage,
    deps: Any,
    codec: EventCodec,
    settings: Settings,
    should_stop: threading.Event,
    stats: RunStats | None = None,
    observer: FileObserver | None = None,
    settled: list[Settled] | None = None,
) -> list[OutboundRecord] | None:
    """Decode every record, call the stage's handler once per event type with all of them (a
    non-batching stage's records come one at a time), retry only the files that met a
    :class:`TransientError` (whole-batch errors retry the whole batch), quarantine the rest.

    ``observer.started`` is told of each decoded input before its handler runs; ``settled``, when
    given, receives one :class:`~ferry.core.runtime.observe.Settled` per record (what the
    records returned publish for it), for the runner to report once they are delivered.

    Returns:
        the records to produce, in input order per event type (a quarantined undecodable record's
        FileFailed first): each file's outputs, or its one FileFailed to ``<prefix>.failed``,
        each with ``source`` = its input record's (topic, partition);
        ``None`` when shutdown was requested before the work finished (store nothing).

    Raises:
        ConfigError: from the handler; the runner stops.
    """
    stats = stats if stats is not None else RunStats()
    out: list[OutboundRecord] = []
    by_type: dict[type[Any], list[tuple[Record, Event]]] = {}
    for record in records:
        decoded: Event | None = None
        try:
            decoded = _decode(record, codec)
            if type(decoded) not in stage.handlers:
                raise PermanentError(
                    f"stage {stage.name} has no handler for {type(decoded).__name__}",
                    reason="unexpected_event",
                )
        except PermanentError as exc:
            out += _encode(stage, record, decoded, exc, 1, codec, settings, settled)
            continue
        by_type.setdefault(type(decoded), []).append((record, decoded))
        if observer is not None:
            notify("started", observer.started, stage.name, record, decoded)

    for etype, items in by_type.items():
        handler = stage.batch_handler(etype)
        events = [event for _, event in items]
        started = time.monotonic()
        ran = _call(stage, handler, events, deps, settings, should_stop, stats)
        if ran is None:
            return None
        results, tries = ran
        seconds = time.monotonic() - started
        for (record, event), result, attempt in zip(items, results, tries, strict=True):
            out += _encode(stage, record, event, result, attempt, codec, settings, settled)
            if not isinstance(result, BaseException):
                _log_done(stage.name, result, seconds, len(items))
    return out


def _log_done(stage: str, outputs: Sequence[Event], seconds: float, batch: int) -> None:
    """One INFO line per file a stage carried on: file id, dataset, output event, rows, seconds
    (of the handler call, shared by the ``batch`` files it took)."""
    for ev in outputs:
        m = getattr(ev, "manifest", None)
        if m is None or isinstance(ev, FileFailed):
            continue
        log.info(
            "stage %s: %s %s (%s) rows in/out/rejected %s/%s/%s in %.2fs (batch of %d)",
            stage,
            type(ev).__name__,
            m.file_id,
            m.dataset,
            m.rows_in,
            m.rows_out,
            m.rows_rejected,
            seconds,
            batch,
        )


def _decode(record: Record, codec: EventCodec) -> Event:
    """The record's event. Raises SerializationError (reason ``undecodable``/``unknown_schema``)."""
    if record.value is None:
        raise SerializationError("record has no value (tombstone)", reason="undecodable")
    return codec.decode(record.value)


def _call(
    stage: Stage,
    handler: BatchHandler,
    events: Sequence[Event],
    deps: Any,
    settings: Settings,
    should_stop: threading.Event,
    stats: RunStats,
) -> tuple[list[BatchResult], list[int]] | None:
    """Call ``handler`` on ``events`` under the retry policy, re-calling it with only the files
    that met a TransientError. Returns (result per event, handler calls per event), or ``None``
    on shutdown."""
    results: dict[int, BatchResult] = {}
    pending = list(range(len(events)))
    tries = [0] * len(events)  #: handler calls each file took part in (its FileFailed.attempt)
    held_at = [0] * len(events)  #: its last call a condition held: max_attempts count after it
    policy = settings.retry
    board = stats.board(stage.name, lambda: conditions_path(settings, stage.name))
    holders = [(id(events), i) for i in range(len(events))]  #: this call's files on the board
    started = time.monotonic()

    def goes_on(i: int) -> bool:
        """File ``i`` met a TransientError and is retried: below its ceiling (a condition's
        window, else max_attempts since its last hold and min_window_s)."""
        res, elapsed = results[i], time.monotonic() - started
        if isinstance(res, ClusterCondition):
            held_at[i] = tries[i]
            return elapsed < policy.condition_window_s
        if not isinstance(res, TransientError):
            return False
        return tries[i] - held_at[i] < policy.max_attempts or elapsed < policy.min_window_s

    def attempt() -> None:
        nonlocal pending
        if should_stop.is_set():
            raise _Abandon
        for i in pending:
            tries[i] += 1
            results.pop(i, None)  # a per-file error of an earlier attempt is stale now
        stats.count("handler_calls")  # from the worker threads of both batches
        try:
            got = list(handler([events[i] for i in pending], deps))
        except OUTAGES as exc:  # the whole batch's: held file by file, as below
            got = [exc] * len(pending)
        if len(got) != len(pending):
            raise PermanentError(
                f"batch handler of {stage.name} returned {len(got)} results "
                f"for {len(pending)} events",
                reason="handler_error",
            )
        for i, res in zip(pending, got, strict=True):
            results[i] = outage_condition(res) if isinstance(res, BaseException) else res
        pending = [i for i in pending if goes_on(i)]
        held = {i for i in pending if isinstance(results[i], ClusterCondition)}
        board.release(*(holders[i] for i in range(len(events)) if i not in held))
        for i in sorted(held):
            board.hold(cast(ClusterCondition, results[i]), holders[i])
        if not pending:
            return
        first = results[pending[0]]
        message = f"{len(pending)} file(s) of the batch failed transiently, the first with: {first}"
        if len(held) == len(pending):  # only conditions: the retry policy holds them
            c = cast(ClusterCondition, first)
            raise ClusterCondition(message, reason=c.reason, cluster=c.cluster, where=c.where)
        raise TransientError(message)

    try:
        retrying(policy, should_stop, what=f"stage {stage.name}", conditions="hold")(attempt)
    except _Abandon:
        return None
    except Exception as exc:  # noqa: BLE001 - settle: a bug quarantines the batch, not the stage
        verdict = settle(exc)  # raises a ConfigError
        if isinstance(verdict, TransientError):
            if should_stop.is_set():
                return None
            for i in pending:
                results.setdefault(i, verdict)
        else:  # PermanentError (HandlerBug: a bug) or DatasetNotReady (the file waits)
            if isinstance(verdict, HandlerBug):
                log.exception("stage %s: batch handler failed", stage.name)
            for i in pending:
                results[i] = verdict
    finally:
        board.release(*holders)
    return [results[i] for i in range(len(events))], tries


def _encode(
    stage: Stage,
    record: Record,
    event: Event | None,
    result: BatchResult | BaseException,
    attempt: int,
    codec: EventCodec,
    settings: Settings,
    settled: list[Settled] | None = None,
) -> list[OutboundRecord]:
    """The records to produce for one file: its outputs, or a FileFailed when ``result`` is an
    error or the outputs cannot be encoded (``unencodable``); what they carry is appended to
    ``settled``."""
    fallback = fallback_key(record)
    source = (record.topic, record.partition)
    outputs: Sequence[Any]
    if isinstance(result, DatasetNotReady):
        log.info("stage %s: %s waits (not quarantined): %s", stage.name, record.where, result)
        key = getattr(event, "file_id", None) or fallback
        return [replace(parked(settings, key.encode(), record.value), source=source)]
    if isinstance(result, BaseException):
        if isinstance(result, HandlerBug):
            log.error(
                "stage %s: handler failed on %s",
                stage.name,
                record.where,
                exc_info=result.original,
            )
        elif not isinstance(result, (PermanentError, TransientError)):
            result = PermanentError(
                f"batch handler returned {type(result).__name__}: {result}",
                reason="handler_error",
            )
        outputs = [quarantine(stage.name, record, result, attempt, event)]
    else:
        outputs = result
    try:
        encoded = encode_events(outputs, settings, codec, fallback)
    except SerializationError as exc:
        outputs = [quarantine(stage.name, record, exc, attempt, event)]
        encoded = encode_events(outputs, settings, codec, fallback)
    if settled is not None:
        settled.append(Settled(record, event, tuple(outputs)))
    return [replace(r, source=source) for r in encoded]


def quarantine(
    stage: str,
    record: Record,
    exc: PermanentError | TransientError,
    attempt: int,
    event: Event | None,
) -> FileFailed:
    """The FileFailed of ``record`` for ``exc`` (its ``reason``), after ``attempt`` attempts.

    ``error`` is ``<topic>[<partition>]@<offset>: <exception type>: <message>`` (for a
    :class:`HandlerBug`, the original exception's type and message). ``event`` is the decoded
    input, ``None`` when it could not be decoded: then (and for a decoded event without a
    manifest, e.g. a ``FileDismissed`` on a stage's topic) the FileFailed has no manifest and
    holds the record's raw key and value bytes, their only copy once the topic's retention ends.
    """
    shown: BaseException = exc.original if isinstance(exc, HandlerBug) else exc
    manifest = getattr(event, "manifest", None)
    undecodable = manifest is None
    return failed(
        stage=stage,
        reason=exc.reason,
        error=f"{record.where}: {type(shown).__name__}: {shown}",
        attempt=attempt,
        manifest=manifest,
        source_topic=record.topic,
        source_partition=record.partition,
        source_offset=record.offset,
        raw_key=record.key if undecodable else None,
        raw_value=record.value if undecodable else None,
    )


def fallback_key(record: Record) -> str:
    """The key of a FileFailed without a file_id (a stranger's bytes: not decodable, or a decoded
    event without a manifest): the input record's coordinates ``<topic>-<partition>-<offset>``.

    Never the record's own key: a stranger may carry any key, a real file's id among them (a
    truncated copy of its event), or the same key as other strangers; keyed by it, its FileFailed
    would be folded into that file's quarantine entry and tracker record, or hide the other
    strangers' raw bytes (case C24). The coordinates are unique per record and the same on a
    replay of that offset, so a replay sets it aside again under the same key. The record's key
    is kept in ``FileFailed.raw_key``.
    """
    return f"{record.topic}-{record.partition}-{record.offset}"


__all__ = ["fallback_key", "process_batch", "quarantine"]
