"""Events and their wire format: round trips, fingerprints, bad bytes, file_id derivation."""

from __future__ import annotations

import json
import shutil
from datetime import UTC, datetime
from pathlib import Path

import pytest
from fastavro.schema import fingerprint, load_schema, to_parsing_canonical_form
from tests.support.factories import failed, undecodable
from tests.support.factories import manifest as make_manifest

from ferry.core.dismissal import FileDismissed
from ferry.core.events import (
    EVENT_TYPES,
    TOPIC_NAMES,
    FileExtracted,
    FileLoaded,
    FileManifest,
    FileTransferred,
    FileTransformed,
    event_key,
)
from ferry.core.identity import derive_file_id
from ferry.core.wire.avro import MAGIC, EventCodec, load_schema_dir, schema_fingerprint
from ferry.errors import SerializationError
from ferry.settings import get_settings

SCHEMAS = get_settings().paths.schemas_dir
SHA = "ab" * 32
T0 = datetime(2024, 5, 1, 12, 30, 15, 123000, tzinfo=UTC)
T1 = datetime(2024, 5, 1, 12, 31, 0, 456000, tzinfo=UTC)


def manifest(**changes: object) -> FileManifest:
    values: dict[str, object] = {
        "source_path": "flights/données été #1 100%=x.csv",
        "size_bytes": 123_456_789_012,
        "updated_at": T1,
        "trace_id": "0123456789abcdef0123456789abcdef",
        "uris": {"landing": "hdfs://127.0.0.1:18020/ferry/landing/flights/x.csv"},
        "rows_in": 10,
        "rows_out": 8,
        "rows_rejected": 2,
        "attempt": 3,
        "source_mtime": T0,
    }
    return make_manifest("flights", SHA, at=T0, **{**values, **changes})


ALL_EVENTS = [
    FileExtracted(manifest(rows_in=None, rows_out=None, rows_rejected=None, source_mtime=None)),
    FileTransformed(manifest()),
    FileTransferred(manifest(uris={})),
    FileLoaded(manifest(), table="demo.flights", partition={"day": "2013-01-01"}),
    failed(
        "transfer",
        manifest(),
        reason="datanode_unreachable",
        error="cannot reach 10.0.0.9:9864",
        attempt=6,
        at=T1,
        source_topic="ferry.transformed",
        source_partition=2,
        source_offset=41,
    ),
    undecodable("load", ("ferry.transferred", 0, 7), raw_key=b"k\x00\xff", at=T1),
    failed(
        "extract",
        None,
        reason="symlink_refused",
        error="a link",
        attempt=1,
        at=T1,
        raw_key=b"flights/x.csv",
        dataset="flights",
        source_path="flights/x.csv",
    ),
    FileDismissed("flights/x.csv", "nobody owns this export", "ops@edge1", T1, T0),
]


@pytest.mark.parametrize("event", ALL_EVENTS, ids=lambda e: type(e).__name__)
def test_round_trip_every_event(codec: EventCodec, event: object) -> None:
    data = codec.encode(event)  # type: ignore[arg-type]
    assert data[:2] == b"\xc3\x01"
    assert data[2:10] == codec.fingerprint(type(event).SCHEMA)
    assert codec.decode(data) == event


def test_decoded_timestamps_are_utc_aware(codec: EventCodec) -> None:
    decoded = codec.decode(codec.encode(ALL_EVENTS[1]))
    assert decoded.manifest.created_at == T0
    assert decoded.manifest.created_at.tzinfo is not None
    assert decoded.manifest.created_at.utcoffset().total_seconds() == 0  # type: ignore[union-attr]


def test_every_event_type_has_a_schema_and_a_topic(codec: EventCodec) -> None:
    assert set(EVENT_TYPES) == {
        "ferry.FileExtracted",
        "ferry.FileTransformed",
        "ferry.FileTransferred",
        "ferry.FileLoaded",
        "ferry.FileFailed",
        "ferry.FileDismissed",  # on the failed topic: it closes a quarantine entry
    }
    assert TOPIC_NAMES == ("extracted", "transformed", "transferred", "loaded", "failed")
    assert set(EVENT_TYPES) | {"ferry.FileManifest"} == set(codec.current)


def test_fingerprint_is_fastavro_crc64_of_canonical_form() -> None:
    path = SCHEMAS / "ferry.FileLoaded.avsc"
    parsed = load_schema(str(path))
    expected = fingerprint(to_parsing_canonical_form(parsed), "CRC-64-AVRO")
    assert schema_fingerprint(parsed).hex() == expected
    # Avro spec test vector: CRC-64-AVRO("\"int\"") = 0x7275d51a3f395c8f, little-endian on the wire.
    assert schema_fingerprint("int") == bytes.fromhex("8f5c393f1ad57572")


def test_fingerprint_lookup_finds_writer_type_and_version(codec: EventCodec) -> None:
    known = codec.known_fingerprints()
    for name in EVENT_TYPES:
        assert known[codec.fingerprint(name)] == (name, "current")


@pytest.mark.parametrize(
    ("data", "reason"),
    [
        (b"not-avro", "undecodable"),
        (b"", "undecodable"),
        (MAGIC, "undecodable"),
        (MAGIC + b"\x00" * 8 + b"\x02ab", "unknown_schema"),
    ],
    ids=["not-avro", "empty", "magic-only", "unknown-fingerprint"],
)
def test_bad_bytes_raise_serialization_error(codec: EventCodec, data: bytes, reason: str) -> None:
    with pytest.raises(SerializationError) as info:
        codec.decode(data)
    assert info.value.reason == reason


