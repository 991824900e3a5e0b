"""The stage runner's partition side: pause/resume for long handlers, the rebalance callbacks
(assign, revoke, lost) with commit-on-revoke for the running batches, and the takeover batch for
partitions assigned while a batch runs.

:class:`PartitionCallbacks` is a mixin of :class:`ferry.core.runtime.runner.StageRunner`, which
owns the
state named below; the guarantees are listed in :mod:`ferry.core.runtime.runner`'s docstring.
"""

from __future__ import annotations

import logging
import threading
import time
from collections import deque
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

from confluent_kafka import KafkaException, TopicPartition

from ferry.core.kafka.clients import OutboundRecord
from ferry.core.runtime.observe import FileObserver, notify
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


class PartitionCallbacks:
    """Partition pause/resume and the rebalance callbacks given to ``Consumer.subscribe``."""

    stage: Stage
    stats: RunStats
    observer: FileObserver | None
    _consumer: Any
    _settings: Settings
    _busy: bool
    _running: list[RunningBatch]
    _takeover: set[tuple[str, int]]
    _takeover_msgs: list[Any]
    _takeover_first: float
    _takeover_seen: float
    _buffer: deque[Any]
    _gathering: list[Any]
    _revoke_grace_s: float

    def _deliver(self, outbound: list[OutboundRecord]) -> None:
        raise NotImplementedError

    def _store_offset(self, msg: Any) -> None:
        raise NotImplementedError

    def _report(self, batch: RunningBatch, kept: list[Any]) -> None:
        """Tell the file observer what was just delivered for the ``kept`` messages of
        ``batch`` (:mod:`ferry.core.runtime.observe`)."""
        if self.observer is None:
            return
        keys = {(m.topic(), m.partition(), m.offset()) for m in kept}
        files = [
            s
            for s in batch.box.get("settled", [])
            if (s.record.topic, s.record.partition, s.record.offset) in keys
        ]
        if files:
            notify("settled", self.observer.settled, self.stage.name, files)

    def _start(self, msgs: list[Any], *, takeover: bool) -> RunningBatch:
        raise NotImplementedError

    def _pause(self) -> None:
        parts = self._consumer.assignment()
        if parts:
            self._consumer.pause(parts)
        self.stats.pauses += 1

    def _resume(self) -> None:
        parts = self._consumer.assignment()
        if parts:
            self._consumer.resume(parts)

    def _takeover_running(self) -> bool:
        return any(b.takeover for b in self._running)

    def _set_flow(self, parts: Iterable[tuple[str, int]], *, flowing: bool) -> None:
        """Resume (``flowing``) or pause these partitions, those still assigned."""
        tps = [TopicPartition(t, p) for t, p in sorted(parts) if (t, p) in self.stats.assigned]
        if tps:
            (self._consumer.resume if flowing else self._consumer.pause)(tps)

    def _gather_takeover(self, msg: Any) -> None:
        now = time.monotonic()
        if not self._takeover_msgs:
            self._takeover_first = now
        self._takeover_seen = now
        self._takeover_msgs.append(msg)

    def _maybe_start_takeover(self) -> None:
        """Start a takeover batch of the records gathered from partitions assigned meanwhile,
        when the stage allows one, none runs, and the gathering is over (``batch_size``
        records, nothing new for ``linger_s``, or ``batch_wait_s`` since the first)."""
        if not (self.stage.takeover and self._takeover_msgs) or self._takeover_running():
            return
        msgs = self._takeover_msgs  # of assigned partitions only: _forget drops the others
        now = time.monotonic()
        size = self.stage.batch_size if self.stage.batching else 1
        gathering = (
            now - self._takeover_seen < self.stage.linger_s
            and now - self._takeover_first < self.stage.batch_wait_s
        )
        if len(msgs) < size and gathering:
            return
        take, self._takeover_msgs = msgs[:size], msgs[size:]
        self._set_flow(self._takeover, flowing=False)  # one takeover batch at a time
        parts = sorted({(m.topic(), m.partition()) for m in take})
        log.info(
            "stage %s: takeover batch of %d record(s) of %s beside the running batch",
            self.stage.name,
            len(take),
            parts,
        )
        self.stats.takeover_batches += 1
        self._start(take, takeover=True)

    def _forget(self, parts: set[tuple[str, int]]) -> None:
        """Drop the buffered records of partitions that left this member, and those of a batch
        being gathered (their new owner, or this member if they come back, reads them again
        from the committed offset)."""
        self._takeover -= parts
        self._gathering[:] = [m for m in self._gathering if (m.topic(), m.partition()) not in parts]
        self._takeover_msgs = [
            m for m in self._takeover_msgs if (m.topic(), m.partition()) not in parts
        ]
        kept = [m for m in self._buffer if (m.topic(), m.partition()) not in parts]
        self._buffer.clear()
        self._buffer.extend(kept)

    def _on_assign(self, consumer: Any, partitions: list[TopicPartition]) -> None:
        self.stats.assignments += 1
        self.stats.assigned |= {(p.topic, p.partition) for p in partitions}
        log.info(
            "stage %s: partitions assigned: %s (busy: %s)",
            self.stage.name,
            sorted((p.topic, p.partition) for p in partitions),
            self._busy,
        )
        if self._settings.kafka.assignment_strategy == "cooperative-sticky":
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
        held = {key for b in self._running for key in b.parts}
        taken = [p for p in partitions if (p.topic, p.partition) not in held]
        if not self._busy:
            consumer.resume(partitions)
        elif self.stage.takeover and taken:
            self._takeover |= {(p.topic, p.partition) for p in taken}
            (consumer.pause if self._takeover_running() else consumer.resume)(taken)
            waiting = [p for p in partitions if (p.topic, p.partition) in held]
            if waiting:
                consumer.pause(waiting)
        else:
            consumer.pause(partitions)

    def _on_revoke(self, consumer: Any, partitions: list[TopicPartition]) -> None:
        """Partitions leave this member in a rebalance: finish the running batch first when it
        holds records of them (:meth:`_finish_before_revoke`), else drop those records."""
        revoked = {(p.topic, p.partition) for p in partitions}
        if revoked:
            self.stats.revocations += 1
        log.info("stage %s: partitions revoked: %s", self.stage.name, sorted(revoked))
        deadline = time.monotonic() + self._revoke_grace_s  # one grace for every running batch
        for batch in list(self._running):
            if batch.parts & revoked and not self._finish_before_revoke(consumer, batch, deadline):
                batch.revoked |= batch.parts & revoked
        self.stats.assigned -= revoked
        self._forget(revoked)

    def _on_lost(self, consumer: Any, partitions: list[TopicPartition]) -> None:
        """Partitions already given to another member (this one missed its session timeout):
        nothing of them may be stored; the running batch's records of them are dropped."""
        lost = {(p.topic, p.partition) for p in partitions}
        if lost:
            self.stats.revocations += 1
        self.stats.assigned -= lost
        for batch in self._running:
            batch.revoked |= batch.parts & lost
        self._forget(lost)
        log.warning("stage %s: partitions lost: %s", self.stage.name, sorted(lost))

    def _finish_before_revoke(self, consumer: Any, batch: RunningBatch, deadline: float) -> bool:
        """Wait (until ``deadline``, monotonic s: ``revoke_grace_s`` from the revocation, shared
        by the running batches) for the running ``batch``, deliver its outputs, store and
        commit its offsets while its partitions are still assigned. True when done;
        False when it failed, was abandoned or outlasted the grace (the caller drops its
        records of the revoked partitions).

        Raises:
            TransientError: its outputs were not acknowledged (as :meth:`_deliver`); it leaves
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
            self._revoke_grace_s,
        )
        if not done.wait(max(0.0, deadline - time.monotonic())) or box.get("result") is None:
            return False
        kept, outbound = batch.kept(box["result"])  # partitions lost earlier: never published
        self._deliver(outbound)
        self._report(batch, kept)
        last: dict[tuple[str, int], int] = {}
        for msg in kept:
            self._store_offset(msg)
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
