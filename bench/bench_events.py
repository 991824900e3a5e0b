"""Benchmark of Ferry's events: Avro codec speed and Kafka round trips on the local broker.

Prints, one figure per line:

- events encoded / decoded per second (``EventCodec``, single-object encoding, one CPU thread);
- produce→consume round trip events/s: the idempotent producer (acks=all) pipelining N events
  into a fresh one-partition topic while a consumer reads them back and decodes them;
- stage runner events/s: a pass-through stage (decode → handler → produce, wait for the ack →
  store offset), one record at a time, which is what every Ferry stage does per file.

Usage: ``python bench/bench_events.py [--events 20000] [--roundtrip 5000] [--runner 300]
[--no-kafka]``. Kafka parts need the broker of ``ferry stack up`` (settings.kafka); their topics
use a fresh prefix and are deleted at the end.
"""

from __future__ import annotations

import argparse
import threading
import time
import uuid
from datetime import UTC, datetime

from confluent_kafka import Consumer, KafkaException, TopicPartition

from ferry.core.events import FileExtracted, FileManifest, FileTransformed
from ferry.core.identity import derive_file_id
from ferry.core.kafka.clients import build_admin, build_producer, group_id
from ferry.core.kafka.topics import ensure_topics
from ferry.core.runtime.runner import build_runner
from ferry.core.runtime.stage import Stage
from ferry.core.wire.avro import default_codec
from ferry.settings import Settings, get_settings

T0 = datetime(2024, 1, 1, tzinfo=UTC)


def manifest(n: int) -> FileManifest:
    sha = f"{n:064x}"
    return FileManifest(
        file_id=derive_file_id("flights", sha),
        dataset="flights",
        source_path=f"flights/2013-01-{n % 28 + 1:02d}/part-{n}.csv",
        size_bytes=1_000_000 + n,
        sha256=sha,
        created_at=T0,
        updated_at=T0,
        trace_id=f"{n:032x}",
        uris={"landing": f"hdfs://127.0.0.1:18020/ferry/landing/flights/part-{n}.csv"},
        rows_in=1000,
        rows_out=990,
        rows_rejected=10,
    )


def bench_codec(n: int) -> None:
    codec = default_codec(get_settings().paths.schemas_dir)
    events = [FileTransformed(manifest(i)) for i in range(n)]
    t = time.perf_counter()
    blobs = [codec.encode(e) for e in events]
    enc = time.perf_counter() - t
    t = time.perf_counter()
    decoded = [codec.decode(b) for b in blobs]
    dec = time.perf_counter() - t
    assert decoded == events
    size = sum(map(len, blobs)) / n
    print(f"codec: {n} FileTransformed events, {size:.0f} bytes each")
    print(f"  encoded per second: {n / enc:,.0f}")
    print(f"  decoded per second: {n / dec:,.0f}")


def bench_roundtrip(s: Settings, n: int) -> None:
    codec = default_codec(s.paths.schemas_dir)
    topic = s.kafka.topic("extracted")
    blobs = [
        (FileExtracted(manifest(i)).file_id.encode(), codec.encode(FileExtracted(manifest(i))))
        for i in range(n)
    ]
    consumer = Consumer(
        {"bootstrap.servers": s.kafka.bootstrap_servers, "group.id": f"{topic}.bench"}
    )
    consumer.assign([TopicPartition(topic, 0, 0)])
    producer = build_producer(s.kafka, "ferry-bench")
    got = 0
    start = time.perf_counter()

    def produce_all() -> None:
        for key, value in blobs:
            while True:
                try:
                    producer.produce(topic, value=value, key=key)
                    break
                except BufferError:
                    producer.poll(0.05)
            producer.poll(0)
        assert producer.flush(30) == 0

    sender = threading.Thread(target=produce_all)
    sender.start()
    deadline = time.monotonic() + 120
    while got < n and time.monotonic() < deadline:
        for msg in consumer.consume(1000, 0.5):
            if msg.error() is None:
                codec.decode(msg.value())
                got += 1
    elapsed = time.perf_counter() - start
    sender.join()
    consumer.close()
    print(f"produce→consume round trip: {got}/{n} events in {elapsed:.2f}s (acks=all, idempotent)")
    print(f"  round-trip events per second: {got / elapsed:,.0f}")


def bench_runner(s: Settings, n: int) -> None:
    codec = default_codec(s.paths.schemas_dir)
    producer = build_producer(s.kafka, "ferry-bench")
    for i in range(n):
        ev = FileExtracted(manifest(100_000 + i))
        producer.produce(
            s.kafka.topic("extracted"), value=codec.encode(ev), key=ev.file_id.encode()
        )
    assert producer.flush(30) == 0
    runner = build_runner(
        Stage("benchrunner", {FileExtracted: lambda ev, deps: [FileTransformed(ev.manifest)]}),
        None,
        s,
    )
    start = time.perf_counter()
    thread = threading.Thread(target=runner.run, kwargs={"install_signal_handlers": False})
    thread.start()
    deadline = time.monotonic() + 300
    while runner.stats.processed < n and time.monotonic() < deadline and thread.is_alive():
        time.sleep(0.05)
    elapsed = time.perf_counter() - start
    runner.stop()
    thread.join(60)
    done = runner.stats.processed
    print(
        f"stage runner ({group_id(s.kafka, 'benchrunner')}): {done}/{n} records in {elapsed:.2f}s, "
        "one record at a time (group join included)"
    )
    print(f"  runner events per second: {done / elapsed:,.0f}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--events", type=int, default=20_000, help="events for the codec benchmark")
    parser.add_argument(
        "--roundtrip", type=int, default=5_000, help="events for the Kafka round trip"
    )
    parser.add_argument("--runner", type=int, default=300, help="records for the stage runner")
    parser.add_argument("--no-kafka", action="store_true", help="codec only")
    args = parser.parse_args()

    bench_codec(args.events)
    if args.no_kafka:
        return
    base = get_settings()
    s = base.model_copy(
        update={
            "kafka": base.kafka.model_copy(
                update={"topic_prefix": f"bench{uuid.uuid4().hex[:8]}", "partitions": 1}
            )
        }
    )
    admin = build_admin(s.kafka)
    try:
        admin.list_topics(timeout=5)
    except KafkaException as exc:
        print(
            f"Kafka at {s.kafka.bootstrap_servers} unreachable ({exc}); "
            "run `ferry stack up`. Skipped."
        )
        return
    created = list(ensure_topics(admin, s.kafka))
    try:
        bench_roundtrip(s, args.roundtrip)
        runner_settings = s.model_copy(
            update={
                "kafka": s.kafka.model_copy(update={"topic_prefix": s.kafka.topic_prefix + "r"})
            }
        )
        created += list(ensure_topics(admin, runner_settings.kafka))
        bench_runner(runner_settings, args.runner)
    finally:
        for fut in admin.delete_topics(created, operation_timeout=10, request_timeout=10).values():
            fut.result(timeout=15)


if __name__ == "__main__":
    main()
