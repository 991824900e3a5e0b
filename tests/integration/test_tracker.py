"""The tracker on the real broker, as a real process (``ferry run tracker``) with its own
topic prefix and HTTP port: exact per-file timelines over HTTP, stuck detection, a bad record
that is counted and skipped (case C05), the plain table page in headless Chromium, state recovered
after a restart (RocksDB store, changelog tail), and ``ferry status`` from the tracker and from the
topics.
"""

from __future__ import annotations

import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
from collections.abc import Callable, Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
import requests
from confluent_kafka import Producer
from tests.support.factories import failed, named

from ferry.core.events import (
    FileExtracted,
    FileManifest,
    FileTransferred,
    FileTransformed,
)
from ferry.core.kafka.clients import build_admin
from ferry.core.kafka.topics import ensure_topics
from ferry.core.services import service_argv
from ferry.core.timeline import to_ms
from ferry.core.wire.avro import default_codec
from ferry.settings import Settings
from ferry_kit.testing.ports import free_port
from ferry_kit.testing.waiting import wait_for as _wait_for

pytestmark = [pytest.mark.integration, pytest.mark.stack("kafka")]

T0 = datetime(2024, 3, 1, 8, 0, tzinfo=UTC)
VENV_BIN = Path(sys.executable).parent
CHROMIUM = shutil.which("chromium") or "/usr/bin/chromium"


def manifest(name: str, minutes: int, **kw: Any) -> FileManifest:
    return named(
        "weather",
        name,
        at=T0,
        size_bytes=7,
        trace_id="3" * 32,
        updated_at=T0 + timedelta(minutes=minutes),
        **kw,
    )


X = manifest("x", 0).file_id
Y = manifest("y", 0).file_id


def ms(minutes: int) -> int:
    return to_ms(T0 + timedelta(minutes=minutes))


EXPECTED_X = {
    "file_id": X,
    "dataset": "weather",
    "source_path": "weather/x.csv",
    "state": "transferred",
    "waiting_in": "load",
    "steps": {
        "extracted": {"first_ms": ms(0), "last_ms": ms(0), "events": 1},
        "transformed": {"first_ms": ms(2), "last_ms": ms(2), "events": 1},
        "transferred": {"first_ms": ms(3), "last_ms": ms(3), "events": 1},
    },
    "last_event": "FileTransferred",
    "attempts": 1,
    "failure": None,
    "rows": {"rows_in": 10, "rows_out": 9, "rows_rejected": 1},
    "table": None,
    "stuck": True,  # waits in load, whose SLA here is 1 s, since 2024
}


def wait_for(cond: Callable[[], Any], what: str, timeout_s: float = 90.0) -> Any:
    return _wait_for(cond, what, timeout_s, poll_s=0.2)


