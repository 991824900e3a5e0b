"""``ferry quarantine list | show FILE_ID | release FILE_ID...`` (:mod:`ferry.ops.quarantine`)."""

from __future__ import annotations

from collections.abc import Sequence
from datetime import UTC, datetime
from typing import TYPE_CHECKING

import typer
from rich.table import Table

from ferry.core.errors import FerryError
from ferry.ops.console import literal_console
from ferry.ops.quarantine import QuarantineEntry, QuarantineRead

if TYPE_CHECKING:
    from rich.console import Console

    from ferry.core.wire.avro import EventCodec
    from ferry.settings import Settings

app = typer.Typer(no_args_is_help=True)

_FILE_IDS = typer.Argument(..., help="File id(s) to release.")


def _when(entry: QuarantineEntry) -> str:
    return entry.failed.failed_at.astimezone(UTC).strftime("%Y-%m-%d %H:%M:%S")


def _state(entry: QuarantineEntry) -> str:
    if entry.loaded_ms is not None:
        at = datetime.fromtimestamp(entry.loaded_ms / 1000, UTC).strftime("%Y-%m-%d %H:%M:%S")
        return f"loaded {at}"
    return "empty file" if entry.empty else "quarantined"


def quarantine_lines(entries: Sequence[QuarantineEntry]) -> list[str]:
    """Two lines per entry, readable at any terminal width and never cutting the file id (it is
    copied into ``show``/``release``)::

        <file id>  <state>  <stage> <reason>  failed <UTC>
            <error, first 160 chars of its first line>

    State: ``quarantined``, ``empty file`` (recorded, nothing to do) or ``loaded <UTC>`` (loaded
    after its latest failure). Attempts and the failure count are in ``ferry quarantine show``."""
    out = []
    for e in entries:
        f = e.failed
        error = (f.error.splitlines() or [""])[0][:160]
        out.append(f"{e.key}  {_state(e)}  {f.stage} {f.reason}  failed {_when(e)}")
        out.append(f"    {error}")
    return out


def _load() -> tuple[QuarantineRead, Settings, EventCodec]:
    from ferry.core.wire.avro import default_codec
    from ferry.ops.quarantine import read_quarantine
    from ferry.settings import get_settings

    settings = get_settings()
    codec = default_codec(settings.paths.schemas_dir)
    return read_quarantine(settings, codec), settings, codec


def _load_or_exit(console: Console) -> tuple[QuarantineRead, Settings, EventCodec]:
    """:func:`_load`, or its error printed in red on ``console`` and exit status 1."""
    try:
        return _load()
    except FerryError as exc:
        console.print(f"{exc}", style="red")
        raise typer.Exit(1) from exc


@app.command("list")
def list_(
    all_: bool = typer.Option(
        False, "--all", help="Also the files loaded since their latest failure."
    ),
) -> None:
    """Every quarantined file (its latest failure) as a table; empty files are marked."""
    console = literal_console()
    read, settings, _codec = _load_or_exit(console)
    topic = settings.kafka.topic("failed")
    held = read.quarantined
    empty = sum(e.empty for e in held)
    resolved = len(read.entries) - len(held)
    title = f"quarantine {topic}: {len(held)} file(s) quarantined ({empty} of them empty)"
    if resolved:
        title += f"; {resolved} loaded since their failure" + ("" if all_ else " (--all)")
    console.print(title, soft_wrap=True)
    for line in quarantine_lines(read.entries if all_ else held):
        console.print(line, soft_wrap=True, markup=False, highlight=False)
    if read.unreadable:
        console.print(f"{len(read.unreadable)} unreadable record(s) on {topic}", style="yellow")


@app.command("show")
def show(
    file_id: str = typer.Argument(..., help="File id (or key of an undecodable record)."),
) -> None:
    """Every field of one file's latest failure."""
    console = literal_console()
    read, _settings, _codec = _load_or_exit(console)
    entry = read.get(file_id)
    if entry is None:
        console.print(f"{file_id} is not in the quarantine", style="red")
        raise typer.Exit(1)
    f = entry.failed
    table = Table(title=f"quarantined {file_id}", show_header=False)
    table.add_column("field", style="bold")
    table.add_column("value", overflow="fold")
    rows = [
        ("state", _state(entry)),
        ("stage", f.stage),
        ("reason", f.reason),
        ("attempt", str(f.attempt)),
        ("failures", str(entry.failures)),
        ("failed at", f.failed_at.isoformat()),
        ("error", f.error),
        ("source", f"{f.source_topic}[{f.source_partition}]@{f.source_offset}"),
        ("failed topic", f"partition {entry.partition} offset {entry.offset}"),
    ]
    if f.manifest is not None:
        m = f.manifest
        rows += [
            ("dataset", m.dataset),
            ("source path", m.source_path),
            ("size bytes", str(m.size_bytes)),
            ("sha256", m.sha256),
            ("uris", ", ".join(f"{k}={v}" for k, v in sorted(m.uris.items()))),
            ("rows in/out/rejected", f"{m.rows_in}/{m.rows_out}/{m.rows_rejected}"),
            ("trace id", m.trace_id),
        ]
    else:
        rows += [
            ("raw key", repr(f.raw_key)),
            ("raw value", f"{len(f.raw_value or b'')} bytes: {(f.raw_value or b'')[:64]!r}"),
        ]
    for k, v in rows:
        table.add_row(k, v)
    console.print(table)


@app.command("release")
def release_(
    file_ids: list[str] = _FILE_IDS,
    force: bool = typer.Option(
        False, "--force", help="Also re-produce raw bytes of undecodable records to their topic."
    ),
) -> None:
    """Re-emit each file's input event to its stage's input topic (nothing is sent if any fails)."""
    from ferry.ops.quarantine import release

    console = literal_console()
    try:
        read, settings, codec = _load()
        done = release(settings, codec, file_ids, force=force, read=read)
    except FerryError as exc:
        console.print(f"{exc}", style="red")
        raise typer.Exit(1) from exc
    for r in done:
        if r.warning:
            console.print(f"warning: {r.warning}", style="yellow")
        what = type(r.event).__name__ if r.event is not None else "raw record"
        console.print(f"released {r.key}: {what} → {r.record.topic}")
    stamp = datetime.now(UTC).isoformat(timespec="seconds")
    console.print(f"{len(done)} file(s) released at {stamp}")
