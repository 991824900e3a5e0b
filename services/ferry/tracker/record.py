"""What the tracker stores per file: the shared :class:`~ferry.core.timeline.Timeline` plus the
detail only the tracker's pages show (sha256, size, URIs, failure history, NAS times).

A record is a JSON-able dict: the keys of :meth:`Timeline.to_dict` plus ``"x"``, the detail::

    {"sha256": str | None, "size_bytes": int | None, "uris": {role: uri},
     "created_ms": int | None,   # manifest created_at (extract saw the file), epoch ms
     "mtime_ms": int | None,     # manifest source_mtime (the file's time on the NAS), epoch ms
     "failures": [{"stage", "reason", "error", "attempt", "at_ms"}, ...],  # oldest first
     "p": int}                   # the Kafka partition the file's events arrive on

:func:`Timeline.from_dict` ignores ``"x"``, so ``Timeline.from_dict(record)`` is the timeline and
the JSON endpoints keep serving exactly :meth:`Timeline.to_dict`.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from ferry.core.events import Event, FileFailed
from ferry.core.timeline import Timeline, fold, to_ms

#: Failures kept per file (the newest); older ones are only counted in ``attempts``.
MAX_FAILURES = 20


def empty_detail(partition: int) -> dict[str, Any]:
    """The detail of a file nothing is known of yet."""
    return {
        "sha256": None,
        "size_bytes": None,
        "uris": {},
        "created_ms": None,
        "mtime_ms": None,
        "failures": [],
        "p": partition,
    }


def apply(
    record: Mapping[str, Any] | None, event: Event, key: str, partition: int
) -> tuple[Timeline | None, dict[str, Any]]:
    """``record`` with ``event`` folded in: (the timeline before, the new record).

    Args:
        record: the stored record, ``None`` for a new file.
        key: the file id (see :func:`ferry.core.timeline.fold`).
        partition: the Kafka partition the event came from.

    Raises:
        ValueError: ``event`` is not a Ferry event type.
    """
    before = Timeline.from_dict(record) if record else None
    after = fold(before, event, key)
    x = dict(record["x"]) if record and "x" in record else empty_detail(partition)
    x["p"] = partition
    manifest = getattr(event, "manifest", None)
    if manifest is not None:
        x["sha256"] = manifest.sha256
        x["size_bytes"] = manifest.size_bytes
        x["uris"] = {**x.get("uris", {}), **dict(manifest.uris)}
        created = to_ms(manifest.created_at)
        x["created_ms"] = created if x["created_ms"] is None else min(x["created_ms"], created)
        if manifest.source_mtime is not None:
            x["mtime_ms"] = to_ms(manifest.source_mtime)
    if isinstance(event, FileFailed):
        failure = {
            "stage": event.stage,
            "reason": event.reason,
            "error": event.error,
            "attempt": event.attempt,
            "at_ms": to_ms(event.failed_at),
        }
        failures = [f for f in x.get("failures", []) if f != failure] + [failure]
        failures.sort(key=lambda f: f["at_ms"])
        x["failures"] = failures[-MAX_FAILURES:]
    return before, {**after.to_dict(), "x": x}


def park(record: Mapping[str, Any] | None, stage: str | None, at_ms: int) -> dict[str, Any] | None:
    """``record`` with ``x["parked"]`` set to ``{"stage", "at_ms"}`` (the file waits in the
    waiting room of ``stage`` for its dataset's definition), or removed (``stage`` None: it was
    released); ``None`` when there is no record (nothing known of the file yet)."""
    if not record:
        return None
    x = dict(record.get("x") or {})
    if stage is None:
        x.pop("parked", None)
    else:
        x["parked"] = {"stage": stage, "at_ms": at_ms}
    return {**record, "x": x}


def parked(record: Mapping[str, Any]) -> tuple[str, str] | None:
    """(dataset, stage) of a file waiting for its definition, else ``None``."""
    p = (record.get("x") or {}).get("parked")
    return (str(record.get("dataset")), str(p["stage"])) if p else None


def waiting(record: Mapping[str, Any]) -> dict[str, Any] | None:
    """Where and since when (epoch ms) a file waits for its definition: ``{"stage",
    "since_ms"}``, else ``None``."""
    p = (record.get("x") or {}).get("parked")
    return {"stage": str(p["stage"]), "since_ms": p["at_ms"]} if p else None


def detail(record: Mapping[str, Any]) -> dict[str, Any]:
    """The record's detail (``"x"``), defaults filled in for records stored before it existed."""
    return {**empty_detail(-1), **dict(record.get("x") or {})}
