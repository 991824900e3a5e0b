"""Reject reason counts travel with the manifest (Avro) to the timeline and ``ferry status``."""

from __future__ import annotations

from datetime import UTC, datetime

from rich.console import Console
from tests.support.paths import REPO_ROOT

from ferry.core.events import FileExtracted, FileManifest, FileTransformed
from ferry.core.identity import derive_file_id
from ferry.core.timeline import Timeline, fold
from ferry.core.wire.avro import default_codec
from ferry.ops.status_cli import _reasons_table

SHA = "ef" * 32
FID = derive_file_id("flights", SHA)
T0 = datetime(2024, 5, 1, 12, 0, tzinfo=UTC)
REASONS = {"type:dep_delay": 3, "fields:6/19": 1, "null:[red]x": 2}


def manifest(**kw: object) -> FileManifest:
    return FileManifest(
        file_id=FID,
        dataset="flights",
        source_path="flights/flights_2013-01-01.csv",
        size_bytes=10,
        sha256=SHA,
        created_at=T0,
        updated_at=T0,
        trace_id="2" * 32,
        **kw,  # type: ignore[arg-type]
    )


def test_reject_reasons_round_trip_through_avro() -> None:
    codec = default_codec(REPO_ROOT / "schemas")
    ev = FileTransformed(manifest(rows_in=10, rows_out=6, rows_rejected=4, reject_reasons=REASONS))
    assert codec.decode(codec.encode(ev)) == ev
    assert codec.decode(codec.encode(FileExtracted(manifest()))).manifest.reject_reasons == {}


def test_timeline_keeps_the_counted_reasons() -> None:
    tl = fold(None, FileExtracted(manifest()), FID)
    assert "reject_reasons" not in tl.to_dict()
    tl = fold(
        tl,
        FileTransformed(manifest(rows_in=10, rows_out=6, rows_rejected=4, reject_reasons=REASONS)),
        FID,
    )
    assert tl.reject_reasons == REASONS
    assert tl.to_dict()["reject_reasons"] == REASONS
    assert Timeline.from_dict(tl.to_dict()) == tl


def test_status_prints_reason_counts_literally() -> None:
    console = Console(record=True, width=100, color_system=None)
    console.print(_reasons_table(REASONS))
    lines = [ln.strip() for ln in console.export_text().splitlines()]
    rows = [ln for ln in lines if ln.startswith("│")]
    assert rows == [
        "│ type:dep_delay │    3 │",
        "│ null:[red]x    │    2 │",
        "│ fields:6/19    │    1 │",
    ]


def test_status_names_the_settings_it_used(monkeypatch, tmp_path) -> None:
    from ferry.ops.status_cli import settings_line
    from ferry.settings import Settings

    monkeypatch.delenv("FERRY_CONFIG", raising=False)
    monkeypatch.delenv("FERRY_PROFILE", raising=False)
    s = Settings(var_dir=tmp_path, kafka={"topic_prefix": "edge1"})
    assert settings_line(s) == (
        "settings: FERRY_CONFIG none (defaults and FERRY_* variables); profile -; "
        f"topic prefix edge1; var_dir {tmp_path}"
    )
    monkeypatch.setenv("FERRY_CONFIG", "/etc/ferry/ferry.yaml")
    monkeypatch.setenv("FERRY_PROFILE", "ha")
    assert settings_line(s).startswith("settings: FERRY_CONFIG /etc/ferry/ferry.yaml; profile ha;")
