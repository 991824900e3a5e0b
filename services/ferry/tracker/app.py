"""The tracker: one faust app that folds every ferry topic into a per-file record table and
serves it over HTTP (endpoints: :mod:`ferry.tracker.views`).

- Input: every topic of the plan (``<prefix>.extracted`` … ``<prefix>.failed``) as raw bytes;
  the agent decodes with Ferry's codec, so an undecodable record is logged, counted
  (``ferry_tracker_bad_records_total``) and skipped; it never stops the agent (docs/field-cases.md,
  C05).
- State: faust Table ``files`` (file id → :mod:`ferry.tracker.record` record) and ``pruned``
  (``"<partition>:<dataset>"`` → loaded files whose detail was dropped), in
  ``settings.tracker.store_url``: ``rocksdb://`` (faust's RocksDB store through the ``rocksdict``
  binding) keeps them on disk under ``data_dir/<prefix>`` with the changelog offset they reflect,
  so a restart reads only the changelog's tail instead of replaying every file. Loaded files
  older than ``loaded_retention_s`` are deleted (their counts kept in ``pruned``). The in-memory
  index (:class:`ferry.tracker.state.TrackerState`) is rebuilt from the store after recovery.
- Access: with ``tracker.token`` set, every request but ``/healthz`` and ``/static/`` needs
  ``Authorization: Bearer <token>`` (:mod:`ferry.tracker.auth`).

One tracker instance per topic prefix: web requests read the local table, which holds every
partition only when this instance is the group's sole member (the consumer group is
``<prefix>.tracker``).
"""

from __future__ import annotations

import asyncio
import logging
import time
from typing import Any

import faust
from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram

from ferry.core.events import TOPIC_NAMES, FileFailed
from ferry.core.kafka.clients import group_id
from ferry.core.runtime.conditions import read_conditions
from ferry.core.runtime.service import configure_logging
from ferry.core.runtime.waiting import WAITING
from ferry.core.services import STAGES, consumer_of
from ferry.core.timeline import Timeline, stage_latencies
from ferry.core.wire.avro import default_codec
from ferry.datasets.reload import Definitions
from ferry.errors import FerryError, SerializationError
from ferry.lineage.naming import Names
from ferry.settings import Settings, get_settings
from ferry.settings.secrets import resolve_secret
from ferry.settings.tracker import TrackerSettings
from ferry.tracker.auth import bearer_middleware, broker_options
from ferry.tracker.record import apply, park
from ferry.tracker.state import TrackerState
from ferry.tracker.views import TrackerContext, now_ms, register

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
        self.quarantine = Gauge(
            "ferry_quarantine_entries",
            "Quarantine entries by state: open (needs someone), dismissed, superseded.",
            ["state"],
            registry=r,
        )
        self.definition_valid = Gauge(
            "ferry_dataset_definition_valid",
            "1 when the dataset's definition is valid and run, 0 when it is invalid (its files "
            "wait until it is fixed).",
            ["dataset"],
            registry=r,
        )
        self.lag = Gauge(
            "ferry_consumer_lag",
            "Records behind the high watermark, per stage group.",
            ["group", "topic"],
            registry=r,
        )
        labels = ["stage", "reason", "cluster", "where"]
        self.condition_files = Gauge(
            "ferry_condition_held_files",
            "Files a stage holds because of a cluster condition (quota_exceeded, safe_mode, "
            "no_space; case C22) now, by stage, reason, cluster and place (a quota's "
            "directory, empty for the whole cluster); no series when none holds.",
            labels,
            registry=r,
        )
        self.condition_since = Gauge(
            "ferry_condition_since_timestamp_seconds",
            "Since when a cluster condition holds a stage's files (epoch s).",
            labels,
            registry=r,
        )

    def show_conditions(self, held: list[Any]) -> None:
        """Set the condition gauges to ``held`` (:class:`ferry.core.runtime.conditions.Held`
        of every running instance): a cleared condition's series disappear."""
        self.condition_files.clear()
        self.condition_since.clear()
        for h in held:
            labels = (h.service, h.reason, h.cluster, h.where)
            files = self.condition_files.labels(*labels)
            files.set(files._value.get() + h.files)  # two instances of a stage: their sum
            since = self.condition_since.labels(*labels)
            old = since._value.get()
            since.set(min(old, h.since) if old else h.since)


