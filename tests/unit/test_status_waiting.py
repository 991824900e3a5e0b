"""``ferry status`` tells a file that waits for its definition (issue 46: ``ferry status FILE``
showed it as plain ``extracted`` and the summary had no waiting section; only the tracker's page
said it): the tracker's ``/files/{id}`` and ``/summary`` carry where it waits, the topics'
fallback reads the waiting topic, and the command prints where, since when and why."""

from __future__ import annotations

import shutil
from pathlib import Path
from typing import Any

import pytest
from tests.support.factories import extracted
from tests.support.paths import REPO_ROOT
from typer.testing import CliRunner

from ferry.cli import app
from ferry.core.events import FileTransferred
from ferry.core.wire.avro import EventCodec
from ferry.settings import Settings, get_settings
from ferry.tracker.record import apply, park
from ferry.tracker.state import TrackerState
from ferry.tracker.views import TrackerContext

AT_MS = 1_764_979_200_000  # 2025-12-06 00:00:00 UTC


def _ctx(records: list[dict[str, Any]]) -> TrackerContext:
    ctx = TrackerContext(
        files={r["file_id"]: r for r in records},
        pruned={},
        state=TrackerState(),
        sla={},
        prefix="ferry",
        groups={},
        refresh_s=1.0,
        metrics=None,
        bad_records=lambda: 0,
    )
    ctx.rebuild()
    return ctx


def test_the_tracker_says_where_a_file_waits_in_its_file_and_summary() -> None:
    ev = extracted("weather", 1)
    _before, record = apply(None, ev, ev.file_id, 0)
    waiting = park(record, "transform", AT_MS)
    assert waiting is not None
    ctx = _ctx([waiting])
    view = ctx.timeline_view(ev.file_id, AT_MS + 1000)
    assert view is not None
    assert (view["state"], view["waiting"]) == (
        "extracted",
        {"stage": "transform", "since_ms": AT_MS},
    )
    assert ctx.summary(AT_MS)["waiting"] == [
        {"dataset": "weather", "stage": "transform", "files": 1}
    ]
    released = _ctx([record]).timeline_view(ev.file_id, AT_MS)
    assert released is not None and "waiting" not in released


def test_the_waiting_topic_folds_to_the_stage_each_file_waits_in(codec: EventCodec) -> None:
    from ferry.core.kafka.admin import ScannedRecord
    from ferry.ops.status import parked_stages

    a, b = extracted("weather", 1), FileTransferred(extracted("weather", 2).manifest)
    records = [
        ScannedRecord("ferry.waiting", 0, 0, AT_MS, a.file_id.encode(), codec.encode(a)),
        ScannedRecord("ferry.waiting", 0, 1, AT_MS + 1, b.file_id.encode(), codec.encode(b)),
        ScannedRecord("ferry.waiting", 0, 2, AT_MS + 2, a.file_id.encode(), b""),  # released
        ScannedRecord("ferry.waiting", 0, 3, AT_MS + 3, b"junk", b"not avro"),
    ]
    assert parked_stages(records, codec) == {b.file_id: {"stage": "load", "since_ms": AT_MS + 1}}


@pytest.fixture
def broken_weather(tmp_path: Path) -> Settings:
    defs = tmp_path / "datasets"
    defs.mkdir()
    for p in (REPO_ROOT / "datasets").glob("*.yaml"):
        shutil.copy(p, defs / p.name)
    text = (defs / "weather.yaml").read_text()
    old = "{name: temp, type: double}"
    assert old in text
    (defs / "weather.yaml").write_text(text.replace(old, "{name: temp, type: long}"))
    base = get_settings()
    return base.model_copy(
        update={
            "var_dir": tmp_path / "var",
            "paths": base.paths.model_copy(update={"datasets_dir": defs}),
        }
    )


def _run(monkeypatch: pytest.MonkeyPatch, settings: Settings, *args: str) -> str:
    monkeypatch.setattr("ferry.settings.get_settings", lambda: settings)
    out = CliRunner().invoke(app, ["status", *args], terminal_width=200)
    assert out.exit_code == 0, out.output
    return " ".join(out.output.replace("│", " ").split())


def test_ferry_status_of_a_file_says_it_waits_and_why(
    monkeypatch: pytest.MonkeyPatch, broken_weather: Settings
) -> None:
    from ferry.ops import status

    ev = extracted("weather", 1)
    _before, record = apply(None, ev, ev.file_id, 0)
    waiting = park(record, "transform", AT_MS)
    assert waiting is not None
    view = _ctx([waiting]).timeline_view(ev.file_id, AT_MS)
    monkeypatch.setattr(status, "file_status", lambda settings, codec, ref: view)
    text = _run(monkeypatch, broken_weather, ev.file_id)
    assert f"file {ev.file_id} (weather): extracted, waiting in transform" in text
    assert (
        "waiting in transform since 2025-12-06 00:00:00.000 (UTC): dataset 'weather' waits for "
        "a valid definition (weather.yaml: columns.5.type: unsupported type 'long'" in text
    )


def test_ferry_status_has_a_waiting_section(
    monkeypatch: pytest.MonkeyPatch, broken_weather: Settings
) -> None:
    from ferry.ops import status

    report = status.StatusReport(
        "tracker",
        {"extracted": 3},
        [],
        [],
        [],
        0,
        waiting=[{"dataset": "weather", "stage": "transform", "files": 3}],
    )
    monkeypatch.setattr(status, "collect_status", lambda settings, codec: report)
    text = _run(monkeypatch, broken_weather)
    assert "files waiting for a definition: 3" in text
    assert (
        "weather transform 3 dataset 'weather' waits for a valid definition (weather.yaml: "
        "columns.5.type: unsupported type 'long'" in text
    )
