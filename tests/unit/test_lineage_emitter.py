"""Lineage never holds up or fails a file: the runtime's observer hook (order against delivery,
an observer that raises) and the emitter (outage counted, full queue dropped, bounded by its
timeout), with fakes and a real HTTP transport to a closed port."""

from __future__ import annotations

import socket
import threading
import time
from pathlib import Path
from typing import Any

from pydantic import SecretStr
from tests.support.fakes import FakeConsumer, FakeMessage, FakeProducer
from tests.unit.test_processing import EXTRACTED, FILE_ID, TRANSFORMED, settings
from tests.unit.test_runner import run_until

from ferry.core.events import FileExtracted
from ferry.core.runtime.runner import StageRunner
from ferry.core.runtime.stage import Stage
from ferry.core.wire.avro import EventCodec
from ferry.lineage.emitter import LineageEmitter, build_transport, kafka_config
from ferry_kit.testing.waiting import wait_for


class Recorder:
    """A file observer writing into the runner's call log."""

    def __init__(self, log: list[Any], fail: bool = False) -> None:
        self.log, self.fail = log, fail

    def started(self, stage: str, record: Any, event: Any) -> None:
        self.log.append(("started", stage, record.offset, type(event).__name__))
        if self.fail:
            raise RuntimeError("observer bug")

    def settled(self, stage: str, files: Any) -> None:
        for f in files:
            self.log.append(
                ("settled", stage, f.record.offset, [type(o).__name__ for o in f.outputs])
            )
        if self.fail:
            raise RuntimeError("observer bug")

    def close(self) -> None:
        self.log.append(("observer-close",))


def runner_with(codec: EventCodec, observer: Recorder, log: list[Any]) -> StageRunner:
    msgs = [
        FakeMessage("unit.extracted", 0, 0, codec.encode(EXTRACTED), FILE_ID.encode()),
        FakeMessage("unit.extracted", 0, 1, b"not-avro", FILE_ID.encode()),
    ]

    def handler(ev: FileExtracted, deps: Any) -> list[Any]:
        log.append(("handler",))
        return [TRANSFORMED]

    return StageRunner(
        Stage("transform", {FileExtracted: handler}),
        None,
        consumer=FakeConsumer(log, msgs),
        producer=FakeProducer(log),
        codec=codec,
        settings=settings(),
        pause_after_s=0.05,
        poll_timeout_s=0.01,
        observer=observer,
    )


def test_observer_hears_start_before_the_handler_and_outcome_after_delivery(codec) -> None:
    log: list[Any] = []
    runner = runner_with(codec, Recorder(log), log)
    run_until(runner, lambda: runner.stats.processed == 2)
    steps = [e for e in log if e[0] in ("started", "handler", "produce", "settled", "store")]
    assert steps == [
        ("started", "transform", 0, "FileExtracted"),
        ("handler",),
        ("produce", "unit.transformed"),
        ("settled", "transform", 0, ["FileTransformed"]),
        ("store", 1),
        ("produce", "unit.failed"),
        ("settled", "transform", 1, ["FileFailed"]),
        ("store", 2),
    ]
    assert log[-1] == ("observer-close",)


def test_an_observer_that_raises_does_not_stop_a_file(codec) -> None:
    log: list[Any] = []
    runner = runner_with(codec, Recorder(log, fail=True), log)
    run_until(runner, lambda: runner.stats.processed == 2)
    assert [e for e in log if e[0] == "store"] == [("store", 1), ("store", 2)]
    assert runner.stats.quarantined == 1  # the undecodable one, not the observed one


class Transport:
    """A client transport that fails, or blocks until released."""

    kind = "fake"

    def __init__(self, fail: bool = False) -> None:
        self.fail, self.release, self.sent = fail, threading.Event(), []
        self.entered = threading.Event()

    def emit(self, event: Any) -> None:
        if self.fail:
            raise ConnectionError("collector down")
        self.entered.set()
        self.release.wait(10)
        self.sent.append(event)

    def close(self, timeout: float = -1) -> bool:
        return True


def an_event() -> Any:
    from openlineage.client.event_v2 import Job, Run, RunEvent, RunState

    return RunEvent(
        eventType=RunState.START,
        eventTime="2026-01-02T03:04:05.000+00:00",
        run=Run(runId="0190f2c4-6f5b-7cc3-8a3b-0a1b2c3d4e5f"),
        job=Job(namespace="ferry", name="flights.extract"),
    )


