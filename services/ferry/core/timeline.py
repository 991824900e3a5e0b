"""A file's timeline: the pure fold of its events that the tracker keeps per ``file_id``.

The state of a file is the step of its most recent event (by event time, ties broken by pipeline
order): ``extracted`` → ``transformed`` → ``transferred`` → ``loaded``, or ``failed``. The stage
it *waits in* follows from the state (``extracted`` waits in ``transform``, …); ``loaded`` and
``failed`` wait nowhere. A file is *stuck* when it has waited in a stage longer than that stage's
SLA (``settings.tracker.sla_s``), counted from the last time it entered that state.

Event time: ``manifest.updated_at`` of manifest events, ``failed_at`` of a FileFailed; both in
epoch milliseconds here. Events may arrive in any order across topics (each topic is consumed
independently), so the fold is order-insensitive for the state: it keeps per step the first and
last event time and the count, and derives the state from those.

Timelines are stored as JSON-able dicts (:meth:`Timeline.to_dict`) in the tracker's table.

A failed file's quarantine entry closes (docs/operations.md, "Closing a quarantine entry") when
an operator dismissed it (a :class:`~ferry.core.dismissal.FileDismissed` folded here, covering
the failures up to its ``failed_at``) or when another file of the same NAS name loaded after the
failure (superseded: a fact of other files' timelines, told by :class:`NameLoads`).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from datetime import datetime
from typing import Any

from ferry.core.dismissal import FileDismissed
from ferry.core.events import (
    Event,
    FileExtracted,
    FileFailed,
    FileLoaded,
    FileTransferred,
    FileTransformed,
)

#: Steps in pipeline order, then ``failed``.
STEPS: tuple[str, ...] = ("extracted", "transformed", "transferred", "loaded", "failed")
_ORDER = {s: i for i, s in enumerate(STEPS)}
#: Step reached → stage the file waits in next (absent: terminal).
WAITS_IN: dict[str, str] = {
    "extracted": "transform",
    "transformed": "transfer",
    "transferred": "load",
}
#: Stage → (step before it, step it produces), for per-stage latency.
STAGE_STEPS: dict[str, tuple[str, str]] = {
    "transform": ("extracted", "transformed"),
    "transfer": ("transformed", "transferred"),
    "load": ("transferred", "loaded"),
}
_STEP_OF: dict[type[Any], str] = {
    FileExtracted: "extracted",
    FileTransformed: "transformed",
    FileTransferred: "transferred",
    FileLoaded: "loaded",
    FileFailed: "failed",
}


_EVENT_OF: dict[str, str] = {step: cls.__name__ for cls, step in _STEP_OF.items()}


def to_ms(ts: datetime) -> int:
    """Epoch milliseconds of an aware datetime."""
    return int(ts.timestamp() * 1000)


@dataclass(frozen=True)
class StepMark:
    """When a file reached one step: first and last event time (epoch ms) and event count."""

    first_ms: int
    last_ms: int
    events: int = 1

    def seen(self, ms: int) -> StepMark:
        return StepMark(min(self.first_ms, ms), max(self.last_ms, ms), self.events + 1)


@dataclass(frozen=True)
class Failure:
    """The latest failure of a file: stage, reason code, error text, attempt, time (epoch ms)."""

    stage: str
    reason: str
    error: str
    attempt: int
    at_ms: int


@dataclass(frozen=True)
class Dismissal:
    """An operator's dismissal: note, who, when (epoch ms), and the last failure time it covers."""

    note: str
    by: str
    at_ms: int
    covers_ms: int


