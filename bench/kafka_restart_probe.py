"""Across one broker restart, gc's broker questions asked through an AdminClient (as gc did)
and through a never-subscribed Consumer of the same kind of group, each in its own loop; prints
how each fares after the broker is back. A diagnostic run by hand with the stack up:
``python bench/kafka_restart_probe.py``."""

import os
import signal
import subprocess
import sys
import threading
import time
import uuid

from confluent_kafka import Consumer, ConsumerGroupTopicPartitions, TopicPartition
from confluent_kafka.admin import NewTopic, OffsetSpec

from ferry.core.kafka.admin import admin_result
from ferry.core.kafka.clients import build_admin, client_config
from ferry.settings import get_settings
from ferry_kit.stack.manager import Stack
from ferry_kit.testing.waiting import wait_for

s = get_settings()
k = s.kafka
T = k.request_timeout_s
topic = f"repro.{uuid.uuid4().hex[:6]}"
admin = build_admin(k)
admin.create_topics([NewTopic(topic, 2, 1)])[topic].result(30)
groups = [f"{topic}.g{i}" for i in range(3)]


def admin_commit(g, parts):
    request = [ConsumerGroupTopicPartitions(g, [TopicPartition(topic, p, 0) for p in parts])]
    admin_result(admin.alter_consumer_group_offsets(request, request_timeout=T)[g], T, "alter")


for g in groups:
    admin_commit(g, [0, 1])
cons = {
    g: Consumer({**client_config(k), "group.id": g, "enable.auto.commit": False}) for g in groups
}
log = {"admin": [], "consumer": []}
stop = threading.Event()


def via_admin(g):
    """The AdminClient calls gc made before it asked through a consumer
    (ferry.core.kafka.offsets says why it no longer does)."""
    parts = sorted(admin.list_topics(topic=topic, timeout=T).topics[topic].partitions)
    for spec in (OffsetSpec.earliest(), OffsetSpec.latest(), OffsetSpec.for_timestamp(0)):
        asked = {TopicPartition(topic, p): spec for p in parts}
        for f in admin.list_offsets(asked, request_timeout=T).values():
            admin_result(f, T, "list_offsets")
    request = [ConsumerGroupTopicPartitions(g, [TopicPartition(topic, p) for p in parts])]
    admin_result(admin.list_consumer_group_offsets(request, request_timeout=T)[g], T, "committed")
    admin_commit(g, parts)


def via_consumer(g):
    c = cons[g]
    parts = sorted(c.list_topics(topic, timeout=T).topics[topic].partitions)
    for p in parts:
        c.get_watermark_offsets(TopicPartition(topic, p), timeout=T, cached=False)
    c.offsets_for_times([TopicPartition(topic, p, 0) for p in parts], timeout=T)
    c.committed([TopicPartition(topic, p) for p in parts], timeout=T)
    c.commit(offsets=[TopicPartition(topic, p, 0) for p in parts], asynchronous=False)


def loop(name, fn):
    while not stop.is_set():
        for g in groups:
            try:
                fn(g)
                log[name].append((time.monotonic(), "ok"))
            except Exception as e:  # noqa: BLE001 - every failure is the figure
                log[name].append((time.monotonic(), str(e)[:80]))


ths = [
    threading.Thread(target=loop, args=(n, f), daemon=True)
    for n, f in (("admin", via_admin), ("consumer", via_consumer))
]
for t in ths:
    t.start()
time.sleep(3)  # both loops running before the broker stops
st = Stack(s)
broker = st.component("kafka")
st.kill("kafka", signal.SIGTERM)
wait_for(lambda: st.pid(broker) is None, "exit", 120, 0.2)
subprocess.run(
    [sys.executable, "-m", "ferry", "stack", "up"],
    check=True,
    timeout=300,
    env=os.environ,
    stdout=subprocess.DEVNULL,
)
back = time.monotonic()
time.sleep(60)  # watch both for a minute after the broker is back
stop.set()
for n in log:
    after = [r for t, r in log[n] if t > back]
    last = [r for t, r in log[n] if t > back + 40]
    failed = [r for r in after if r != "ok"]
    print(
        f"{n}: after the broker was back {len(after)} calls, {len(failed)} failed; "
        f"in its last 20 s {len(last)} calls, {sum(r != 'ok' for r in last)} failed; "
        f"last failure: {failed[-1] if failed else '-'}"
    )
