"""What a stage is: its name, its event-type → handler table and batching, and the records and
counters its runner deals in (:mod:`ferry.core.runtime.processing` runs it;
:mod:`ferry.core.runtime.runner` loops).
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Hashable, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, cast

from ferry.core.events import Event
from ferry.core.runtime.conditions import ConditionBoard
from ferry.errors import (
    ConfigError,
    DatasetNotReady,
    PermanentError,
    TransientError,
)
from ferry.settings import Settings
from ferry.settings.stages import BatchSettings

#: A handler: (input event, the stage's dependencies) → output events. Must be idempotent.
Handler = Callable[[Any, Any], Sequence[Event]]

#: A batch handler: (input events, deps) → one result per input, in order: that file's output
#: events, or the FerryError that file met (PermanentError → quarantine it; TransientError → retry
#: that file with the next attempt; DatasetNotReady → park it until its definition is valid).
#: Raising instead fails the whole batch (retried if transient).
BatchResult = Sequence[Event] | PermanentError | TransientError | DatasetNotReady
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
    #: Natural batching: after the first event, the batch keeps gathering only while the next
    #: event arrives within ``linger_s`` seconds; when nothing else is waiting it starts at once,
    #: so a lone file pays at most ``linger_s``, never ``batch_wait_s``.
    linger_s: float = 0.2
    #: Called once by the runner before it joins the consumer group (e.g. build the Spark
    #: session and reach the Hive metastore), so an instance owns partitions only once it can
    #: process them at full speed: a hot standby takes over a killed instance's partitions warm.
    warm_up: Callable[[], None] | None = None
    #: Partitions assigned while a batch runs (taken over from a member that died or left) get
    #: a second batch beside the running one instead of waiting for it (hot standby, see
    #: :mod:`ferry.core.runtime.runner`). Only for handlers that may run two batches at once in two
    #: threads on records of different partitions.
    takeover: bool = False
    #: Called by the runner on every turn of its loop while no batch runs (a few times a
    #: second; rate-limit inside): e.g. reload the dataset definitions and release the files
    #: that waited for them (:mod:`ferry.core.runtime.waiting`). It must not raise.
    tick: Callable[[], object] | None = None

    @classmethod
    def batched(
        cls,
        name: str,
        handlers: Mapping[type[Any], BatchHandler],
        section: BatchSettings,
        warm_up: Callable[[], None],
        tick: Callable[[], object] | None = None,
    ) -> Stage:
        """A batching stage sized by its settings section (``settings.transform``,
        ``settings.load``: batch_size, batch_wait_s, takeover_batch), warmed up by ``warm_up``
        before it joins its consumer group."""
        return cls(
            name,
            handlers,
            batch_size=section.batch_size,
            batch_wait_s=section.batch_wait_s,
            warm_up=warm_up,
            takeover=section.takeover_batch,
            tick=tick,
        )

    @property
    def batching(self) -> bool:
        return self.batch_size > 1

    def input_topics(self, settings: Settings) -> list[str]:
        """Full names of the topics this stage consumes, sorted."""
        return sorted({settings.kafka.topic(getattr(cls, "TOPIC")) for cls in self.handlers})  # noqa: B009

    def batch_handler(self, event_type: type[Any]) -> BatchHandler:
        """The handler of ``event_type`` as a :data:`BatchHandler` (a plain one adapted by
        :func:`one_by_one`). Raises KeyError: no handler for that type."""
        handler = self.handlers[event_type]
        if self.batching:
            return cast(BatchHandler, handler)
        return one_by_one(cast(Handler, handler))


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
        """``topic[partition]@offset``."""
        return f"{self.topic}[{self.partition}]@{self.offset}"


@dataclass
class RunStats:
    """Counters of one :meth:`ferry.core.runtime.runner.StageRunner.run`; read them from any
    thread."""

    processed: int = 0  #: records whose outputs were delivered and offset stored
    quarantined: int = 0  #: of those, records that produced a FileFailed
    abandoned: int = 0  #: records dropped on shutdown or revocation (offset not stored)
    handler_calls: int = 0  #: handler attempts, retries included
    pauses: int = 0  #: times the partitions were paused for a long handler
    assignments: int = 0  #: on_assign callbacks
    revocations: int = 0  #: on_revoke/on_lost callbacks with at least one partition
    takeover_batches: int = 0  #: batches run beside a running one, of partitions taken over
    assigned: set[tuple[str, int]] = field(default_factory=set)
    #: the cluster conditions holding this run's files (made by :meth:`board` on first use)
    conditions: ConditionBoard | None = None
    _lock: threading.Lock = field(default_factory=threading.Lock, repr=False, compare=False)

    def board(self, service: str, path: Callable[[], Path]) -> ConditionBoard:
        """:attr:`conditions`, made on first use, mirrored to ``path()``."""
        with self._lock:
            if self.conditions is None:
                self.conditions = ConditionBoard(service, path())
            return self.conditions

    def count(self, name: str, n: int = 1) -> None:
        """Add ``n`` to counter ``name`` atomically: the batch and the takeover batch count
        from two worker threads, and ``+=`` on an attribute is a read, an add and a write."""
        with self._lock:
            setattr(self, name, getattr(self, name) + n)


class HandlerBug(PermanentError):
    """A handler raised an exception that is not a FerryError (``original``): its file is
    quarantined as ``reason`` (``handler_error`` unless the stage names its own, e.g. extract's
    ``extract_error``) with the original's type and message."""

    reason = "handler_error"

    def __init__(self, original: Exception, reason: str | None = None) -> None:
        super().__init__(f"{type(original).__name__}: {original}", reason=reason)
        self.original = original