class Tracker:
    """The tracker as a child process; ``start()``/``stop()`` may be called repeatedly."""

    def __init__(self, s: Settings, port: int, workdir: Path) -> None:
        self.port = port
        self.workdir = workdir
        self.env = {
            **os.environ,
            "FERRY_KAFKA__TOPIC_PREFIX": s.kafka.topic_prefix,
            "FERRY_KAFKA__BOOTSTRAP_SERVERS_OVERRIDE": s.kafka.bootstrap_servers,
            "FERRY_TRACKER__WEB_PORT": str(port),
            "FERRY_TRACKER__DATA_DIR": str(workdir / "data"),
            "FERRY_TRACKER__SLA_S": '{"transform": 3600, "transfer": 3600, "load": 1}',
            "FERRY_TRACKER__LAG_REFRESH_S": "2",
            "PYTHONUNBUFFERED": "1",
            "COLUMNS": "250",
        }
        self.proc: subprocess.Popen[bytes] | None = None
        self.starts = 0

    def start(self) -> None:
        self.starts += 1
        log = open(self.workdir / f"tracker-{self.starts}.log", "wb")  # noqa: SIM115
        self.proc = subprocess.Popen(service_argv("tracker"), env=self.env, stdout=log, stderr=log)
        wait_for(lambda: self._alive() and self.get("/summary"), "the tracker's HTTP server")

    def _alive(self) -> bool:
        assert self.proc is not None and self.proc.poll() is None, self.log_tail()
        return True

    def stop(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(60)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(10)
                raise AssertionError("tracker did not stop within 60 s of SIGTERM") from None

    def get(self, path: str) -> Any:
        try:
            r = requests.get(f"http://127.0.0.1:{self.port}{path}", timeout=5)
        except requests.RequestException:
            return None
        if r.status_code != 200:
            return None
        return r.json() if "json" in r.headers.get("content-type", "") else r.text

    def log_tail(self) -> str:
        logs = sorted(self.workdir.glob("tracker-*.log"))
        return logs[-1].read_text(errors="replace")[-3000:] if logs else ""


@pytest.fixture
def ts(stack: Settings, unique: Any) -> Settings:
    s: Settings = unique.settings(stack)
    ensure_topics(build_admin(s.kafka), s.kafka)
    return s


@pytest.fixture
def tracker(ts: Settings, tmp_path: Path) -> Iterator[Tracker]:
    t = Tracker(ts, free_port(), tmp_path)
    yield t
    t.stop()


def produce_events(s: Settings) -> None:
    codec = default_codec(s.paths.schemas_dir)
    p = Producer({"bootstrap.servers": s.kafka.bootstrap_servers, "enable.idempotence": True})
    rows = [
        ("extracted", X, codec.encode(FileExtracted(manifest("x", 0)))),
        ("extracted", "bad", b"not-avro"),
        (
            "transformed",
            X,
            codec.encode(
                FileTransformed(manifest("x", 2, rows_in=10, rows_out=9, rows_rejected=1))
            ),
        ),
        ("transferred", X, codec.encode(FileTransferred(manifest("x", 3)))),
        ("extracted", Y, codec.encode(FileExtracted(manifest("y", 0)))),
        (
            "failed",
            Y,
            codec.encode(
                failed(
                    "transform",
                    manifest("y", 0),
                    reason="rows_invalid",
                    error="no valid rows",
                    attempt=1,
                    at=T0 + timedelta(minutes=1),
                )
            ),
        ),
    ]
    for topic, key, value in rows:
        p.produce(s.kafka.topic(topic), key=key.encode(), value=value)
    assert p.flush(10) == 0


def metric(text: str, name: str) -> float:
    m = re.search(rf"^{re.escape(name)} ([0-9.e+-]+)$", text, re.M)
    assert m, f"{name} not in /metrics"
    return float(m.group(1))


def run_chromium(*args: str, text: bool) -> subprocess.CompletedProcess[Any]:
    """Headless Chromium with a throw-away profile on ``args``; asserts that it exits 0."""
    with tempfile.TemporaryDirectory(prefix="ferry-chromium-") as profile:
        out = subprocess.run(
            [
                CHROMIUM,
                "--headless",
                "--no-sandbox",
                "--disable-gpu",
                "--disable-background-networking",
                "--disable-component-update",
                "--disable-sync",
                "--no-first-run",
                f"--user-data-dir={profile}",
                *args,
            ],
            capture_output=True,
            text=text,
            timeout=90,
            check=False,
        )
    assert out.returncode == 0, out.stderr[-2000:]
    return out


def dump_dom(url: str, *extra: str) -> str:
    if not Path(CHROMIUM).exists():
        pytest.fail(f"{CHROMIUM} missing: `make browser` (apt-get install -y chromium) installs it")
    return str(run_chromium(*extra, "--dump-dom", url, text=True).stdout)


def ferry_cli(t: Tracker, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [str(VENV_BIN / "ferry"), *args],
        env=t.env,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )


def test_tracker_timeline_stuck_bad_record_page_restart_and_status(
    ts: Settings, tracker: Tracker
) -> None:
    tracker.start()
    produce_events(ts)

    # X's three events are on three topics: the tracker may fold its transferred event before
    # its extracted one (state "transferred" with one step missing), so wait for all three.
    x = wait_for(
        lambda: (d := tracker.get(f"/files/{X}")) and len(d["steps"]) == 3 and d,
        "file X's three events folded",
    )
    assert x == EXPECTED_X
    summary = wait_for(
        lambda: (d := tracker.get("/summary")) and d["files"] == 2 and d["bad_records"] == 1 and d,
        "both files and the bad record",
    )
    assert summary["states"] == {
        "extracted": 0,
        "transformed": 0,
        "transferred": 1,
        "loaded": 0,
        "failed": 1,
    }
    y = tracker.get(f"/files/{Y}")
    assert (y["state"], y["failure"]["reason"], y["failure"]["stage"]) == (
        "failed",
        "rows_invalid",
        "transform",
    )
    stuck = tracker.get("/stuck")
    assert [(f["file_id"], f["stuck_in"], f["sla_s"]) for f in stuck["files"]] == [(X, "load", 1.0)]
    failed = tracker.get("/files?state=failed")
    assert [f["file_id"] for f in failed["files"]] == [Y]
    assert tracker.get("/files/0123") is None  # 404

    metrics = tracker.get("/metrics")
    assert metric(metrics, "ferry_tracker_bad_records_total") == 1.0
    assert metric(metrics, 'ferry_files{state="transferred"}') == 1.0
    assert metric(metrics, 'ferry_files_stuck{stage="load"}') == 1.0
    assert (
        metric(metrics, 'ferry_tracker_failures_total{reason="rows_invalid",stage="transform"}')
        == 1.0
    )
    assert metric(metrics, 'ferry_stage_latency_seconds_count{stage="transform"}') == 1.0
    assert metric(metrics, 'ferry_stage_latency_seconds_sum{stage="transform"}') == 120.0

    dom = dump_dom(f"http://127.0.0.1:{tracker.port}/table")  # the plain table (was at /)
    row = re.search(rf'<tr class="file stuck" id="f-{X}">(.*?)</tr>', dom, re.S)
    assert row, dom[:2000]
    cells = re.findall(r"<td[^>]*>(.*?)</td>", row.group(1))
    assert cells == [
        X,
        "weather",
        "weather/x.csv",
        "transferred stuck",
        "2024-03-01 08:00:00",
        "2024-03-01 08:02:00",
        "2024-03-01 08:03:00",
        "",
        "",
        "",
    ]

    status = ferry_cli(tracker, "status")
    assert status.returncode == 0, status.stdout + status.stderr
    assert "from the tracker" in status.stdout and "quarantined files: 1" in status.stdout

    tracker.stop()
    fallback = ferry_cli(tracker, "status", X)  # tracker down: folded from the topics
    assert fallback.returncode == 0, fallback.stdout + fallback.stderr
    assert f"file {X} (weather): transferred" in fallback.stdout
    failed_y = ferry_cli(tracker, "status", Y)
    assert failed_y.returncode == 0, failed_y.stdout + failed_y.stderr
    assert "last failure: transform rows_invalid: no valid rows" in failed_y.stdout

    tracker.start()  # state comes back from the changelog; the consumed offsets were committed
    recovered = wait_for(lambda: tracker.get(f"/files/{X}"), "file X after restart", 120)
    assert recovered == EXPECTED_X
    after = tracker.get("/summary")
    assert (after["files"], after["bad_records"]) == (2, 0)
