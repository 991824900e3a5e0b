"""The gc service's Prometheus metrics, in their own registry, served on ``/metrics``."""

from __future__ import annotations

import logging

from prometheus_client import CollectorRegistry, Counter, Gauge, start_http_server

from ferry.errors import ConfigError
from ferry.settings.retention import RetentionSettings

log = logging.getLogger(__name__)


class GcMetrics:
    """What the gc service counts (names as exported; counters get ``_total``):

    - ``ferry_gc_removed_files_total{zone}``, ``ferry_gc_removed_bytes_total{zone}``: files (and
      their bytes) removed from each zone;
    - ``ferry_gc_copies_total{zone,outcome}``: copies looked at: ``removed``, ``gone`` (already
      removed: a sweep done twice), ``rewritten`` (left for a later run), ``foreign`` (not where
      Ferry writes this file: left), ``mismatch`` (an archived name holding other bytes: left);
    - ``ferry_gc_orphans_total{zone}``: temporary files and batch directories of dead attempts;
    - ``ferry_gc_records_total{retention}``: gc-topic records swept per retention class;
    - ``ferry_gc_copied_total``: loaded and failed records copied into the gc topic;
    - ``ferry_gc_errors_total{zone}``: copies that could not be removed (logged with the path);
    - ``ferry_gc_expired_unswept_total{retention}``: gc-topic records gone before their sweep
      (the service was down longer than ``retention.grace``: their copies were left behind);
    - ``ferry_gc_client_renewals_total{retention}``: a class's broker client replaced after
      :data:`ferry.gc.sweeper.RENEW_AFTER` sweeps in a row failed on the broker;
    - ``ferry_gc_last_sweep_timestamp_seconds``: end of the last complete sweep.
    """

    def __init__(self) -> None:
        self.registry = r = CollectorRegistry()
        self.removed_files = Counter(
            "ferry_gc_removed_files", "Files removed, by zone.", ["zone"], registry=r
        )
        self.removed_bytes = Counter(
            "ferry_gc_removed_bytes", "Bytes removed, by zone.", ["zone"], registry=r
        )
        self.copies = Counter(
            "ferry_gc_copies",
            "Copies looked at, by zone and outcome.",
            ["zone", "outcome"],
            registry=r,
        )
        self.orphans = Counter(
            "ferry_gc_orphans", "Temporary files of dead attempts removed.", ["zone"], registry=r
        )
        self.records = Counter(
            "ferry_gc_records",
            "gc topic records swept, by retention class.",
            ["retention"],
            registry=r,
        )
        self.copied = Counter(
            "ferry_gc_copied", "loaded and failed records copied to the gc topic.", registry=r
        )
        self.errors = Counter(
            "ferry_gc_errors", "Copies that could not be removed, by zone.", ["zone"], registry=r
        )
        self.expired_unswept = Counter(
            "ferry_gc_expired_unswept",
            "gc topic records that expired before their sweep.",
            ["retention"],
            registry=r,
        )
        self.renewals = Counter(
            "ferry_gc_client_renewals",
            "Broker clients replaced after failed sweeps, by retention class.",
            ["retention"],
            registry=r,
        )
        self.last_sweep = Gauge(
            "ferry_gc_last_sweep_timestamp_seconds", "End of the last complete sweep.", registry=r
        )

    def serve(self, retention: RetentionSettings) -> int | None:
        """Start the ``/metrics`` HTTP server on ``retention.metrics_host:metrics_port`` (port 0:
        any free port) in a daemon thread; return the port, or ``None`` when it is off.

        Raises:
            ConfigError: the port cannot be bound (another gc service on this host?).
        """
        if retention.metrics_port is None:
            return None
        try:
            server, _thread = start_http_server(
                retention.metrics_port, retention.metrics_host, registry=self.registry
            )
        except OSError as exc:
            raise ConfigError(
                f"gc: cannot serve /metrics on {retention.metrics_host}:"
                f"{retention.metrics_port}: {exc} (set retention.metrics_port: 0 for any port)"
            ) from exc
        port = int(server.server_port)
        log.info("gc: /metrics on http://%s:%d/metrics", retention.metrics_host, port)
        return port


__all__ = ["GcMetrics"]
