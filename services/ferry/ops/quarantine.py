"""The quarantine (``<prefix>.failed``): read it, release files back to their stage, dismiss
what nobody will fix.

A :class:`FileFailed` is keyed by the file's id, or — for an input record that could not be
decoded, or a NAS entry extract refused before hashing it — by the input record's key (the NAS
path, or ``topic-partition-offset``). :func:`read_quarantine` keeps the latest failure per key,
and an entry leaves the quarantine (docs/operations.md, "Closing a quarantine entry") when:

- the file reached Hive after it (a ``FileLoaded`` of its id newer than the failure: released
  and loaded since): ``loaded``;
- another file of the same NAS name (and dataset) loaded after the failure (the corrected file
  re-dropped under its name, the new version of a file changed after it was taken):
  ``superseded`` — a fact of the topics, so nothing needs writing and nothing can drift;
- an operator dismissed it (:func:`dismiss`: a :class:`~ferry.core.dismissal.FileDismissed` on
  the failed topic, keyed like the entry) and no failure came after: ``dismissed``, kept and
  shown with its note (``list --all``).

Empty files (reasons ``empty_*``, case C11) are recorded on the failed topic too; they need no
action and are told apart by :attr:`QuarantineEntry.empty`.

Releasing a file re-emits the input event of the stage that gave up on it, rebuilt from the
failure's manifest (which is the input event's manifest, unchanged): a ``transform`` failure
re-emits ``FileExtracted(manifest)`` to ``<prefix>.extracted``, ``transfer`` re-emits
``FileTransformed``, ``load`` re-emits ``FileTransferred``. An undecodable record has no manifest;
its raw bytes can be re-produced to its source topic with ``force`` (useful after deploying a
reader that knows its schema; otherwise the stage quarantines it again). Records are keyed by
file id and produced by the idempotent producer, acknowledged before :func:`release` returns.
"""

from __future__ import annotations

import logging
import os
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, replace

from ferry.core.dismissal import FileDismissed
from ferry.core.events import Event, FileFailed, FileLoaded, utc_now
from ferry.core.kafka.admin import OpsError, scan
from ferry.core.kafka.clients import OutboundRecord, build_producer
from ferry.core.kafka.offsets import topic_bounds
from ferry.core.kafka.publish import encode_events, publish
from ferry.core.services import STAGES, service
from ferry.core.timeline import NameLoads, to_ms
from ferry.core.wire.avro import EventCodec
from ferry.errors import SerializationError
from ferry.settings import Settings

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class QuarantineEntry:
    """The latest failure of one key on the failed topic, and what closed it.

    ``failures`` counts every FileFailed of that key; ``partition``/``offset``/``timestamp_ms``
    locate the latest one on the failed topic (timestamp in epoch ms). ``loaded_ms`` is the
    Kafka timestamp (epoch ms) of the first FileLoaded of the file produced after that failure,
    ``None`` when it has not reached Hive since. ``dismissed`` is the latest dismissal of the
    key (it closes the entry when it covers the latest failure); ``superseded_by`` the other file
    of the same NAS name loaded after the failure (file id, load time in epoch ms).
    """

    key: str
    failed: FileFailed
    failures: int
    partition: int
    offset: int
    timestamp_ms: int
    loaded_ms: int | None = None
    dismissed: FileDismissed | None = None
    superseded_by: tuple[str, int] | None = None

    @property
    def resolved(self) -> bool:
        """The file was loaded after its latest failure (released, or redelivered, and done)."""
        return self.loaded_ms is not None

    @property
    def empty(self) -> bool:
        """An empty file recorded by extract (reason ``empty_*``): nothing to fix or release."""
        return self.failed.reason.startswith("empty_")

    @property
    def state(self) -> str:
        """``loaded`` (since its failure), ``superseded``, ``dismissed``, ``empty`` or
        ``quarantined``: the first that applies."""
        if self.resolved:
            return "loaded"
        if self.superseded_by is not None:
            return "superseded"
        if self.dismissed is not None and self.dismissed.closes(to_ms(self.failed.failed_at)):
            return "dismissed"
        return "empty" if self.empty else "quarantined"


