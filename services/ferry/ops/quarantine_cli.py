"""``ferry quarantine list | show ID | release ID... | dismiss ID... --note TEXT``
(:mod:`ferry.ops.quarantine`)."""

from __future__ import annotations

from collections.abc import Sequence
from datetime import UTC, datetime
from typing import TYPE_CHECKING

import typer
from rich.padding import Padding
from rich.table import Table
from rich.text import Text

from ferry.errors import FerryError
from ferry.ops.console import literal_console
from ferry.ops.quarantine import QuarantineEntry, QuarantineRead

if TYPE_CHECKING:
    from rich.console import Console

    from ferry.core.wire.avro import EventCodec
    from ferry.settings import Settings

app = typer.Typer(no_args_is_help=True)

_FILE_IDS = typer.Argument(..., help="File id(s) to release.")
_KEYS = typer.Argument(..., help="File id(s), or key(s) as `list` shows them.")


def _when(entry: QuarantineEntry) -> str:
    return entry.failed.failed_at.astimezone(UTC).strftime("%Y-%m-%d %H:%M:%S")


def _utc(ms: int) -> str:
    return datetime.fromtimestamp(ms / 1000, UTC).strftime("%Y-%m-%d %H:%M:%S")


def _state(entry: QuarantineEntry) -> str:
    """The entry's state with its detail: ``quarantined``, ``empty file``, ``loaded <UTC>``,
    ``superseded by <file id> (loaded <UTC>)`` or ``dismissed by <who> at <UTC>: <note>``."""
    state = entry.state
    if state == "loaded" and entry.loaded_ms is not None:
        return f"loaded {_utc(entry.loaded_ms)}"
    if state == "superseded" and entry.superseded_by is not None:
        fid, ms = entry.superseded_by
        return f"superseded by {fid} (loaded {_utc(ms)})"
    if state == "dismissed" and entry.dismissed is not None:
        d = entry.dismissed
        return (
            f"dismissed by {d.by} at {d.dismissed_at.astimezone(UTC):%Y-%m-%d %H:%M:%S}: {d.note}"
        )
    return "empty file" if state == "empty" else state


def quarantine_blocks(entries: Sequence[QuarantineEntry]) -> list[Text | Padding]:
    """Per entry, for every stage alike: its key (file id, or NAS path of a file refused before
    it had one) and state on the first line, never cut (it is copied into ``show``, ``release``,
    ``dismiss``); then dataset, NAS name, stage, reason code and failure time; then the whole
    reason, every line, wrapped at the terminal's width::

        <key>  <state>
            dataset <d> · NAS <path> · stage <s> · reason <code> · failed <UTC> · attempt <n>
            <error, whole, wrapped>
    """
    out: list[Text | Padding] = []
    for e in entries:
        f = e.failed
        out.append(Text(f"{e.key}  {_state(e)}"))
        facts = (
            f"dataset {f.nas_dataset or '?'} · NAS {f.nas_path or '?'} · stage {f.stage} · "
            f"reason {f.reason} · failed {_when(e)} · attempt {f.attempt}"
            + (f" · {e.failures} failures" if e.failures > 1 else "")
        )
        out.append(Padding(Text(facts, overflow="fold"), (0, 0, 0, 4), expand=False))
        out.append(Padding(Text(f.error, overflow="fold"), (0, 0, 0, 4), expand=False))
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
        False,
        "--all",
        help="Also the entries closed since: loaded after their failure, superseded, dismissed.",
    ),
) -> None:
    """Every quarantined file with its dataset, NAS name, stage, reason code and whole reason;
    empty files are marked."""
    console = literal_console()
    read, settings, _codec = _load_or_exit(console)
    topic = settings.kafka.topic("failed")
    held = read.quarantined
    empty = sum(e.empty for e in held)
    title = f"quarantine {topic}: {len(held)} file(s) quarantined ({empty} of them empty)"
    closed = {s: sum(e.state == s for e in read.entries) for s in ("loaded", "superseded")}
    closed["dismissed"] = sum(e.state == "dismissed" for e in read.entries)
    parts = [
        f"{closed['loaded']} loaded since their failure" if closed["loaded"] else "",
        f"{closed['superseded']} superseded" if closed["superseded"] else "",
        f"{closed['dismissed']} dismissed" if closed["dismissed"] else "",
    ]
    if any(parts):
        title += "; " + ", ".join(p for p in parts if p) + ("" if all_ else " (--all)")
    console.print(title, soft_wrap=True)
    for block in quarantine_blocks(read.entries if all_ else held):
        console.print(block)
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
        ("dataset", f.nas_dataset or "?"),
        ("NAS path", f.nas_path or "?"),
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


@app.command("dismiss")
def dismiss_(
    keys: list[str] = _KEYS,
    note: str = typer.Option(..., "--note", help="Why nobody will fix it (kept and shown)."),
) -> None:
    """Close entries nobody will fix: kept on the failed topic, shown by `list --all` with the
    note, counted as dismissed; a later failure of the same file opens it again."""
    from ferry.ops.quarantine import dismiss

    console = literal_console()
    try:
        read, settings, codec = _load()
        done = dismiss(settings, codec, keys, note, read=read)
    except FerryError as exc:
        console.print(f"{exc}", style="red")
        raise typer.Exit(1) from exc
    for d in done:
        console.print(f"dismissed {d.key} by {d.by}: {d.note}")
    console.print(f"{len(done)} entr{'y' if len(done) == 1 else 'ies'} dismissed")
