"""Issue 3 on the real broker: topic plan, at-least-once across SIGKILL, poison records (case C05),
handlers longer than max.poll.interval.ms (case C04).

Each test has its own topic prefix and therefore its own topics and consumer groups. Topics have
one partition so offsets are exact. This file is also the child process of the SIGKILL test:
``python test_kafka_runner.py child <kill|run> <state dir>`` (settings from FERRY_* variables).
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka import Consumer, TopicPartition
from confluent_kafka.admin import ConfigResource
from tests.support.factories import numbered
from tests.support.kafka_io import Running, produce, read_all
from tests.support.paths import REPO_ROOT

from ferry.core.events import (
    FileExtracted,
    FileFailed,
    FileManifest,
    FileTransformed,
)
from ferry.core.kafka.clients import build_admin, group_id
from ferry.core.kafka.topics import ensure_topics
from ferry.core.runtime.runner import build_runner
from ferry.core.runtime.stage import Stage
from ferry.core.wire.avro import EventCodec, default_codec
from ferry.settings import Settings, get_settings
from ferry_kit.testing.waiting import wait_for

pytestmark = [pytest.mark.integration, pytest.mark.stack("kafka")]

T0 = datetime(2024, 3, 1, 8, 0, 0, tzinfo=UTC)
STAGE = "transform"


def make_manifest(n: int) -> FileManifest:
    return numbered("flights", n, f"{n}.csv", at=T0)


def transformed_of(event: FileExtracted) -> FileTransformed:
    """Deterministic output, so a re-run produces an identical event."""
    return FileTransformed(
        event.manifest.advance(rows_in=10, rows_out=9, rows_rejected=1, updated_at=T0)
    )


# -- fixtures and helpers ---------------------------------------------------------------------


def topics_and_codec(s: Settings) -> EventCodec:
    """Create ``s``'s topics (``ensure_topics``); returns the event codec on its schemas."""
    ensure_topics(build_admin(s.kafka), s.kafka)
    return default_codec(s.paths.schemas_dir)


def env_of(s: Settings) -> dict[str, str]:
    k = s.kafka
    return {
        **os.environ,
        "FERRY_KAFKA__TOPIC_PREFIX": k.topic_prefix,
        "FERRY_KAFKA__PARTITIONS": str(k.partitions),
        "FERRY_KAFKA__MAX_POLL_INTERVAL_MS": str(k.max_poll_interval_ms),
        "FERRY_KAFKA__SESSION_TIMEOUT_MS": str(k.session_timeout_ms),
        "FERRY_KAFKA__BOOTSTRAP_SERVERS_OVERRIDE": k.bootstrap_servers,
        "FERRY_RETRY__MAX_ATTEMPTS": str(s.retry.max_attempts),
        "FERRY_RETRY__INITIAL_BACKOFF_S": str(s.retry.initial_backoff_s),
        "FERRY_RETRY__MAX_BACKOFF_S": str(s.retry.max_backoff_s),
        "PYTHONUNBUFFERED": "1",
        # The child runs this file as a script: the repository root makes ``tests`` importable.
        "PYTHONPATH": os.pathsep.join(filter(None, [str(REPO_ROOT), os.environ.get("PYTHONPATH")])),
    }


def committed(s: Settings, stage: str, topic: str) -> int:
    consumer = Consumer(
        {"bootstrap.servers": s.kafka.bootstrap_servers, "group.id": group_id(s.kafka, stage)}
    )
    try:
        [tp] = consumer.committed([TopicPartition(s.kafka.topic(topic), 0)], timeout=10)
        return int(tp.offset)
    finally:
        consumer.close()


def committed_both(s: Settings, topic: str) -> list[int]:
    """The stage group's committed offsets of partitions 0 and 1 of ``topic`` (full name)."""
    check = Consumer(
        {"bootstrap.servers": s.kafka.bootstrap_servers, "group.id": group_id(s.kafka, STAGE)}
    )
    try:
        got = check.committed([TopicPartition(topic, 0), TopicPartition(topic, 1)], timeout=10)
    finally:
        check.close()
    return [int(tp.offset) for tp in got]