def store_options(tcfg: TrackerSettings) -> dict[str, Any]:
    """Options of each table's RocksDB store (keys of ``faust.stores.rocksdb.RocksDBOptions``):
    the rocksdict driver, two write buffers of ``store_write_buffer_mb`` and a block cache of
    ``store_block_cache_mb`` per table partition. Memory bound of the store, MiB: tables (2) ×
    partitions × (2 × write buffer + block cache). faust's defaults (three 64 MiB write buffers
    and a 2 GiB cache per partition) let the tracker grow about 5 KB per file carried in the
    hour-long soak although loaded files were pruned after 10 minutes. Measured in one run,
    ``bench/bench_tracker.py --files 40000 --span-h 1 --retention-h 0.1667 --rss-every 5000
    --store-options faust|ferry`` (2026-12-03): RSS 99 → 223 MB over the 40,000 files with
    faust's defaults, 97 → 111 MB with these."""
    return {
        "driver": "rocksdict",
        "write_buffer_size": tcfg.store_write_buffer_mb << 20,
        "max_write_buffer_number": 2,
        "block_cache_size": tcfg.store_block_cache_mb << 20,
    }


def build_app(settings: Settings | None = None, *, create_topics: bool = True) -> faust.App:
    """Wire the tracker: the faust app, its topic subscription, table, agent, timer and views.

    Args:
        create_topics: create the topic plan first (idempotent; connects to the broker).

    Raises:
        TransientError, ConfigError: from :func:`ferry.core.kafka.topics.ensure_topics`.
    """
    settings = settings or get_settings()
    kafka, tcfg = settings.kafka, settings.tracker
    if create_topics:
        from ferry.core.kafka.clients import build_admin
        from ferry.core.kafka.topics import TRACKER_CHANGELOGS, ensure_topics

        admin = build_admin(kafka)
        ensure_topics(admin, kafka, retry=settings.retry)
        ensure_topics(admin, kafka, (WAITING, *TRACKER_CHANGELOGS), retry=settings.retry)
    codec = default_codec(settings.paths.schemas_dir)
    sla = dict(tcfg.sla_s)
    datadir = tcfg.data_dir / kafka.topic_prefix
    datadir.mkdir(parents=True, exist_ok=True)
    app = faust.App(
        group_id(kafka, "tracker"),
        broker=[f"kafka://{hp.strip()}" for hp in kafka.bootstrap_servers.split(",")],
        store=tcfg.store_url,
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
        **broker_options(kafka),
    )
    metrics = TrackerMetrics()
    app.ferry_metrics = metrics  # type: ignore[attr-defined]
    topic = app.topic(
        *(kafka.topic(n) for n in TOPIC_NAMES), key_serializer="raw", value_serializer="raw"
    )
    waiting = app.topic(kafka.topic(WAITING), key_serializer="raw", value_serializer="raw")
    rocksdb = tcfg.store_url.startswith("rocksdb")
    # A dict per table: faust's store pops "driver" from the options it is given.
    files = app.Table(
        "files",
        default=None,
        partitions=kafka.partitions,
        help="file id → record",
        options=store_options(tcfg) if rocksdb else None,
    )
    pruned = app.Table(
        "pruned",
        default=None,
        partitions=kafka.partitions,
        options=store_options(tcfg) if rocksdb else None,
        help="'<partition>:<dataset>' → loaded files whose detail retention dropped",
    )
    state = TrackerState()
    ctx = TrackerContext(
        files=files,
        pruned=pruned,
        state=state,
        sla=sla,
        prefix=kafka.topic_prefix,
        groups={s: group_id(kafka, s) for s in STAGES},
        refresh_s=tcfg.page_refresh_s,
        health_stall_s=tcfg.health_stall_s,
        health_broker_s=tcfg.health_broker_s,
        metrics=metrics,
        bad_records=lambda: int(metrics.bad_records._value.get()),
        names=Names.of(settings),
    )
    ctx.definitions = Definitions(settings.paths.datasets_dir, "tracker", must_exist=False)
    app.ferry_state = state  # type: ignore[attr-defined]
    retention_ms = int(tcfg.loaded_retention_s * 1000)
    last_sweep: dict[int, float] = {}

    @files.on_recover
    async def rebuild_index() -> None:
        started = time.monotonic()
        ctx.rebuild()
        log.info(
            "tracker: %d files indexed from the store in %.2f s",
            len(state.entries),
            time.monotonic() - started,
        )

    def sweep(partition: int) -> None:
        """Drop loaded files' detail older than the retention (their partition's only: a
        table write goes to the changelog partition of the event being processed)."""
        now = time.monotonic()
        if retention_ms <= 0 or now - last_sweep.get(partition, 0.0) < tcfg.retention_sweep_s:
            return
        last_sweep[partition] = now
        for e in state.expired(partition, now_ms() - retention_ms):
            del files[e.file_id]
            key = f"{partition}:{e.dataset}"
            pruned[key] = int(pruned.get(key) or 0) + 1
            state.drop(e.file_id)
            state.pruned[e.dataset] += 1

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
                ctx.liveness.last_event_ms = now_ms()
                continue
            try:
                key = event.file_id or _fallback_key(msg.key, where)
                before, record = apply(files.get(key), event, key, msg.partition)
                files[key] = record
                state.put(record)
            except (FerryError, ValueError, KeyError, TypeError) as exc:
                metrics.bad_records.inc()
                log.warning("tracker: cannot fold %s: %s", where, exc)
                continue
            metrics.events.labels(msg.topic).inc()
            ctx.liveness.last_event_ms = now_ms()
            if isinstance(event, FileFailed):
                metrics.failures.labels(event.stage, event.reason).inc()
            for stage, seconds in stage_latencies(before, Timeline.from_dict(record)).items():
                metrics.latency.labels(stage).observe(seconds)
            sweep(msg.partition)

    @app.agent(waiting, name="ferry.tracker.waiting")
    async def track_waiting(stream: Any) -> None:
        """Files parked in the waiting room (their definition is invalid for a stage) and
        released from it (an empty value): ``x.parked`` of their record."""
        async for ev in stream.events():
            key = _fallback_key(ev.message.key, "")
            stage = None
            if ev.value:
                try:
                    stage = _waiting_stage(codec.decode(ev.value))
                except SerializationError:
                    metrics.bad_records.inc()
                    continue
            record = park(files.get(key), stage, now_ms())
            if record is None:
                continue
            files[key] = record
            if stage is None:
                ctx.parked.pop(key, None)
            else:
                ctx.parked[key] = (str(record.get("dataset")), stage)

    @app.timer(interval=tcfg.lag_refresh_s, name="ferry.tracker.lag")
    async def refresh_lag() -> None:
        loop = asyncio.get_running_loop()
        try:
            lags, own = await asyncio.wait_for(
                loop.run_in_executor(None, _lag_snapshot, settings), kafka.request_timeout_s * 3
            )
        except (TimeoutError, FerryError) as exc:
            log.warning("tracker: consumer lag not refreshed: %s", exc)
            ctx.liveness.lag_error = f"{type(exc).__name__}: {exc}".rstrip(": ")
            return
        ctx.lags = lags
        ctx.liveness.lag_ok_ms, ctx.liveness.own_lag, ctx.liveness.lag_error = now_ms(), own, ""
        ctx.conditions = read_conditions(settings)  # this host's stage instances (C22)
        metrics.show_conditions(ctx.conditions)
        for (group, tp), lag in lags.items():
            metrics.lag.labels(group, tp).set(lag)

    register(app, ctx)
    token = resolve_secret(tcfg.token, tcfg.token_file, "tracker.token")
    if token is not None:
        app.web.web_app.middlewares.append(bearer_middleware(token))  # type: ignore[attr-defined]
    return app


