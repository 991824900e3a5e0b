"""Quarantine release: the input event rebuilt from a FileFailed (pure, with the real codec)."""

from __future__ import annotations

from datetime import UTC, datetime

import pytest
from tests.support.factories import failed as make_failed
from tests.support.factories import manifest

from ferry.core.events import (
    FileExtracted,
    FileFailed,
    FileManifest,
    FileTransferred,
    FileTransformed,
)
from ferry.core.kafka.admin import OpsError
from ferry.core.wire.avro import default_codec
from ferry.ops.quarantine import QuarantineEntry, input_event_for, plan_release
from ferry.settings import Settings

T0 = datetime(2024, 3, 1, 8, 0, tzinfo=UTC)
SHA = "ab" * 32
MANIFEST = manifest(
    "flights",
    SHA,
    at=T0,
    source_path="flights/2013-01-01.csv",
    size_bytes=1234,
    trace_id="0" * 32,
    uris={"landing": "hdfs://b/ferry/landing/x.csv"},
)


def failed(stage: str, manifest: FileManifest | None = MANIFEST, **kw: object) -> FileFailed:
    return make_failed(stage, manifest, at=T0, **kw)


@pytest.mark.parametrize(
    ("stage", "cls"),
    [("transform", FileExtracted), ("transfer", FileTransformed), ("load", FileTransferred)],
)
def test_input_event_is_the_stage_input_with_the_same_manifest(stage: str, cls: type) -> None:
    assert input_event_for(failed(stage)) == cls(manifest=MANIFEST)


def test_extract_unknown_and_undecodable_are_refused() -> None:
    with pytest.raises(OpsError, match="NAS"):
        input_event_for(failed("extract"))
    with pytest.raises(OpsError, match="unknown stage"):
        input_event_for(failed("bogus"))
    with pytest.raises(OpsError, match="--force"):
        input_event_for(failed("transfer", None))


def entry(f: FileFailed, key: str) -> QuarantineEntry:
    return QuarantineEntry(key, f, 1, 0, 0, 0)


def test_plan_release_encodes_the_input_event_to_the_input_topic_keyed_by_file_id() -> None:
    settings = Settings()
    codec = default_codec(settings.paths.schemas_dir)
    rel = plan_release(entry(failed("load"), MANIFEST.file_id), settings, codec)
    assert rel.record.topic == "ferry.transferred"
    assert rel.record.key == MANIFEST.file_id.encode()
    assert codec.decode(rel.record.value) == FileTransferred(manifest=MANIFEST)
    assert rel.warning is None


def test_raw_release_needs_force_and_reproduces_the_bytes_with_a_warning() -> None:
    settings = Settings()
    codec = default_codec(settings.paths.schemas_dir)
    f = failed(
        "transform",
        None,
        source_topic="ferry.extracted",
        source_partition=1,
        source_offset=7,
        raw_key=b"k1",
        raw_value=b"not-avro",
    )
    e = entry(f, "k1")
    with pytest.raises(OpsError, match="--force"):
        plan_release(e, settings, codec)
    rel = plan_release(e, settings, codec, force=True)
    assert (rel.record.topic, rel.record.key, rel.record.value) == (
        "ferry.extracted",
        b"k1",
        b"not-avro",
    )
    assert rel.event is None and rel.warning and "ferry.extracted" in rel.warning