@dataclass(frozen=True)
class Timeline:
    """Everything the tracker knows of one file.

    ``attempts`` is the highest attempt number seen (manifest ``attempt`` or FileFailed
    ``attempt``); ``rows`` holds the latest non-null ``rows_in``/``rows_out``/``rows_rejected``;
    ``reject_reasons`` the rejected rows per reason code of the latest counted manifest (in
    :meth:`to_dict` only when not empty).
    """

    file_id: str
    dataset: str | None = None
    source_path: str | None = None
    steps: Mapping[str, StepMark] = field(default_factory=dict)
    attempts: int = 0
    failure: Failure | None = None
    rows: Mapping[str, int] = field(default_factory=dict)
    table: str | None = None
    reject_reasons: Mapping[str, int] = field(default_factory=dict)
    #: the dataset definition version of the latest event that carries one
    definition_version: str | None = None
    dismissed: Dismissal | None = None

    @property
    def dismissal(self) -> Dismissal | None:
        """The dismissal that closes the file's quarantine entry: it is failed and was
        dismissed after its latest failure; ``None`` otherwise."""
        d, f = self.dismissed, self.failure
        if d is None or f is None or self.state != "failed" or f.at_ms > d.covers_ms:
            return None
        return d

    @property
    def state(self) -> str | None:
        """The step of the most recent event (ties: the later step), ``None`` when empty."""
        if not self.steps:
            return None
        return max(self.steps.items(), key=lambda kv: (kv[1].last_ms, _ORDER[kv[0]]))[0]

    @property
    def last_event(self) -> str | None:
        """Type name of the most recent event (by event time, so independent of the order in
        which the topics were consumed), ``None`` when empty."""
        state = self.state
        return _EVENT_OF[state] if state else None

    @property
    def waiting_in(self) -> str | None:
        """The stage the file waits in now (``None`` when loaded, failed or empty)."""
        state = self.state
        return WAITS_IN.get(state) if state else None

    def latest_ms(self, default: int) -> int:
        """Time of the most recent event (epoch ms), ``default`` when empty."""
        return max((m.last_ms for m in self.steps.values()), default=default)

    def entered_ms(self) -> int | None:
        """When the file entered its current state (last event time of that step)."""
        state = self.state
        return self.steps[state].last_ms if state else None

    def stuck(self, now_ms: int, sla_s: Mapping[str, float]) -> bool:
        """True when the file waited in a stage longer than that stage's SLA (s)."""
        stage = self.waiting_in
        entered = self.entered_ms()
        if stage is None or entered is None or stage not in sla_s:
            return False
        return now_ms - entered > sla_s[stage] * 1000

    def to_dict(self) -> dict[str, Any]:
        """JSON-able form (what the tracker stores and serves); derived fields included."""
        return (
            {
                "file_id": self.file_id,
                "dataset": self.dataset,
                "source_path": self.source_path,
                "state": self.state,
                "waiting_in": self.waiting_in,
                "steps": {
                    s: {"first_ms": m.first_ms, "last_ms": m.last_ms, "events": m.events}
                    for s, m in sorted(self.steps.items(), key=lambda kv: _ORDER[kv[0]])
                },
                "last_event": self.last_event,
                "attempts": self.attempts,
                "failure": None
                if self.failure is None
                else {
                    "stage": self.failure.stage,
                    "reason": self.failure.reason,
                    "error": self.failure.error,
                    "attempt": self.failure.attempt,
                    "at_ms": self.failure.at_ms,
                },
                "rows": dict(self.rows),
                "table": self.table,
            }
            | ({"reject_reasons": dict(self.reject_reasons)} if self.reject_reasons else {})
            | ({"dismissed": self.dismissed.__dict__.copy()} if self.dismissed else {})
            | ({"definition_version": self.definition_version} if self.definition_version else {})
        )

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> Timeline:
        f = d.get("failure")
        return cls(
            file_id=d["file_id"],
            dataset=d.get("dataset"),
            source_path=d.get("source_path"),
            steps={
                s: StepMark(m["first_ms"], m["last_ms"], m["events"]) for s, m in d["steps"].items()
            },
            attempts=d.get("attempts", 0),
            failure=None if f is None else Failure(**f),
            rows=dict(d.get("rows") or {}),
            table=d.get("table"),
            reject_reasons=dict(d.get("reject_reasons") or {}),
            dismissed=Dismissal(**d["dismissed"]) if d.get("dismissed") else None,
            definition_version=d.get("definition_version"),
        )


def event_time_ms(event: Event) -> int:
    """The event's own time, epoch ms (``failed_at``, ``dismissed_at`` or
    ``manifest.updated_at``)."""
    if isinstance(event, FileFailed):
        return to_ms(event.failed_at)
    if isinstance(event, FileDismissed):
        return to_ms(event.dismissed_at)
    return to_ms(event.manifest.updated_at)