#: Entry states that still sit in the quarantine (``empty``: recorded, nothing to do).
OPEN_STATES = ("quarantined", "empty")


@dataclass(frozen=True)
class QuarantineRead:
    """Entries in order of their latest failure, and records of the failed topic that could not
    be decoded (``(partition, offset, error)``)."""

    entries: tuple[QuarantineEntry, ...]
    unreadable: tuple[tuple[int, int, str], ...]

    @property
    def quarantined(self) -> tuple[QuarantineEntry, ...]:
        """Entries still in the quarantine: neither loaded since their latest failure, nor
        superseded, nor dismissed (empty files included)."""
        return tuple(e for e in self.entries if e.state in OPEN_STATES)

    def get(self, key: str) -> QuarantineEntry | None:
        return next((e for e in self.entries if e.key == key), None)


@dataclass(frozen=True)
class FailedRecord:
    """A decoded record of the failed topic: its entry key, place and Kafka time (epoch ms)."""

    key: str
    partition: int
    offset: int
    timestamp_ms: int
    event: FileFailed | FileDismissed


def fold_quarantine(
    records: Iterable[FailedRecord], loads: NameLoads, loaded_ms: Mapping[str, int]
) -> list[QuarantineEntry]:
    """The entries of the failed topic's ``records`` (in topic order per partition), in order
    of their latest failure. ``loads``: every FileLoaded by NAS name (event times), for
    superseded entries; ``loaded_ms``: file id → Kafka time of its first load after its latest
    failure (:func:`_loaded_after`). Pure: the unit tests' way in."""
    latest: dict[str, QuarantineEntry] = {}
    dismissals: dict[str, FileDismissed] = {}
    for r in records:
        if isinstance(r.event, FileDismissed):
            d = dismissals.get(r.key)
            if d is None or r.event.dismissed_at >= d.dismissed_at:
                dismissals[r.key] = r.event
            continue
        prev = latest.get(r.key)
        failures = (prev.failures if prev else 0) + 1
        latest[r.key] = QuarantineEntry(
            r.key, r.event, failures, r.partition, r.offset, r.timestamp_ms
        )
    out = []
    for k, e in latest.items():
        f = e.failed
        later = loads.superseding(f.nas_path, f.nas_dataset, k, to_ms(f.failed_at))
        out.append(
            replace(e, loaded_ms=loaded_ms.get(k), dismissed=dismissals.get(k), superseded_by=later)
        )
    return sorted(out, key=lambda e: (e.timestamp_ms, e.partition, e.offset))


def read_quarantine(settings: Settings, codec: EventCodec) -> QuarantineRead:
    """Read the whole failed topic (low to high watermark, every partition), then the loaded
    topic to mark the entries loaded since their latest failure or superseded by another file
    of the same NAS name.

    Raises:
        OpsError: the failed topic does not exist. TransientError: the broker stopped answering.
    """
    kafka = settings.kafka
    topic = kafka.topic(FileFailed.TOPIC)
    marks = topic_bounds(kafka, topic)
    records: list[FailedRecord] = []
    unreadable: list[tuple[int, int, str]] = []
    for rec in scan(kafka, topic, marks):
        try:
            if rec.value is None:
                raise SerializationError("tombstone", reason="undecodable")
            event = codec.decode(rec.value)
            if not isinstance(event, FileFailed | FileDismissed):
                raise SerializationError(f"{type(event).__name__} on the failed topic")
        except SerializationError as exc:
            log.warning("%s[%d]@%d: %s", topic, rec.partition, rec.offset, exc)
            unreadable.append((rec.partition, rec.offset, str(exc)))
            continue
        key = (
            event.key
            if isinstance(event, FileDismissed)
            else _entry_key(rec.key, event, rec.partition, rec.offset)
        )
        records.append(FailedRecord(key, rec.partition, rec.offset, rec.timestamp_ms, event))
    failed_ms = {}
    for r in records:
        if isinstance(r.event, FileFailed):
            failed_ms[r.key] = r.timestamp_ms
    loads, loaded = _loaded_after(settings, codec, failed_ms)
    return QuarantineRead(tuple(fold_quarantine(records, loads, loaded)), tuple(unreadable))


