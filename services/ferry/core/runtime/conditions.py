"""The cluster conditions a stage instance holds files for, now (case C22): what, where, since
when, how many files.

A :class:`~ferry.errors.ClusterCondition` (a quota exceeded, safe mode, no space) holds files
instead of quarantining them; while it lasts the stage says so. Each instance keeps a
:class:`ConditionBoard`, mirrored to ``<var_dir>/run/<service>.<pid>.conditions`` (JSON, removed
when the last condition clears; a killed instance's file is swept with its liveness file,
:func:`ferry.core.runtime.heartbeat.sweep_dead`). ``ferry ps`` shows each instance's conditions
in its health, ``ferry status`` lists them, and the tracker exports them as the gauges
``ferry_condition_held_files`` and ``ferry_condition_since_timestamp_seconds`` on ``/metrics``
and on its page (:func:`read_conditions`). The file is of this host: an instance on another
host is seen by a tracker and a ``ferry status`` of its own host.

File shape::

    {"service": "extract", "pid": 123, "conditions": [{"reason": "quota_exceeded",
     "cluster": "b", "where": "/ferry/landing", "since": 1765000000.0, "last": 1765000042.5,
     "files": 5, "message": "..."}]}
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
import threading
import time
from collections.abc import Callable, Hashable
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from ferry.errors import ClusterCondition
from ferry.settings import Settings

log = logging.getLogger(__name__)


def conditions_path(settings: Settings, service: str, pid: int | None = None) -> Path:
    """``<var_dir>/run/<service>.<pid>.conditions`` of instance ``pid`` (default: this one)."""
    return settings.var_dir / "run" / f"{service}.{pid or os.getpid()}.conditions"


def place(cluster: str, where: str) -> str:
    """``b:/ferry/landing``, ``cluster b``, or ``a cluster`` when the error did not name it (a
    Parquet footer Spark could not read)."""
    if where:
        return f"{cluster}:{where}"
    return f"cluster {cluster}" if cluster else "a cluster"


@dataclass(frozen=True)
class Held:
    """One condition holding files: its reason code, cluster and place (``where``: a quota's
    directory, ``""`` for the whole cluster), since when and last seen (epoch s), the files it
    holds now and the last error's message."""

    reason: str
    cluster: str
    where: str
    since: float
    last: float
    files: int
    message: str
    service: str = ""
    pid: int = 0

    @property
    def place(self) -> str:
        """``b:/ferry/landing``, or ``cluster b``."""
        return place(self.cluster, self.where)

    def line(self) -> str:
        """``quota_exceeded at b:/ferry/landing since 2026-12-06 03:41:02 UTC (5 files)``."""
        since = time.strftime("%Y-%m-%d %H:%M:%S UTC", time.gmtime(self.since))
        return f"{self.reason} at {self.place} since {since} ({self.files} file(s) held)"


