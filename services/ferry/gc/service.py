"""The gc service (``ferry run gc``): removes every copy Ferry made once its retention passed.

Each turn of the loop (every ``retention.interval_s``):

1. copy the new ``FileLoaded`` and ``FileFailed`` records to the gc topic (:mod:`ferry.gc.copier`);
2. sweep each retention class (:mod:`ferry.gc.sweeper`): the records that became due, each
   file's due copies removed (:mod:`ferry.gc.plan`, :mod:`ferry.gc.hdfs_copies`,
   :mod:`ferry.gc.nas_copies`);
3. every ``retention.nas_interval_s``: the files of ``<nas>/.ferry/empty/`` and ``.ferry/failed/``
   past their retention, and the batch directories dead transforms left in ``_tmp`` of staging
   and rejects past ``retention.orphans``;
4. touch its liveness file (``ferry ps`` health), also after each step.

It touches only what this pipeline wrote: the paths its events name under its own zones' roots,
the ``.ferry/`` sub-directories and ``_tmp`` directories of its own datasets. A turn that meets an
unreachable cluster or broker logs it and tries again next turn; every step is idempotent. What it
removes is logged (one line per file) and counted on ``/metrics`` (:class:`GcMetrics`).
"""

from __future__ import annotations

import functools
import logging
import signal
import threading
import time
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

from ferry.clusters.hdfs.port import HdfsPort
from ferry.clusters.hdfs.webhdfs import WebHdfs
from ferry.core.kafka.admin import scan_consumer
from ferry.core.kafka.clients import build_admin
from ferry.core.kafka.offsets import group_client
from ferry.core.kafka.topics import ensure_topics
from ferry.core.runtime.heartbeat import beat, heartbeat_path, remove, sweep_dead
from ferry.core.runtime.service import service_main
from ferry.core.wire.avro import default_codec
from ferry.datasets.registry import load_definitions
from ferry.errors import ConfigError, FerryError
from ferry.gc.copier import Copier, ensure_gc_topic
from ferry.gc.hdfs_copies import orphan_batches, shared_in_use
from ferry.gc.metrics import GcMetrics
from ferry.gc.nas_copies import sweep_by_age
from ferry.gc.plan import class_label, longest, retention_classes
from ferry.gc.remover import Remover, human_bytes
from ferry.gc.sweeper import Sweeper, class_group
from ferry.settings import Settings, get_settings
from ferry.settings.retention import HDFS_ZONES, zone

log = logging.getLogger(__name__)

#: NAS zones swept by age (the archive is swept by event).
AGED_ZONES = ("empty", "failed")
#: HDFS zones whose ``<root>/<dataset>/_tmp`` holds a transform's batch directories.
BATCH_ZONES = ("staging", "rejects")
#: HDFS zones whose ``<root>/<dataset>/_shared`` holds transform batches' shared data files
#: (issue 45), each batch directory removed once older than the zone's retention.
SHARED_ZONES = ("staging", "incoming")


@dataclass
class TurnStats:
    """What one turn did: records copied, records swept per class, NAS files and batch
    directories removed by listing, and errors met (logged)."""

    copied: int = 0
    swept: dict[str, int] = field(default_factory=dict)
    listed_removed: int = 0
    errors: int = 0


