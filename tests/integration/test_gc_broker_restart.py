"""The gc service through a broker restart on the real broker: its sweeps ask the broker for
their groups' committed offsets every turn; an admin client whose requests were in flight while
the broker restarted kept answering ``_TIMED_OUT`` for some groups for as long as it lived (the
hour-long soak of 2026-12-03: 40 minutes without a sweep, until gc was killed). The sweeps now
ask through a consumer of their own group (ferry.core.kafka.offsets), replaced after three
failed sweeps in a row (ferry.gc.sweeper.RENEW_AFTER), so they resume."""

from __future__ import annotations

import functools
import os
import signal
import subprocess
import sys
import threading
import time
from datetime import timedelta
from typing import Any

import pytest

from ferry.core.kafka.admin import scan_consumer
from ferry.core.kafka.clients import build_admin
from ferry.core.kafka.offsets import alter_offsets, group_client
from ferry.core.wire.avro import default_codec
from ferry.gc.copier import ensure_gc_topic
from ferry.gc.metrics import GcMetrics
from ferry.gc.service import GcService
from ferry.gc.sweeper import Sweeper, class_group
from ferry.settings import Settings
from ferry.settings.retention import RetentionSettings
from ferry_kit.stack.manager import Stack
from ferry_kit.testing.waiting import wait_for

# Stops the shared broker: alone (make test's exclusive part).
pytestmark = [pytest.mark.integration, pytest.mark.exclusive, pytest.mark.stack("kafka")]

CLASSES = (10, 15, 20)  # minutes: three groups, as the soak's retention classes


class _Copier:
    def pump(self, max_s: float, stop: threading.Event) -> int:
        return 0


def test_sweeps_resume_after_a_broker_restart_met_their_requests(stack: Settings, unique: Any):
    ks = unique.settings(stack)
    admin = build_admin(ks.kafka)
    topic = ensure_gc_topic(admin, ks.kafka, 86_400_000)
    metrics = GcMetrics()
    reader = scan_consumer(ks.kafka)
    sweepers = [
        Sweeper(
            timedelta(minutes=m),
            ks.kafka,
            RetentionSettings(),
            group_client(ks.kafka, class_group(ks.kafka, timedelta(minutes=m))),
            topic,
            default_codec(ks.paths.schemas_dir),
            None,  # type: ignore[arg-type]  # nothing is due: no removal
            metrics,
            reader,
            renew=functools.partial(  # as the gc service builds them
                group_client, ks.kafka, class_group(ks.kafka, timedelta(minutes=m))
            ),
        )
        for m in CLASSES
    ]
    for s in sweepers:  # each group has committed offsets, as a running gc's have
        client = group_client(ks.kafka, s.group)
        alter_offsets(
            client, ks.kafka, s.group, topic, dict.fromkeys(range(ks.kafka.partitions), 0)
        )
        client.close()
    service = GcService(ks, _Copier(), sweepers, None, [], metrics, reader)  # type: ignore[arg-type]
    turns: list[tuple[float, int, dict[str, int]]] = []
    stop = threading.Event()

    def loop() -> None:  # turn after turn, so requests are in flight when the broker stops
        while not stop.is_set():
            t = service.run_once()
            turns.append((time.monotonic(), t.errors, t.swept))

    worker = threading.Thread(target=loop, name="gc-turns", daemon=True)
    worker.start()
    st = Stack(stack)
    broker = st.component("kafka")
    try:
        wait_for(lambda: len(turns) >= 3, "three turns before the restart", 60, 0.1)
        st.kill("kafka", signal.SIGTERM)
        wait_for(lambda: st.pid(broker) is None, "the broker's exit", 120, 0.2)
    finally:
        # In a child process: the stack's health probe (Kafka clients of its own) beside this
        # process's running gc clients crashed the test process now and then (SIGSEGV in
        # librdkafka, while the broker had no leader yet); the gc service never runs one.
        # Only the broker: a bare `stack up` starts every component this module did not need
        # (the first CI run of this test: not all healthy within the child's 300 s, killed).
        # The child's deadline ends before its timeout, so a late broker is told by its error.
        subprocess.run(
            [sys.executable, "-m", "ferry", "stack", "up", "kafka", "--deadline", "120"],
            check=True,
            timeout=150,
            env=os.environ,
        )
    back = time.monotonic()
    whole = {f"{m}m": 0 for m in CLASSES}
    try:
        # Two request timeouts per class and turn at most: a few turns, then every class sweeps.
        wait_for(
            lambda: any(at > back and e == 0 and sw == whole for at, e, sw in turns[-3:]),
            "a whole turn after the restart",
            180,
            0.5,
        )
    finally:
        stop.set()
        worker.join(60)
    after = [(e, sw) for at, e, sw in turns if at > back]
    assert after[-1] == (0, whole)
    failed = sum(1 for e, _ in after if e)
    renewed = sum(s.renewals for s in sweepers)
    print(f"\nturns after the broker was back: {len(after)}, failed {failed}, renewed {renewed}")
