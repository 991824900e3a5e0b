"""The stage runner's partition side: pause/resume for long handlers and the rebalance callbacks
(assign, revoke, lost), with commit-on-revoke for the running batch.

:class:`PartitionCallbacks` is a mixin of :class:`ferry.core.runner.StageRunner`, which owns the
state named below; the guarantees are listed in :mod:`ferry.core.runner`'s docstring.
"""

from __future__ import annotations

import logging
import threading
from typing import Any

from confluent_kafka import KafkaException, TopicPartition

from ferry.core.config import Settings
from ferry.core.kafka import OutboundRecord
from ferry.core.stage import RunStats, Stage

log = logging.getLogger("ferry.core.runner")


class PartitionCallbacks:
    """Partition pause/resume and the rebalance callbacks given to ``Consumer.subscribe``."""

    stage: Stage
    stats: RunStats
    _consumer: Any
    _settings: Settings
    _busy: bool
    _current: set[tuple[str, int]]
    _revoked_meanwhile: set[tuple[str, int]]
    _inflight: tuple[list[Any], threading.Event, dict[str, Any]] | None
    _revoke_grace_s: float
    _settled_on_revoke: bool

    def _deliver(self, outbound: list[OutboundRecord]) -> None:
        raise NotImplementedError

    def _store_offset(self, msg: Any) -> None:
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
        if self._busy:
            consumer.pause(partitions)
        else:
            consumer.resume(partitions)

    def _on_revoke(self, consumer: Any, partitions: list[TopicPartition]) -> None:
        """Partitions leave this member in a rebalance: finish the running batch first when it
        holds records of them (:meth:`_finish_before_revoke`), else drop those records."""
        revoked = {(p.topic, p.partition) for p in partitions}
        if revoked:
            self.stats.revocations += 1
        log.info("stage %s: partitions revoked: %s", self.stage.name, sorted(revoked))
        if self._busy and self._current & revoked and not self._finish_before_revoke(consumer):
            self._revoked_meanwhile |= self._current & revoked
        self.stats.assigned -= revoked

    def _on_lost(self, consumer: Any, partitions: list[TopicPartition]) -> None:
        """Partitions already given to another member (this one missed its session timeout):
        nothing of them may be stored; the running batch's records of them are dropped."""
        lost = {(p.topic, p.partition) for p in partitions}
        if lost:
            self.stats.revocations += 1
        self.stats.assigned -= lost
        if self._busy:
            self._revoked_meanwhile |= self._current & lost
        log.warning("stage %s: partitions lost: %s", self.stage.name, sorted(lost))

    def _finish_before_revoke(self, consumer: Any) -> bool:
        """Wait (at most ``revoke_grace_s``) for the running batch, deliver its outputs, store
        and commit its offsets while its partitions are still assigned. True when done; False
        when it failed, was abandoned or outlasted the grace (the caller drops its records).

        Raises:
            TransientError: its outputs were not acknowledged (as :meth:`_deliver`); it leaves
                ``poll()`` and stops the runner, and the records are redelivered.
        """
        if self._settled_on_revoke:  # an earlier revocation of this batch delivered it
            return True
        if self._inflight is None:
            return False
        msgs, done, box = self._inflight
        log.info(
            "stage %s: finishing the running batch of %d before its partitions move "
            "(at most %.0f s)",
            self.stage.name,
            len(msgs),
            self._revoke_grace_s,
        )
        if not done.wait(self._revoke_grace_s) or box.get("result") is None:
            return False
        self._deliver(box["result"])
        last: dict[tuple[str, int], int] = {}
        for msg in msgs:
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
        self._settled_on_revoke = True
        return True