def test_truncated_payload_is_undecodable(codec: EventCodec) -> None:
    data = codec.encode(ALL_EVENTS[3])
    with pytest.raises(SerializationError) as info:
        codec.decode(data[:-5])
    assert info.value.reason == "undecodable"
    assert info.value.__cause__ is not None


def test_trailing_bytes_are_undecodable(codec: EventCodec) -> None:
    with pytest.raises(SerializationError, match="1 trailing bytes") as info:
        codec.decode(codec.encode(ALL_EVENTS[0]) + b"\x00")
    assert info.value.reason == "undecodable"


def test_event_that_breaks_its_schema_cannot_be_encoded(codec: EventCodec) -> None:
    bad = FileExtracted(manifest(size_bytes="big"))  # type: ignore[arg-type]
    with pytest.raises(SerializationError) as info:
        codec.encode(bad)
    assert info.value.reason == "unencodable"
    assert info.value.__cause__ is not None


def test_old_event_read_with_new_reader_schema(tmp_path: Path) -> None:
    """A release without FileLoaded.partition: its events read with the default {}."""
    released = tmp_path / "released" / "0.9"
    released.mkdir(parents=True)
    for path in SCHEMAS.glob("ferry.*.avsc"):
        shutil.copy(path, tmp_path / path.name)
        shutil.copy(path, released / path.name)
    old = json.loads((released / "ferry.FileLoaded.avsc").read_text())
    old["fields"] = [f for f in old["fields"] if f["name"] != "partition"]
    (released / "ferry.FileLoaded.avsc").write_text(json.dumps(old))

    old_only = EventCodec.from_dir(released)  # writes with the old schema as "current"
    event = FileLoaded(manifest(), table="demo.flights", partition={"day": "x"})
    old_bytes = old_only.encode_datum(
        "ferry.FileLoaded", {"manifest": event.manifest.to_dict(), "table": "demo.flights"}
    )

    codec = EventCodec.from_dir(tmp_path)
    assert codec.known_fingerprints()[old_bytes[2:10]] == ("ferry.FileLoaded", "0.9")
    assert codec.decode(old_bytes) == FileLoaded(event.manifest, table="demo.flights", partition={})


def test_schema_file_name_must_match_type(tmp_path: Path) -> None:
    from ferry.errors import ConfigError

    (tmp_path / "ferry.Wrong.avsc").write_text(
        json.dumps({"type": "record", "name": "Right", "namespace": "ferry", "fields": []})
    )
    with pytest.raises(ConfigError, match="ferry.Wrong.avsc"):
        load_schema_dir(tmp_path)


def test_file_id_same_bytes_same_id_regardless_of_name_or_case() -> None:
    a = derive_file_id("flights", SHA)
    assert a == derive_file_id("flights", SHA.upper())
    assert len(a) == 32 and a == a.lower() and int(a, 16) >= 0
    assert a != derive_file_id("weather", SHA)
    assert a != derive_file_id("flights", "cd" * 32)


def test_file_id_is_pinned() -> None:
    """Changing the derivation would orphan every recorded file; this value must never change."""
    assert derive_file_id("flights", SHA) == "4630335e667c337f81f1dc9ae4ed612c"


@pytest.mark.parametrize(("dataset", "sha"), [("", SHA), ("flights", "xyz"), ("flights", SHA[:-1])])
def test_file_id_rejects_bad_input(dataset: str, sha: str) -> None:
    with pytest.raises(ValueError):
        derive_file_id(dataset, sha)


def test_event_key_is_file_id_or_fallback() -> None:
    assert event_key(ALL_EVENTS[0]) == ALL_EVENTS[0].manifest.file_id
    assert event_key(ALL_EVENTS[5], fallback="t-0-7") == "t-0-7"
    with pytest.raises(ValueError):
        event_key(ALL_EVENTS[5])


def test_advance_merges_uris_and_sets_updated_at() -> None:
    m = manifest()
    later = m.advance(uris={"staging": "hdfs://b/s"}, rows_out=5)
    assert later.uris == {**m.uris, "staging": "hdfs://b/s"}
    assert later.rows_out == 5
    assert later.updated_at > m.updated_at
    assert m.uris == {"landing": "hdfs://127.0.0.1:18020/ferry/landing/flights/x.csv"}


def test_a_failure_names_its_nas_file_with_or_without_a_manifest() -> None:
    with_manifest = failed("transform", manifest(), reason="header_mismatch")
    assert (with_manifest.nas_dataset, with_manifest.nas_path) == (
        "flights",
        "flights/données été #1 100%=x.csv",
    )
    refused = failed("extract", None, dataset="flights", source_path="flights/x.csv")
    assert (refused.nas_dataset, refused.nas_path) == ("flights", "flights/x.csv")
    older = failed("extract", None, raw_key="flights/é.csv".encode())  # before the fields
    assert (older.nas_dataset, older.nas_path) == (None, "flights/é.csv")
    assert failed("load", None, raw_key=b"k").nas_path is None  # a record key, not a NAS path
