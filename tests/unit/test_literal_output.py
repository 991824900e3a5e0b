"""Output never interprets data: names, reasons and errors print byte for byte (issue: a NAS file
named ``flights_2016-01-31[red]:x:.csv`` printed as ``flights_2016-01-31[red]❌.csv``)."""

from __future__ import annotations

import io

import pytest
from rich.table import Table
from tests.support.factories import failed, manifest
from typer.testing import CliRunner

from ferry.ops import quarantine_cli
from ferry.ops.console import literal_console
from ferry.ops.quarantine import QuarantineEntry, QuarantineRead

NAME = "flights/flights_2016-01-31[red]:x:[/red] 100%[bold].csv"
ERROR = "root:x:0:0:[bold]root[/bold]:/root:/bin/bash %s %(name)s :thumbs_up:"


def printed(*renderables: object) -> str:
    out = io.StringIO()
    console = literal_console(200, file=out)
    for r in renderables:
        console.print(r)
    return out.getvalue()


def test_a_string_and_a_table_cell_print_literally():
    table = Table()
    table.add_column("name")
    table.add_row(NAME)
    text = printed(NAME, table)
    assert text.splitlines()[0] == NAME
    assert f"│ {NAME} │" in text


@pytest.fixture
def entry() -> QuarantineEntry:
    m = manifest("flights", "cd" * 32, source_path=NAME)
    f = failed("transform", m, reason="header_mismatch", error=ERROR, attempt=1)
    return QuarantineEntry(m.file_id, f, 1, 0, 7, 1_700_000_000_000)


def test_quarantine_list_and_show_print_names_and_errors_literally(monkeypatch, entry):
    from ferry.settings import get_settings

    read = QuarantineRead((entry,), ())
    monkeypatch.setattr(quarantine_cli, "_load", lambda: (read, get_settings(), None))
    runner = CliRunner()
    listed = runner.invoke(quarantine_cli.app, ["list"], env={"COLUMNS": "250"})
    assert listed.exit_code == 0, listed.output
    lines = listed.output.splitlines()
    assert lines[1] == f"{entry.key}  quarantined"
    assert lines[2] == (
        f"    dataset flights · NAS {NAME} · stage transform · reason header_mismatch · "
        "failed 2024-01-02 03:04:05 · attempt 1"
    )
    assert lines[3] == f"    {ERROR}"
    assert "❌" not in listed.output and "👍" not in listed.output
    shown = runner.invoke(quarantine_cli.app, ["show", entry.key], env={"COLUMNS": "250"})
    assert shown.exit_code == 0, shown.output
    assert f"│ source path          │ {NAME}" in shown.output
    assert f"│ error                │ {ERROR}" in shown.output
    missing = runner.invoke(quarantine_cli.app, ["show", "[red]:x:"], env={"COLUMNS": "250"})
    assert missing.exit_code == 1
    assert missing.output.strip() == "[red]:x: is not in the quarantine"
