"""Sends OpenLineage events without ever holding up a file: a bounded queue drained by one
background thread through the OpenLineage client (``OpenLineageClient.emit``) and the transport
``lineage.transport`` names (the client's own ``KafkaTransport``, ``HttpTransport`` or
``FileTransport``).

- :meth:`LineageEmitter.emit` only enqueues (never blocks, never raises); a full queue drops the
  event.
- One send is bounded by ``lineage.timeout_s``: Kafka waits that long for the broker's
  acknowledgement (librdkafka keeps the message three times as long, so an event counted failed
  may still arrive), HTTP uses it as connect/read timeout with ``http_retries`` retries.
- Outcomes are counted (``ferry_lineage_events_total{service,outcome="sent|failed|dropped"}``)
  in Prometheus text format in ``<metrics_dir>/<service>.<pid>.prom`` (node_exporter's textfile
  collector; rewritten at most every 5 s, removed at a clean stop, when the totals are logged),
  and failures logged, one line per kind of failure a minute.
"""

from __future__ import annotations

import contextlib
import logging
import os
import queue
import threading
import time
from pathlib import Path
from typing import Any

from openlineage.client import OpenLineageClient
from openlineage.client.transport.file import FileConfig, FileTransport
from openlineage.client.transport.http import HttpConfig, HttpTransport
from openlineage.client.transport.kafka import KafkaConfig, KafkaTransport
from openlineage.client.transport.transport import Transport
from prometheus_client import CollectorRegistry, Counter, write_to_textfile

from ferry.core.kafka.clients import build_admin, client_config
from ferry.core.kafka.ratelimit import RateLimitFilter
from ferry.core.kafka.topics import ensure_topics
from ferry.errors import ConfigError
from ferry.settings import Settings

log = logging.getLogger("ferry.lineage")
if not any(isinstance(f, RateLimitFilter) for f in log.filters):
    log.addFilter(RateLimitFilter(interval_s=60.0))

#: Seconds between two writes of the counters file (and one at close).
METRICS_EVERY_S = 5.0


def lineage_topic(settings: Settings) -> str:
    """Full name of the OpenLineage topic: ``<kafka.topic_prefix>.<lineage.kafka_topic>``."""
    return settings.kafka.topic(settings.lineage.kafka_topic)


def build_transport(settings: Settings, service: str) -> Transport | None:
    """The client transport ``lineage.transport`` names (``None`` for ``none``). Kafka: the topic
    is created when missing, the producer shares every security setting of Ferry's clients.

    Raises:
        ConfigError: http without ``http_url``; bad Kafka security settings.
        TransientError: the broker did not answer the topic creation.
    """
    lin = settings.lineage
    if lin.transport == "none":
        return None
    if lin.transport == "file":
        lin.file_path.parent.mkdir(parents=True, exist_ok=True)
        return FileTransport(FileConfig(log_file_path=str(lin.file_path), append=True))
    if lin.transport == "http":
        if not lin.http_url:
            raise ConfigError("lineage.transport is http but lineage.http_url is not set")
        n = lin.http_retries
        params: dict[str, Any] = {
            "url": lin.http_url,
            "endpoint": lin.http_endpoint,
            "timeout": lin.timeout_s,
            "retry": {"total": n, "connect": n, "read": n, "status": n},
        }
        if lin.http_api_key is not None:
            params["auth"] = {"type": "api_key", "apiKey": lin.http_api_key.get_secret_value()}
        return HttpTransport(HttpConfig.from_dict(params))
    ensure_topics(
        build_admin(settings.kafka), settings.kafka, (lin.kafka_topic,), retry=settings.retry
    )
    return KafkaTransport(kafka_config(settings, service))


def kafka_config(settings: Settings, service: str) -> KafkaConfig:
    """The client's Kafka transport configuration: topic :func:`lineage_topic`, a producer with
    every setting Ferry's own clients share (:func:`ferry.core.kafka.clients.client_config`:
    bootstrap servers, SASL_SSL with its password and CA), acks from all replicas, messages
    kept three ``lineage.timeout_s`` at most; no flush per event (the emitter waits for the
    acknowledgement itself, bounded).

    Raises:
        ConfigError: SASL_SSL without a usable password, or a missing CA file.
    """
    lin = settings.lineage
    config = {
        **client_config(settings.kafka),
        "client.id": f"ferry-{service}-lineage-{os.getpid()}",
        "acks": "all",
        "linger.ms": 5,
        "message.timeout.ms": int(lin.timeout_s * 3000),
        "queue.buffering.max.messages": lin.queue_size,
    }
    return KafkaConfig(config=config, topic=lineage_topic(settings), flush=False)


