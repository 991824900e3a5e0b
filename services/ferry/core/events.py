"""Ferry's events: one past-tense dataclass per transition, with explicit wire dicts.

The Avro types live in ``schemas/ferry.<Name>.avsc``; each dataclass here mirrors one of them field
for field. ``to_dict()`` gives the Avro datum that :class:`ferry.core.wire.avro.EventCodec`
encodes and ``from_dict()`` builds the event back from a decoded datum, field by field. Timestamps
are timezone-aware UTC :class:`datetime.datetime` values (Avro ``timestamp-millis``, so
millisecond precision on the wire).

Every event about a file is keyed by its :attr:`FileManifest.file_id` and goes to the topic
``settings.kafka.topic(event.TOPIC)`` (see :func:`ferry.core.kafka.publish.encode_events`).
Every stage builds its quarantine records with :func:`failed`.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from datetime import UTC, datetime
from typing import Any, ClassVar, Union, get_args

from ferry.core.dismissal import FileDismissed
from ferry.errors import SerializationError


def utc_now() -> datetime:
    """Now, UTC, truncated to milliseconds (what survives the wire)."""
    now = datetime.now(UTC)
    return now.replace(microsecond=now.microsecond // 1000 * 1000)


def _req(data: Mapping[str, Any], name: str, schema: str) -> Any:
    try:
        return data[name]
    except KeyError as exc:
        raise SerializationError(f"{schema} datum lacks field {name!r}") from exc


@dataclass(frozen=True)
class FileManifest:
    """What Ferry knows about one file so far (``schemas/ferry.FileManifest.avsc``).

    ``uris`` maps a role (``landing``, ``staging``, ``rejects``, ``incoming``, ``table``) to a full
    URI. Row counts are ``None`` until transform has counted them. ``attempt`` is 1-based.
    ``reject_reasons``: rejected rows per reason code (``type:dep_delay`` → 3), set by transform.
    ``definition_version``: the dataset definition's version used by the stage that wrote the
    event (``ferry.datasets.registry.definition_version``); ``None`` in older events.
    """

    SCHEMA: ClassVar[str] = "ferry.FileManifest"

    file_id: str
    dataset: str
    source_path: str
    size_bytes: int
    sha256: str
    created_at: datetime
    updated_at: datetime
    trace_id: str
    uris: Mapping[str, str] = field(default_factory=dict)
    rows_in: int | None = None
    rows_out: int | None = None
    rows_rejected: int | None = None
    attempt: int = 1
    source_mtime: datetime | None = None
    reject_reasons: Mapping[str, int] = field(default_factory=dict)
    definition_version: str | None = None

    def to_dict(self) -> dict[str, Any]:
        return {
            "file_id": self.file_id,
            "dataset": self.dataset,
            "source_path": self.source_path,
            "size_bytes": self.size_bytes,
            "sha256": self.sha256,
            "uris": dict(self.uris),
            "rows_in": self.rows_in,
            "rows_out": self.rows_out,
            "rows_rejected": self.rows_rejected,
            "attempt": self.attempt,
            "created_at": self.created_at,
            "updated_at": self.updated_at,
            "source_mtime": self.source_mtime,
            "trace_id": self.trace_id,
            "reject_reasons": dict(self.reject_reasons),
            "definition_version": self.definition_version,
        }

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> FileManifest:
        s = cls.SCHEMA
        return cls(
            file_id=_req(data, "file_id", s),
            dataset=_req(data, "dataset", s),
            source_path=_req(data, "source_path", s),
            size_bytes=_req(data, "size_bytes", s),
            sha256=_req(data, "sha256", s),
            created_at=_req(data, "created_at", s),
            updated_at=_req(data, "updated_at", s),
            trace_id=_req(data, "trace_id", s),
            uris=dict(data.get("uris") or {}),
            rows_in=data.get("rows_in"),
            rows_out=data.get("rows_out"),
            rows_rejected=data.get("rows_rejected"),
            attempt=data.get("attempt", 1),
            source_mtime=data.get("source_mtime"),
            reject_reasons=dict(data.get("reject_reasons") or {}),
            definition_version=data.get("definition_version"),
        )

    def advance(self, **changes: Any) -> FileManifest:
        """A copy with ``changes`` applied and ``updated_at`` set to now (unless given).

        ``uris`` in ``changes`` are merged into the existing ones, not replacing them.
        """
        if "uris" in changes:
            changes["uris"] = {**self.uris, **changes["uris"]}
        changes.setdefault("updated_at", utc_now())
        return replace(self, **changes)


@dataclass(frozen=True)
class _ManifestEvent:
    """An event whose only payload is the manifest."""

    SCHEMA: ClassVar[str]
    TOPIC: ClassVar[str]

    manifest: FileManifest

    @property
    def file_id(self) -> str:
        return self.manifest.file_id

    def to_dict(self) -> dict[str, Any]:
        return {"manifest": self.manifest.to_dict()}

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> Any:
        return cls(manifest=FileManifest.from_dict(_req(data, "manifest", cls.SCHEMA)))


@dataclass(frozen=True)
class FileExtracted(_ManifestEvent):
    """A NAS file is complete in HDFS B landing (``manifest.uris['landing']``)."""

    SCHEMA: ClassVar[str] = "ferry.FileExtracted"
    TOPIC: ClassVar[str] = "extracted"


@dataclass(frozen=True)
class FileTransformed(_ManifestEvent):
    """The file is parsed, validated and in HDFS B staging (``uris['staging']``, row counts)."""

    SCHEMA: ClassVar[str] = "ferry.FileTransformed"
    TOPIC: ClassVar[str] = "transformed"


@dataclass(frozen=True)
class FileTransferred(_ManifestEvent):
    """The staged output is verified in HDFS A incoming (``uris['incoming']``)."""

    SCHEMA: ClassVar[str] = "ferry.FileTransferred"
    TOPIC: ClassVar[str] = "transferred"


@dataclass(frozen=True)
class FileLoaded:
    """The file's rows are in Hive table ``table`` (``database.table``), partition ``partition``."""

    SCHEMA: ClassVar[str] = "ferry.FileLoaded"
    TOPIC: ClassVar[str] = "loaded"

    manifest: FileManifest
    table: str
    partition: Mapping[str, str] = field(default_factory=dict)

    @property
    def file_id(self) -> str:
        return self.manifest.file_id

    def to_dict(self) -> dict[str, Any]:
        return {
            "manifest": self.manifest.to_dict(),
            "table": self.table,
            "partition": dict(self.partition),
        }

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> FileLoaded:
        s = cls.SCHEMA
        return cls(
            manifest=FileManifest.from_dict(_req(data, "manifest", s)),
            table=_req(data, "table", s),
            partition=dict(data.get("partition") or {}),
        )


