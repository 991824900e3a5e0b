"""The runner's consumer-group details for hot standby: the warm-up before joining, the client id
that tells instances apart, incremental assignment under the cooperative protocol."""

from __future__ import annotations

import os
import time
from typing import Any

from confluent_kafka import TopicPartition
from tests.support.fakes import FakeMessage

from ferry.core.events import FileExtracted
from ferry.core.kafka.clients import consumer_config
from ferry.core.runtime.rebalance import RunningBatch
from ferry.core.runtime.runner import StageRunner
from ferry.core.runtime.stage import Stage
from ferry.settings import Settings


class RecordingConsumer:
    """Records the calls the runner makes; polls return nothing."""

    def __init__(self, runner_box: dict[str, StageRunner]) -> None:
        self.calls: list[tuple[str, Any]] = []
        self._box = runner_box

    def subscribe(self, topics: list[str], **_callbacks: Any) -> None:
        self.calls.append(("subscribe", topics))

    def poll(self, _timeout: float) -> None:
        self._box["runner"].stop()

    def close(self) -> None:
        self.calls.append(("close", None))

    def assign(self, parts: list[TopicPartition]) -> None:
        self.calls.append(("assign", [p.partition for p in parts]))

    def incremental_assign(self, parts: list[TopicPartition]) -> None:
        self.calls.append(("incremental_assign", [p.partition for p in parts]))

    def pause(self, parts: list[TopicPartition]) -> None:
        self.calls.append(("pause", [p.partition for p in parts]))

    def resume(self, parts: list[TopicPartition]) -> None:
        self.calls.append(("resume", [p.partition for p in parts]))


class NullProducer:
    def flush(self, _timeout: float) -> int:
        return 0


def runner(
    settings: Settings, warm_up: Any = None, takeover: bool = False
) -> tuple[StageRunner, RecordingConsumer]:
    box: dict[str, StageRunner] = {}
    consumer = RecordingConsumer(box)
    r = StageRunner(
        Stage("load", {FileExtracted: lambda e, d: []}, warm_up=warm_up, takeover=takeover),
        None,
        consumer=consumer,
        producer=NullProducer(),
        codec=None,  # type: ignore[arg-type]
        settings=settings,
    )
    box["runner"] = r
    return r, consumer


def test_warm_up_runs_before_the_runner_joins_its_group():
    box: dict[str, RecordingConsumer] = {}
    r, consumer = runner(Settings(), warm_up=lambda: box["c"].calls.append(("warm", None)))
    box["c"] = consumer
    r.run(install_signal_handlers=False)
    assert [c for c, _ in consumer.calls] == ["warm", "subscribe", "close"]


def test_a_failing_warm_up_is_logged_and_the_runner_still_joins(caplog):
    def boom() -> None:
        raise RuntimeError("no master")

    r, consumer = runner(Settings(), warm_up=boom)
    r.run(install_signal_handlers=False)
    assert [c for c, _ in consumer.calls] == ["subscribe", "close"]
    assert "stage load: warm-up failed; building on first use" in caplog.text


def test_eager_protocol_assigns_the_full_list_cooperative_only_the_added():
    tp = [TopicPartition("p.extracted", 1), TopicPartition("p.extracted", 2)]
    eager, ec = runner(Settings(kafka={"assignment_strategy": "range"}))
    eager.partitions.on_assign(ec, tp)
    coop, cc = runner(Settings(kafka={"assignment_strategy": "cooperative-sticky"}))
    coop.partitions.on_assign(cc, tp)
    assert ec.calls == [("assign", [1, 2]), ("resume", [1, 2])]
    assert cc.calls == [("incremental_assign", [1, 2]), ("resume", [1, 2])]


def test_partitions_assigned_mid_batch_flow_for_a_takeover_batch_unless_one_runs():
    """While a batch runs (on partition 0): new partitions are resumed and marked for a takeover
    batch; the batch's own partition handed back (eager protocol) waits paused; once a takeover
    batch runs, further new partitions wait paused too; without ``takeover`` all wait."""
    tp = [TopicPartition("p.extracted", n) for n in range(4)]
    r, c = runner(Settings(), takeover=True)
    r.partitions.busy = True
    r.partitions.running = [RunningBatch([FakeMessage("p.extracted", 0, 7, b"")])]
    r.partitions.on_assign(c, tp[:2])
    assert c.calls == [("incremental_assign", [0, 1]), ("resume", [1]), ("pause", [0])]
    assert r.partitions.takeover == {("p.extracted", 1)}
    r.partitions.running.append(
        RunningBatch([FakeMessage("p.extracted", 1, 3, b"")], takeover=True)
    )
    r.partitions.on_assign(c, tp[2:3])
    assert c.calls[-1] == ("pause", [2])
    assert r.partitions.takeover == {("p.extracted", 1), ("p.extracted", 2)}
    plain, pc = runner(Settings())
    plain.partitions.busy = True
    plain.partitions.on_assign(pc, tp[3:])
    assert pc.calls == [("incremental_assign", [3]), ("pause", [3])]


def test_consumer_group_settings_for_failover():
    cfg = consumer_config(Settings().kafka, "ferry.load", f"ferry-load-{os.getpid()}")
    assert (
        cfg["session.timeout.ms"],
        cfg["heartbeat.interval.ms"],
        cfg["partition.assignment.strategy"],
        cfg["client.id"],
    ) == (10_000, 3000, "cooperative-sticky", f"ferry-load-{os.getpid()}")


class Waits:
    """A batch's ``done`` event that never ends: each wait lasts its whole timeout (s), which is
    recorded."""

    def __init__(self) -> None:
        self.timeouts: list[float] = []

    def wait(self, timeout: float) -> bool:
        self.timeouts.append(timeout)
        time.sleep(timeout)
        return False

    def is_set(self) -> bool:
        return False


def test_one_revocation_waits_one_grace_for_all_its_running_batches():
    """Found by review: each running batch got a whole ``revoke_grace_s``, so a revocation of
    the first and the takeover batch's partitions could block poll() for twice the grace."""
    r, c = runner(Settings(kafka={"revoke_grace_s": 0.3}), takeover=True)
    first = RunningBatch([FakeMessage("p.extracted", 0, 1, b"")])
    takeover = RunningBatch([FakeMessage("p.extracted", 1, 1, b"")], takeover=True)
    waits = Waits()
    first.done = takeover.done = waits  # type: ignore[assignment]
    r.partitions.busy, r.partitions.running = True, [first, takeover]
    r.partitions.on_revoke(c, [TopicPartition("p.extracted", 0), TopicPartition("p.extracted", 1)])
    # the first batch waits out the grace; the second has none left (was: a grace of its own)
    assert len(waits.timeouts) == 2
    assert 0.25 < waits.timeouts[0] <= 0.3
    assert waits.timeouts[1] == 0.0
    assert (first.revoked, takeover.revoked) == ({("p.extracted", 0)}, {("p.extracted", 1)})


def test_a_revocation_drops_the_records_of_the_batch_being_gathered():
    """Found by review: records gathered for the next batch were kept when their partition was
    revoked meanwhile (outputs published for a partition no longer owned; when it came back,
    its stored offset moved backwards)."""
    r, c = runner(Settings())
    gathered = r.partitions.gathering = [FakeMessage("p.extracted", p, 5, b"") for p in (0, 1, 0)]
    r.partitions.on_revoke(c, [TopicPartition("p.extracted", 0)])
    assert [(m.partition(), m.offset()) for m in gathered] == [(1, 5)]
