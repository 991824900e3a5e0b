"""``ferry replay``: move a stage's consumer-group offsets so it re-reads its input events.

Three kinds of target, with Kafka's standard reset semantics (as ``kafka-consumer-groups
--reset-offsets``): an offset (clamped into ``[low, high]`` of each partition), a timestamp (the
first record with timestamp ≥ it, or the end when there is none), or the events of given files.

For files: a topic is keyed by ``file_id``, so all of a file's events sit in one partition. The
plan finds each file's earliest event on the stage's input topic and sets that partition to the
smallest such offset, never moving a group *forward* (a file not yet processed needs no replay).
Every record after that offset in the same partition is re-processed too; that is safe because
every stage is idempotent on ``file_id`` (docs/architecture.md, "Delivery and idempotency").

Offsets can only be moved while the group has no active members: the broker would reject it, and a
running consumer would overwrite the new offsets with its next commit. :func:`apply_plan` refuses
with the members named.

The planning functions (``plan_*``) are pure; :func:`build_plan`, :func:`apply_plan` and
:func:`wait_drained` talk to the broker.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime

from confluent_kafka import Consumer
from confluent_kafka.admin import AdminClient, OffsetSpec

from ferry.core.kafka.admin import OpsError, active_members, input_topic, scan
from ferry.core.kafka.clients import group_id
from ferry.core.kafka.offsets import (
    alter_offsets,
    committed_offsets,
    group_client,
    list_offsets,
    partitions_of,
    watermarks,
)
from ferry.core.wire.avro import EventCodec
from ferry.errors import SerializationError, TransientError
from ferry.settings import Settings
from ferry.settings.kafka import KafkaSettings


class GroupActive(OpsError):
    """The consumer group has active members; offsets cannot be moved under them."""

    reason = "group_active"


@dataclass(frozen=True)
class PartitionOffsets:
    """What the broker says of one partition: the group's committed offset (``None``: nothing
    committed yet) and the partition's low/high watermarks."""

    partition: int
    committed: int | None
    low: int
    high: int

    @property
    def position(self) -> int:
        """Where the group reads next: its committed offset, else ``low`` (stage groups use
        ``auto.offset.reset=earliest``), clamped into ``[low, high]``."""
        start = self.committed if self.committed is not None else self.low
        return min(max(start, self.low), self.high)


@dataclass(frozen=True)
class Move:
    """One partition's move: from ``current`` (committed, ``None`` when none) to ``new``."""

    partition: int
    current: int | None
    new: int
    low: int
    high: int
    files: tuple[str, ...] = ()  #: file ids that caused this move (file-id replays only)

    @property
    def replayed(self) -> int:
        """Events the group reads again that it had already read: ``position - new`` (≥ 0)."""
        start = self.current if self.current is not None else self.low
        return max(0, min(start, self.high) - self.new)

    @property
    def pending(self) -> int:
        """Events the group reads after the move until it reaches ``high``: ``high - new``."""
        return max(0, self.high - self.new)

    @property
    def changes(self) -> bool:
        return self.current != self.new


@dataclass(frozen=True)
class ReplayPlan:
    """Moves of one group on one topic. ``missing`` lists file ids not found on the topic."""

    stage: str
    group: str
    topic: str
    target: str  #: human description of the target ("offset 5", "2024-03-01T08:00:00+00:00", ...)
    moves: tuple[Move, ...]
    missing: tuple[str, ...] = ()
    notes: tuple[str, ...] = field(default=())

    @property
    def changed(self) -> tuple[Move, ...]:
        return tuple(m for m in self.moves if m.changes)

    @property
    def replayed(self) -> int:
        return sum(m.replayed for m in self.moves)


def _clamp(offset: int, low: int, high: int) -> int:
    return min(max(offset, low), high)


def plan_to_offset(states: Iterable[PartitionOffsets], offset: int) -> list[Move]:
    """Every partition to ``offset``, clamped into ``[low, high]`` (standard reset semantics).

    Raises:
        ValueError: ``offset`` is negative.
    """
    if offset < 0:
        raise ValueError(f"offset must be ≥ 0, got {offset}")
    return [
        Move(s.partition, s.committed, _clamp(offset, s.low, s.high), s.low, s.high)
        for s in sorted(states, key=lambda s: s.partition)
    ]


def plan_to_offsets(
    states: Iterable[PartitionOffsets], targets: Mapping[int, int | None]
) -> list[Move]:
    """Each partition to its own target (e.g. from ListOffsets by timestamp); ``None`` or a
    negative target (no record at/after the timestamp) means the end (``high``).

    Partitions absent from ``targets`` are left out of the plan.
    """
    moves = []
    for s in sorted(states, key=lambda s: s.partition):
        if s.partition not in targets:
            continue
        t = targets[s.partition]
        new = s.high if t is None or t < 0 else _clamp(t, s.low, s.high)
        moves.append(Move(s.partition, s.committed, new, s.low, s.high))
    return moves