class LineageEmitter:
    """Queues events and sends them from a daemon thread (see the module docstring).

    Args:
        transport: the client transport; ``None``: every :meth:`emit` is a no-op.
        service: the service's name, a label of the counters.
        metrics_file: where the counters are written; ``None``: not written.
    """

    def __init__(
        self,
        transport: Transport | None,
        *,
        service: str,
        timeout_s: float = 5.0,
        queue_size: int = 10_000,
        metrics_file: Path | None = None,
    ) -> None:
        self.service = service
        self.timeout_s = timeout_s
        self.metrics_file = metrics_file
        self.registry = CollectorRegistry()
        self._count = Counter(
            "ferry_lineage_events",
            "OpenLineage events by outcome: sent, failed (not sent or not acknowledged within "
            "lineage.timeout_s), dropped (queue full or emitter closed).",
            ["service", "outcome"],
            registry=self.registry,
        )
        self._queue: queue.Queue[Any] = queue.Queue(maxsize=queue_size)
        self._transport = transport
        self._client = OpenLineageClient(transport=transport) if transport is not None else None
        self._written = 0.0
        self._closed = threading.Event()
        self._thread: threading.Thread | None = None
        if self._client is not None:
            self._thread = threading.Thread(target=self._run, name="ferry-lineage", daemon=True)
            self._thread.start()

    @property
    def enabled(self) -> bool:
        return self._client is not None

    def counts(self) -> dict[str, int]:
        """outcome → events so far (``sent``, ``failed``, ``dropped``)."""
        out = {}
        for outcome in ("sent", "failed", "dropped"):
            out[outcome] = int(self._count.labels(self.service, outcome)._value.get())
        return out

    def emit(self, event: Any) -> None:
        """Queue ``event`` for sending; never blocks, never raises."""
        if self._client is None:
            return
        if self._closed.is_set():
            self._tally("dropped", "emitter closed")
            return
        try:
            self._queue.put_nowait(event)
        except queue.Full:
            self._tally("dropped", f"queue full ({self._queue.maxsize} events)")

    def close(self, timeout_s: float | None = None) -> None:
        """Stop taking events, send what is queued (at most ``timeout_s``, default twice
        ``timeout_s``), write the counters."""
        self._closed.set()
        deadline = time.monotonic() + (timeout_s if timeout_s is not None else 2 * self.timeout_s)
        if self._thread is not None:
            # The worker stops at this mark, after what came before it; with the queue still
            # full at the deadline the daemon thread ends with the process.
            with contextlib.suppress(queue.Full):
                self._queue.put(None, timeout=max(0.0, deadline - time.monotonic()))
            self._thread.join(max(0.0, deadline - time.monotonic()))
        if self.enabled:
            log.info("lineage: %s: OpenLineage events %s", self.service, self.counts())
        if self.metrics_file is not None:  # a stopped process's counters are not current
            self.metrics_file.unlink(missing_ok=True)

    def _run(self) -> None:
        while True:
            event = self._queue.get()
            if event is None:
                return
            try:
                self._send(event)
            except Exception as exc:  # noqa: BLE001 - an outage is counted and logged, never raised
                self._tally("failed", f"{type(exc).__name__}: {exc}")
            else:
                self._tally("sent")

    def _send(self, event: Any) -> None:
        """One event through the client; for Kafka, wait for its acknowledgement."""
        assert self._client is not None
        self._client.emit(event)
        kafka = isinstance(self._transport, KafkaTransport)
        if kafka and not self._transport.wait_for_completion(self.timeout_s):  # type: ignore[union-attr]
            raise TimeoutError(f"not acknowledged by the broker within {self.timeout_s:.1f}s")

    def _tally(self, outcome: str, why: str = "") -> None:
        self._count.labels(self.service, outcome).inc()
        if outcome != "sent":
            log.warning(
                "lineage: %s: OpenLineage event %s (%s); the file goes on",
                self.service,
                outcome,
                why,
            )
        self._write_metrics()

    def _write_metrics(self, force: bool = False) -> None:
        now = time.monotonic()
        if self.metrics_file is None or (not force and now - self._written < METRICS_EVERY_S):
            return
        self._written = now
        try:
            self.metrics_file.parent.mkdir(parents=True, exist_ok=True)
            write_to_textfile(str(self.metrics_file), self.registry)
        except OSError as exc:
            log.warning("lineage: counters not written to %s: %s", self.metrics_file, exc)


def build_emitter(settings: Settings, service: str) -> LineageEmitter:
    """The emitter of ``service`` per ``settings.lineage`` (off: an emitter that sends nothing).

    Raises:
        ConfigError, TransientError: from :func:`build_transport`.
    """
    lin = settings.lineage
    metrics_dir = lin.metrics_dir or settings.var_dir / "metrics"
    transport = build_transport(settings, service)
    return LineageEmitter(
        transport,
        service=service,
        timeout_s=lin.timeout_s,
        queue_size=lin.queue_size,
        metrics_file=metrics_dir / f"{service}.{os.getpid()}.prom" if transport else None,
    )


__all__ = ["LineageEmitter", "build_emitter", "build_transport", "kafka_config", "lineage_topic"]
