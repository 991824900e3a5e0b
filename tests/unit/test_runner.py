"""The stage runner's loop with in-memory fakes of the consumer and producer (no broker):
offsets, pausing, shutdown, rebalance. What one record becomes is in test_processing.py."""

from __future__ import annotations

import contextlib
import threading
from collections.abc import Callable
from typing import Any

import pytest
from confluent_kafka import TopicPartition
from tests.support.fakes import FakeConsumer, FakeMessage, FakeProducer
from tests.unit.test_processing import EXTRACTED, FILE_ID, TRANSFORMED, settings

from ferry.core.events import FileExtracted
from ferry.core.runtime.runner import StageRunner
from ferry.core.runtime.stage import Stage
from ferry.core.wire.avro import EventCodec
from ferry.errors import TransientError
from ferry.settings import Settings
from ferry_kit.testing.waiting import wait_for

# -- the loop, with fakes -------------------------------------------------------------------


def make_runner(
    codec: EventCodec, handler: Callable[..., Any], values: list[bytes], **kw: Any
) -> tuple[StageRunner, FakeConsumer, FakeProducer, list[Any]]:
    log: list[Any] = []
    msgs = [FakeMessage("unit.extracted", 0, i, v, FILE_ID.encode()) for i, v in enumerate(values)]
    consumer = FakeConsumer(log, msgs)
    producer = FakeProducer(log, unacked=kw.pop("unacked", 0))
    runner = StageRunner(
        Stage("transform", {FileExtracted: handler}),
        None,
        consumer=consumer,
        producer=producer,
        codec=codec,
        settings=kw.pop("settings", settings()),
        pause_after_s=0.05,
        poll_timeout_s=0.01,
    )
    return runner, consumer, producer, log


def batching_runner(
    codec: EventCodec,
    batch: Callable[..., Any],
    consumer: FakeConsumer,
    log: list[Any],
    s: Settings,
) -> StageRunner:
    """A batching transform runner (up to 10 records, batch_wait_s an hour, linger 50 ms) on
    ``consumer``, producing to a FakeProducer that logs to ``log``."""
    return StageRunner(
        Stage("transform", {FileExtracted: batch}, batch_size=10, batch_wait_s=3600, linger_s=0.05),
        None,
        consumer=consumer,
        producer=FakeProducer(log),
        codec=codec,
        settings=s,
        pause_after_s=0.05,
        poll_timeout_s=0.01,
    )


def run_until(runner: StageRunner, condition: Callable[[], bool], timeout_s: float = 5.0) -> Any:
    result: dict[str, Any] = {}

    def target() -> None:
        try:
            result["stats"] = runner.run(install_signal_handlers=False)
        except BaseException as exc:  # noqa: BLE001 - handed to the test thread
            result["error"] = exc

    thread = threading.Thread(target=target, daemon=True)
    thread.start()
    # Until the condition holds or the runner ended; the caller asserts what it expects either way.
    with contextlib.suppress(AssertionError):
        wait_for(lambda: condition() or not thread.is_alive(), "run_until", timeout_s, poll_s=0.005)
    runner.stop()
    thread.join(timeout_s)
    assert not thread.is_alive()
    return result


def test_offset_is_stored_only_after_outputs_are_acknowledged(codec: EventCodec) -> None:
    runner, consumer, producer, log = make_runner(
        codec, lambda ev, deps: [TRANSFORMED], [codec.encode(EXTRACTED), b"not-avro"]
    )
    run_until(runner, lambda: runner.stats.processed == 2)
    steps = [entry for entry in log if entry[0] in ("produce", "flush", "store", "close")]
    assert steps == [
        ("produce", "unit.transformed"),
        ("flush",),
        ("store", 1),
        ("produce", "unit.failed"),
        ("flush",),
        ("store", 2),
        ("close",),
    ]
    assert (runner.stats.processed, runner.stats.quarantined, runner.stats.pauses) == (2, 1, 0)


def test_long_handler_pauses_keeps_polling_then_resumes(codec: EventCodec) -> None:
    box: dict[str, FakeConsumer] = {}

    def slow(ev: FileExtracted, deps: Any) -> list[Any]:
        # Long until the loop has polled 10 times while paused (deadline 5 s), not a fixed time.
        wait_for(
            lambda: box["consumer"].polls_while_paused >= 10, "10 polls while paused", 5.0, 0.005
        )
        return [TRANSFORMED]

    runner, consumer, producer, log = make_runner(codec, slow, [codec.encode(EXTRACTED)])
    box["consumer"] = consumer
    run_until(runner, lambda: runner.stats.processed == 1)
    names = [entry[0] for entry in log if entry[0] in ("pause", "resume", "produce", "store")]
    # The first resume is the assignment's (the pause flag is set on every assign); the batch
    # is delivered and its offset stored before its partitions resume.
    assert names == ["resume", "pause", "produce", "store", "resume"]
    assert consumer.polls_while_paused >= 10
    assert (runner.stats.pauses, runner.stats.handler_calls) == (1, 1)


def test_unacknowledged_output_stops_the_runner_without_storing(codec: EventCodec) -> None:
    runner, consumer, producer, log = make_runner(
        codec, lambda ev, deps: [TRANSFORMED], [codec.encode(EXTRACTED)], unacked=1
    )
    result = run_until(runner, lambda: False, timeout_s=5.0)
    assert isinstance(result.get("error"), TransientError)
    assert [e for e in log if e[0] == "store"] == []
    assert ("close",) in log
    assert sum(1 for e in log if e[0] == "produce") == 3  # settings().retry.max_attempts