def fold(timeline: Timeline | None, event: Event, key: str) -> Timeline:
    """``timeline`` with ``event`` applied (a new value; the input is not changed).

    Args:
        timeline: the file's timeline so far, ``None`` for a new file.
        key: the file id (or the record key of an undecodable input's FileFailed).

    Raises:
        ValueError: ``event`` is not a Ferry event type.
    """
    tl = timeline if timeline is not None else Timeline(file_id=key)
    if isinstance(event, FileDismissed):  # no step: it closes the quarantine entry
        d = Dismissal(event.note, event.by, to_ms(event.dismissed_at), to_ms(event.failed_at))
        if tl.dismissed is None or d.at_ms >= tl.dismissed.at_ms:
            return replace(tl, dismissed=d)
        return tl
    step = _STEP_OF.get(type(event))
    if step is None:
        raise ValueError(f"not a Ferry event: {type(event).__name__}")
    ms = event_time_ms(event)
    steps = dict(tl.steps)
    steps[step] = steps[step].seen(ms) if step in steps else StepMark(ms, ms)
    changes: dict[str, Any] = {"steps": steps}
    manifest = getattr(event, "manifest", None)
    attempt = tl.attempts
    if manifest is not None:
        changes["dataset"] = manifest.dataset
        changes["source_path"] = manifest.source_path
        rows = dict(tl.rows)
        for name in ("rows_in", "rows_out", "rows_rejected"):
            value = getattr(manifest, name)
            if value is not None:
                rows[name] = value
        changes["rows"] = rows
        if manifest.rows_rejected is not None:
            changes["reject_reasons"] = dict(manifest.reject_reasons)
        attempt = max(attempt, manifest.attempt)
        version = getattr(manifest, "definition_version", None)
        if version and (tl.definition_version is None or ms >= tl.latest_ms(0)):
            changes["definition_version"] = version
    if isinstance(event, FileFailed):
        if manifest is None and tl.source_path is None:  # a NAS file refused before hashing
            changes["dataset"] = event.nas_dataset
            changes["source_path"] = event.nas_path
        attempt = max(attempt, event.attempt)
        if tl.failure is None or ms >= tl.failure.at_ms:
            changes["failure"] = Failure(event.stage, event.reason, event.error, event.attempt, ms)
    if isinstance(event, FileLoaded):
        changes["table"] = event.table
    changes["attempts"] = attempt
    return replace(tl, **changes)


def stage_latencies(before: Timeline | None, after: Timeline) -> dict[str, float]:
    """Stage → seconds from entering the stage to leaving it (first-seen event times), for each
    stage whose two steps are both known in ``after`` but were not both known in ``before`` — so
    each stage is measured once per file, whatever order the topics were consumed in."""
    out: dict[str, float] = {}
    for stage, (start, end) in STAGE_STEPS.items():
        if start not in after.steps or end not in after.steps:
            continue
        if before is not None and start in before.steps and end in before.steps:
            continue
        out[stage] = max(0.0, (after.steps[end].first_ms - after.steps[start].first_ms) / 1000)
    return out


class NameLoads:
    """Loads by NAS name, to tell a superseded quarantine entry: a failure of one file is
    superseded when another file of the same NAS name (and dataset, when both are known) was
    loaded after it — the corrected file re-dropped under its name, or the new version of a file
    changed after it was taken."""

    def __init__(self) -> None:
        #: source_path → {file id: (dataset, first load time, epoch ms)}
        self.by_name: dict[str, dict[str, tuple[str | None, int]]] = {}

    def add(self, source_path: str, dataset: str | None, file_id: str, loaded_ms: int) -> None:
        loads = self.by_name.setdefault(source_path, {})
        first = loads.get(file_id)
        loads[file_id] = (dataset, loaded_ms if first is None else min(first[1], loaded_ms))

    def discard(self, source_path: str, file_id: str) -> None:
        self.by_name.get(source_path, {}).pop(file_id, None)

    def superseding(
        self, source_path: str | None, dataset: str | None, file_id: str, failed_ms: int
    ) -> tuple[str, int] | None:
        """The other file (id, load time) of ``source_path`` loaded first after ``failed_ms``,
        or None."""
        if not source_path:
            return None
        later = [
            (ms, fid)
            for fid, (ds, ms) in self.by_name.get(source_path, {}).items()
            if fid != file_id
            and ms > failed_ms
            and (ds is None or dataset is None or ds == dataset)
        ]
        if not later:
            return None
        ms, fid = min(later)
        return fid, ms


#: Quarantine states of a failed file that need no one (besides ``open``).
CLOSED = ("superseded", "dismissed")


def closed_text(closure: tuple[str, str | None] | None) -> str:
    """``open``, ``superseded by <file id>``, ``dismissed: <note>``; empty for no closure."""
    if not closure or not closure[0]:
        return ""
    state, detail = closure
    if state == "superseded":
        return f"superseded by {detail}"
    if state == "dismissed":
        return f"dismissed: {detail}"
    return state
