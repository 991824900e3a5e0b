"""The stage runner: consume records, process them, produce the outputs, store the offsets.

Build a runner for a :class:`~ferry.core.runtime.processing.Stage` and run it::

    STAGE = Stage(name="transform", handlers={FileExtracted: transform_file})
    runner = build_runner(STAGE, deps, settings)   # creates topics and clients; nothing at import
    runner.run()                                    # until SIGTERM/SIGINT or runner.stop()

What a record becomes (outputs or one FileFailed, retries, quarantine):
:func:`~ferry.core.runtime.processing.process_batch`; sent by :mod:`ferry.core.kafka.publish`.

Guarantees:

- At-least-once: a record's offset is stored only after all its output events were acknowledged
  by the broker; auto-commit then commits stored offsets only. A crash in between redelivers the
  record, so handlers must be idempotent on ``file_id``. A record quarantined as undecodable is
  never redelivered after its FileFailed was acknowledged.
- A :class:`~ferry.errors.ConfigError` from a handler stops the runner; so do output events
  the broker never acknowledged after the retries of ``settings.retry`` (their input offsets
  are not stored).
- Long handlers run in a worker thread; after ``pause_after_s`` the runner pauses every assigned
  partition and keeps calling ``poll()`` (no records then) so the consumer stays in its group.
- Shutdown (SIGTERM/SIGINT or :meth:`StageRunner.stop`): no new record is taken; a running handler
  gets ``kafka.shutdown_grace_s`` to finish (outputs delivered, offset stored) or is abandoned
  (offset not stored); ``close()`` commits the stored offsets and leaves the group.
- Rebalance: classic (eager) or cooperative protocol, as ``kafka.assignment_strategy`` says
  (cooperative: only the partitions that move are revoked and assigned, incrementally). When a
  partition of the running batch is revoked (another instance joined), the revoke callback
  first lets the batch finish (at most ``kafka.revoke_grace_s``, default half of
  ``max.poll.interval.ms``), delivers its outputs, stores and commits its offsets, and only then
  lets the partition go: the work is not thrown away for the new owner to redo with a cold
  Spark session (the commit-on-revoke pattern of the Kafka consumer documentation,
  ``ConsumerRebalanceListener``). If the batch fails, outlasts the grace, or the partitions were
  *lost* (this member was fenced: they already belong to another), the outputs of that
  partition's records are dropped (offsets not stored: the new owner processes them; publishing
  them too would hand the next stage a manifest whose staging files the new owner may
  rewrite); the batch's records on partitions still assigned are delivered and stored as usual,
  since this consumer's position there is already past them (dropping them too let the next
  batch's offsets commit over them: files lost, compose scaled-replica scenario).
  Every assigned partition is paused if a handler is running and resumed otherwise, because
  librdkafka keeps the pause flag of a revoked partition when it is assigned again.
- Takeover batch (hot standby; ``Stage.takeover``: transform and load unless
  ``<stage>.takeover_batch`` is off): partitions assigned while a batch runs were another
  member's (it died or left). Their records run as a second batch beside the first (one at a
  time, never on a partition of the first, so each partition stays in order), not after it;
  each batch is delivered and stored when it ends (:mod:`ferry.core.runtime.rebalance`).
"""

from __future__ import annotations

import logging
import os
import signal
import threading
import time
from types import FrameType
from typing import Any

from confluent_kafka import KafkaException

from ferry.core.kafka.clients import (
    OutboundRecord,
    build_admin,
    build_consumer,
    build_producer,
    group_id,
    refuse_unauthorized,
)
from ferry.core.kafka.publish import publish
from ferry.core.kafka.topics import ensure_topics
from ferry.core.runtime.membership import GroupWatch
from ferry.core.runtime.observe import FileObserver, Settled, notify
from ferry.core.runtime.processing import process_batch
from ferry.core.runtime.rebalance import Partitions, RunningBatch
from ferry.core.runtime.stage import Record, RunStats, Stage
from ferry.core.wire.avro import EventCodec, default_codec
from ferry.settings import Settings