def start(running: list[Running], s: Settings, handler: Callable[..., Any]) -> Running:
    r = Running(build_runner(Stage(STAGE, {FileExtracted: handler}), None, s))
    running.append(r)
    return r


# -- tests ------------------------------------------------------------------------------------


def test_topic_plan_is_created_once_with_partitions_and_retention(ks: Settings) -> None:
    admin = build_admin(ks.kafka)
    names = [
        ks.kafka.topic(n) for n in ("extracted", "transformed", "transferred", "loaded", "failed")
    ]
    assert ensure_topics(admin, ks.kafka) == dict.fromkeys(names, "created")
    assert ensure_topics(admin, ks.kafka) == dict.fromkeys(names, "exists")
    # The broker's metadata cache learns of new topics shortly after the controller made them.
    meta = wait_for(
        lambda: (m := admin.list_topics(timeout=10)) and set(names) <= set(m.topics) and m,
        "the new topics in the broker's metadata",
    )
    assert {n: len(meta.topics[n].partitions) for n in names} == dict.fromkeys(names, 1)
    res = ConfigResource(ConfigResource.Type.TOPIC, ks.kafka.topic("failed"))
    configs = admin.describe_configs([res], request_timeout=10)[res].result(timeout=10)
    assert configs["retention.ms"].value == str(ks.kafka.retention_ms)


def test_poison_record_lands_in_failed_exactly_once_and_is_not_redelivered(
    ks: Settings, running: list[Running]
) -> None:
    codec = topics_and_codec(ks)
    good = FileExtracted(make_manifest(1))
    produce(ks, "extracted", b"poison", b"not-avro")
    produce(ks, "extracted", good.file_id.encode(), codec.encode(good))

    first = start(running, ks, lambda ev, deps: [transformed_of(ev)])
    wait_for(lambda: first.runner.stats.processed == 2, "two records processed")
    first.stop()

    failed = read_all(ks, "failed")
    assert len(failed) == 1
    key, value = failed[0]
    event = codec.decode(value or b"")
    assert isinstance(event, FileFailed)
    assert key == f"{ks.kafka.topic('extracted')}-0-0".encode()  # coordinates, not its key (C24)
    assert (event.stage, event.reason, event.attempt) == (STAGE, "undecodable", 1)
    assert (event.source_topic, event.source_partition, event.source_offset) == (
        ks.kafka.topic("extracted"),
        0,
        0,
    )
    assert (event.raw_key, event.raw_value, event.manifest) == (b"poison", b"not-avro", None)
    assert [codec.decode(v or b"") for _, v in read_all(ks, "transformed")] == [
        transformed_of(good)
    ]
    assert committed(ks, STAGE, "extracted") == 2

    # A restarted stage resumes after both records: a third record is the next thing it handles.
    third = FileExtracted(make_manifest(3))
    second = start(running, ks, lambda ev, deps: [transformed_of(ev)])
    produce(ks, "extracted", third.file_id.encode(), codec.encode(third))
    wait_for(lambda: second.runner.stats.processed == 1, "the third record processed")
    second.stop()
    assert second.runner.stats.processed == 1
    assert len(read_all(ks, "failed")) == 1
    assert [codec.decode(v or b"") for _, v in read_all(ks, "transformed")] == [
        transformed_of(good),
        transformed_of(third),
    ]
    assert committed(ks, STAGE, "extracted") == 3