def plan_for_files(
    states: Iterable[PartitionOffsets], first_offsets: Mapping[str, tuple[int, int]]
) -> list[Move]:
    """Moves that make the group re-read the events of the given files.

    Args:
        states: every partition of the input topic.
        first_offsets: file id → (partition, offset of its earliest event on the topic).

    Returns:
        one move per partition holding at least one of the files: to the smallest of those
        offsets, but never forward of where the group reads now (:attr:`PartitionOffsets.position`)
        — a file the group has not reached yet is read anyway. Partitions without files are left
        out.
    """
    by_partition: dict[int, list[tuple[int, str]]] = {}
    for fid, (p, off) in first_offsets.items():
        by_partition.setdefault(p, []).append((off, fid))
    moves = []
    for s in sorted(states, key=lambda s: s.partition):
        hits = sorted(by_partition.get(s.partition, []))
        if not hits:
            continue
        target = _clamp(hits[0][0], s.low, s.high)
        new = min(target, s.position)
        moves.append(
            Move(s.partition, s.committed, new, s.low, s.high, tuple(fid for _o, fid in hits))
        )
    return moves


def _key_file_id(key: bytes | None, value: bytes | None, codec: EventCodec | None) -> str | None:
    if key:
        try:
            return key.decode("utf-8")
        except UnicodeDecodeError:
            return None
    if value is not None and codec is not None:
        try:
            return codec.decode(value).file_id
        except SerializationError:
            return None
    return None


def find_first_offsets(
    settings: Settings,
    topic: str,
    bounds: Mapping[int, tuple[int, int]],
    file_ids: Sequence[str],
    codec: EventCodec | None = None,
) -> dict[str, tuple[int, int]]:
    """file id → (partition, offset of its earliest event in ``bounds``) on ``topic``.

    Reads keys (the file id); a record without a key is decoded with ``codec`` when given. Stops
    as soon as every file was found (a file's events are in one partition, and each partition is
    read in offset order, so the first hit is the earliest). Files not found are absent.

    Raises:
        TransientError: the topic stopped delivering records before its high watermark.
    """
    wanted = set(file_ids)
    found: dict[str, tuple[int, int]] = {}
    for rec in scan(settings.kafka, topic, bounds, stop=lambda: len(found) == len(wanted)):
        fid = _key_file_id(rec.key, rec.value, codec)
        if fid in wanted and fid not in found:
            found[fid] = (rec.partition, rec.offset)
    return found


@dataclass(frozen=True)
class Target:
    """What to replay to: exactly one of ``offset``, ``timestamp``, ``files``, ``earliest``,
    ``latest``. ``partitions`` limits an offset/timestamp/earliest/latest move to those."""

    offset: int | None = None
    timestamp: datetime | None = None
    files: tuple[str, ...] = ()
    earliest: bool = False
    latest: bool = False
    partitions: tuple[int, ...] = ()

    def __post_init__(self) -> None:
        chosen = sum(
            [
                self.offset is not None,
                self.timestamp is not None,
                bool(self.files),
                self.earliest,
                self.latest,
            ]
        )
        if chosen != 1:
            raise ValueError(
                "choose exactly one target: an offset, a timestamp, file ids, earliest or latest"
            )
        if self.timestamp is not None and self.timestamp.tzinfo is None:
            raise ValueError("the timestamp needs a time zone (e.g. 2024-03-01T08:00:00+00:00)")

    def describe(self) -> str:
        if self.offset is not None:
            return f"offset {self.offset}"
        if self.timestamp is not None:
            return f"timestamp {self.timestamp.isoformat()}"
        if self.files:
            return f"{len(self.files)} file(s)"
        return "earliest" if self.earliest else "latest"


def build_plan(
    admin: AdminClient,
    settings: Settings,
    stage: str,
    target: Target,
    codec: EventCodec | None = None,
) -> ReplayPlan:
    """Read the group's committed offsets and the topic's watermarks (through a consumer of the
    group: :mod:`ferry.core.kafka.offsets`), and plan the move. ``admin`` is not asked.

    Raises:
        ConfigError: unknown stage or ``extract``.
        OpsError: the input topic does not exist, or a partition in ``target.partitions`` does not.
        TransientError: the broker did not answer in time.
    """
    kafka = settings.kafka
    topic = input_topic(settings, stage)
    group = group_id(kafka, stage)
    client = group_client(kafka, group)
    try:
        return _plan(client, settings, stage, group, topic, target, codec)
    finally:
        client.close()