log = logging.getLogger(__name__)


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
        observer: FileObserver | None = None,
    ) -> None:
        self.stage = stage
        self.observer = observer
        self.deps = deps
        self.stats = RunStats()
        self._consumer = consumer
        self._producer = producer
        self._codec = codec
        self._settings = settings
        self._pause_after_s = min(pause_after_s, settings.kafka.max_poll_interval_ms / 5000)
        self._poll_timeout_s = poll_timeout_s
        self._stop = threading.Event()
        #: the partitions' state and the rebalance callbacks (:mod:`ferry.core.runtime.rebalance`)
        self.partitions = Partitions(
            stage,
            self.stats,
            consumer,
            settings,
            start=self._start,
            settle=self._settle,
        )
        #: a consumer out of its group for good subscribes again (:mod:`.membership`)
        self.group_watch = GroupWatch.for_group(
            consumer, settings.kafka, group_id(settings.kafka, stage.name)
        )

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
            ConfigError: raised by a handler.
            KafkaException: a fatal consumer error.
        """
        previous = self._install_signals() if install_signal_handlers else {}
        self._warm_up()
        topics = self.stage.input_topics(self._settings)
        parts = self.partitions
        self._subscribe(topics)
        log.info("stage %s consuming %s", self.stage.name, topics)
        try:
            while not self._stop.is_set():
                if self.stage.tick is not None:
                    self.stage.tick()  # must not raise (ferry.core.runtime.stage.Stage.tick)
                msgs = self._next_batch()
                if msgs:
                    self._run_batches(msgs)
                if self.group_watch.should_rejoin(bool(self.stats.assigned or parts.running)):
                    self._consumer.unsubscribe()
                    self._subscribe(topics)
        finally:
            for signum, handler in previous.items():
                signal.signal(signum, handler)
            self._consumer.close()
            self._producer.flush(self._settings.kafka.request_timeout_s)
            notify("close", getattr(self.observer, "close", None))
        return self.stats

    def _subscribe(self, topics: list[str]) -> None:
        parts = self.partitions
        self._consumer.subscribe(
            topics, on_assign=parts.on_assign, on_revoke=parts.on_revoke, on_lost=parts.on_lost
        )

    def _warm_up(self) -> None:
        """Run the stage's ``warm_up`` before joining the group. A failure is logged with its
        traceback and the runner goes on: the handlers build what they need on first use and
        meet (and report) the same error there, per file."""
        if self.stage.warm_up is None:
            return
        t0 = time.monotonic()
        try:
            self.stage.warm_up()
        except Exception:  # noqa: BLE001 - an optimisation; the handlers' own path raises it again
            log.warning(
                "stage %s: warm-up failed; building on first use", self.stage.name, exc_info=True
            )
            return
        log.info("stage %s: warm in %.1f s", self.stage.name, time.monotonic() - t0)

    # -- the loop's steps --------------------------------------------------------------------
    def _next_batch(self) -> list[Any]:
        """One record, or for a batching stage up to ``batch_size`` records: after the first,
        more are taken while each arrives within ``linger_s`` of the last, for at most
        ``batch_wait_s`` after the first (natural batching: a lone file starts at once)."""
        first = self._next_message()
        if first is None or not self.stage.batching:
            return [] if first is None else [first]
        batch = self.partitions.gathering = [first]
        deadline = time.monotonic() + self.stage.batch_wait_s
        while len(batch) < self.stage.batch_size and not self._stop.is_set():
            left = deadline - time.monotonic()
            if left <= 0:
                break
            msg = self._next_message(min(self.stage.linger_s, left))
            if msg is None:
                break  # nothing else waiting: start now
            batch.append(msg)
        self.partitions.gathering = []
        return batch

    def _next_message(self, timeout_s: float | None = None) -> Any:
        buffer = self.partitions.buffer
        while buffer:
            msg = buffer.popleft()
            if (msg.topic(), msg.partition()) in self.stats.assigned:
                return msg
        msg = self._consumer.poll(self._poll_timeout_s if timeout_s is None else timeout_s)
        if msg is None:
            return None
        err = msg.error()
        if err is not None:
            kafka = self._settings.kafka
            refuse_unauthorized(err, kafka, msg.topic(), group_id(kafka, self.stage.name))
            if err.fatal():
                raise KafkaException(err)
            log.warning("stage %s: consumer error: %s", self.stage.name, err)
            return None
        return msg

    def _run_batches(self, msgs: list[Any]) -> None:
        """Run ``msgs`` as a batch in a worker thread and keep polling (paused) while it runs;
        run a takeover batch beside it when partitions are assigned meanwhile; deliver and store
        each batch as it ends (:meth:`_complete`). Returns when none runs."""
        parts = self.partitions
        parts.busy, parts.takeover, parts.takeover_msgs = True, set(), []
        first = self._start(msgs, takeover=False)
        paused = False
        pause_at = time.monotonic() + self._pause_after_s
        abandon_at: float | None = None
        try:
            while parts.running:
                for batch in [b for b in parts.running if b.done.is_set()]:
                    parts.running.remove(batch)
                    self._complete(batch)
                    if batch.takeover and parts.running:
                        parts.set_flow(parts.takeover, flowing=True)  # the lane is free again
                if not parts.running:
                    break
                if not paused:
                    left = pause_at - time.monotonic()
                    if left > 0 and first.done.wait(left):
                        continue  # a short handler: done before anything was paused
                    parts.pause()
                    paused = True
                extra = self._consumer.poll(min(self._poll_timeout_s, 0.2))
                if extra is not None and extra.error() is None:
                    if (extra.topic(), extra.partition()) in parts.takeover:
                        parts.gather_takeover(extra)
                    else:
                        parts.buffer.append(extra)  # polled before its pause took effect
                if not self._stop.is_set():
                    parts.maybe_start_takeover()
                else:
                    grace = self._settings.kafka.shutdown_grace_s
                    abandon_at = abandon_at or time.monotonic() + grace
                    if time.monotonic() >= abandon_at:
                        for batch in parts.running:
                            log.warning(
                                "stage %s: abandoning %s at shutdown",
                                self.stage.name,
                                batch.records[0].where,
                            )
                            self.stats.abandoned += len(batch.msgs)
                        return
        finally:
            # after an error or at shutdown: abandoned (redelivered), not awaited again by close()
            parts.running.clear()
            parts.busy = False
            parts.buffer.extend(parts.takeover_msgs)  # their partitions are ordinary ones now
            parts.takeover, parts.takeover_msgs = set(), []
            if paused and not self._stop.is_set():
                parts.resume()

    def _start(self, msgs: list[Any], takeover: bool) -> RunningBatch:
        """Start :func:`~ferry.core.runtime.processing.process_batch` over ``msgs`` in a worker
        thread."""
        batch = RunningBatch(msgs, takeover=takeover)
        records = batch.records
        settled: list[Settled] = batch.box.setdefault("settled", [])

        def work() -> None:
            try:
                batch.box["result"] = process_batch(
                    records,
                    self.stage,
                    self.deps,
                    self._codec,
                    self._settings,
                    self._stop,
                    self.stats,
                    self.observer,
                    settled,
                )
            except BaseException as exc:  # noqa: BLE001 - handed to the loop thread and re-raised
                batch.box["error"] = exc
            finally:
                batch.done.set()

        self.partitions.running.append(batch)
        name = f"ferry-{self.stage.name}-{'takeover' if takeover else 'handler'}"
        threading.Thread(target=work, name=name, daemon=True).start()
        return batch

    def _complete(self, batch: RunningBatch) -> None:
        """A batch ended: deliver its outputs and store its offsets, except the records of
        partitions revoked or lost meanwhile (dropped, their new owner redoes them); nothing
        when the revoke callback delivered it already or it was abandoned.

        Raises:
            the batch's own error (a ConfigError, …); TransientError from delivery.
        """
        msgs = batch.msgs
        if batch.settled:
            self.stats.processed += batch.delivered
            self.stats.abandoned += len(msgs) - batch.delivered
            return
        if "error" in batch.box:
            raise batch.box["error"]
        outbound: list[OutboundRecord] | None = batch.box["result"]
        if outbound is None:
            self.stats.abandoned += len(msgs)
            return
        kept, outbound = batch.kept(outbound)
        if batch.revoked:
            self.stats.abandoned += len(msgs) - len(kept)
            log.info(
                "stage %s: %d of %d record(s) of the batch were on partitions revoked "
                "meanwhile %s: their outputs dropped, their new owner redoes them",
                self.stage.name,
                len(msgs) - len(kept),
                len(msgs),
                sorted(batch.revoked),
            )
        if not kept:
            return
        self._settle(batch, kept, outbound)
        self.stats.processed += len(kept)
        self.stats.quarantined += sum(
            r.topic == self._settings.kafka.topic("failed") for r in outbound
        )

    def _settle(self, batch: RunningBatch, kept: list[Any], outbound: list[OutboundRecord]) -> None:
        """Deliver ``outbound`` (produce and wait for acks, retried by ``settings.retry``; raises
        TransientError after), tell the file observer, then store the ``kept`` messages'
        offsets: what a batch that ended (:meth:`_complete`) or a batch finished before a
        revocation (:meth:`Partitions.finish_before_revoke`) does with what it kept."""
        publish(self._producer, outbound, self._settings)
        self._report(batch, kept)
        for msg in kept:
            self._store_offset(msg)

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

    def _install_signals(self) -> dict[int, Any]:
        if threading.current_thread() is not threading.main_thread():
            return {}

        def on_signal(signum: int, frame: FrameType | None) -> None:
            log.info("stage %s: signal %d, stopping", self.stage.name, signum)
            self.stop()

        return {s: signal.signal(s, on_signal) for s in (signal.SIGTERM, signal.SIGINT)}


def build_runner(
    stage: Stage,
    deps: Any,
    settings: Settings,
    *,
    client_id: str | None = None,
    observer: FileObserver | None = None,
) -> StageRunner:
    """Wire a stage: create the topic plan (idempotent), the consumer, the producer and the codec
    (schemas from ``settings.paths.schemas_dir``). Consumer group ``<topic_prefix>.<stage.name>``;
    client id ``client_id``, default ``ferry-<stage.name>-<pid>`` (the pid tells the instances
    of one stage apart in the group's member list: ``ferry ps`` health). ``observer``: see
    :mod:`ferry.core.runtime.observe`.

    Raises:
        TransientError: the broker did not answer the topic creation in time.
        ConfigError: bad settings or schemas, or the broker refused a topic.
    """
    kafka = settings.kafka
    ensure_topics(build_admin(kafka), kafka, retry=settings.retry)
    cid = client_id or f"ferry-{stage.name}-{os.getpid()}"
    return StageRunner(
        stage,
        deps,
        consumer=build_consumer(kafka, group_id(kafka, stage.name), cid),
        producer=build_producer(kafka, cid),
        codec=default_codec(settings.paths.schemas_dir),
        settings=settings,
        observer=observer,
    )


__all__ = ["StageRunner", "build_runner"]
