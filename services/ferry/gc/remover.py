"""Remove the due copies of one file, log one line for it and count what was removed."""

from __future__ import annotations

import logging
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from ferry.clusters.hdfs.port import HdfsPort
from ferry.core.events import FileFailed, FileManifest
from ferry.errors import FerryError, HdfsPathNotFound, TransientError
from ferry.gc.hdfs_copies import Removal, copy_dir, remove_hdfs_copy
from ferry.gc.metrics import GcMetrics
from ferry.gc.nas_copies import remove_archived
from ferry.gc.plan import ARCHIVE
from ferry.settings.retention import RetentionSettings, zone

log = logging.getLogger(__name__)


def human_bytes(n: int) -> str:
    """``1536`` → ``1.5 KiB``."""
    size = float(n)
    for unit in ("B", "KiB", "MiB", "GiB"):
        if size < 1024 or unit == "GiB":
            return f"{size:.0f} B" if unit == "B" else f"{size:.1f} {unit}"
        size /= 1024
    return f"{size:.1f} GiB"


@dataclass
class Remover:
    """What removing copies needs: the HDFS ports by cluster name (``"a"``, ``"b"``), each HDFS
    zone's root path, the NAS directory, each dataset's marker suffix (``None``: no marker), the
    retention settings and the metrics."""

    hdfs: Mapping[str, HdfsPort]
    roots: Mapping[str, str]
    nas_dir: Path
    markers: Mapping[str, str | None]
    retention: RetentionSettings
    metrics: GcMetrics

    def remove(
        self, event: Any, zones: list[str], event_ms: int, now_ms: int, label: str
    ) -> list[Removal]:
        """Remove ``event``'s file's copies in ``zones`` (its time ``event_ms``, epoch ms) and
        log one line naming the file, the event, each zone's outcome, files and bytes. After a
        ``FileFailed``, nothing is removed when the file ran again since (:meth:`rerun_since`):
        every zone is ``rewritten``.

        A copy that cannot be removed for good (permissions, a NAS error) is logged as an error,
        counted in ``ferry_gc_errors_total`` and skipped.

        Raises:
            TransientError: a cluster did not answer; the caller sweeps this event again later.
        """
        m = event.manifest
        skew_ms = int(self.retention.clock_skew_s * 1000)
        orphans_ms = now_ms - int(self.retention.orphans.total_seconds() * 1000)
        done: list[Removal] = []
        if isinstance(event, FileFailed) and self.rerun_since(m, event_ms + skew_ms):
            # Released (or re-dropped) and carried on since: the later run's own outcome says
            # when its copies go, the landing copy it read included.
            done = [Removal(z, "rewritten", m.uris.get(z, z)) for z in zones]
            for r in done:
                self._count(r)
            self._log(event, done, event_ms, label)
            return done
        for name in zones:
            try:
                if name == ARCHIVE:
                    r = remove_archived(self.nas_dir, m, self.markers.get(m.dataset))
                else:
                    r = remove_hdfs_copy(
                        self.hdfs[zone(name).store],
                        name,
                        self.roots[name],
                        m,
                        written_before_ms=event_ms + skew_ms,
                        orphans_before_ms=orphans_ms,
                    )
            except TransientError:
                raise
            except (FerryError, OSError) as exc:
                self.metrics.errors.labels(name).inc()
                log.error("gc: %s copy of %s (%s) not removed: %s", name, m.file_id, m.dataset, exc)
                continue
            self._count(r)
            done.append(r)
        self._log(event, done, event_ms, label)
        return done

    def rerun_since(self, m: FileManifest, after_ms: int) -> bool:
        """Whether ``m``'s file was staged or transferred again after ``after_ms`` (epoch ms):
        its staging or incoming directory holds a file written later. Two listings.

        Raises:
            TransientError: a cluster did not answer.
        """
        for name in ("staging", "incoming"):
            try:
                entries = self.hdfs[zone(name).store].list(copy_dir(self.roots[name], m))
            except HdfsPathNotFound:
                continue
            if any(e.mtime_ms > after_ms for e in entries):
                return True
        return False

    def _count(self, r: Removal) -> None:
        self.metrics.copies.labels(r.zone, r.outcome).inc()
        if r.files:
            self.metrics.removed_files.labels(r.zone).inc(r.files)
            self.metrics.removed_bytes.labels(r.zone).inc(r.bytes)
        if r.orphans:
            self.metrics.orphans.labels(r.zone).inc(r.orphans)

    @staticmethod
    def _log(event: Any, done: list[Removal], event_ms: int, label: str) -> None:
        if not done:
            return
        m = event.manifest
        when = datetime.fromtimestamp(event_ms / 1000, tz=UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
        parts = []
        for r in done:
            what = f"{r.files} file(s) {human_bytes(r.bytes)}" if r.outcome == "removed" else ""
            parts.append(f"{r.zone} {r.outcome}{' ' + what if what else ''}")
        level = logging.INFO if any(r.outcome != "gone" for r in done) else logging.DEBUG
        log.log(
            level,
            "gc: %s %s (%s) after %s at %s, retention %s: %s",
            m.dataset,
            m.file_id,
            m.source_path,
            type(event).__name__,
            when,
            label,
            "; ".join(parts),
        )


__all__ = ["Remover", "human_bytes"]
