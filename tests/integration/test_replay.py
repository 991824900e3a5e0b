"""``ferry replay`` on the real broker: a real consumer group's committed offsets move to exactly
the expected values for an offset, a timestamp and file ids; the command refuses while the group
has an active member; ``--dry-run`` changes nothing; ``wait_drained`` sees a replay drain.

Each test has its own topic prefix (so its own topics and groups). Records are produced to
explicit partitions so every offset is known.
"""

from __future__ import annotations

import os
import subprocess
import threading
import time
from collections.abc import Callable, Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka import Consumer, Producer, TopicPartition
from tests.support.factories import named

from ferry.core.events import FileExtracted
from ferry.core.kafka.clients import build_admin, group_id
from ferry.core.kafka.topics import ensure_topics
from ferry.core.wire.avro import default_codec
from ferry.ops.replay import GroupActive, Target, apply_plan, build_plan, wait_drained
from ferry.settings import Settings
from ferry_kit.testing.waiting import wait_for

pytestmark = [pytest.mark.integration, pytest.mark.stack("kafka")]

STAGE = "transform"  # input topic <prefix>.extracted, group <prefix>.transform
T0 = datetime(2024, 3, 1, 8, 0, tzinfo=UTC)
FERRY = Path(os.environ.get("VIRTUAL_ENV", Path(__file__).parents[2] / ".venv")) / "bin" / "ferry"


FILES = {n: named("flights", n, at=T0, size_bytes=1, trace_id="0" * 32) for n in "abcde"}


def fid(name: str) -> str:
    return FILES[name].file_id


@pytest.fixture
def rs(stack: Settings, unique: Any) -> Settings:
    s: Settings = unique.settings(stack)
    ensure_topics(build_admin(s.kafka), s.kafka)
    return s


def produce(s: Settings, rows: list[tuple[int, str, int | None]]) -> None:
    """(partition, file name, timestamp ms or None) → FileExtracted on <prefix>.extracted."""
    codec = default_codec(s.paths.schemas_dir)
    producer = Producer(
        {"bootstrap.servers": s.kafka.bootstrap_servers, "enable.idempotence": True}
    )
    topic = s.kafka.topic("extracted")
    for partition, name, ts in rows:
        kw: dict[str, Any] = {"timestamp": ts} if ts is not None else {}
        value = codec.encode(FileExtracted(FILES[name]))
        producer.produce(topic, value=value, key=fid(name).encode(), partition=partition, **kw)
    assert producer.flush(10) == 0


def commit(s: Settings, offsets: dict[int, int]) -> None:
    """Commit ``offsets`` for the stage's group without joining it (assign + commit)."""
    consumer = Consumer(
        {"bootstrap.servers": s.kafka.bootstrap_servers, "group.id": group_id(s.kafka, STAGE)}
    )
    try:
        topic = s.kafka.topic("extracted")
        consumer.commit(
            offsets=[TopicPartition(topic, p, o) for p, o in offsets.items()], asynchronous=False
        )
    finally:
        consumer.close()


def committed(s: Settings) -> dict[int, int]:
    consumer = Consumer(
        {"bootstrap.servers": s.kafka.bootstrap_servers, "group.id": group_id(s.kafka, STAGE)}
    )
    try:
        topic = s.kafka.topic("extracted")
        tps = consumer.committed([TopicPartition(topic, p) for p in range(3)], timeout=10)
        return {tp.partition: int(tp.offset) for tp in tps}
    finally:
        consumer.close()


def cli(s: Settings, *args: str) -> subprocess.CompletedProcess[str]:
    env = {
        **os.environ,
        "FERRY_KAFKA__TOPIC_PREFIX": s.kafka.topic_prefix,
        "FERRY_KAFKA__BOOTSTRAP_SERVERS_OVERRIDE": s.kafka.bootstrap_servers,
        "COLUMNS": "200",
    }
    return subprocess.run(
        [str(FERRY), *args], env=env, capture_output=True, text=True, timeout=120, check=False
    )


