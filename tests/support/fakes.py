"""In-memory stand-ins for the confluent-kafka clients (no broker), shared by the unit tests.

They implement only the methods Ferry calls: ``ferry.core.kafka.clients.produce_and_wait``
(produce, then
flush) and the stage runner's consumer loop (``ferry.core.runtime.runner.StageRunner``).
"""

from __future__ import annotations

import time
from collections import deque
from collections.abc import Callable
from typing import Any

from confluent_kafka import TopicPartition


class FakeMessage:
    """A consumed (or delivered) record: topic, partition, offset, value and key; never an error."""

    def __init__(
        self,
        topic: str,
        partition: int = 0,
        offset: int = 0,
        value: bytes | None = None,
        key: bytes | None = None,
    ) -> None:
        self._t, self._p, self._o, self._v, self._k = topic, partition, offset, value, key

    def topic(self) -> str:
        return self._t

    def partition(self) -> int:
        return self._p

    def offset(self) -> int:
        return self._o

    def value(self) -> bytes | None:
        return self._v

    def key(self) -> bytes | None:
        return self._k

    def error(self) -> None:
        return None


class FakeProducer:
    """The producer ``produce_and_wait`` uses: ``produce(...)`` queues, ``flush(timeout)`` settles.

    Args:
        log: a call log shared with other fakes: ``("produce", topic)`` per record produced and
            ``("flush",)`` per flush that found records pending. None: no log.
        unacked: every flush leaves the pending records unacknowledged (kept pending, no delivery
            report) and returns this count, as a broker that does not answer in time.
        fail_flushes: the next ``fail_flushes`` flushes report the delivery error
            ``"broker down"`` for each pending record through its ``on_delivery`` (then dropped).
        on_flush: called at the start of each flush, while the records are still unacknowledged.

    Attributes:
        acked: (topic, key, value) of every acknowledged record, in order; ``sent`` is the same
            list.
        flushes: how many times ``flush`` was called.
    """

    def __init__(
        self,
        log: list[Any] | None = None,
        unacked: int = 0,
        fail_flushes: int = 0,
        on_flush: Callable[[], object] | None = None,
    ) -> None:
        self.log = log
        self.unacked = unacked
        self.fail_flushes = fail_flushes
        self.on_flush = on_flush
        self.queued: list[tuple[str, bytes, bytes, Any]] = []
        self.acked: list[tuple[str, bytes, bytes]] = []
        self.sent = self.acked
        self.flushes = 0

    def produce(self, topic: str, value: bytes, key: bytes, on_delivery: Any = None) -> None:
        if self.log is not None:
            self.log.append(("produce", topic))
        self.queued.append((topic, key, value, on_delivery))

    def poll(self, timeout: float = 0) -> int:
        return 0

    def flush(self, timeout: float = 0) -> int:
        self.flushes += 1
        if self.on_flush is not None:
            self.on_flush()
        if self.queued and self.log is not None:
            self.log.append(("flush",))
        if self.unacked:
            return self.unacked
        queued, self.queued = self.queued, []
        for topic, key, value, on_delivery in queued:
            msg = FakeMessage(topic, 0, 0, value, key)
            if self.fail_flushes > 0:
                if on_delivery is not None:
                    on_delivery("broker down", msg)
            else:
                self.acked.append((topic, key, value))
                if on_delivery is not None:
                    on_delivery(None, msg)
        if self.fail_flushes > 0:
            self.fail_flushes -= 1
        return 0


class FakeConsumer:
    """Serves queued messages from one partition of ``topic``; honours pause(); records every
    call in ``log``. ``on_poll`` (if set) runs at the start of each poll; ``polls_while_paused``
    counts the polls made while paused."""

    def __init__(
        self, log: list[Any], messages: list[FakeMessage], topic: str = "unit.extracted"
    ) -> None:
        self.log = log
        self.queue = deque(messages)
        self.parts = [TopicPartition(topic, 0)]
        self.paused = False
        self.callbacks: dict[str, Any] = {}
        self.polls_while_paused = 0
        self.on_poll: Callable[[FakeConsumer], None] | None = None

    def subscribe(self, topics: list[str], **callbacks: Any) -> None:
        self.log.append(("subscribe", tuple(topics)))
        self.callbacks = callbacks
        callbacks["on_assign"](self, self.parts)

    def assign(self, parts: list[TopicPartition]) -> None:
        self.log.append(("assign", len(parts)))

    def incremental_assign(self, parts: list[TopicPartition]) -> None:
        """The cooperative protocol's assign (the default assignor); logged as ``assign``: this
        fake's one partition is always assigned whole, so the two protocols look alike here
        (tests/unit/test_runner_group.py tells them apart)."""
        self.log.append(("assign", len(parts)))

    def assignment(self) -> list[TopicPartition]:
        return self.parts

    def pause(self, parts: list[TopicPartition]) -> None:
        self.paused = True
        self.log.append(("pause",))

    def resume(self, parts: list[TopicPartition]) -> None:
        self.paused = False
        self.log.append(("resume",))

    def poll(self, timeout: float) -> FakeMessage | None:
        """The next queued message, or None after at most 10 ms (paused, or nothing queued)."""
        if self.on_poll is not None:
            self.on_poll(self)
        if self.paused:
            self.polls_while_paused += 1
            time.sleep(min(timeout, 0.01))  # a real poll blocks up to ``timeout`` when idle
            return None
        if self.queue:
            return self.queue.popleft()
        time.sleep(min(timeout, 0.01))
        return None

    def store_offsets(self, message: FakeMessage) -> None:
        self.log.append(("store", message.offset() + 1))

    def commit(self, offsets: list[TopicPartition], asynchronous: bool = True) -> None:
        self.log.append(("commit", [(tp.partition, tp.offset) for tp in offsets]))

    def close(self) -> None:
        self.log.append(("close",))