def _plan(
    client: Consumer,
    settings: Settings,
    stage: str,
    group: str,
    topic: str,
    target: Target,
    codec: EventCodec | None,
) -> ReplayPlan:
    kafka = settings.kafka
    parts = partitions_of(client, kafka, topic)
    if target.partitions:
        unknown = sorted(set(target.partitions) - set(parts))
        if unknown:
            raise OpsError(f"topic {topic} has no partition(s) {unknown}; it has {parts}")
        chosen = sorted(set(target.partitions))
    else:
        chosen = parts
    marks = watermarks(client, kafka, topic, parts)
    committed = committed_offsets(client, kafka, group, topic, parts)
    states = [PartitionOffsets(p, committed[p], *marks[p]) for p in parts]
    selected = [s for s in states if s.partition in chosen]
    missing: tuple[str, ...] = ()
    notes: list[str] = []
    if target.offset is not None:
        moves = plan_to_offset(selected, target.offset)
    elif target.earliest:
        moves = plan_to_offsets(selected, {s.partition: s.low for s in selected})
    elif target.latest:
        moves = plan_to_offsets(selected, {s.partition: s.high for s in selected})
    elif target.timestamp is not None:
        ts_ms = int(target.timestamp.timestamp() * 1000)
        found = list_offsets(
            client, kafka, topic, {s.partition: OffsetSpec.for_timestamp(ts_ms) for s in selected}
        )
        moves = plan_to_offsets(selected, dict(found))
    else:
        first = find_first_offsets(settings, topic, marks, target.files, codec)
        missing = tuple(f for f in target.files if f not in first)
        moves = plan_for_files(states, first)
        for m in moves:
            if m.pending > len(m.files):
                notes.append(
                    f"partition {m.partition}: {m.pending} event(s) from offset {m.new} are read "
                    f"again, including other files' events after it (safe: stages are idempotent "
                    f"on file_id)"
                )
    return ReplayPlan(stage, group, topic, target.describe(), tuple(moves), missing, tuple(notes))


def apply_plan(admin: AdminClient, settings: Settings, plan: ReplayPlan) -> list[Move]:
    """Commit the plan's new offsets (partitions whose offset changes only), through a consumer
    of the group once ``admin`` says the group has no member.

    Returns:
        the moves applied.

    Raises:
        GroupActive: the group has active members (their client ids and hosts are named); stop
            the stage's instances first.
        OpsError: the broker refused an offset.
        TransientError: no answer in time.
    """
    kafka = settings.kafka
    members = active_members(admin, kafka, plan.group)
    if members:
        who = ", ".join(f"{m.client_id}@{m.host}" for m in members)
        raise GroupActive(
            f"consumer group {plan.group} has {len(members)} active member(s) ({who}); stop the "
            f"{plan.stage} stage's instances, then replay again (offsets move only in an empty "
            f"group)"
        )
    changed = list(plan.changed)
    client = group_client(kafka, plan.group)
    try:
        alter_offsets(client, kafka, plan.group, plan.topic, {m.partition: m.new for m in changed})
    finally:
        client.close()
    return changed


def wait_drained(
    admin: AdminClient,
    settings: Settings,
    plan: ReplayPlan,
    timeout_s: float,
    on_progress: Callable[[int, int], None] | None = None,
    interval_s: float = 0.5,
) -> int:
    """Wait until the group's committed offsets reach each moved partition's ``high`` (as it was
    when planned), asked through a consumer of the group; ``admin`` is not asked.

    Args:
        on_progress: called with (events done, events total) after every look.

    Returns:
        events drained (= the plan's pending total).

    Raises:
        TransientError: not drained within ``timeout_s`` (done/total named).
    """
    kafka = settings.kafka
    moves = [m for m in plan.moves if m.pending > 0]
    total = sum(m.pending for m in moves)
    deadline = time.monotonic() + timeout_s
    client = group_client(kafka, plan.group)
    try:
        return _drain(
            client, kafka, plan, moves, total, deadline, timeout_s, on_progress, interval_s
        )
    finally:
        client.close()


def _drain(
    client: Consumer,
    kafka: KafkaSettings,
    plan: ReplayPlan,
    moves: list[Move],
    total: int,
    deadline: float,
    timeout_s: float,
    on_progress: Callable[[int, int], None] | None,
    interval_s: float,
) -> int:
    done = 0
    while True:
        if moves:
            committed = committed_offsets(
                client, kafka, plan.group, plan.topic, [m.partition for m in moves]
            )
            done = 0
            for m in moves:
                c = committed[m.partition]
                done += 0 if c is None else min(max(c - m.new, 0), m.pending)
        if on_progress is not None:
            on_progress(done, total)
        if done >= total:
            return total
        if time.monotonic() >= deadline:
            raise TransientError(
                f"group {plan.group} drained {done} of {total} replayed event(s) on {plan.topic} "
                f"within {timeout_s:.0f}s; is the {plan.stage} stage running?"
            )
        time.sleep(interval_s)