class ConditionBoard:
    """What one stage instance holds, by condition; thread-safe (batches and extract's workers
    hold and release from several threads).

    Args:
        service: the stage's name.
        path: where to mirror the board (``None``: kept in memory only, e.g. in unit tests).
        clock: epoch seconds (tests pass a fake).
    """

    def __init__(
        self, service: str, path: Path | None = None, clock: Callable[[], float] = time.time
    ) -> None:
        self.service = service
        self.path = path
        self._clock = clock
        self._lock = threading.Lock()
        #: condition key → (since, last, message, holders)
        self._held: dict[tuple[str, str, str], tuple[float, float, str, set[Hashable]]] = {}

    def hold(self, exc: ClusterCondition, holder: Hashable) -> None:
        """``holder`` (a file id, a NAS path) is held by ``exc``'s condition, and by no other."""
        now = self._clock()
        with self._lock:
            new = exc.key not in self._held
            self._drop(holder, keep=exc.key)
            since, _last, _msg, holders = self._held.get(exc.key, (now, now, "", set()))
            holders.add(holder)
            self._held[exc.key] = (since, now, str(exc), holders)
            self._write()
        if new:
            log.warning(
                "%s: HOLDING files: %s (not quarantined; retried until it clears)",
                self.service,
                exc,
            )

    def release(self, *holders: Hashable) -> None:
        """``holders`` are no longer held (carried on, quarantined, or given up at shutdown)."""
        with self._lock:
            before = set(self._held)
            for holder in holders:
                self._drop(holder)
            cleared = before - set(self._held)
            if cleared:
                self._write()
        for reason, cluster, where in sorted(cleared):
            log.warning(
                "%s: %s at %s cleared: held files go on",
                self.service,
                reason,
                place(cluster, where),
            )

    def current(self) -> list[Held]:
        """The conditions holding files now, oldest first."""
        with self._lock:
            return self._snapshot()

    def _drop(self, holder: Hashable, keep: tuple[str, str, str] | None = None) -> None:
        for key in [k for k in self._held if k != keep]:
            holders = self._held[key][3]
            holders.discard(holder)
            if not holders:
                del self._held[key]

    def _snapshot(self) -> list[Held]:
        out = [
            Held(r, c, w, since, last, len(holders), msg, self.service, os.getpid())
            for (r, c, w), (since, last, msg, holders) in self._held.items()
        ]
        return sorted(out, key=lambda h: (h.since, h.reason, h.cluster, h.where))

    def _write(self) -> None:
        """Mirror the board to :attr:`path` (removed when empty). An OSError is logged, never
        raised: a full local disk must not stop the stage."""
        if self.path is None:
            return
        try:
            if not self._held:
                self.path.unlink(missing_ok=True)
                return
            body = {
                "service": self.service,
                "pid": os.getpid(),
                "conditions": [_public(h) for h in self._snapshot()],
            }
            self.path.parent.mkdir(parents=True, exist_ok=True)
            tmp = self.path.with_name(f".{self.path.name}.tmp")
            tmp.write_text(json.dumps(body), "utf-8")
            tmp.replace(self.path)
        except OSError as exc:
            log.warning("%s: conditions not written to %s: %s", self.service, self.path, exc)


def _public(h: Held) -> dict[str, Any]:
    d = asdict(h)
    del d["service"], d["pid"]
    return d


def read_conditions_file(path: Path) -> list[Held]:
    """The conditions in one instance's file; ``[]`` when it is absent or unreadable."""
    try:
        body = json.loads(path.read_text("utf-8"))
    except (OSError, ValueError):
        return []
    if not isinstance(body, dict) or not isinstance(body.get("conditions"), list):
        return []
    out = []
    for c in body["conditions"]:
        with contextlib.suppress(KeyError, TypeError, ValueError):
            out.append(
                Held(
                    str(c["reason"]),
                    str(c["cluster"]),
                    str(c["where"]),
                    float(c["since"]),
                    float(c["last"]),
                    int(c["files"]),
                    str(c.get("message", "")),
                    str(body.get("service", "")),
                    int(body.get("pid", 0)),
                )
            )
    return out


def read_conditions(settings: Settings, service: str = "*") -> list[Held]:
    """Every condition held now by the running instances of ``service`` (``*``: all) on this
    host: the ``.conditions`` files in ``<var_dir>/run`` whose process runs."""
    out: list[Held] = []
    for path in sorted((settings.var_dir / "run").glob(f"{service}.*.conditions")):
        try:
            pid = int(path.name.rsplit(".", 2)[-2])
            os.kill(pid, 0)
        except (ValueError, ProcessLookupError):
            continue  # not a pid, or a killed instance's file (swept at its next start)
        except PermissionError:
            pass  # another user's process: it runs
        out += read_conditions_file(path)
    return out


__all__ = [
    "ConditionBoard",
    "Held",
    "conditions_path",
    "read_conditions",
    "read_conditions_file",
]
