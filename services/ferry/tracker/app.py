"""The tracker: one faust app that folds every ferry topic into a per-file timeline table and
serves it over HTTP.

- Input: every topic of the plan (``<prefix>.extracted`` … ``<prefix>.failed``) as raw bytes;
  the agent decodes with Ferry's codec, so an undecodable record is logged, counted
  (``ferry_tracker_bad_records_total``) and skipped; it never stops the agent (case C05).
- State: faust Table ``files`` (file id → :meth:`Timeline.to_dict`) in the ``memory://`` store,
  rebuilt on start from its changelog topic ``<prefix>.tracker-files-changelog``.
- HTTP (faust web, aiohttp) on ``settings.tracker.web_host:web_port``:

  ============================ ===============================================================
  ``GET /files/{file_id}``     the file's timeline (JSON; 404 when unknown)
  ``GET /files?state=&dataset=&limit=``  timelines, filtered (``state`` may be ``stuck``)
  ``GET /stuck``               files waiting in a stage longer than its SLA
  ``GET /summary``             files per state, stuck per stage, bad records (``ferry status``)
  ``GET /metrics``             Prometheus text format
  ``GET /``                    an HTML status page listing files and their steps
  ============================ ===============================================================

One tracker instance per topic prefix: web requests read the local table, which holds every
partition only when this instance is the group's sole member (the consumer group is
``<prefix>.tracker``).
"""

from __future__ import annotations

import asyncio
import html
import logging
import time
from collections import Counter as _Counter
from collections.abc import Iterable
from datetime import UTC, datetime
from typing import Any

import faust
from faust.web import Request, Response, View
from prometheus_client import (
    CONTENT_TYPE_LATEST,
    CollectorRegistry,
    Counter,
    Gauge,
    Histogram,
    generate_latest,
)

from ferry.core.avro import default_codec
from ferry.core.config import Settings, get_settings
from ferry.core.errors import FerryError, SerializationError
from ferry.core.events import TOPIC_NAMES
from ferry.core.kafka import group_id
from ferry.core.service import configure_logging
from ferry.core.timeline import STEPS, Timeline, fold, stage_latencies

log = logging.getLogger(__name__)

_LATENCY_BUCKETS = (1, 5, 15, 30, 60, 120, 300, 600, 1800, 3600, 7200, 21600, 86400)


class TrackerMetrics:
    """The tracker's Prometheus metrics, in their own registry (one per app)."""

    def __init__(self) -> None:
        self.registry = CollectorRegistry()
        r = self.registry
        self.events = Counter(
            "ferry_tracker_events", "Events folded, by topic.", ["topic"], registry=r
        )
        self.bad_records = Counter(
            "ferry_tracker_bad_records", "Records that could not be decoded (skipped).", registry=r
        )
        self.failures = Counter(
            "ferry_tracker_failures",
            "FileFailed events seen, by stage and reason.",
            ["stage", "reason"],
            registry=r,
        )
        self.latency = Histogram(
            "ferry_stage_latency_seconds",
            "Time a file spent in a stage (event times), s.",
            ["stage"],
            buckets=_LATENCY_BUCKETS,
            registry=r,
        )
        self.files = Gauge("ferry_files", "Files by current state.", ["state"], registry=r)
        self.stuck = Gauge(
            "ferry_files_stuck",
            "Files waiting in a stage longer than its SLA.",
            ["stage"],
            registry=r,
        )
        self.lag = Gauge(
            "ferry_consumer_lag",
            "Records behind the high watermark, per stage group.",
            ["group", "topic"],
            registry=r,
        )


def _now_ms() -> int:
    return int(time.time() * 1000)


def _timelines(table: Any) -> list[Timeline]:
    return [Timeline.from_dict(v) for v in list(table.values()) if v]


def summary(timelines: Iterable[Timeline], now_ms: int, sla_s: dict[str, float]) -> dict[str, Any]:
    """Files per state and stuck files per stage (the ``/summary`` body, minus counters)."""
    states: _Counter[str] = _Counter()
    stuck: _Counter[str] = _Counter()
    for tl in timelines:
        states[tl.state or "unknown"] += 1
        if tl.stuck(now_ms, sla_s):
            stuck[tl.waiting_in or "unknown"] += 1
    return {
        "files": sum(states.values()),
        "states": {s: states.get(s, 0) for s in STEPS},
        "stuck": dict(stuck),
    }


def _stuck_view(tl: Timeline, now_ms: int, sla_s: dict[str, float]) -> dict[str, Any]:
    entered = tl.entered_ms() or now_ms
    stage = tl.waiting_in or ""
    return {
        **tl.to_dict(),
        "stuck_in": stage,
        "waiting_s": round((now_ms - entered) / 1000, 3),
        "sla_s": sla_s.get(stage),
    }


