"""``ferry status``: the failed files counted are the ones listed (issue 46: after extract's
quarantined files were moved back and loaded it counted ``failed 5`` while its quarantine table
listed none, "5 superseded")."""

from __future__ import annotations

from typing import Any

import pytest
from typer.testing import CliRunner

from ferry.cli import app
from ferry.ops import status


def _failed(n: int, closure: str) -> dict[str, Any]:
    return {
        "file_id": f"f{n}",
        "dataset": "flights",
        "source_path": f"flights/flights_{n}.csv",
        "state": "failed",
        "steps": {},
        "failure": {"stage": "extract", "reason": "hdfs_unavailable"},
        "quarantine": {"state": closure, "detail": None},
    }


def test_the_failed_count_is_split_as_the_quarantine_table_lists(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    files = [_failed(n, "superseded") for n in range(5)] + [_failed(9, "open")]
    report = status.StatusReport("topics", {"loaded": 5, "failed": 6}, [], files, [], 0)
    monkeypatch.setattr(status, "collect_status", lambda settings, codec: report)
    out = CliRunner().invoke(app, ["status"], terminal_width=200)
    assert out.exit_code == 0, out.output
    rows = [
        [c.strip() for c in ln.split("│")[1:-1]]
        for ln in out.output.split("files by state")[1].split("consumer lag")[0].splitlines()
        if ln.count("│") == 3
    ]
    assert rows == [
        ["loaded", "5"],
        ["failed, in quarantine", "1"],
        ["failed, superseded (loaded since)", "5"],
    ]
    assert "quarantined files (5 more superseded or dismissed): 1" in out.output