@pytest.fixture
def active_member(rs: Settings) -> Iterator[Callable[[], Consumer]]:
    made: list[Consumer] = []

    def make() -> Consumer:
        c = Consumer(
            {
                "bootstrap.servers": rs.kafka.bootstrap_servers,
                "group.id": group_id(rs.kafka, STAGE),
                "enable.auto.commit": False,
                "session.timeout.ms": 6000,
            }
        )
        c.subscribe([rs.kafka.topic("extracted")])
        made.append(c)
        wait_for(lambda: (c.poll(0.2), bool(c.assignment()))[1], "the member's assignment")
        return c

    yield make
    for c in made:
        c.close()


def test_to_offset_moves_every_partition_clamped(rs: Settings) -> None:
    produce(rs, [(0, n, None) for n in "abcde"] + [(1, n, None) for n in "abc"])
    commit(rs, {0: 5, 1: 3})
    admin = build_admin(rs.kafka)
    plan = build_plan(admin, rs, STAGE, Target(offset=4))
    assert [(m.partition, m.current, m.new, m.replayed, m.pending) for m in plan.moves] == [
        (0, 5, 4, 1, 1),
        (1, 3, 3, 0, 0),
        (2, None, 0, 0, 0),
    ]
    apply_plan(admin, rs, plan)
    assert committed(rs) == {0: 4, 1: 3, 2: 0}


def test_to_timestamp_uses_first_event_at_or_after(rs: Settings) -> None:
    # Record times an hour ago, within the topics' 14-day retention: records of T0 (2024) were
    # deleted whenever the broker's retention check (every 5 min) ran between the produce and
    # the replay, which then found no record at/after the time (p0 stayed at 5).
    start = datetime.now(UTC).replace(microsecond=0) - timedelta(hours=1)
    t = int(start.timestamp() * 1000)
    produce(rs, [(0, n, t + i * 1000) for i, n in enumerate("abcde")])
    produce(rs, [(1, n, t + i * 1000) for i, n in enumerate("abc")])
    commit(rs, {0: 5, 1: 3})
    result = cli(rs, "replay", STAGE, "--to-timestamp", (start + timedelta(seconds=3)).isoformat())
    assert result.returncode == 0, result.stdout + result.stderr
    # p0: the record at t+3s is offset 3; p1 has none at/after t+3s → its end (3); p2 empty → 0
    assert committed(rs) == {0: 3, 1: 3, 2: 0}


def test_file_ids_dry_run_then_move_to_each_files_earliest_event(rs: Settings) -> None:
    produce(rs, [(0, "a", None), (0, "b", None), (0, "a", None), (0, "c", None), (0, "b", None)])
    produce(rs, [(1, "d", None), (1, "e", None)])
    commit(rs, {0: 5, 1: 2})
    dry = cli(
        rs, "replay", STAGE, "--file", fid("b"), "--file", fid("e"), "--move-offsets", "--dry-run"
    )
    assert dry.returncode == 0, dry.stdout + dry.stderr
    assert "dry run" in dry.stdout and "re-read" in dry.stdout
    assert "other files' events" in dry.stdout  # partition 0 replays c and a after b
    assert committed(rs) == {0: 5, 1: 2, 2: -1001}  # nothing moved (-1001: none committed)
    unknown = cli(rs, "replay", STAGE, "--file", "0" * 32, "--move-offsets", "--dry-run")
    assert unknown.returncode == 1, unknown.stdout + unknown.stderr
    assert f"file {'0' * 32} has no event on {rs.kafka.topic('extracted')}" in unknown.stdout

    admin = build_admin(rs.kafka)
    plan = build_plan(admin, rs, STAGE, Target(files=(fid("b"), fid("e"), "0" * 32)))
    assert plan.missing == ("0" * 32,)
    assert [(m.partition, m.new, m.files, m.replayed) for m in plan.moves] == [
        (0, 1, (fid("b"),), 4),
        (1, 1, (fid("e"),), 1),
    ]
    moved = cli(rs, "replay", STAGE, "--file", fid("b"), "--file", fid("e"), "--move-offsets")
    assert moved.returncode == 0, moved.stdout + moved.stderr
    assert committed(rs) == {0: 1, 1: 1, 2: -1001}  # partition 2 holds none of the files


