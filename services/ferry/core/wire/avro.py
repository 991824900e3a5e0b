"""Avro schemas from ``schemas/`` and the single-object wire format of Ferry's events.

Layout of the schema directory (``settings.paths.schemas_dir``)::

    schemas/ferry.<Name>.avsc                  the current version, one named type per file
    schemas/released/<version>/ferry.<Name>.avsc   frozen snapshots (``ferry schemas release``)

Wire format: Avro single-object encoding (Avro 1.11 spec, "Single-object encoding"): the two
bytes ``C3 01``, the 8-byte little-endian CRC-64-AVRO fingerprint of the writer schema's Parsing
Canonical Form, then the Avro binary payload. A reader finds the writer schema by fingerprint
among the current and every released version, and resolves the payload into the *current*
schema of the same type, so events written by an older release stay readable.
"""

from __future__ import annotations

import io
import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path
from typing import Any

import fastavro
from fastavro.read import SchemaResolutionError
from fastavro.repository import SchemaRepositoryError
from fastavro.schema import (
    SchemaParseException,
    fingerprint,
    load_schema,
    to_parsing_canonical_form,
)
from fastavro.validation import ValidationError

from ferry.core.events import EVENT_TYPES, Event
from ferry.errors import ConfigError, SerializationError

MAGIC = b"\xc3\x01"
HEADER_BYTES = len(MAGIC) + 8
CURRENT = "current"
_FILE_RE = re.compile(r"^ferry\.[A-Za-z_][A-Za-z0-9_]*\.avsc$")

#: fastavro raises these for undecodable payloads (truncated, bad union index, bad UTF-8, ...).
_DECODE_ERRORS = (
    EOFError,
    ValueError,
    IndexError,
    KeyError,
    TypeError,
    OverflowError,
    MemoryError,
    SchemaResolutionError,
)
_ENCODE_ERRORS = (ValueError, TypeError, KeyError, AttributeError, OverflowError, ValidationError)


def schema_fingerprint(schema: Any) -> bytes:
    """The 8-byte CRC-64-AVRO fingerprint of a schema's Parsing Canonical Form.

    Bytes are little-endian, as written after ``C3 01`` in single-object encoding (fastavro's
    ``fingerprint`` returns them in that order, like the Java implementation).
    """
    return bytes.fromhex(fingerprint(to_parsing_canonical_form(schema), "CRC-64-AVRO"))


def load_schema_dir(directory: Path) -> dict[str, Any]:
    """Parse every ``ferry.*.avsc`` in ``directory``; named types resolve across files.

    Returns:
        full name (``ferry.FileFailed``) → parsed fastavro schema (referenced types inlined).

    Raises:
        ConfigError: a file is not valid Avro, references an unknown type, or its type's full
            name differs from its file name.
    """
    schemas: dict[str, Any] = {}
    for path in sorted(directory.glob("ferry.*.avsc")):
        if not _FILE_RE.match(path.name):
            continue
        try:
            parsed = load_schema(str(path))
        except (SchemaParseException, SchemaRepositoryError, ValueError, OSError) as exc:
            raise ConfigError(f"cannot load Avro schema {path}: {exc}") from exc
        name = parsed.get("name") if isinstance(parsed, dict) else None
        if name != path.name[: -len(".avsc")]:
            raise ConfigError(
                f"schema file {path} defines {name!r}; the file must be named <full name>.avsc"
            )
        schemas[name] = parsed
    return schemas


@dataclass(frozen=True)
class SchemaVersion:
    """One version of the schema set: ``"current"`` or a released version name."""

    version: str
    schemas: Mapping[str, Any]


def released_dir(schemas_dir: Path) -> Path:
    """Directory holding the released snapshots, one sub-directory per version."""
    return schemas_dir / "released"


def load_schema_history(schemas_dir: Path) -> list[SchemaVersion]:
    """The current schema set first, then every released one (sorted by version name).

    Raises:
        ConfigError: the directory holds no schemas, or one file cannot be loaded.
    """
    current = load_schema_dir(schemas_dir)
    if not current:
        raise ConfigError(f"no ferry.*.avsc schemas in {schemas_dir}")
    versions = [SchemaVersion(CURRENT, current)]
    rel = released_dir(schemas_dir)
    if rel.is_dir():
        for sub in sorted(
            (p for p in rel.iterdir() if p.is_dir()), key=lambda p: _version_key(p.name)
        ):
            versions.append(SchemaVersion(sub.name, load_schema_dir(sub)))
    return versions


def _version_key(name: str) -> tuple[Any, ...]:
    return tuple(
        (0, int(part), "") if part.isdigit() else (1, 0, part) for part in re.split(r"[.\-]", name)
    )


@dataclass(frozen=True)
class _Writer:
    name: str
    version: str
    schema: Any


