"""The tracker's in-memory index of the files its store retains: what every page and JSON view
reads (the store itself is only read at start, by :meth:`TrackerState.load`, and per file page).

One :class:`Entry` (a few hundred bytes) per retained file; loaded files older than the retention
are dropped from the store and from here, and only counted (:attr:`TrackerState.pruned`), so
memory grows with the files in flight and those loaded within the retention, not with every file
ever carried.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from ferry.core.services import SERVICES
from ferry.core.timeline import STEPS, WAITS_IN, NameLoads

#: Stage → the step it produces (its output event's topic name), in pipeline order.
PRODUCES: dict[str, str] = {s.name: s.output.TOPIC for s in SERVICES if s.output is not None}
_ORDER = {s: i for i, s in enumerate(STEPS)}


@dataclass(slots=True)
class Entry:
    """One retained file, as the listing pages need it. Times are epoch ms.

    ``first`` holds per step of :data:`ferry.core.timeline.STEPS` the first event time (or
    ``None``); ``start_ms`` is the file's NAS time (``source_mtime``, else ``created_at``).
    ``failed_ms`` is the latest failure's time; ``dismissed`` the note of a dismissal covering it
    (``None``: not dismissed).
    """

    file_id: str
    dataset: str
    source_path: str
    state: str
    entered_ms: int
    first: tuple[int | None, ...]
    reason: str | None
    failed_stage: str | None
    size_bytes: int
    start_ms: int | None
    partition: int
    failed_ms: int | None = None
    dismissed: str | None = None

    @property
    def waiting_in(self) -> str | None:
        return WAITS_IN.get(self.state)

    def stuck(self, now_ms: int, sla_s: Mapping[str, float]) -> bool:
        """Same rule as :meth:`ferry.core.timeline.Timeline.stuck`."""
        stage = self.waiting_in
        if stage is None or stage not in sla_s:
            return False
        return now_ms - self.entered_ms > sla_s[stage] * 1000

    def at(self, step: str) -> int | None:
        return self.first[_ORDER[step]]

    @property
    def stage(self) -> str | None:
        """The stage the file is in: where it waits, where it failed, or ``None`` (loaded)."""
        return self.waiting_in or self.failed_stage


def entry_of(record: Mapping[str, Any]) -> Entry | None:
    """The index entry of a stored record (``None`` for a record with no step)."""
    steps = record.get("steps") or {}
    state = record.get("state")
    if not steps or state is None:
        return None
    x = record.get("x") or {}
    failure = record.get("failure") or {}
    d = record.get("dismissed") or {}
    failed_ms = failure.get("at_ms")
    covered = state == "failed" and d and failed_ms is not None and failed_ms <= d["covers_ms"]
    return Entry(
        file_id=record["file_id"],
        dataset=record.get("dataset") or "",
        source_path=record.get("source_path") or "",
        state=state,
        entered_ms=steps[state]["last_ms"],
        first=tuple(steps[s]["first_ms"] if s in steps else None for s in STEPS),
        reason=failure.get("reason"),
        failed_stage=failure.get("stage"),
        size_bytes=int(x.get("size_bytes") or 0),
        start_ms=x.get("mtime_ms") or x.get("created_ms"),
        partition=int(x.get("p", -1)),
        failed_ms=failed_ms,
        dismissed=d["note"] if covered else None,
    )


def attention(e: Entry, now_ms: int, sla_s: Mapping[str, float]) -> int:
    """Listing rank: 0 quarantined (failed), 1 stuck, 2 waiting, 3 loaded."""
    if e.state == "failed":
        return 0
    if e.stuck(now_ms, sla_s):
        return 1
    return 2 if e.waiting_in else 3


#: A quarantine entry's state: open (needs someone), dismissed, or superseded.
QUARANTINE_STATES: tuple[str, ...] = ("open", "dismissed", "superseded")


class TrackerState:
    """Index of retained files and counts of pruned ones.

    ``pruned`` maps a dataset to the number of its loaded files whose detail was dropped;
    ``loads`` the loads by NAS name (:class:`~ferry.core.timeline.NameLoads`) that tell a
    superseded quarantine entry.
    """

    def __init__(self) -> None:
        self.entries: dict[str, Entry] = {}
        self.pruned: Counter[str] = Counter()
        self.loaded = False
        self.loads = NameLoads()
        #: NAS path → failed file ids (a loaded file of that name is kept from pruning)
        self._failed_names: dict[str, set[str]] = {}

    def put(self, record: Mapping[str, Any]) -> None:
        e = entry_of(record)
        if e is not None:
            self.drop(e.file_id)
            self.entries[e.file_id] = e
            if (loaded := e.at("loaded")) is not None and e.source_path:
                self.loads.add(e.source_path, e.dataset or None, e.file_id, loaded)
            if e.state == "failed" and e.source_path:
                self._failed_names.setdefault(e.source_path, set()).add(e.file_id)

    def drop(self, file_id: str) -> Entry | None:
        e = self.entries.pop(file_id, None)
        if e is not None and e.source_path:
            self.loads.discard(e.source_path, file_id)
            self._failed_names.get(e.source_path, set()).discard(file_id)
        return e

    def closure(self, e: Entry) -> tuple[str, str | None]:
        """The quarantine state of ``e`` (see :data:`QUARANTINE_STATES`) and its detail: the
        superseding file's id, or the dismissal's note. ``("", None)`` for a file not failed."""
        if e.state != "failed":
            return "", None
        later = self.loads.superseding(
            e.source_path, e.dataset or None, e.file_id, e.failed_ms or e.entered_ms
        )
        if later is not None:
            return "superseded", later[0]
        if e.dismissed is not None:
            return "dismissed", e.dismissed
        return "open", None

    def by_name(self, name: str) -> list[Entry]:
        """Files whose NAS path is ``name``; else whose NAS path or base name starts with it;
        newest (by the time they entered their state) first."""
        exact = [e for e in self.entries.values() if e.source_path == name]
        if not exact:
            exact = [
                e
                for e in self.entries.values()
                if e.source_path.startswith(name)
                or e.source_path.rsplit("/", 1)[-1].startswith(name)
            ]
        return sorted(exact, key=lambda e: (-e.entered_ms, e.file_id))

    def load(self, records: Iterable[Mapping[str, Any]], pruned: Mapping[str, int]) -> None:
        """Rebuild from the store: every record, and ``pruned`` (``"<partition>:<dataset>"`` →
        count, the persisted form)."""
        self.entries.clear()
        self.loads = NameLoads()
        self._failed_names.clear()
        for r in records:
            if r:
                self.put(r)
        self.pruned = Counter()
        for key, n in pruned.items():
            self.pruned[key.split(":", 1)[1] if ":" in key else key] += int(n)
        self.loaded = True

    def expired(self, partition: int, cutoff_ms: int, limit: int = 10_000) -> list[Entry]:
        """Loaded files of ``partition`` loaded before ``cutoff_ms`` (at most ``limit``)."""
        out = []
        for e in self.entries.values():
            if e.state == "loaded" and e.partition == partition and e.entered_ms < cutoff_ms:
                if self._failed_names.get(e.source_path):
                    continue  # it may supersede a quarantine entry: kept to tell so
                out.append(e)
                if len(out) >= limit:
                    break
        return out

    def counts(self, now_ms: int, sla_s: Mapping[str, float]) -> dict[str, Any]:
        """The ``/summary`` body (minus counters): files per state, stuck per stage; pruned
        loaded files count as loaded."""
        states: Counter[str] = Counter()
        stuck: Counter[str] = Counter()
        quarantine: Counter[str] = Counter()
        for e in self.entries.values():
            states[e.state] += 1
            if e.stuck(now_ms, sla_s):
                stuck[e.waiting_in or "unknown"] += 1
            if e.state == "failed":
                quarantine[self.closure(e)[0]] += 1
        states["loaded"] += sum(self.pruned.values())
        return {
            "files": sum(states.values()),
            "states": {s: states.get(s, 0) for s in STEPS},
            "stuck": dict(stuck),
            "quarantine": {s: quarantine.get(s, 0) for s in QUARANTINE_STATES},
        }

    def datasets(self) -> list[str]:
        return sorted({e.dataset for e in self.entries.values()} | set(self.pruned))
