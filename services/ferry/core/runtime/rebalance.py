"""The stage runner's partition side: pause/resume for long handlers, the rebalance callbacks
(assign, revoke, lost) with commit-on-revoke for the running batches, and the takeover batch for
partitions assigned while a batch runs.

:class:`Partitions` holds that state (the running batches, the takeover partitions and records,
the buffered and gathered records); the :class:`ferry.core.runtime.runner.StageRunner` owns one
and gives it two of its own steps: how to start a batch and how to settle one (deliver its
outputs, report them, store its offsets). The guarantees are listed in
:mod:`ferry.core.runtime.runner`'s docstring.
"""

from __future__ import annotations

import logging
import threading
import time
from collections import deque
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import Any

from confluent_kafka import KafkaException, TopicPartition

from ferry.core.kafka.clients import OutboundRecord
from ferry.core.runtime.stage import Record, RunStats, Stage
from ferry.settings import Settings

log = logging.getLogger("ferry.core.runtime.runner")


@dataclass
class RunningBatch:
    """One batch a worker thread is running: its messages, the partitions they are on, the
    worker's ``done`` event and result ``box`` (``result``: the records to produce, or
    ``error``; ``settled``: what they publish per record, for the file observer)."""

    msgs: list[Any]
    #: a takeover batch (records of partitions assigned while another batch ran)
    takeover: bool = False
    done: threading.Event = field(default_factory=threading.Event)
    box: dict[str, Any] = field(default_factory=dict)
    #: its partitions revoked or lost while it ran: their records' outputs are dropped
    revoked: set[tuple[str, int]] = field(default_factory=set)
    #: delivered, stored and committed by the revoke callback; ``delivered`` records of it
    settled: bool = False
    delivered: int = 0

    def __post_init__(self) -> None:
        self.records = [Record.of(m) for m in self.msgs]
        self.parts = {(r.topic, r.partition) for r in self.records}

    def kept(self, outbound: list[OutboundRecord]) -> tuple[list[Any], list[OutboundRecord]]:
        """(its messages, ``outbound``) without those of partitions in :attr:`revoked`: what
        may still be delivered and stored."""
        gone = self.revoked
        msgs = [m for m in self.msgs if (m.topic(), m.partition()) not in gone]
        return msgs, [r for r in outbound if r.source not in gone]


#: Starts a batch of messages in a worker thread (``takeover``: a takeover batch).
Start = Callable[[list[Any], bool], RunningBatch]
#: Settles what a batch kept: delivers ``outbound``, reports the ``kept`` messages to the file
#: observer and stores their offsets (raises TransientError when delivery fails).
Settle = Callable[[RunningBatch, list[Any], list[OutboundRecord]], None]