class EventCodec:
    """Encodes and decodes Ferry events in Avro single-object encoding.

    Build once per process (:func:`default_codec`, or ``EventCodec(load_schema_history(dir))``):
    it parses the schemas and indexes every version's fingerprints at construction.
    Thread-safe after construction.
    """

    def __init__(self, history: Iterable[SchemaVersion]) -> None:
        versions = list(history)
        if not versions or versions[0].version != CURRENT:
            raise ConfigError("schema history must start with the current version")
        self.current: Mapping[str, Any] = versions[0].schemas
        self._fingerprint: dict[str, bytes] = {
            n: schema_fingerprint(s) for n, s in self.current.items()
        }
        self._writers: dict[bytes, _Writer] = {}
        for version in reversed(versions):  # the current version wins identical fingerprints
            for name, schema in version.schemas.items():
                self._writers[schema_fingerprint(schema)] = _Writer(name, version.version, schema)

    @classmethod
    def from_dir(cls, schemas_dir: Path) -> EventCodec:
        """A codec over ``schemas_dir`` and its released versions. Raises ConfigError."""
        return cls(load_schema_history(schemas_dir))

    def fingerprint(self, name: str) -> bytes:
        """Fingerprint of the current schema of type ``name`` (e.g. ``ferry.FileLoaded``).

        Raises:
            SerializationError: no such type in the current schemas.
        """
        try:
            return self._fingerprint[name]
        except KeyError as exc:
            raise SerializationError(
                f"no current Avro schema named {name!r}", reason="unknown_schema"
            ) from exc

    def known_fingerprints(self) -> dict[bytes, tuple[str, str]]:
        """Every fingerprint this codec can read → (type full name, version)."""
        return {fp: (w.name, w.version) for fp, w in self._writers.items()}

    def encode_datum(self, name: str, datum: Mapping[str, Any]) -> bytes:
        """Single-object bytes of ``datum`` written with the current schema ``name``.

        Raises:
            SerializationError: unknown type, or the datum does not match the schema.
        """
        fp = self.fingerprint(name)
        buf = io.BytesIO()
        buf.write(MAGIC)
        buf.write(fp)
        try:
            fastavro.schemaless_writer(buf, self.current[name], datum, strict=True)
        except _ENCODE_ERRORS as exc:
            raise SerializationError(f"cannot encode {name}: {exc}", reason="unencodable") from exc
        return buf.getvalue()

    def decode_datum(self, data: bytes) -> tuple[str, dict[str, Any]]:
        """(type full name, datum in the *current* schema) from single-object bytes.

        Raises:
            SerializationError: reason ``undecodable`` (no magic, short, bad payload, trailing
                bytes) or ``unknown_schema`` (fingerprint of no known version).
        """
        if len(data) < HEADER_BYTES or data[:2] != MAGIC:
            raise SerializationError(
                f"not Avro single-object encoding ({len(data)} bytes, "
                f"starts {data[:4].hex() or 'empty'})",
                reason="undecodable",
            )
        fp = bytes(data[2:HEADER_BYTES])
        writer = self._writers.get(fp)
        if writer is None:
            raise SerializationError(
                f"unknown Avro schema fingerprint {fp.hex()}", reason="unknown_schema"
            )
        reader = self.current.get(writer.name)
        if reader is None:
            raise SerializationError(
                f"type {writer.name} (fingerprint {fp.hex()}, version {writer.version}) "
                "has no current schema",
                reason="unknown_schema",
            )
        buf = io.BytesIO(data)
        buf.seek(HEADER_BYTES)
        try:
            datum = fastavro.schemaless_reader(
                buf, writer.schema, None if writer.version == CURRENT else reader
            )
        except _DECODE_ERRORS as exc:
            raise SerializationError(
                f"bad {writer.name} payload (writer version {writer.version}): "
                f"{type(exc).__name__}: {exc}",
                reason="undecodable",
            ) from exc
        if buf.tell() != len(data):
            raise SerializationError(
                f"{len(data) - buf.tell()} trailing bytes after a {writer.name} payload",
                reason="undecodable",
            )
        if not isinstance(datum, dict):
            raise SerializationError(f"{writer.name} payload is not a record", reason="undecodable")
        return writer.name, datum

    def encode(self, event: Event) -> bytes:
        """Single-object bytes of an event (its ``to_dict()`` with its current schema).

        Raises:
            SerializationError: the event does not match its schema.
        """
        return self.encode_datum(event.SCHEMA, event.to_dict())

    def decode(self, data: bytes) -> Event:
        """The event in ``data``, as its dataclass, read with the current schema.

        Raises:
            SerializationError: see :meth:`decode_datum`; also ``unknown_schema`` when the type
                is not one of :data:`ferry.core.events.EVENT_TYPES`.
        """
        name, datum = self.decode_datum(data)
        cls = EVENT_TYPES.get(name)
        if cls is None:
            raise SerializationError(f"{name} is not an event type", reason="unknown_schema")
        event: Event = cls.from_dict(datum)
        return event


@lru_cache(maxsize=4)
def _codec_for(schemas_dir: Path) -> EventCodec:
    return EventCodec.from_dir(schemas_dir)


def default_codec(schemas_dir: Path) -> EventCodec:
    """The process-wide codec over ``schemas_dir`` (``settings.paths.schemas_dir``).

    Built once per directory (resolved), then shared.

    Raises:
        ConfigError: the schemas cannot be loaded.
    """
    return _codec_for(Path(schemas_dir).resolve())