def _fmt_ms(ms: int) -> str:
    return datetime.fromtimestamp(ms / 1000, UTC).strftime("%Y-%m-%d %H:%M:%S")


def render_status_page(
    timelines: list[Timeline], now_ms: int, sla_s: dict[str, float], prefix: str
) -> str:
    """The ``/`` page: a summary line and one row per file (newest first) with each step's time."""
    rows = []
    for tl in sorted(timelines, key=lambda t: -(t.entered_ms() or 0)):
        cells = "".join(
            f"<td class='step'>{_fmt_ms(tl.steps[s].first_ms) if s in tl.steps else ''}</td>"
            for s in STEPS
        )
        stuck = " stuck" if tl.stuck(now_ms, sla_s) else ""
        reason = tl.failure.reason if tl.failure else ""
        rows.append(
            f"<tr class='file{stuck}' id='f-{html.escape(tl.file_id)}'>"
            f"<td class='file-id'>{html.escape(tl.file_id)}</td>"
            f"<td>{html.escape(tl.dataset or '')}</td>"
            f"<td class='source'>{html.escape(tl.source_path or '')}</td>"
            f"<td class='state'>{html.escape(tl.state or '')}{stuck}</td>{cells}"
            f"<td>{html.escape(reason)}</td></tr>"
        )
    s = summary(timelines, now_ms, sla_s)
    counts = ", ".join(f"{k}: {v}" for k, v in s["states"].items())
    head = "".join(
        f"<th>{h}</th>" for h in ("file id", "dataset", "NAS file", "state", *STEPS, "failure")
    )
    return (
        "<!doctype html><html><head><meta charset='utf-8'>"
        f"<title>Ferry tracker ({html.escape(prefix)})</title>"
        "<style>body{font-family:sans-serif}td,th{padding:2px 8px;border-bottom:1px solid #ddd}"
        "tr.stuck{background:#fdd}</style></head><body>"
        f"<h1>Ferry tracker — {html.escape(prefix)}</h1>"
        f"<p id='summary'>{s['files']} file(s) — {html.escape(counts)}; "
        f"stuck: {sum(s['stuck'].values())}</p>"
        f"<table id='files'><thead><tr>{head}</tr></thead><tbody>{''.join(rows)}</tbody></table>"
        "</body></html>"
    )


