"""Plain produce and read-back on the real broker, and a stage runner on a background thread
(:class:`Running`), for the integration tests."""

from __future__ import annotations

import threading
import time

from confluent_kafka import Consumer, Producer, TopicPartition

from ferry.core.runtime.runner import StageRunner
from ferry.settings import Settings


def produce(s: Settings, topic: str, key: bytes, value: bytes) -> None:
    """Produce one record to ``s.kafka.topic(topic)`` and wait for its acknowledgement (10 s).

    Raises:
        AssertionError: the record was not acknowledged in 10 s.
    """
    producer = Producer(
        {"bootstrap.servers": s.kafka.bootstrap_servers, "enable.idempotence": True}
    )
    producer.produce(s.kafka.topic(topic), key=key, value=value)
    assert producer.flush(10) == 0


def read_all(s: Settings, topic: str) -> list[tuple[bytes | None, bytes | None]]:
    """Every record now in partition 0 of ``s.kafka.topic(topic)`` (up to its high watermark), as
    (key, value) pairs in offset order; commits nothing.

    Raises:
        AssertionError: the records were not all read within 30 s.
    """
    full = s.kafka.topic(topic)
    consumer = Consumer(
        {
            "bootstrap.servers": s.kafka.bootstrap_servers,
            "group.id": f"reader-{full}",
            "enable.auto.commit": False,
        }
    )
    try:
        low, high = consumer.get_watermark_offsets(TopicPartition(full, 0), timeout=10)
        consumer.assign([TopicPartition(full, 0, low)])
        out: list[tuple[bytes | None, bytes | None]] = []
        deadline = time.monotonic() + 30
        while len(out) < high - low:
            assert time.monotonic() < deadline, f"read {len(out)} of {high - low} records of {full}"
            msg = consumer.poll(0.5)
            if msg is not None and msg.error() is None:
                out.append((msg.key(), msg.value()))
        return out
    finally:
        consumer.close()


class Running:
    """A runner on a background thread (signals stay with pytest)."""

    def __init__(self, runner: StageRunner) -> None:
        self.runner = runner
        self.error: BaseException | None = None
        self.thread = threading.Thread(target=self._run, daemon=True)
        self.thread.start()

    def _run(self) -> None:
        try:
            self.runner.run(install_signal_handlers=False)
        except BaseException as exc:  # noqa: BLE001 - reported by stop()
            self.error = exc

    def stop(self) -> None:
        self.runner.stop()
        self.thread.join(60)
        assert not self.thread.is_alive()
        assert self.error is None, self.error