class GcService:
    """Built by :func:`build`; :meth:`run` until SIGTERM or :meth:`stop`."""

    def __init__(
        self,
        settings: Settings,
        copier: Copier,
        sweepers: list[Sweeper],
        remover: Remover,
        datasets: list[str],
        metrics: GcMetrics,
        reader: Any = None,
    ) -> None:
        self.settings = settings
        self.copier = copier
        self.sweepers = sweepers
        self.remover = remover
        self.datasets = datasets
        self.metrics = metrics
        self.reader = reader  #: the sweeps' reading consumer, closed with the service
        self._stop = threading.Event()
        self._listed_at: float | None = None
        self.metrics_port: int | None = None
        #: the liveness file while :meth:`run` runs (``ferry ps`` health)
        self._alive: Path | None = None

    def _beat(self) -> None:
        if self._alive is not None:
            beat(self._alive)

    def stop(self) -> None:
        self._stop.set()

    def run_once(self, now_s: float | None = None) -> TurnStats:
        """One turn (steps 1–3 of the module docstring) at ``now_s`` (epoch s, default now)."""
        now_s = time.time() if now_s is None else now_s
        stats = TurnStats()
        try:
            stats.copied = self.copier.pump(
                max(1.0, self.settings.retention.interval_s), self._stop
            )
            self.metrics.copied.inc(stats.copied)
        except FerryError as exc:
            stats.errors += 1
            log.warning("gc: copying loaded/failed records: %s", exc)
        self._beat()
        for sweeper in self.sweepers:
            try:
                stats.swept[sweeper.label] = sweeper.sweep(int(now_s * 1000), self._stop)
            except FerryError as exc:
                stats.errors += 1
                log.warning("gc %s: sweep stopped: %s", sweeper.label, exc)
            self._beat()
        if (
            self._listed_at is None
            or now_s - self._listed_at >= self.settings.retention.nas_interval_s
        ):
            stats.listed_removed = self.sweep_listed(now_s)
            self._listed_at = now_s
        if not stats.errors:
            self.metrics.last_sweep.set(now_s)
        return stats

    def sweep_listed(self, now_s: float) -> int:
        """Step 3: the aged NAS files and the dead transforms' batch directories; returns how
        many were removed. Errors are logged and counted, never raised."""
        r = self.settings.retention
        removed = 0
        for dataset in self.datasets:
            for name in AGED_ZONES:
                keep = r.of(name)
                if keep is None:
                    continue
                try:
                    gone = sweep_by_age(
                        self.settings.paths.nas_dir, name, dataset, now_s - keep.total_seconds()
                    )
                except OSError as exc:
                    self.metrics.errors.labels(name).inc()
                    log.error("gc: .ferry/%s/%s not swept: %s", name, dataset, exc)
                    continue
                for f in gone:
                    moved = datetime.fromtimestamp(f.moved_s, tz=UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
                    log.info(
                        "gc: %s removed %s (%s, moved there %s, retention %s)",
                        name,
                        f.path,
                        human_bytes(f.size),
                        moved,
                        class_label(keep),
                    )
                    self.metrics.removed_files.labels(name).inc()
                    self.metrics.removed_bytes.labels(name).inc(f.size)
                    self.metrics.copies.labels(name, "removed").inc()
                removed += len(gone)
            for name in BATCH_ZONES:
                removed += self._sweep_batches(name, dataset, now_s)
            for name in SHARED_ZONES:
                keep = r.of(name)
                if keep is not None:
                    removed += self._sweep_batches(name, dataset, now_s, "_shared", keep)
        return removed

    def _sweep_batches(
        self,
        name: str,
        dataset: str,
        now_s: float,
        sub: str = "_tmp",
        age: timedelta | None = None,
    ) -> int:
        port: HdfsPort = self.remover.hdfs[zone(name).store]
        age = age if age is not None else self.settings.retention.orphans
        before_ms = int((now_s - age.total_seconds()) * 1000)
        what = "of a transform that died" if sub == "_tmp" else "of shared files past retention"
        root = self.remover.roots[name]
        try:
            dead = orphan_batches(port, root, dataset, before_ms, sub)
            if sub == "_shared":  # kept while a file of the batch still has its directory here
                dead = [e for e in dead if not shared_in_use(port, root, dataset, e.path)]
            for e in dead:
                port.delete(e.path, recursive=True)
                log.info("gc: %s removed %s, a batch directory %s", name, e.path, what)
        except FerryError as exc:
            self.metrics.errors.labels(name).inc()
            log.warning("gc: %s/%s/%s not swept: %s", name, dataset, sub, exc)
            return 0
        if dead:
            self.metrics.orphans.labels(name).inc(len(dead))
        return len(dead)

    def run(self) -> None:
        """Turn every ``retention.interval_s`` until stopped (SIGTERM/SIGINT)."""
        previous = {}
        if threading.current_thread() is threading.main_thread():
            previous = {
                s: signal.signal(s, lambda *_: self.stop()) for s in (signal.SIGTERM, signal.SIGINT)
            }
        self._alive = alive = heartbeat_path(self.settings, "gc")
        sweep_dead(alive.parent)  # files of earlier, killed processes
        self.metrics_port = self.metrics.serve(self.settings.retention)
        log.info(
            "gc: sweeping classes %s every %.0f s (zones: %s)",
            [s.label for s in self.sweepers],
            self.settings.retention.interval_s,
            describe(self.settings),
        )
        try:
            while not self._stop.is_set():
                stats = self.run_once()
                log.debug("gc: turn %s", stats)
                beat(alive)
                self._stop.wait(self.settings.retention.interval_s)
        finally:
            remove(alive)
            self._alive = None
            self.copier.close()
            if self.reader is not None:
                self.reader.close()
            for sweeper in self.sweepers:
                sweeper.close()
            for s, h in previous.items():
                signal.signal(s, h)


def describe(settings: Settings) -> str:
    """``landing 14d, staging 14d, …, quarantined 14d`` (``keep``: never removed)."""
    r = settings.retention
    names = [*(z.name for z in (*HDFS_ZONES,)), "archive", *AGED_ZONES, "quarantined"]
    return ", ".join(
        f"{n} {'keep' if r.of(n) is None else class_label(r.of(n) or timedelta(0))}" for n in names
    )


def warn_short(settings: Settings) -> list[str]:
    """The zones whose retention is shorter than the Kafka topics keep events: a replay of an
    older event still in Kafka will be quarantined ``input_expired``. Logged at start."""
    kafka = timedelta(milliseconds=settings.kafka.retention_ms)
    short = []
    for name in (*(z.name for z in HDFS_ZONES if z.name != "rejects"), "quarantined"):
        keep = settings.retention.of(name)
        if keep is not None and keep < kafka:
            short.append(name)
    if short:
        log.warning(
            "gc: retention of %s is shorter than kafka.retention_ms (%s): replaying an event "
            "older than that finds its input gone (input_expired)",
            ", ".join(short),
            class_label(kafka),
        )
    return short


def build(settings: Settings | None = None) -> GcService:
    """Wire the gc service: topics (the plan and ``<prefix>.gc``), the copier, one sweeper per
    retention class, the HDFS ports of both clusters, the datasets' NAS markers.

    Raises:
        ConfigError: bad settings, no dataset definitions, or the broker refused the gc topic.
        TransientError: the broker did not answer.
    """
    settings = settings or get_settings()
    # Every valid definition (an invalid one's files are swept again once it is fixed and gc
    # restarted; its copies stay meanwhile, never removed by mistake).
    datasets = load_definitions(settings.paths.datasets_dir).specs
    if not datasets:
        raise ConfigError(f"no valid dataset definitions in {settings.paths.datasets_dir}")
    kafka, r = settings.kafka, settings.retention
    admin = build_admin(kafka)
    ensure_topics(admin, kafka, retry=settings.retry)
    keep_ms = int((longest(r) + r.grace).total_seconds() * 1000)
    topic = ensure_gc_topic(admin, kafka, keep_ms)
    metrics = GcMetrics()
    remover = Remover(
        hdfs={"a": WebHdfs.for_cluster("a", settings), "b": WebHdfs.for_cluster("b", settings)},
        roots={z.name: getattr(settings.paths, z.path_setting) for z in HDFS_ZONES},
        nas_dir=Path(settings.paths.nas_dir),
        markers={
            name: spec.finished.marker_suffix if spec.finished.policy == "marker" else None
            for name, spec in datasets.items()
        },
        retention=r,
        metrics=metrics,
    )
    codec = default_codec(settings.paths.schemas_dir)
    reader = scan_consumer(kafka)  # one for every class, for the service's whole life
    sweepers = [
        Sweeper(
            k,
            kafka,
            r,
            group_client(kafka, class_group(kafka, k)),
            topic,
            codec,
            remover,
            metrics,
            reader,
            renew=functools.partial(group_client, kafka, class_group(kafka, k)),
        )
        for k in retention_classes(r)
    ]
    warn_short(settings)
    copier = Copier(kafka, topic)
    return GcService(settings, copier, sweepers, remover, sorted(datasets), metrics, reader)


#: ``ferry run gc`` (:func:`ferry.core.services.run`).
main = service_main(build)