@dataclass(frozen=True)
class FileFailed:
    """A stage gave up on one input record (the quarantine, topic ``<prefix>.failed``).

    ``manifest`` is ``None`` when the input could not be decoded; then ``raw_key``/``raw_value``
    hold its bytes. ``source_*`` locate the input record (topic, partition, offset).
    ``dataset``/``source_path`` name a NAS file that failed before it had a manifest (extract).
    """

    SCHEMA: ClassVar[str] = "ferry.FileFailed"
    TOPIC: ClassVar[str] = "failed"

    stage: str
    reason: str
    error: str
    attempt: int
    failed_at: datetime
    manifest: FileManifest | None = None
    source_topic: str | None = None
    source_partition: int | None = None
    source_offset: int | None = None
    raw_key: bytes | None = None
    raw_value: bytes | None = None
    dataset: str | None = None
    source_path: str | None = None

    @property
    def file_id(self) -> str | None:
        return self.manifest.file_id if self.manifest is not None else None

    @property
    def nas_dataset(self) -> str | None:
        """The file's dataset: the manifest's, else ``dataset``."""
        return self.manifest.dataset if self.manifest is not None else self.dataset

    @property
    def nas_path(self) -> str | None:
        """The file's NAS path: the manifest's, else ``source_path``, else (an extract failure
        recorded before that field existed) ``raw_key`` as UTF-8."""
        if self.manifest is not None:
            return self.manifest.source_path
        if self.source_path is None and self.stage == "extract" and self.raw_key:
            return self.raw_key.decode("utf-8", "backslashreplace")
        return self.source_path

    def to_dict(self) -> dict[str, Any]:
        return {
            "stage": self.stage,
            "reason": self.reason,
            "error": self.error,
            "attempt": self.attempt,
            "failed_at": self.failed_at,
            "manifest": self.manifest.to_dict() if self.manifest is not None else None,
            "source_topic": self.source_topic,
            "source_partition": self.source_partition,
            "source_offset": self.source_offset,
            "raw_key": self.raw_key,
            "raw_value": self.raw_value,
            "dataset": self.dataset,
            "source_path": self.source_path,
        }

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> FileFailed:
        s = cls.SCHEMA
        manifest = data.get("manifest")
        return cls(
            stage=_req(data, "stage", s),
            reason=_req(data, "reason", s),
            error=_req(data, "error", s),
            attempt=_req(data, "attempt", s),
            failed_at=_req(data, "failed_at", s),
            manifest=FileManifest.from_dict(manifest) if manifest is not None else None,
            source_topic=data.get("source_topic"),
            source_partition=data.get("source_partition"),
            source_offset=data.get("source_offset"),
            raw_key=data.get("raw_key"),
            raw_value=data.get("raw_value"),
            dataset=data.get("dataset"),
            source_path=data.get("source_path"),
        )


