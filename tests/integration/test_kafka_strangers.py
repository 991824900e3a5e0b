"""Strangers' bytes on a real broker (issue 47, case C24): every kind of record that is not the
stage's event (tests/support/strangers.py) produced between real events on transform's input
topic. The stage handles exactly the real events, sets each stranger aside once (reason, topic,
partition, offset, raw bytes) under its coordinates, moves its offset past all of them; the
quarantine shows each stranger and blames no real file; ``ferry replay`` over those offsets sets
them aside again under the same keys."""

from __future__ import annotations

import pytest
from confluent_kafka import Consumer, TopicPartition
from tests.support.factories import numbered
from tests.support.kafka_io import Running, produce, read_all
from tests.support.strangers import strangers

from ferry.core.events import FileExtracted, FileFailed, FileTransformed
from ferry.core.kafka.clients import build_admin, group_id
from ferry.core.kafka.topics import ensure_topics
from ferry.core.runtime.runner import build_runner
from ferry.core.runtime.stage import Stage
from ferry.core.wire.avro import default_codec
from ferry.ops.quarantine import read_quarantine
from ferry.ops.replay import Target, apply_plan, build_plan
from ferry.settings import Settings
from ferry_kit.testing.waiting import wait_for

pytestmark = [pytest.mark.integration, pytest.mark.stack("kafka")]

STAGE = "transform"


def done(ev: FileExtracted) -> FileTransformed:
    """Deterministic, so a replay produces identical events."""
    return FileTransformed(ev.manifest.advance(rows_out=1, updated_at=ev.manifest.updated_at))


def committed(s: Settings) -> int:
    check = Consumer(
        {"bootstrap.servers": s.kafka.bootstrap_servers, "group.id": group_id(s.kafka, STAGE)}
    )
    try:
        [tp] = check.committed([TopicPartition(s.kafka.topic("extracted"), 0)], timeout=10)
        return int(tp.offset)
    finally:
        check.close()


def run_until(ks: Settings, running: list[Running], handled: list[str], records: int) -> Running:
    """A transform runner over the extracted topic until it processed ``records`` records and
    committed past them; stopped (the group left) before returning."""

    def handle(ev: FileExtracted, deps: object) -> list[FileTransformed]:
        handled.append(ev.file_id)
        return [done(ev)]

    r = Running(build_runner(Stage(STAGE, {FileExtracted: handle}), None, ks))
    running.append(r)
    wait_for(lambda: r.runner.stats.processed == records, f"{records} records processed")
    r.stop()
    return r


def test_strangers_are_set_aside_between_real_events_and_again_on_replay(
    ks: Settings, running: list[Running]
) -> None:
    ensure_topics(build_admin(ks.kafka), ks.kafka)
    codec = default_codec(ks.paths.schemas_dir)
    real = [FileExtracted(numbered("flights", n, f"s{n}.csv")) for n in range(4)]
    other = numbered("flights", 9, "s9.csv")
    ss = strangers(codec, real[0].manifest, other)
    topic = ks.kafka.topic("extracted")
    # real 0, then each stranger followed by a real event (1, 2, 3, 1, 2, 3, ...), then real 0
    # under a key of another shape
    sent = 1
    produce(ks, "extracted", real[0].file_id.encode(), codec.encode(real[0]))
    expected_ids = [real[0].file_id]
    offsets: dict[str, int] = {}
    for n, s in enumerate(ss):
        offsets[s.name] = sent
        produce(ks, "extracted", s.key, s.value)  # type: ignore[arg-type]
        ev = real[1 + n % 3]
        produce(ks, "extracted", ev.file_id.encode(), codec.encode(ev))
        sent += 2
        expected_ids.append(ev.file_id)
    produce(ks, "extracted", b"\xc3\x28\xff", codec.encode(real[0]))
    expected_ids.append(real[0].file_id)
    total = sent + 1

    handled: list[str] = []
    first = run_until(ks, running, handled, total)
    assert handled == expected_ids
    assert (first.runner.stats.processed, first.runner.stats.quarantined) == (total, len(ss))
    assert committed(ks) == total
    by_id = {ev.file_id: ev for ev in real}
    assert [codec.decode(v or b"") for _, v in read_all(ks, "transformed")] == [
        done(by_id[i]) for i in expected_ids
    ]
    failed = [(k, codec.decode(v or b"")) for k, v in read_all(ks, "failed")]
    want = []
    for s in ss:
        off = offsets[s.name]
        want_key = other.file_id if s.name == "wrong_type" else f"{topic}-0-{off}"
        want.append(
            (want_key.encode(), s.reason, off, s.key if s.raw else None, s.value if s.raw else None)
        )
    got = []
    for got_key, f in failed:
        assert isinstance(f, FileFailed)
        assert (f.stage, f.attempt, f.source_topic, f.source_partition) == (STAGE, 1, topic, 0)
        got.append((got_key, f.reason, f.source_offset, f.raw_key, f.raw_value))
    assert got == want

    # The quarantine shows each stranger under its coordinates; no real file is in it (the
    # truncated copy of real 0's event was keyed by real 0's id).
    read = read_quarantine(ks, codec)
    assert [(e.key, e.failed.reason, e.failures) for e in read.quarantined] == [
        (k.decode(), r, 1) for k, r, *_ in want
    ]
    assert read.get(real[0].file_id) is None and read.unreadable == ()

    # `ferry replay --offset 0`: every record again; the strangers set aside again, same keys.
    admin = build_admin(ks.kafka)
    apply_plan(admin, ks, build_plan(admin, ks, STAGE, Target(offset=0)))
    assert committed(ks) == 0
    handled.clear()
    run_until(ks, running, handled, total)
    assert handled == expected_ids
    assert committed(ks) == total
    again = read_quarantine(ks, codec)
    assert [(e.key, e.failed.reason, e.failures) for e in again.quarantined] == [
        (k.decode(), r, 2) for k, r, *_ in want
    ]