def test_one_file_is_replayed_while_the_stage_runs_by_re_emitting_its_input_event(
    rs: Settings, active_member: Callable[[], Consumer]
) -> None:
    produce(rs, [(0, "a", None), (0, "b", None), (1, "d", None)])
    commit(rs, {0: 2, 1: 1})
    member = active_member()  # the stage runs: offsets could not move, events can be re-emitted
    dry = cli(rs, "replay", STAGE, "--file", fid("b"), "--dry-run")
    assert dry.returncode == 0, dry.stdout + dry.stderr
    topic = rs.kafka.topic("extracted")
    assert f"{fid('b')}: FileExtracted at {topic}[0]@1" in dry.stdout
    assert f"dry run: 1 event(s) would be produced to {topic}" in dry.stdout
    unknown = cli(rs, "replay", STAGE, "--file", "0" * 32)
    assert unknown.returncode == 1, unknown.stdout + unknown.stderr
    assert f"file {'0' * 32} has no event on {topic}; nothing to replay" in unknown.stdout

    done = cli(rs, "replay", STAGE, "--file", fid("b"))
    assert done.returncode == 0, done.stdout + done.stderr
    assert f"produced 1 event(s) to {topic}; stage {STAGE} replays them" in done.stdout
    got: list[tuple[int, int, bytes | None, bytes | None]] = []

    def received() -> bool:
        msg = member.poll(0.2)
        if msg is not None and msg.error() is None:
            got.append((msg.partition(), msg.offset(), msg.key(), msg.value()))
        return bool(got)

    wait_for(received, "the running member to receive the re-emitted event")
    # The member had committed everything: what it reads is only the new copy of b's event,
    # produced keyed by b's file id (the partition its key maps to, as every Ferry producer does).
    assert [k for _, _, k, _ in got] == [fid("b").encode()]
    codec = default_codec(rs.paths.schemas_dir)
    assert codec.decode(got[0][3] or b"") == FileExtracted(FILES["b"])
    assert committed(rs) == {0: 2, 1: 1, 2: -1001}  # no offset moved by the replay


def test_refuses_while_the_group_has_an_active_member(
    rs: Settings, active_member: Callable[[], Consumer]
) -> None:
    produce(rs, [(0, n, None) for n in "abc"])
    commit(rs, {0: 3})
    member = active_member()
    admin = build_admin(rs.kafka)
    plan = build_plan(admin, rs, STAGE, Target(offset=0))
    with pytest.raises(GroupActive, match="active member"):
        apply_plan(admin, rs, plan)
    result = cli(rs, "replay", STAGE, "--to-offset", "0")
    assert result.returncode == 1
    assert "active member" in result.stdout
    member.close()  # leaves the group at once
    wait_for(
        lambda: cli(rs, "replay", STAGE, "--to-offset", "0").returncode == 0,
        "replay to succeed once the member left",
    )
    assert committed(rs)[0] == 0


def test_wait_drained_follows_a_consumer_to_the_end(rs: Settings) -> None:
    produce(rs, [(0, n, None) for n in "abcde"])
    commit(rs, {0: 5, 1: 0, 2: 0})
    admin = build_admin(rs.kafka)
    plan = build_plan(admin, rs, STAGE, Target(files=(fid("b"),)))
    apply_plan(admin, rs, plan)
    assert committed(rs)[0] == 1

    def consume() -> None:  # a stand-in stage: reads and commits one record at a time
        c = Consumer(
            {
                "bootstrap.servers": rs.kafka.bootstrap_servers,
                "group.id": group_id(rs.kafka, STAGE),
                "enable.auto.commit": False,
            }
        )
        c.subscribe([rs.kafka.topic("extracted")])
        n = 0
        try:
            deadline = time.monotonic() + 60
            while n < 4 and time.monotonic() < deadline:
                msg = c.poll(0.2)
                if msg is not None and msg.error() is None:
                    c.commit(message=msg, asynchronous=False)
                    n += 1
        finally:
            c.close()

    seen: list[tuple[int, int]] = []
    thread = threading.Thread(target=consume, daemon=True)
    thread.start()
    total = wait_drained(admin, rs, plan, 60, lambda d, t: seen.append((d, t)))
    thread.join(30)
    assert total == 4
    assert seen[-1] == (4, 4)
    assert committed(rs)[0] == 5