def build_app(settings: Settings | None = None, *, create_topics: bool = True) -> faust.App:
    """Wire the tracker: the faust app, its topic subscription, table, agent, timer and views.

    Args:
        create_topics: create the topic plan first (idempotent; connects to the broker).

    Raises:
        TransientError, ConfigError: from :func:`ferry.core.topics.ensure_topics`.
    """
    settings = settings or get_settings()
    kafka, tcfg = settings.kafka, settings.tracker
    if create_topics:
        from ferry.core.kafka import build_admin
        from ferry.core.topics import ensure_topics

        ensure_topics(build_admin(kafka), kafka)
    codec = default_codec(settings.paths.schemas_dir)
    sla = dict(tcfg.sla_s)
    datadir = tcfg.data_dir / kafka.topic_prefix
    datadir.mkdir(parents=True, exist_ok=True)
    app = faust.App(
        group_id(kafka, "tracker"),
        broker=[f"kafka://{hp.strip()}" for hp in kafka.bootstrap_servers.split(",")],
        store="memory://",
        datadir=str(datadir),
        autodiscover=False,
        topic_partitions=kafka.partitions,
        topic_replication_factor=kafka.replication_factor,
        consumer_auto_offset_reset="earliest",
        web_enabled=True,
        web_bind=tcfg.web_host,
        web_host=tcfg.web_host,
        web_port=tcfg.web_port,
        web_in_thread=False,
        broker_commit_interval=1.0,
        producer_acks=-1,
        table_standby_replicas=0,
    )
    metrics = TrackerMetrics()
    app.ferry_metrics = metrics  # type: ignore[attr-defined]
    topic = app.topic(
        *(kafka.topic(n) for n in TOPIC_NAMES), key_serializer="raw", value_serializer="raw"
    )
    files = app.Table(
        "files",
        default=None,
        partitions=kafka.partitions,
        help="file id → timeline",
    )

    @app.agent(topic, name="ferry.tracker.track")
    async def track(stream: Any) -> None:
        async for ev in stream.events():
            msg = ev.message
            where = f"{msg.topic}[{msg.partition}]@{msg.offset}"
            try:
                if ev.value is None:
                    raise SerializationError("record has no value", reason="undecodable")
                event = codec.decode(ev.value)
            except SerializationError as exc:
                metrics.bad_records.inc()
                log.warning("tracker: skipping undecodable record %s: %s", where, exc)
                continue
            try:
                key = event.file_id or _fallback_key(msg.key, where)
                raw = files.get(key)
                before = Timeline.from_dict(raw) if raw else None
                after = fold(before, event, key)
                files[key] = after.to_dict()
            except (FerryError, ValueError, KeyError, TypeError) as exc:
                metrics.bad_records.inc()
                log.warning("tracker: cannot fold %s: %s", where, exc)
                continue
            metrics.events.labels(msg.topic).inc()
            if event.TOPIC == "failed":
                metrics.failures.labels(event.stage, event.reason).inc()  # type: ignore[union-attr]
            for stage, seconds in stage_latencies(before, after).items():
                metrics.latency.labels(stage).observe(seconds)

    @app.timer(interval=tcfg.lag_refresh_s, name="ferry.tracker.lag")
    async def refresh_lag() -> None:
        loop = asyncio.get_running_loop()
        try:
            lags = await asyncio.wait_for(
                loop.run_in_executor(None, _lag_snapshot, settings), kafka.request_timeout_s * 3
            )
        except (TimeoutError, FerryError) as exc:
            log.warning("tracker: consumer lag not refreshed: %s", exc)
            return
        for (group, tp), lag in lags.items():
            metrics.lag.labels(group, tp).set(lag)

    def refresh_state_gauges() -> list[Timeline]:
        tls = _timelines(files)
        s = summary(tls, _now_ms(), sla)
        for state, n in s["states"].items():
            metrics.files.labels(state).set(n)
        for stage in ("transform", "transfer", "load"):
            metrics.stuck.labels(stage).set(s["stuck"].get(stage, 0))
        return tls

    @app.page("/files/{file_id}", name="file")
    class FileView(View):
        async def get(self, request: Request, file_id: str) -> Response:
            raw = files.get(file_id)
            if not raw:
                return self.json({"error": f"unknown file {file_id}"}, status=404)
            tl = Timeline.from_dict(raw)
            return self.json({**tl.to_dict(), "stuck": tl.stuck(_now_ms(), sla)})

    @app.page("/files", name="files")
    class FilesView(View):
        async def get(self, request: Request) -> Response:
            state = request.query.get("state")
            dataset = request.query.get("dataset")
            try:
                limit = int(request.query.get("limit", "1000"))
            except ValueError:
                return self.json({"error": "limit must be an integer"}, status=400)
            now = _now_ms()
            out = []
            for tl in _timelines(files):
                if dataset and tl.dataset != dataset:
                    continue
                if state == "stuck" and not tl.stuck(now, sla):
                    continue
                if state and state != "stuck" and tl.state != state:
                    continue
                out.append({**tl.to_dict(), "stuck": tl.stuck(now, sla)})
            out.sort(key=lambda d: d["file_id"])
            return self.json({"count": len(out), "files": out[:limit]})

    @app.page("/stuck", name="stuck")
    class StuckView(View):
        async def get(self, request: Request) -> Response:
            now = _now_ms()
            out = [_stuck_view(tl, now, sla) for tl in _timelines(files) if tl.stuck(now, sla)]
            out.sort(key=lambda d: -d["waiting_s"])
            return self.json({"count": len(out), "sla_s": sla, "files": out})

    @app.page("/summary", name="summary")
    class SummaryView(View):
        async def get(self, request: Request) -> Response:
            body = summary(_timelines(files), _now_ms(), sla)
            body["bad_records"] = int(metrics.bad_records._value.get())
            body["topic_prefix"] = kafka.topic_prefix
            return self.json(body)

    @app.page("/metrics", name="metrics")
    class MetricsView(View):
        async def get(self, request: Request) -> Response:
            refresh_state_gauges()
            return self.bytes(
                generate_latest(metrics.registry), content_type=CONTENT_TYPE_LATEST.split(";")[0]
            )

    @app.page("/", name="index")
    class IndexView(View):
        async def get(self, request: Request) -> Response:
            return self.html(
                render_status_page(_timelines(files), _now_ms(), sla, kafka.topic_prefix)
            )

    return app


def _fallback_key(key: bytes | None, where: str) -> str:
    if key:
        try:
            return key.decode("utf-8")
        except UnicodeDecodeError:
            pass  # binary key: use the record's coordinates
    return where


def _lag_snapshot(settings: Settings) -> dict[tuple[str, str], int]:
    """(group, topic) → total lag over partitions; blocking (run in an executor)."""
    from ferry.core.kafka import build_admin
    from ferry.core.kafkaops import consumer_lag

    out: dict[tuple[str, str], int] = {}
    for pl in consumer_lag(build_admin(settings.kafka), settings):
        out[(pl.group, pl.topic)] = out.get((pl.group, pl.topic), 0) + pl.lag
    return out


def main() -> None:
    """Run the tracker worker until SIGTERM/SIGINT (settings from the environment)."""
    configure_logging()
    app = build_app(get_settings())
    worker = faust.Worker(app, loglevel="INFO", quiet=True, redirect_stdouts=False)
    worker.execute_from_commandline()


if __name__ == "__main__":
    main()
