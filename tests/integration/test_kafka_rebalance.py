"""Rebalances on the real broker: a partition's pause flag across revoke and re-assign (eager
protocol), commit on revoke (cooperative protocol, the default), and the takeover batch. Helpers
are those of test_kafka_runner.py; each test has its own topic prefix, topics and consumer groups.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import Any

import pytest
from confluent_kafka import Consumer, Producer
from tests.integration.test_kafka_runner import (
    STAGE,
    committed_both,
    make_manifest,
    start,
    topics_and_codec,
    transformed_of,
)
from tests.support.kafka_io import Running

from ferry.core.events import FileExtracted
from ferry.core.kafka.clients import group_id
from ferry.core.runtime.runner import build_runner
from ferry.core.runtime.stage import Stage
from ferry.core.wire.avro import EventCodec
from ferry.settings import Settings
from ferry_kit.testing.waiting import wait_for

pytestmark = [pytest.mark.integration, pytest.mark.stack("kafka")]


def putter(ks: Settings, codec: EventCodec, topic: str) -> Callable[[int, int], FileExtracted]:
    """``put(n, partition)``: produce FileExtracted of manifest ``n`` to that partition (acked)."""
    producer = Producer({"bootstrap.servers": ks.kafka.bootstrap_servers})

    def put(n: int, partition: int) -> FileExtracted:
        ev = FileExtracted(make_manifest(n))
        producer.produce(
            topic, key=ev.file_id.encode(), value=codec.encode(ev), partition=partition
        )
        assert producer.flush(10) == 0
        return ev

    return put


def test_partitions_paused_across_a_rebalance_are_consumed_after_reassignment(
    ks: Settings, running: list[Running]
) -> None:
    """Found by the Kafka-restart fault scenario: librdkafka keeps a partition's pause flag
    across revoke and re-assign (librdkafka issue #1849), so a partition paused during a long
    handler, revoked, and handed back after the handler finished stayed paused for good.

    Deterministic sequence with a second group member: the runner pauses both partitions for a
    blocked handler; a plain consumer joins (eager rebalance: the runner loses both, gets one
    back, the other goes to the newcomer); the handler is released (its outcome is dropped:
    its partition was revoked); the newcomer leaves without committing; the runner gets both
    partitions back while idle. Every record of both partitions must then be handled.
    """
    # The eager (range) protocol this sequence is about: a group's members must all speak the
    # same one, and the plain newcomer below uses librdkafka's default (range). revoke_grace_s 0:
    # the revocation does not wait for the blocked handler (commit on revoke has its own test).
    eager = {"partitions": 2, "assignment_strategy": "range", "revoke_grace_s": 0.0}
    ks = ks.model_copy(update={"kafka": ks.kafka.model_copy(update=eager)})
    codec = topics_and_codec(ks)
    topic = ks.kafka.topic("extracted")
    put = putter(ks, codec, topic)

    release = threading.Event()
    handled: list[str] = []

    def handler(ev: FileExtracted, deps: Any) -> list[Any]:
        if not handled:
            release.wait(60)  # the first call blocks until the test has rebalanced the group
        handled.append(ev.file_id)
        return [transformed_of(ev)]

    first = put(10, 0)
    r = start(running, ks, handler)
    wait_for(lambda: r.runner.stats.pauses == 1, "the blocked handler's partitions paused")

    newcomer_parts: list[int] = []
    newcomer = Consumer(
        {
            "bootstrap.servers": ks.kafka.bootstrap_servers,
            "group.id": group_id(ks.kafka, STAGE),
            "enable.auto.commit": False,
            "session.timeout.ms": 6000,
        }
    )
    newcomer.subscribe(
        [topic], on_assign=lambda c, ps: newcomer_parts.extend(p.partition for p in ps)
    )

    def joined() -> bool:
        if newcomer_parts and r.runner.stats.assignments == 2:
            return True
        newcomer.poll(0.2)  # the newcomer joins the group only while it polls
        return False

    wait_for(joined, "the newcomer to join the runner's group", 60, poll_s=0)
    assert r.runner.stats.revocations == 1
    assert len(newcomer_parts) == 1  # range assignor: one partition each
    assert len(r.runner.stats.assigned) == 1
    release.set()
    wait_for(lambda: r.runner.stats.abandoned == 1, "the revoked handler's outcome dropped")
    newcomer.close()  # leaves the group without committing anything

    wait_for(lambda: len(r.runner.stats.assigned) == 2, "both partitions back at the runner")
    later = [put(11, 0), put(12, 1)]
    wait_for(
        lambda: {first.file_id, *(e.file_id for e in later)} <= set(handled),
        "every record of both partitions handled",
    )
    wait_for(lambda: r.runner.stats.processed == 3, "three records processed")
    r.stop()
    assert sorted(handled[1:]) == sorted([first.file_id, *(e.file_id for e in later)])
    assert committed_both(ks, topic) == [2, 1]


def test_a_partition_revoked_mid_batch_is_committed_before_it_moves(
    ks: Settings, running: list[Running]
) -> None:
    """Commit on revoke, cooperative protocol (the default): a batch holds one record of each of
    two partitions when a second member joins; whichever partition moves, the revocation waits
    for the batch, delivers it and commits both offsets before the newcomer gets the partition:
    one handler call, nothing abandoned, committed offsets [1, 1] (the newcomer has nothing to
    redo). Before, the batch's outcome was dropped and redone by the new owner."""
    ks = ks.model_copy(update={"kafka": ks.kafka.model_copy(update={"partitions": 2})})
    assert ks.kafka.assignment_strategy == "cooperative-sticky"
    codec = topics_and_codec(ks)
    topic = ks.kafka.topic("extracted")
    producer = Producer({"bootstrap.servers": ks.kafka.bootstrap_servers})
    evs = [FileExtracted(make_manifest(30 + p)) for p in (0, 1)]
    for p, ev in enumerate(evs):
        producer.produce(topic, key=ev.file_id.encode(), value=codec.encode(ev), partition=p)
    assert producer.flush(10) == 0

    calls: list[list[str]] = []
    box: dict[str, Running] = {}

    def batch(events: list[FileExtracted], deps: Any) -> list[list[Any]]:
        calls.append(sorted(e.file_id for e in events))
        if len(calls) == 1:  # still running when the newcomer's join revokes a partition
            wait_for(lambda: box["r"].runner.stats.revocations == 1, "the revocation", 60, 0.05)
        return [[transformed_of(e)] for e in events]

    stage = Stage(STAGE, {FileExtracted: batch}, batch_size=10, batch_wait_s=10, linger_s=2)
    box["r"] = r = Running(build_runner(stage, None, ks))
    running.append(r)
    wait_for(lambda: r.runner.stats.pauses == 1, "the batch's partitions paused")
    assert calls == [sorted(e.file_id for e in evs)]

    newcomer_parts: list[int] = []
    newcomer = Consumer(
        {
            "bootstrap.servers": ks.kafka.bootstrap_servers,
            "group.id": group_id(ks.kafka, STAGE),
            "enable.auto.commit": False,
            "partition.assignment.strategy": "cooperative-sticky",
        }
    )
    newcomer.subscribe(
        [topic],
        on_assign=lambda c, ps: (
            c.incremental_assign(ps),
            newcomer_parts.extend(p.partition for p in ps),
        ),
    )

    def joined() -> bool:
        newcomer.poll(0.2)  # the newcomer joins the group only while it polls
        return bool(newcomer_parts)

    wait_for(joined, "the newcomer to get a partition", 90, poll_s=0)
    try:
        assert (r.runner.stats.processed, r.runner.stats.abandoned) == (2, 0)
        assert calls == [sorted(e.file_id for e in evs)]
        assert committed_both(ks, topic) == [1, 1]
    finally:
        newcomer.close()
    r.stop()


def test_partitions_taken_over_mid_batch_run_beside_it(
    ks: Settings, running: list[Running]
) -> None:
    """Hot standby: the runner owns one of two partitions and is in a batch that will not end
    until the other partition's record is handled and committed; the member owning that other
    partition leaves. The runner gets it while busy and runs its record as a takeover batch
    beside the first, delivered and committed while the first still runs. Before, the new
    partition waited paused behind the running batch (here: for ever; in the hot-standby
    scenario, a 55 s transform batch)."""
    ks = ks.model_copy(update={"kafka": ks.kafka.model_copy(update={"partitions": 2})})
    codec = topics_and_codec(ks)
    topic = ks.kafka.topic("extracted")
    put = putter(ks, codec, topic)

    member_parts: set[int] = set()
    member = Consumer(
        {
            "bootstrap.servers": ks.kafka.bootstrap_servers,
            "group.id": group_id(ks.kafka, STAGE),
            "enable.auto.commit": False,
            "partition.assignment.strategy": "cooperative-sticky",
        }
    )
    member.subscribe(
        [topic],
        on_assign=lambda c, ps: member_parts.update(p.partition for p in ps),
        on_revoke=lambda c, ps: member_parts.difference_update(p.partition for p in ps),
    )

    def member_has(n: int) -> Callable[[], bool]:
        def check() -> bool:
            member.poll(0.2)  # a member takes part in a rebalance only while it polls
            return len(member_parts) == n

        return check

    wait_for(member_has(2), "the first member to own both partitions", 60, poll_s=0)

    calls: list[list[str]] = []
    box: dict[str, Any] = {}

    def batch(events: list[FileExtracted], deps: Any) -> list[list[Any]]:
        calls.append([e.file_id for e in events])
        if len(calls) == 1:  # the first batch ends only once the taken-over record is committed
            other = 1 - box["mine"]
            wait_for(
                lambda: committed_both(ks, topic)[other] == 1,
                "the taken-over partition's record committed while this batch runs",
                90,
                0.2,
            )
        return [[transformed_of(e)] for e in events]

    stage = Stage(STAGE, {FileExtracted: batch}, batch_size=10, linger_s=0.2, takeover=True)
    r = Running(build_runner(stage, None, ks))
    running.append(r)

    def split() -> bool:
        member_has(1)()
        return len(member_parts) == 1 and len(r.runner.stats.assigned) == 1

    wait_for(split, "the runner to join and get one partition", 90, poll_s=0)
    [(_, mine)] = r.runner.stats.assigned
    box["mine"] = mine
    first = put(40, mine)
    wait_for(lambda: r.runner.stats.pauses == 1, "the runner's batch running, paused")
    second = put(41, 1 - mine)
    member.close()  # leaves: its partition moves to the runner while the batch runs

    wait_for(lambda: r.runner.stats.processed == 2, "both records processed", 120)
    r.stop()
    assert calls == [[first.file_id], [second.file_id]]
    assert (r.runner.stats.takeover_batches, r.runner.stats.abandoned) == (1, 0)
    assert committed_both(ks, topic) == [1, 1]