def failed(
    *,
    stage: str,
    reason: str,
    error: str,
    attempt: int = 1,
    manifest: FileManifest | None = None,
    source_topic: str | None = None,
    source_partition: int | None = None,
    source_offset: int | None = None,
    raw_key: bytes | None = None,
    raw_value: bytes | None = None,
    failed_at: datetime | None = None,
    dataset: str | None = None,
    source_path: str | None = None,
) -> FileFailed:
    """The :class:`FileFailed` every stage emits when it gives up on one input.

    Args:
        stage: the stage that gave up (``extract``, ``transform``, ``transfer``, ``load``).
        reason: the machine-readable reason code (an error's ``reason``, e.g. ``hdfs_timeout``,
            ``handler_error``, ``empty_blank``).
        error: the human-readable message; name the file or the input record in it.
        attempt: how many attempts were made, 1-based.
        manifest: the input's manifest; ``None`` when the input could not be decoded or has no
            manifest yet (a NAS file refused before hashing).
        source_topic, source_partition, source_offset: where the input record was read, for a
            stage that consumes a topic.
        raw_key, raw_value: the input's raw bytes, when it could not be decoded (extract puts the
            NAS path's bytes in ``raw_key``).
        failed_at: when the stage gave up, timezone-aware UTC; default :func:`utc_now`.
        dataset, source_path: the NAS file's dataset and path when there is no manifest.

    Raises:
        ValueError: ``attempt`` is below 1.
    """
    if attempt < 1:
        raise ValueError(f"attempt must be >= 1, got {attempt}")
    return FileFailed(
        stage=stage,
        reason=reason,
        error=error,
        attempt=attempt,
        failed_at=failed_at if failed_at is not None else utc_now(),
        manifest=manifest,
        source_topic=source_topic,
        source_partition=source_partition,
        source_offset=source_offset,
        raw_key=raw_key,
        raw_value=raw_value,
        dataset=dataset,
        source_path=source_path,
    )


#: Every event type, by Avro full name. The one table from schema to class.
Event = Union[  # noqa: UP007
    FileExtracted, FileTransformed, FileTransferred, FileLoaded, FileFailed, FileDismissed
]
EVENT_TYPES: dict[str, type[Any]] = {cls.SCHEMA: cls for cls in get_args(Event)}

#: Short topic names of the topic plan, in pipeline order (``failed`` also carries dismissals).
TOPIC_NAMES: tuple[str, ...] = tuple(dict.fromkeys(cls.TOPIC for cls in EVENT_TYPES.values()))


def event_key(event: Event, fallback: str | None = None) -> str:
    """The Kafka key of an event: its ``file_id``, else ``fallback``.

    Raises:
        ValueError: the event has no file_id (undecodable input) and no fallback was given.
    """
    key = event.file_id
    if key is None:
        key = fallback
    if key is None:
        raise ValueError(f"{type(event).__name__} has no file_id and no fallback key")
    return key
