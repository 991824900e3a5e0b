"""Field case C16 on the real broker: the tracker's ``/healthz`` says 503 with the reason while the
broker is paused (SIGSTOP), and after it resumes the tracker consumes again on its own and counts
a new event once."""

from __future__ import annotations

import os
import signal
import time
from pathlib import Path
from typing import Any

import pytest
import requests
from confluent_kafka import Producer
from tests.integration.test_tracker import Tracker, free_port, manifest, wait_for

from ferry.core.events import FileExtracted
from ferry.core.kafka.clients import build_admin
from ferry.core.kafka.topics import ensure_topics
from ferry.core.wire.avro import default_codec
from ferry.settings import Settings
from ferry_kit.stack.manager import Stack

# exclusive: pauses the stack's broker (pyproject.toml: markers)
pytestmark = [pytest.mark.integration, pytest.mark.stack("kafka"), pytest.mark.exclusive]

#: How long the broker stays paused, s: well past the tracker's health threshold (6 s here) and
#: past its consumer's session timeout, so the group must rejoin after the pause.
PAUSE_S = 45.0


def healthz(t: Tracker) -> tuple[int, dict[str, Any]]:
    try:
        r = requests.get(f"http://127.0.0.1:{t.port}/healthz", timeout=5)
    except requests.RequestException as exc:
        return 0, {"error": str(exc)}
    return r.status_code, r.json()


def test_healthz_fails_while_the_broker_is_paused_and_the_tracker_comes_back_by_itself(
    stack: Settings, unique: Any, tmp_path: Path
) -> None:
    s: Settings = unique.settings(stack)
    ensure_topics(build_admin(s.kafka), s.kafka)
    t = Tracker(s, free_port(), tmp_path)
    t.env |= {
        "FERRY_TRACKER__HEALTH_BROKER_S": "6",
        "FERRY_TRACKER__HEALTH_STALL_S": "6",
        "FERRY_TRACKER__LAG_REFRESH_S": "1",
        "FERRY_KAFKA__REQUEST_TIMEOUT_S": "2",
    }
    broker = Stack(stack)
    pid = broker.pid(broker.component("kafka"))
    assert pid is not None, "the stack's broker is not running"
    t.start()
    try:
        wait_for(lambda: healthz(t)[0] == 200, "the tracker healthy")
        os.kill(pid, signal.SIGSTOP)
        paused_at = time.monotonic()
        try:
            status, body = wait_for(
                lambda: (h := healthz(t))[0] == 503 and h, "/healthz 503 while paused", 60
            )
            assert body["status"] == "unhealthy"
            assert body["reasons"][0].startswith("cannot reach the broker: no lag read for ")
            time.sleep(max(0.0, PAUSE_S - (time.monotonic() - paused_at)))  # hold the fault
        finally:
            os.kill(pid, signal.SIGCONT)
        resumed_at = time.monotonic()
        z = manifest("z", 0)
        codec = default_codec(s.paths.schemas_dir)
        p = Producer({"bootstrap.servers": s.kafka.bootstrap_servers, "enable.idempotence": True})
        p.produce(
            s.kafka.topic("extracted"), key=z.file_id.encode(), value=codec.encode(FileExtracted(z))
        )
        assert p.flush(30) == 0
        got = wait_for(lambda: t.get(f"/files/{z.file_id}"), "the new event consumed", 180)
        wait_for(lambda: healthz(t)[0] == 200, "/healthz 200 again", 60)
        print(f"\nC16: back to consuming {time.monotonic() - resumed_at:.1f}s after SIGCONT")
        assert (got["file_id"], got["state"], got["steps"]["extracted"]["events"]) == (
            z.file_id,
            "extracted",
            1,
        )
    finally:
        t.stop()