def settle(
    exc: BaseException, bug_reason: str | None = None
) -> PermanentError | TransientError | DatasetNotReady:
    """Ferry's one quarantine policy: the verdict on an exception that ended a file's attempt.

    A :class:`TransientError` is returned as it is (retried by the retry policy; past its ceiling
    the file is quarantined with its reason), a :class:`PermanentError` likewise (quarantined at
    once), a :class:`DatasetNotReady` likewise (the file waits for its definition, neither
    retried nor quarantined), any other exception becomes a :class:`HandlerBug` (quarantined as
    ``bug_reason``,
    default ``handler_error``, the original kept for the log) — a bug quarantines its file, never
    the stage. Used by the stage runner (:func:`one_by_one`,
    :mod:`ferry.core.runtime.processing`) and by extract, which has no input topic.

    Raises:
        ConfigError: ``exc`` itself: the process cannot go on.
    """
    if isinstance(exc, ConfigError):
        raise exc
    if isinstance(exc, (TransientError, PermanentError, DatasetNotReady)):
        return exc
    if isinstance(exc, Exception):
        return HandlerBug(exc, bug_reason)
    raise exc  # KeyboardInterrupt, SystemExit: not a file's fault


def one_by_one(handler: Handler) -> BatchHandler:
    """A :data:`BatchHandler` calling the plain ``handler`` once per event: each result is that
    event's outputs, or the TransientError/PermanentError it raised, or a :class:`HandlerBug`
    for any other exception. A ConfigError is raised (it stops the runner)."""
    return in_parallel(handler, 1)


def file_key(event: Any) -> Hashable | None:
    """The file an event is about (its ``file_id``), or None for an event of no file."""
    return cast(Hashable | None, getattr(event, "file_id", None))


def in_parallel(
    handler: Handler, threads: int, key: Callable[[Any], Hashable | None] = file_key
) -> BatchHandler:
    """A :data:`BatchHandler` calling the plain ``handler`` on up to ``threads`` events at once
    (a thread pool per batch); results in the events' order, each settled as in
    :func:`one_by_one`. For handlers that wait on the network, not the CPU (transfer's copies),
    and whose dependencies may be used from several threads. A ConfigError is raised once every
    running call has returned.

    Events of one file (the same ``key``, default :func:`file_key`) never run at once: they run
    one after another in the batch's order, while other files' run beside them. A batch can hold
    two events of one file (transform ran it twice: a redelivery, a rebalance between two
    replicas), and two copies of one file into the same directory at once could delete each
    other's output: the compose nemesis's seed 4711 (2026-12-07) quarantined a file as
    ``hdfs_not_found`` that way (tests/unit/test_stage_parallel.py).

    Raises:
        ValueError: ``threads`` < 1.
    """
    if threads < 1:
        raise ValueError(f"threads must be >= 1, got {threads}")

    def call(event: Any, deps: Any) -> BatchResult:
        try:
            return list(handler(event, deps))
        except Exception as exc:  # noqa: BLE001 - settle: a bug quarantines this file only
            return settle(exc)

    def each(events: Sequence[Any], deps: Any) -> list[BatchResult]:
        if threads == 1 or len(events) <= 1:
            return [call(event, deps) for event in events]
        groups: dict[tuple[str, Hashable], list[int]] = {}
        for i, event in enumerate(events):
            k = key(event)
            groups.setdefault(("event", i) if k is None else ("file", k), []).append(i)
        results: list[BatchResult | None] = [None] * len(events)

        def run(idx: list[int]) -> None:
            for i in idx:
                results[i] = call(events[i], deps)

        with ThreadPoolExecutor(min(threads, len(groups)), "ferry-file") as pool:
            list(pool.map(run, groups.values()))
        return cast(list[BatchResult], results)

    return each


__all__ = [
    "BatchHandler",
    "BatchResult",
    "Handler",
    "HandlerBug",
    "settle",
    "Record",
    "RunStats",
    "Stage",
    "file_key",
    "in_parallel",
    "one_by_one",
]
