"""Recovery in bulk on a real broker (issue 47): ``ferry quarantine release`` with filters over a
failed topic holding an incident's entries: the dry run moves and sends nothing; the run re-emits
the transform file's input event, re-produces a stranger's raw bytes (``--force``) and closes its
entry, moves extract's NAS file back, and leaves the one whose name was dropped again since."""

from __future__ import annotations

import os
from datetime import UTC, datetime
from pathlib import Path

import pytest
from tests.support.factories import failed, numbered
from tests.support.kafka_io import produce, read_all
from typer.testing import CliRunner

from ferry.core.events import FileExtracted, FileFailed
from ferry.core.kafka.clients import build_admin
from ferry.core.kafka.topics import ensure_topics
from ferry.core.wire.avro import default_codec
from ferry.ops import quarantine_cli
from ferry.ops.bulk import RAW_NOTE
from ferry.ops.quarantine import read_quarantine
from ferry.settings import Settings

pytestmark = [pytest.mark.integration, pytest.mark.stack("kafka")]

T0 = datetime(2026, 12, 6, 6, 0, tzinfo=UTC)


def drop(path: Path, data: bytes) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(data)
    os.utime(path, (T0.timestamp(), T0.timestamp()))


def test_bulk_release_by_reason_and_time_with_a_dry_run_first(
    ks: Settings, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    s = ks.model_copy(update={"paths": ks.paths.model_copy(update={"nas_dir": tmp_path})})
    ensure_topics(build_admin(s.kafka), s.kafka)
    codec = default_codec(s.paths.schemas_dir)
    nas = []
    for n in (1, 2):
        data = f"h\n{n}\n".encode()
        m = numbered("flights", n, f"flights_{n}.csv", size_bytes=len(data), source_mtime=T0)
        drop(tmp_path / ".ferry/failed/flights" / f"flights_{n}.{m.file_id[:12]}.csv", data)
        nas.append(failed("extract", m, reason="hdfs_rejected", at=T0))
    drop(tmp_path / "flights/flights_2.csv", b"dropped again")
    moved = numbered("flights", 3, "flights_3.csv")
    stranger = failed(
        "transform",
        None,
        reason="undecodable",
        at=T0,
        source_topic=s.kafka.topic("extracted"),
        source_partition=0,
        source_offset=7,
        raw_key=b"k",
        raw_value=b"not-avro",
    )
    entries: list[tuple[str, FileFailed]] = [(f.file_id or "", f) for f in nas] + [
        (moved.file_id, failed("transform", moved, reason="hdfs_rejected", at=T0)),
        (f"{s.kafka.topic('extracted')}-0-7", stranger),
        (
            "late",
            failed(
                "load",
                numbered("flights", 4),
                reason="hdfs_rejected",
                at=datetime(2026, 12, 6, 9, tzinfo=UTC),
            ),
        ),
    ]
    for key, f in entries:
        produce(s, "failed", key.encode(), codec.encode(f))
    monkeypatch.setattr(quarantine_cli, "_load", lambda: (read_quarantine(s, codec), s, codec))
    args = ["release", "--reason", "hdfs_rejected", "--reason", "undecodable"]
    args += ["--since", "2026-12-06T05:00", "--until", "2026-12-06T08:00", "--force"]

    dry = CliRunner().invoke(quarantine_cli.app, [*args, "--dry-run"], env={"COLUMNS": "300"})
    assert dry.exit_code == 1, dry.output  # one of four cannot move
    assert dry.output.splitlines()[-1] == "3 of 4 selected entries would be released"
    assert read_all(s, "extracted") == []
    assert not (tmp_path / "flights/flights_1.csv").exists()

    run = CliRunner().invoke(quarantine_cli.app, args, env={"COLUMNS": "300"})
    assert run.exit_code == 1, run.output
    outcomes = {
        cells[1].strip(): cells[-2].strip()
        for cells in (ln.split("│") for ln in run.output.splitlines() if ln.startswith("│ "))
        if len(cells) > 3
    }
    assert outcomes == {
        nas[0].file_id: "done",
        nas[1].file_id: "name taken in the drop directory",
        moved.file_id: "done",
        f"{s.kafka.topic('extracted')}-0-7": "done",
    }
    assert run.output.splitlines()[-1] == "3 of 4 selected entries released"
    assert read_all(s, "extracted") == [
        (moved.file_id.encode(), codec.encode(FileExtracted(moved))),
        (b"k", b"not-avro"),
    ]
    assert (tmp_path / "flights/flights_1.csv").read_bytes() == b"h\n1\n"
    assert (tmp_path / "flights/flights_2.csv").read_bytes() == b"dropped again"
    assert len(list((tmp_path / ".ferry/failed/flights").iterdir())) == 1
    after = read_quarantine(s, codec)
    closed = after.get(f"{s.kafka.topic('extracted')}-0-7")
    assert closed is not None and closed.state == "dismissed"
    assert closed.dismissed is not None and closed.dismissed.note == RAW_NOTE