def test_handler_longer_than_max_poll_interval_stays_in_group(
    ks: Settings, running: list[Running]
) -> None:
    codec = topics_and_codec(ks)
    event = FileExtracted(make_manifest(2))
    produce(ks, "extracted", event.file_id.encode(), codec.encode(event))
    long_s = 2 * ks.kafka.max_poll_interval_ms / 1000  # 12 s against max.poll.interval.ms=6000
    calls: list[float] = []

    def slow(ev: FileExtracted, deps: Any) -> list[Any]:
        calls.append(time.monotonic())
        time.sleep(long_s)  # the slow work itself (e.g. a Spark batch), not a wait for a condition
        return [transformed_of(ev)]

    r = start(running, ks, slow)
    wait_for(lambda: r.runner.stats.processed == 1, "the slow record processed", timeout_s=90)
    stats = r.runner.stats
    assert (stats.revocations, stats.assignments, stats.handler_calls, stats.pauses) == (0, 1, 1, 1)
    r.stop()
    assert len(calls) == 1
    assert [codec.decode(v or b"") for _, v in read_all(ks, "transformed")] == [
        transformed_of(event)
    ]
    assert committed(ks, STAGE, "extracted") == 1


def test_sigkill_between_produce_and_offset_store_reprocesses_once(
    ks: Settings, tmp_path: Path
) -> None:
    codec = topics_and_codec(ks)
    event = FileExtracted(make_manifest(4))
    produce(ks, "extracted", event.file_id.encode(), codec.encode(event))
    cmd = [sys.executable, __file__, "child"]

    killed = subprocess.run(
        [*cmd, "kill", str(tmp_path)], env=env_of(ks), timeout=120, capture_output=True
    )
    assert killed.returncode == -signal.SIGKILL, killed.stderr.decode()[-2000:]
    assert len(read_all(ks, "transformed")) == 1
    assert (tmp_path / "calls.log").read_text().count("\n") == 1
    assert committed(ks, STAGE, "extracted") < 0  # nothing committed: no stored offset

    child = subprocess.Popen([*cmd, "run", str(tmp_path)], env=env_of(ks), stderr=subprocess.PIPE)
    try:
        wait_for(
            lambda: len(read_all(ks, "transformed")) == 2,
            "the record processed again",
            timeout_s=90,
        )
        child.send_signal(signal.SIGTERM)
        _, err = child.communicate(timeout=60)
    finally:
        if child.poll() is None:
            child.kill()
    assert child.returncode == 0, err.decode()[-2000:]
    assert (tmp_path / "calls.log").read_text().count("\n") == 2
    outcomes = sorted((tmp_path / "outcomes").iterdir())
    assert [p.name for p in outcomes] == [event.file_id]
    assert outcomes[0].read_text() == "rows_out=9"
    produced = [codec.decode(v or b"") for _, v in read_all(ks, "transformed")]
    assert produced == [
        transformed_of(event),
        transformed_of(event),
    ]  # at-least-once: same event twice
    assert committed(ks, STAGE, "extracted") == 1


# -- the child process of the SIGKILL test ----------------------------------------------------


def _child(mode: str, state: Path) -> None:
    outcomes = state / "outcomes"
    outcomes.mkdir(parents=True, exist_ok=True)

    def handler(ev: FileExtracted, deps: Any) -> list[Any]:
        with open(state / "calls.log", "a", encoding="utf-8") as fh:
            fh.write(f"{os.getpid()} {ev.file_id}\n")
        # Idempotent outcome: one file per file_id, written to a temp name and renamed.
        tmp = outcomes / f".{ev.file_id}.{os.getpid()}"
        tmp.write_text("rows_out=9")
        os.replace(tmp, outcomes / ev.file_id)
        return [transformed_of(ev)]

    runner = build_runner(Stage(STAGE, {FileExtracted: handler}), None, get_settings())
    if mode == "kill":

        def die_before_storing(msg: Any) -> None:
            os.kill(os.getpid(), signal.SIGKILL)

        runner._store_offset = die_before_storing  # type: ignore[method-assign]
    runner.run()


if __name__ == "__main__":
    if len(sys.argv) == 4 and sys.argv[1] == "child":
        _child(sys.argv[2], Path(sys.argv[3]))
    else:
        sys.exit("usage: test_kafka_runner.py child <kill|run> <state dir>")