def _loaded_after(
    settings: Settings, codec: EventCodec, failed_ms: dict[str, int]
) -> tuple[NameLoads, dict[str, int]]:
    """(every FileLoaded by NAS name, file id → timestamp (epoch ms) of its first FileLoaded
    newer than ``failed_ms[file id]``). Records of the loaded topic that cannot be decoded are
    skipped (the loaded topic is not the quarantine's to report)."""
    loads = NameLoads()
    if not failed_ms:
        return loads, {}
    kafka = settings.kafka
    topic = kafka.topic(FileLoaded.TOPIC)
    try:
        marks = topic_bounds(kafka, topic)
    except OpsError:
        return loads, {}  # no loaded topic yet: nothing was loaded
    out: dict[str, int] = {}
    for rec in scan(kafka, topic, marks):
        try:
            event = codec.decode(rec.value or b"")
        except SerializationError:
            continue
        if not isinstance(event, FileLoaded):
            continue
        m = event.manifest
        loads.add(m.source_path, m.dataset, m.file_id, to_ms(m.updated_at))
        key = m.file_id
        if key in failed_ms and key not in out and rec.timestamp_ms > failed_ms[key]:
            out[key] = rec.timestamp_ms
    return loads, out


def _entry_key(key: bytes | None, event: FileFailed, partition: int, offset: int) -> str:
    if event.file_id:
        return event.file_id
    if key:
        try:
            return key.decode("utf-8")
        except UnicodeDecodeError:
            pass  # binary key: fall back to the failure's own coordinates
    return f"failed-{partition}-{offset}"


def input_event_for(failed: FileFailed) -> Event:
    """The input event of the stage that gave up, rebuilt from the failure's manifest.

    Raises:
        OpsError: no manifest (undecodable input: release it raw with ``force``), the stage has
            no input topic (``extract``: re-drop the file on the NAS), or the stage is unknown.
    """
    if failed.stage not in STAGES:
        raise OpsError(
            f"FileFailed from unknown stage {failed.stage!r}; known: {', '.join(STAGES)}"
        )
    cls = service(failed.stage).input
    if cls is None:
        where = failed.nas_path or "it"
        raise OpsError(
            f"stage {failed.stage} reads the NAS, not a topic: to retry {where}, move it back "
            f"from .ferry/failed/{failed.nas_dataset or '<dataset>'}/ into its directory "
            f"(`ferry quarantine release --stage extract --reason {failed.reason}` moves back "
            "every such file, --dry-run first), or drop the corrected file under the same name "
            "(its load supersedes this entry)"
        )
    if failed.manifest is None:
        raise OpsError(
            f"the failure of {failed.source_topic}[{failed.source_partition}]@"
            f"{failed.source_offset} has no manifest (undecodable input, reason {failed.reason}); "
            f"release it raw with --force"
        )
    event: Event = cls(manifest=failed.manifest)
    return event


@dataclass(frozen=True)
class Release:
    """One record to re-emit for a quarantined key, with a warning when it is raw bytes."""

    key: str
    record: OutboundRecord
    event: Event | None  #: the rebuilt input event (``None`` for raw re-production)
    warning: str | None = None