def test_stop_during_long_handler_abandons_after_grace(codec: EventCodec) -> None:
    release = threading.Event()

    def stuck(ev: FileExtracted, deps: Any) -> list[Any]:
        release.wait(5)
        return [TRANSFORMED]

    runner, consumer, producer, log = make_runner(
        codec, stuck, [codec.encode(EXTRACTED)], settings=settings(shutdown_grace_s=0.1)
    )
    result = run_until(runner, lambda: runner.stats.pauses == 1)
    release.set()
    assert "error" not in result
    assert [e for e in log if e[0] in ("produce", "store")] == []
    assert runner.stats.abandoned == 1


def test_stop_during_handler_within_grace_finishes_the_record(codec: EventCodec) -> None:
    box: dict[str, StageRunner] = {}

    def slow(ev: FileExtracted, deps: Any) -> list[Any]:
        # Still running when the stop comes (run_until stops the runner once it paused).
        wait_for(lambda: box["runner"]._stop.is_set(), "the stop request", 5.0, 0.005)
        return [TRANSFORMED]

    runner, consumer, producer, log = make_runner(codec, slow, [codec.encode(EXTRACTED)])
    box["runner"] = runner
    run_until(runner, lambda: runner.stats.pauses == 1)
    assert [e for e in log if e[0] in ("produce", "store")] == [
        ("produce", "unit.transformed"),
        ("store", 1),
    ]


@pytest.mark.parametrize(
    ("callback", "expected", "processed_abandoned"),
    [
        # Commit on revoke: the revocation lets the running record finish, delivers its output
        # and commits its offset before the partition moves (its new owner has nothing to redo).
        (
            "on_revoke",
            [("produce", "unit.transformed"), ("store", 1), ("commit", [(0, 1)])],
            (1, 0),
        ),
        # Lost (this member was fenced): the partition is another's already; nothing is stored.
        ("on_lost", [], (0, 1)),
    ],
)
def test_a_partition_taken_while_its_record_runs(
    codec: EventCodec, callback: str, expected: list[Any], processed_abandoned: tuple[int, int]
) -> None:
    box: dict[str, StageRunner] = {}

    def slow(ev: FileExtracted, deps: Any) -> list[Any]:
        # Still running when its partition is taken.
        wait_for(lambda: box["runner"].stats.revocations == 1, "the revocation", 5.0, 0.005)
        return [TRANSFORMED]

    runner, consumer, producer, log = make_runner(codec, slow, [codec.encode(EXTRACTED)])
    box["runner"] = runner

    def take_once(c: FakeConsumer) -> None:
        if c.paused and runner.stats.revocations == 0:
            c.callbacks[callback](c, c.parts)

    consumer.on_poll = take_once
    run_until(runner, lambda: runner.stats.processed + runner.stats.abandoned == 1)
    assert [e for e in log if e[0] in ("produce", "store", "commit")] == expected
    stats = runner.stats
    assert (stats.revocations, (stats.processed, stats.abandoned)) == (1, processed_abandoned)


def test_a_revoked_partition_drops_only_its_own_records_of_the_batch(codec: EventCodec) -> None:
    """A batch took records from partitions 0 and 1; partition 0 is revoked while it runs
    (cooperative rebalance: another instance joined) and the batch outlasts the revoke grace.
    Partition 1's record is still this consumer's: its output is delivered and its offset
    stored; dropping it too let the next batch's offsets commit over it (compose scaled-replica
    scenario: 3 of 12 files lost)."""
    log: list[Any] = []
    value = codec.encode(EXTRACTED)
    messages = [
        FakeMessage("unit.extracted", 0, 7, value),
        FakeMessage("unit.extracted", 1, 3, value),
    ]
    consumer = FakeConsumer(log, messages)
    consumer.parts = [TopicPartition("unit.extracted", 0), TopicPartition("unit.extracted", 1)]
    box: dict[str, StageRunner] = {}

    def batch(events: Any, deps: Any) -> list[list[Any]]:
        # Outlasts the revoke grace: done only once the revocation gave up waiting.
        only_1 = {("unit.extracted", 1)}
        wait_for(lambda: box["runner"].stats.assigned == only_1, "the revocation", 5.0, 0.005)
        return [[TRANSFORMED] for _ in events]

    def revoke_partition_0(c: FakeConsumer) -> None:
        if c.paused and box["runner"].stats.revocations == 0:
            c.parts = c.parts[1:]
            c.callbacks["on_revoke"](c, [TopicPartition("unit.extracted", 0)])

    consumer.on_poll = revoke_partition_0
    runner = batching_runner(codec, batch, consumer, log, settings(revoke_grace_s=0.05))
    box["runner"] = runner
    run_until(runner, lambda: runner.stats.processed == 1)
    assert [e for e in log if e[0] in ("produce", "store")] == [
        ("produce", "unit.transformed"),
        ("store", 4),
    ]
    assert (runner.stats.processed, runner.stats.abandoned) == (1, 1)


def test_a_batch_starts_as_soon_as_nothing_else_is_waiting(codec: EventCodec) -> None:
    """Natural batching: batch_wait_s is an hour, yet three waiting events form one batch at once
    and an event arriving later is a batch of its own, each started without waiting."""
    log: list[Any] = []
    value = codec.encode(EXTRACTED)
    consumer = FakeConsumer(log, [FakeMessage("unit.extracted", 0, i, value) for i in range(3)])
    sizes: list[int] = []

    def batch(events: Any, deps: Any) -> list[list[Any]]:
        sizes.append(len(events))
        if len(sizes) == 1:
            consumer.queue.append(FakeMessage("unit.extracted", 0, 3, value))
        return [[TRANSFORMED] for _ in events]

    runner = batching_runner(codec, batch, consumer, log, settings())
    run_until(runner, lambda: runner.stats.processed == 4)
    assert (sizes, runner.stats.processed) == ([3, 1], 4)
