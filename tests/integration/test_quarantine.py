"""``ferry quarantine`` on the real broker: ``list`` shows a FileFailed produced to the failed
topic; ``release`` re-emits exactly the stage's input event (decoded and compared), keyed by
file id; a file loaded after its failure leaves the list (``--all`` shows it as loaded); empty
files are marked; a raw (undecodable) record is re-produced only with ``--force``.
"""

from __future__ import annotations

import os
import subprocess
from dataclasses import replace
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest
from tests.support.factories import failed, manifest, undecodable
from tests.support.kafka_io import produce, read_all

from ferry.core.events import (
    FileFailed,
    FileLoaded,
    FileTransformed,
)
from ferry.core.kafka.clients import build_admin
from ferry.core.kafka.topics import ensure_topics
from ferry.core.wire.avro import default_codec
from ferry.ops.quarantine import read_quarantine
from ferry.settings import Settings

pytestmark = [pytest.mark.integration, pytest.mark.stack("kafka")]

T0 = datetime(2024, 3, 1, 8, 0, tzinfo=UTC)
SHA = "ef" * 32
MANIFEST = manifest(
    "flights",
    SHA,
    at=T0,
    source_path="flights/données été.csv",
    size_bytes=4321,
    trace_id="2" * 32,
    uris={"landing": "hdfs://b/l.csv", "staging": "hdfs://b/s.parquet"},
    rows_in=10,
    rows_out=10,
    rows_rejected=0,
)
FERRY = Path(os.environ.get("VIRTUAL_ENV", Path(__file__).parents[2] / ".venv")) / "bin" / "ferry"


@pytest.fixture
def qs(stack: Settings, unique: Any) -> Settings:
    s: Settings = unique.settings(stack)
    s = s.model_copy(update={"kafka": s.kafka.model_copy(update={"partitions": 1})})
    ensure_topics(build_admin(s.kafka), s.kafka)
    return s


def cli(s: Settings, *args: str) -> subprocess.CompletedProcess[str]:
    env = {
        **os.environ,
        "FERRY_KAFKA__TOPIC_PREFIX": s.kafka.topic_prefix,
        "FERRY_KAFKA__PARTITIONS": "1",
        "FERRY_KAFKA__BOOTSTRAP_SERVERS_OVERRIDE": s.kafka.bootstrap_servers,
        "COLUMNS": "250",
    }
    return subprocess.run(
        [str(FERRY), *args], env=env, capture_output=True, text=True, timeout=120, check=False
    )


def failures(s: Settings) -> tuple[FileFailed, FileFailed]:
    managed = failed(
        "transfer",
        MANIFEST,
        reason="datanode_unreachable",
        error="datanode 10.0.0.9:9864 unreachable",
        attempt=1,
        at=T0,
        source_topic=s.kafka.topic("transformed"),
        source_partition=0,
        source_offset=12,
    )
    raw = undecodable("transform", (s.kafka.topic("extracted"), 0, 3), raw_key=b"rawkey", at=T0)
    return managed, raw


def test_list_show_and_release_re_emit_the_exact_input_event(qs: Settings) -> None:
    codec = default_codec(qs.paths.schemas_dir)
    managed, raw = failures(qs)
    produce(qs, "failed", MANIFEST.file_id.encode(), codec.encode(managed))
    produce(qs, "failed", b"rawkey", codec.encode(raw))
    produce(qs, "failed", b"junk", b"not-avro")  # an unreadable record on the failed topic itself

    read = read_quarantine(qs, codec)
    assert [(e.key, e.failed, e.failures) for e in read.entries] == [
        (MANIFEST.file_id, managed, 1),
        ("rawkey", raw, 1),
    ]
    assert [(p, o) for p, o, _err in read.unreadable] == [(0, 2)]

    listed = cli(qs, "quarantine", "list")
    assert listed.returncode == 0, listed.stdout + listed.stderr
    assert MANIFEST.file_id in listed.stdout
    assert "datanode_unreachable" in listed.stdout and "transfer" in listed.stdout
    assert "1 unreadable record(s)" in listed.stdout

    shown = cli(qs, "quarantine", "show", MANIFEST.file_id)
    assert shown.returncode == 0, shown.stdout + shown.stderr
    assert "données été.csv" in shown.stdout

    released = cli(qs, "quarantine", "release", MANIFEST.file_id)
    assert released.returncode == 0, released.stdout + released.stderr
    [(key, value)] = read_all(qs, "transformed")
    assert key == MANIFEST.file_id.encode()
    assert value is not None and codec.decode(value) == FileTransformed(manifest=MANIFEST)

    # The released file reaches Hive (the load stage's event, produced here); an empty file is
    # recorded by extract. The first leaves the list, the second stays, marked as empty.
    loaded = FileLoaded(manifest=MANIFEST, table="ferry.flights", partition={"year": "2013"})
    produce(qs, "loaded", MANIFEST.file_id.encode(), codec.encode(loaded))
    empty_manifest = replace(MANIFEST, file_id="e" * 32, source_path="flights/empty.csv")
    empty = replace(managed, stage="extract", reason="empty_file", manifest=empty_manifest)
    produce(qs, "failed", b"e" * 32, codec.encode(empty))
    read = read_quarantine(qs, codec)
    assert [(e.key, e.resolved, e.empty) for e in read.entries] == [
        (MANIFEST.file_id, True, False),
        ("rawkey", False, False),
        ("e" * 32, False, True),
    ]
    assert [e.key for e in read.quarantined] == ["rawkey", "e" * 32]
    listed = cli(qs, "quarantine", "list")
    assert listed.returncode == 0, listed.stdout + listed.stderr
    assert MANIFEST.file_id not in listed.stdout
    assert "2 file(s) quarantined (1 of them empty); 1 loaded since their failure" in listed.stdout
    assert "empty file" in listed.stdout
    everything = cli(qs, "quarantine", "list", "--all")
    assert everything.returncode == 0, everything.stdout + everything.stderr
    assert MANIFEST.file_id in everything.stdout and "loaded 20" in everything.stdout


def test_raw_release_needs_force(qs: Settings) -> None:
    codec = default_codec(qs.paths.schemas_dir)
    _managed, raw = failures(qs)
    produce(qs, "failed", b"rawkey", codec.encode(raw))

    refused = cli(qs, "quarantine", "release", "rawkey")
    assert refused.returncode == 1
    assert "--force" in refused.stdout
    unknown = cli(qs, "quarantine", "release", "nope")
    assert unknown.returncode == 1 and "not in quarantine" in unknown.stdout
    assert read_all(qs, "extracted") == []  # nothing was produced

    forced = cli(qs, "quarantine", "release", "--force", "rawkey")
    assert forced.returncode == 0, forced.stdout + forced.stderr
    assert "warning" in forced.stdout
    assert read_all(qs, "extracted") == [(b"rawkey", b"not-avro")]
    # its entry is closed: the bytes' new failure, if any, has its own key (case C24)
    entry = read_quarantine(qs, codec).get("rawkey")
    assert entry is not None and entry.state == "dismissed"