class Partitions:
    """The partitions of one stage runner: what is assigned and paused, the running batches, the
    records buffered, gathered or waiting for a takeover batch; and the rebalance callbacks given
    to ``Consumer.subscribe`` (:meth:`on_assign`, :meth:`on_revoke`, :meth:`on_lost`).

    Args:
        start, settle: the runner's own steps (:data:`Start`, :data:`Settle`).
        revoke_grace_s: how long a revocation waits for the running batches, s.
    """

    def __init__(
        self,
        stage: Stage,
        stats: RunStats,
        consumer: Any,
        settings: Settings,
        *,
        start: Start,
        settle: Settle,
    ) -> None:
        self.stage, self.stats, self.consumer = stage, stats, consumer
        self.cooperative = settings.kafka.assignment_strategy == "cooperative-sticky"
        grace, half = settings.kafka.revoke_grace_s, settings.kafka.max_poll_interval_ms / 2000
        self.revoke_grace_s = half if grace is None else grace
        self._start, self._settle = start, settle
        #: a batch is running (set for the whole of the runner's ``_run_batches``)
        self.busy = False
        #: the running batches: the first one, and at most one takeover batch beside it
        self.running: list[RunningBatch] = []
        #: partitions assigned while a batch ran (a takeover) and their records not yet handled
        self.takeover: set[tuple[str, int]] = set()
        self.takeover_msgs: list[Any] = []
        #: when the first and the last of ``takeover_msgs`` arrived (monotonic s)
        self.takeover_first = self.takeover_seen = 0.0
        #: records polled while their partitions were being paused, taken before new polls
        self.buffer: deque[Any] = deque()
        #: the batch being gathered (a revocation drops some of its records)
        self.gathering: list[Any] = []

    def pause(self) -> None:
        parts = self.consumer.assignment()
        if parts:
            self.consumer.pause(parts)
        self.stats.pauses += 1

    def resume(self) -> None:
        parts = self.consumer.assignment()
        if parts:
            self.consumer.resume(parts)

    def takeover_running(self) -> bool:
        return any(b.takeover for b in self.running)

    def set_flow(self, parts: Iterable[tuple[str, int]], *, flowing: bool) -> None:
        """Resume (``flowing``) or pause these partitions, those still assigned."""
        tps = [TopicPartition(t, p) for t, p in sorted(parts) if (t, p) in self.stats.assigned]
        if tps:
            (self.consumer.resume if flowing else self.consumer.pause)(tps)

    def gather_takeover(self, msg: Any) -> None:
        now = time.monotonic()
        if not self.takeover_msgs:
            self.takeover_first = now
        self.takeover_seen = now
        self.takeover_msgs.append(msg)

    def maybe_start_takeover(self) -> None:
        """Start a takeover batch of the records gathered from partitions assigned meanwhile,
        when the stage allows one, none runs, and the gathering is over (``batch_size``
        records, nothing new for ``linger_s``, or ``batch_wait_s`` since the first)."""
        if not (self.stage.takeover and self.takeover_msgs) or self.takeover_running():
            return
        msgs = self.takeover_msgs  # of assigned partitions only: forget drops the others
        now = time.monotonic()
        size = self.stage.batch_size if self.stage.batching else 1
        gathering = (
            now - self.takeover_seen < self.stage.linger_s
            and now - self.takeover_first < self.stage.batch_wait_s
        )
        if len(msgs) < size and gathering:
            return
        take, self.takeover_msgs = msgs[:size], msgs[size:]
        self.set_flow(self.takeover, flowing=False)  # one takeover batch at a time
        parts = sorted({(m.topic(), m.partition()) for m in take})
        log.info(
            "stage %s: takeover batch of %d record(s) of %s beside the running batch",
            self.stage.name,
            len(take),
            parts,
        )
        self.stats.takeover_batches += 1
        self._start(take, True)

    def forget(self, parts: set[tuple[str, int]]) -> None:
        """Drop the buffered records of partitions that left this member, and those of a batch
        being gathered (their new owner, or this member if they come back, reads them again
        from the committed offset)."""
        self.takeover -= parts
        self.gathering[:] = [m for m in self.gathering if (m.topic(), m.partition()) not in parts]
        self.takeover_msgs = [
            m for m in self.takeover_msgs if (m.topic(), m.partition()) not in parts
        ]
        kept = [m for m in self.buffer if (m.topic(), m.partition()) not in parts]
        self.buffer.clear()
        self.buffer.extend(kept)

    def on_assign(self, consumer: Any, partitions: list[TopicPartition]) -> None:
        self.stats.assignments += 1
        self.stats.assigned |= {(p.topic, p.partition) for p in partitions}
        log.info(
            "stage %s: partitions assigned: %s (busy: %s)",
            self.stage.name,
            sorted((p.topic, p.partition) for p in partitions),
            self.busy,
        )
        if self.cooperative:
            # Cooperative protocol: assignments are incremental and a full assign() is refused.
            consumer.incremental_assign(partitions)
        else:
            consumer.assign(partitions)
        if not partitions:
            return
        # librdkafka keeps a partition's pause flag across revoke and re-assign (librdkafka issue
        # #1849): a partition paused for a long handler, revoked, and handed back once the
        # handler is done would stay paused for good. Set the flag explicitly on every assign.
        # While a batch runs, new partitions wait paused behind it, unless the stage runs a
        # takeover batch for them (they were another member's: see ferry.core.runtime.runner) and
        # none
        # runs yet.
        # A partition a running batch holds records of (the eager protocol hands a member its
        # own partitions back) is not a takeover: it waits for that batch.
        held = {key for b in self.running for key in b.parts}
        taken = [p for p in partitions if (p.topic, p.partition) not in held]
        if not self.busy:
            consumer.resume(partitions)
        elif self.stage.takeover and taken:
            self.takeover |= {(p.topic, p.partition) for p in taken}
            (consumer.pause if self.takeover_running() else consumer.resume)(taken)
            waiting = [p for p in partitions if (p.topic, p.partition) in held]
            if waiting:
                consumer.pause(waiting)
        else:
            consumer.pause(partitions)

    def on_revoke(self, consumer: Any, partitions: list[TopicPartition]) -> None:
        """Partitions leave this member in a rebalance: finish the running batch first when it
        holds records of them (:meth:`finish_before_revoke`), else drop those records."""
        revoked = {(p.topic, p.partition) for p in partitions}
        if revoked:
            self.stats.revocations += 1
        log.info("stage %s: partitions revoked: %s", self.stage.name, sorted(revoked))
        deadline = time.monotonic() + self.revoke_grace_s  # one grace for every running batch
        for batch in list(self.running):
            if batch.parts & revoked and not self.finish_before_revoke(consumer, batch, deadline):
                batch.revoked |= batch.parts & revoked
        self.stats.assigned -= revoked
        self.forget(revoked)

    def on_lost(self, consumer: Any, partitions: list[TopicPartition]) -> None:
        """Partitions already given to another member (this one missed its session timeout):
        nothing of them may be stored; the running batch's records of them are dropped."""
        lost = {(p.topic, p.partition) for p in partitions}
        if lost:
            self.stats.revocations += 1
        self.stats.assigned -= lost
        for batch in self.running:
            batch.revoked |= batch.parts & lost
        self.forget(lost)
        log.warning("stage %s: partitions lost: %s", self.stage.name, sorted(lost))

    def finish_before_revoke(self, consumer: Any, batch: RunningBatch, deadline: float) -> bool:
        """Wait (until ``deadline``, monotonic s: ``revoke_grace_s`` from the revocation, shared
        by the running batches) for the running ``batch``, deliver its outputs, store and
        commit its offsets while its partitions are still assigned. True when done;
        False when it failed, was abandoned or outlasted the grace (the caller drops its
        records of the revoked partitions).

        Raises:
            TransientError: its outputs were not acknowledged (from ``settle``); it leaves
                ``poll()`` and stops the runner, and the records are redelivered.
        """
        if batch.settled:  # an earlier revocation of this batch delivered it
            return True
        msgs, done, box = batch.msgs, batch.done, batch.box
        log.info(
            "stage %s: finishing the running batch of %d before its partitions move "
            "(at most %.0f s)",
            self.stage.name,
            len(msgs),
            self.revoke_grace_s,
        )
        if not done.wait(max(0.0, deadline - time.monotonic())) or box.get("result") is None:
            return False
        kept, outbound = batch.kept(box["result"])  # partitions lost earlier: never published
        self._settle(batch, kept, outbound)
        last: dict[tuple[str, int], int] = {}
        for msg in kept:
            key = (msg.topic(), msg.partition())
            last[key] = max(last.get(key, -1), msg.offset())
        try:
            consumer.commit(
                offsets=[TopicPartition(t, p, o + 1) for (t, p), o in sorted(last.items())],
                asynchronous=False,
            )
        except KafkaException as exc:  # the stored offsets are committed by auto-commit too
            log.warning("stage %s: commit before revoke failed: %s", self.stage.name, exc)
        batch.settled, batch.delivered = True, len(kept)
        return True
