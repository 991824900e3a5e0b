"""Strangers' bytes (case C24): records on a Ferry topic that are not the events its stage reads,
each with the FileFailed a consuming stage must set it aside with. Shared by the unit tests
(``tests/unit/test_strangers.py``) and the broker test
(``tests/integration/test_kafka_strangers.py``).

Every kind an operator has met or can meet on a topic: a real event cut short, Avro of another
schema (single-object with a fingerprint Ferry never wrote; Confluent's framing with a schema
registry id), JSON, random bytes (seeded), a tombstone (no value), an empty value, a Ferry event
of a type the stage has no handler for (with a manifest, and without one), and a real event under
a key of another shape (it is handled: the value, not the key, names the file).
"""

from __future__ import annotations

import io
import json
import random
from dataclasses import dataclass
from datetime import UTC, datetime

import fastavro
from fastavro.schema import parse_schema

from ferry.core.dismissal import FileDismissed
from ferry.core.events import FileExtracted, FileManifest, FileTransformed
from ferry.core.wire.avro import MAGIC, EventCodec, schema_fingerprint

#: A schema Ferry never wrote (someone else's producer on the same cluster).
FOREIGN_SCHEMA = parse_schema(
    {
        "type": "record",
        "name": "Click",
        "namespace": "shop",
        "fields": [{"name": "user", "type": "string"}, {"name": "ms", "type": "long"}],
    }
)
T = datetime(2024, 3, 1, 9, 0, 0, tzinfo=UTC)


@dataclass(frozen=True)
class Stranger:
    """One record to produce, and how the stage must set it aside.

    ``reason``: the FileFailed's reason; ``error``: the text after ``<topic>[<p>]@<o>: `` in its
    ``error``; ``raw``: whether the FileFailed keeps the record's key and value (no manifest).
    """

    name: str
    key: bytes | None
    value: bytes | None
    reason: str
    error: str
    raw: bool = True


def foreign_avro() -> bytes:
    """Single-object Avro of :data:`FOREIGN_SCHEMA` (a valid header, an unknown fingerprint)."""
    buf = io.BytesIO()
    buf.write(MAGIC + schema_fingerprint(FOREIGN_SCHEMA))
    fastavro.schemaless_writer(buf, FOREIGN_SCHEMA, {"user": "u1", "ms": 7})
    return buf.getvalue()


def confluent_avro() -> bytes:
    """Confluent's wire format: magic byte 0, a 4-byte schema registry id, the Avro body."""
    buf = io.BytesIO()
    buf.write(b"\x00" + (42).to_bytes(4, "big"))
    fastavro.schemaless_writer(buf, FOREIGN_SCHEMA, {"user": "u1", "ms": 7})
    return buf.getvalue()


def strangers(codec: EventCodec, victim: FileManifest, other: FileManifest) -> list[Stranger]:
    """Every kind of stranger, in a fixed order. ``victim``: a real file whose id a truncated copy
    of its event is keyed by (it must not be blamed); ``other``: the file of the Ferry event of
    the wrong type (a ``FileTransformed`` on transform's input topic)."""
    whole = codec.encode(FileExtracted(victim))
    cut = whole[: len(whole) // 2]
    fp = schema_fingerprint(FOREIGN_SCHEMA).hex()
    js = json.dumps({"file_id": victim.file_id, "dataset": "flights"}).encode()
    rnd = random.Random(47).randbytes(64)
    assert rnd[:2] != MAGIC
    conf = confluent_avro()
    dismissal = FileDismissed("k", "note", "op@host", T, T)
    return [
        Stranger(
            "truncated",
            victim.file_id.encode(),
            cut,
            "undecodable",
            "SerializationError: bad ferry.FileExtracted payload (writer version current): ",
        ),
        Stranger(
            "foreign_avro",
            b"click-1",
            foreign_avro(),
            "unknown_schema",
            f"SerializationError: unknown Avro schema fingerprint {fp}",
        ),
        Stranger(
            "confluent_avro",
            b"click-2",
            conf,
            "undecodable",
            f"SerializationError: not Avro single-object encoding ({len(conf)} bytes, "
            "starts 00000000)",
        ),
        Stranger(
            "json",
            b"j",
            js,
            "undecodable",
            f"SerializationError: not Avro single-object encoding ({len(js)} bytes, "
            f"starts {js[:4].hex()})",
        ),
        Stranger(
            "random",
            b"\xff\xfe\x00k",
            rnd,
            "undecodable",
            "SerializationError: not Avro single-object encoding (64 bytes, "
            f"starts {rnd[:4].hex()})",
        ),
        Stranger(
            "tombstone",
            b"gone",
            None,
            "undecodable",
            "SerializationError: record has no value (tombstone)",
        ),
        Stranger(
            "empty",
            None,
            b"",
            "undecodable",
            "SerializationError: not Avro single-object encoding (0 bytes, starts empty)",
        ),
        Stranger(
            "wrong_type",
            other.file_id.encode(),
            codec.encode(FileTransformed(other)),
            "unexpected_event",
            "PermanentError: stage transform has no handler for FileTransformed",
            raw=False,
        ),
        Stranger(
            "dismissal",
            b"k",
            codec.encode(dismissal),
            "unexpected_event",
            "PermanentError: stage transform has no handler for FileDismissed",
        ),
    ]


__all__ = ["FOREIGN_SCHEMA", "Stranger", "confluent_avro", "foreign_avro", "strangers"]