def _waiting_stage(event: Any) -> str | None:
    """The stage a parked input event waits for: the one that consumes its topic."""
    return consumer_of(getattr(event, "TOPIC", ""))


def _fallback_key(key: bytes | None, where: str) -> str:
    if key:
        try:
            return key.decode("utf-8")
        except UnicodeDecodeError:
            pass  # binary key: use the record's coordinates
    return where


def _lag_snapshot(settings: Settings) -> tuple[dict[tuple[str, str], int], int]:
    """((group, topic) → total lag over partitions for the stage groups, the tracker's own lag on
    the Ferry topics); blocking (run in an executor)."""
    from ferry.core.kafka.offsets import consumer_lag, group_lag

    out: dict[tuple[str, str], int] = {}
    for pl in consumer_lag(settings):
        out[(pl.group, pl.topic)] = out.get((pl.group, pl.topic), 0) + pl.lag
    topics = [settings.kafka.topic(n) for n in TOPIC_NAMES]
    return out, group_lag(settings, group_id(settings.kafka, "tracker"), topics)


def main() -> None:
    """Run the tracker worker until SIGTERM/SIGINT (settings from the environment)."""
    configure_logging()
    app = build_app(get_settings())
    worker = faust.Worker(app, loglevel="INFO", quiet=True, redirect_stdouts=False)
    worker.execute_from_commandline()


if __name__ == "__main__":
    main()