def test_an_outage_is_counted_and_written_never_raised(tmp_path: Path) -> None:
    prom = tmp_path / "extract.1.prom"
    em = LineageEmitter(Transport(fail=True), service="extract", metrics_file=prom)
    started = time.monotonic()
    for _ in range(3):
        em.emit(an_event())
    assert time.monotonic() - started < 0.5  # emit only queues
    wait_for(lambda: em.counts()["failed"] == 3, "3 failures counted", 5.0)
    # the first failure is written at once; later ones within 5 s wait for the next write
    assert 'ferry_lineage_events_total{outcome="failed",service="extract"} 1.0' in prom.read_text()
    em.close()
    assert em.counts() == {"sent": 0, "failed": 3, "dropped": 0}
    assert not prom.exists()  # removed at a clean stop


def test_a_full_queue_drops_and_counts() -> None:
    t = Transport()
    em = LineageEmitter(t, service="load", queue_size=2)
    em.emit(an_event())
    assert t.entered.wait(5)  # the sender holds the first one and waits
    for _ in range(4):  # two queued, two dropped
        em.emit(an_event())
    wait_for(lambda: em.counts()["dropped"] == 2, "2 dropped", 5.0)
    t.release.set()
    wait_for(lambda: em.counts()["sent"] == 3, "3 sent", 5.0)
    em.close()
    assert em.counts() == {"sent": 3, "failed": 0, "dropped": 2}


def test_http_collector_down_fails_within_the_timeout() -> None:
    with socket.socket() as s:  # a port nobody listens on
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    base = settings()
    lineage = base.lineage.model_copy(
        update={"transport": "http", "http_url": f"http://127.0.0.1:{port}", "timeout_s": 1.0}
    )
    s2 = base.model_copy(update={"lineage": lineage})
    em = LineageEmitter(build_transport(s2, "transfer"), service="transfer", timeout_s=1.0)
    started = time.monotonic()
    em.emit(an_event())
    wait_for(lambda: em.counts()["failed"] == 1, "HTTP failure counted", 15.0)
    assert time.monotonic() - started < 10  # 1 retry with backoff, refused at once
    em.close()


def test_off_sends_nothing() -> None:
    assert build_transport(settings(), "extract") is None
    em = LineageEmitter(None, service="extract")
    em.emit(an_event())
    em.close()
    assert not em.enabled and em.counts() == {"sent": 0, "failed": 0, "dropped": 0}


def test_file_transport_writes_one_json_line_per_event(tmp_path: Path) -> None:
    base = settings()
    path = tmp_path / "ol" / "events.jsonl"
    lineage = base.lineage.model_copy(update={"transport": "file", "file_path": path})
    em = LineageEmitter(
        build_transport(base.model_copy(update={"lineage": lineage}), "x"), service="x"
    )
    em.emit(an_event())
    em.emit(an_event())
    em.close()
    lines = path.read_text().splitlines()
    assert len(lines) == 2 and '"job": {"facets": {}, "name": "flights.extract"' in lines[0]
    assert em.counts()["sent"] == 2


def test_kafka_transport_shares_the_clients_security(tmp_path: Path) -> None:
    """Same broker, same SASL_SSL login and CA as every Ferry client; topic <prefix>.openlineage."""
    ca = tmp_path / "ca.pem"
    ca.write_text("x")
    base = settings()
    kafka = base.kafka.model_copy(
        update={
            "security_protocol": "SASL_SSL",
            "sasl_password": SecretStr("s3cret"),
            "ssl_ca_path": ca,
        }
    )
    cfg = kafka_config(base.model_copy(update={"kafka": kafka}), "load")
    assert cfg.topic == "unit.openlineage"
    got = {k: cfg.config[k] for k in ("security.protocol", "sasl.mechanisms", "sasl.username")}
    assert got == {
        "security.protocol": "SASL_SSL",
        "sasl.mechanisms": "SCRAM-SHA-512",
        "sasl.username": "ferry",
    }
    assert cfg.config["sasl.password"] == "s3cret" and cfg.config["ssl.ca.location"] == str(ca)
    assert cfg.config["bootstrap.servers"] == base.kafka.bootstrap_servers
    assert cfg.flush is False