def plan_release(
    entry: QuarantineEntry, settings: Settings, codec: EventCodec, force: bool = False
) -> Release:
    """What releasing ``entry`` re-emits (pure: encodes, produces nothing).

    Raises:
        OpsError: see :func:`input_event_for`; raw release without ``force``, or a failure with
            no raw value or source topic to re-produce.
    """
    failed = entry.failed
    if failed.manifest is not None:
        event = input_event_for(failed)  # the stage's input type: its topic is the stage's input
        [record] = encode_events([event], settings, codec)  # keyed by file id, as entry.key
        return Release(entry.key, record, event)
    if not force:
        input_event_for(failed)  # raises the explanatory OpsError
    if failed.raw_value is None or failed.source_topic is None:
        raise OpsError(
            f"quarantined record {entry.key} has no raw value or source topic to re-produce"
        )
    key = failed.raw_key if failed.raw_key is not None else entry.key.encode()
    warning = (
        f"{entry.key}: re-producing {len(failed.raw_value)} raw byte(s) to {failed.source_topic} "
        f"(reason was {failed.reason}); the {failed.stage} stage quarantines it again unless its "
        f"reader now understands it"
    )
    return Release(
        entry.key, OutboundRecord(failed.source_topic, key, failed.raw_value), None, warning
    )


def release(
    settings: Settings,
    codec: EventCodec,
    keys: Sequence[str],
    force: bool = False,
    read: QuarantineRead | None = None,
) -> list[Release]:
    """Re-emit the input events of the quarantined ``keys`` and wait for the broker's acks.

    Raises:
        OpsError: a key is not in the quarantine, or cannot be released (nothing is produced
            then: every key is planned before the first record is sent).
        TransientError: the broker did not acknowledge every record after the retries of
            ``settings.retry`` (see :func:`ferry.core.kafka.publish.publish`).
    """
    read = read if read is not None else read_quarantine(settings, codec)
    unknown = [k for k in keys if read.get(k) is None]
    if unknown:
        raise OpsError(f"not in quarantine {settings.kafka.topic('failed')}: {', '.join(unknown)}")
    planned = [plan_release(e, settings, codec, force) for e in _entries(read, keys)]
    producer = build_producer(settings.kafka, "ferry-quarantine-release")
    publish(producer, [p.record for p in planned], settings)
    return planned


def _entries(read: QuarantineRead, keys: Iterable[str]) -> list[QuarantineEntry]:
    out = []
    for k in dict.fromkeys(keys):  # de-duplicated, in order
        entry = read.get(k)
        assert entry is not None
        out.append(entry)
    return out


def _operator() -> str:
    """``user@host`` of this command."""
    import getpass
    import socket

    try:
        user = getpass.getuser()
    except (KeyError, OSError):
        user = str(os.getuid())
    return f"{user}@{socket.gethostname()}"


def dismiss(
    settings: Settings,
    codec: EventCodec,
    keys: Sequence[str],
    note: str,
    read: QuarantineRead | None = None,
    by: str | None = None,
) -> list[FileDismissed]:
    """Dismiss the quarantined ``keys`` with ``note``: one :class:`FileDismissed` each on the
    failed topic, keyed like its entry, covering its latest failure; acknowledged before this
    returns. Dismissing a dismissed entry again replaces its note.

    Raises:
        OpsError: an empty note; a key not in the quarantine, or loaded or superseded since its
            failure (nothing to dismiss). Nothing is produced then.
        TransientError: the broker did not acknowledge every record (``settings.retry``).
    """
    if not note.strip():
        raise OpsError("a dismissal needs a --note saying why nobody will fix it")
    read = read if read is not None else read_quarantine(settings, codec)
    unknown = [k for k in keys if read.get(k) is None]
    if unknown:
        raise OpsError(f"not in quarantine {settings.kafka.topic('failed')}: {', '.join(unknown)}")
    done = [e for e in _entries(read, keys) if e.state in ("loaded", "superseded")]
    if done:
        raise OpsError(
            "nothing to dismiss: "
            + ", ".join(
                f"{e.key} is {e.state}" + (f" by {e.superseded_by[0]}" if e.superseded_by else "")
                for e in done
            )
        )
    now, who = utc_now(), by or _operator()
    events = [
        FileDismissed(e.key, note.strip(), who, now, e.failed.failed_at)
        for e in _entries(read, keys)
    ]
    producer = build_producer(settings.kafka, "ferry-quarantine-dismiss")
    publish(producer, encode_events(events, settings, codec), settings)
    return events
