"""Which copies of a file are due, and when: pure functions of an event and the retentions.

The gc service sweeps its topic ``<prefix>.gc`` (a copy of every ``FileLoaded`` and
``FileFailed``, see :mod:`ferry.gc.copier`) once per *retention class*: each distinct retention
value among the zones (e.g. 14 days for landing, staging, incoming and quarantined copies, 30 for
the archive, 90 for rejects with the defaults). A class's sweep reads the records older than its
retention and removes, for each, the copies of the zones whose retention is that class
(:func:`due_zones`). Zones a class removes:

- after a ``FileLoaded``: landing, staging, rejects and incoming (each by its own retention) and
  the NAS archive (``retention.archive``);
- after a ``FileFailed`` of transform, transfer or load (a quarantined file, with its manifest):
  its landing, staging, rejects and incoming copies by ``retention.quarantined``, its NAS archive
  by ``retention.archive``;
- nothing after any other event: extract's failures never landed anything, and the NAS files it
  moved to ``.ferry/empty/`` and ``.ferry/failed/`` are swept by age
  (:mod:`ferry.gc.nas_copies`).
"""

from __future__ import annotations

from datetime import timedelta
from typing import Any

from ferry.core.events import FileFailed, FileLoaded
from ferry.core.services import CONSUMING_STAGES
from ferry.settings.retention import HDFS_ZONES, RetentionSettings

#: The NAS zone a sweep of events removes (empty and failed are swept by age).
ARCHIVE = "archive"

#: Stages whose FileFailed quarantines a file that has HDFS copies: those that consume a topic
#: (extract's failures never landed anything).
QUARANTINING = CONSUMING_STAGES


def retention_of(event: Any, zone: str, retention: RetentionSettings) -> timedelta | None:
    """How long after ``event`` its file's copy in ``zone`` is kept; ``None``: not this event's
    to remove (kept for ever, or not a copy the event names)."""
    if isinstance(event, FileLoaded):
        return retention.of(zone)
    if isinstance(event, FileFailed) and event.manifest is not None:
        if event.stage not in QUARANTINING:
            return None
        return retention.archive if zone == ARCHIVE else retention.quarantined
    return None


def event_zones() -> tuple[str, ...]:
    """The zones a sweep of events removes: the HDFS zones and the NAS archive."""
    return (*(z.name for z in HDFS_ZONES), ARCHIVE)


def retention_classes(retention: RetentionSettings) -> list[timedelta]:
    """Every distinct finite retention a sweep of events applies, shortest first."""
    values = {retention.of(z) for z in event_zones()} | {retention.quarantined}
    return sorted(v for v in values if v is not None)


def due_zones(event: Any, retention: RetentionSettings, klass: timedelta) -> list[str]:
    """The zones of ``event``'s file that the sweep of class ``klass`` removes, in
    :func:`event_zones` order: those whose retention for this event is exactly ``klass`` and
    that the event names a copy in (an HDFS zone needs its URI in the manifest)."""
    manifest = getattr(event, "manifest", None)
    if manifest is None:
        return []
    out = []
    for zone in event_zones():
        if retention_of(event, zone, retention) != klass:
            continue
        if zone != ARCHIVE and zone not in manifest.uris:
            continue
        out.append(zone)
    return out


def longest(retention: RetentionSettings) -> timedelta:
    """The longest finite retention of :func:`retention_classes` (0 when every zone keeps)."""
    classes = retention_classes(retention)
    return classes[-1] if classes else timedelta(0)


def class_label(klass: timedelta) -> str:
    """A retention class as a short stable label: ``14d``, ``6h``, ``90s``, ``0s``."""
    seconds = int(klass.total_seconds())
    for unit, size in (("d", 86400), ("h", 3600), ("m", 60)):
        if seconds and seconds % size == 0:
            return f"{seconds // size}{unit}"
    return f"{seconds}s"


__all__ = [
    "ARCHIVE",
    "QUARANTINING",
    "class_label",
    "due_zones",
    "event_zones",
    "longest",
    "retention_classes",
    "retention_of",
]
