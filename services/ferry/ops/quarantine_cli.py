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
    from ferry.ops.bulk import BulkItem, Selection
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


def _instant(text: str | None, option: str) -> datetime | None:
    """``text`` (ISO 8601; UTC when it names no zone) as an aware datetime; exit 2 if invalid."""
    if text is None:
        return None
    try:
        at = datetime.fromisoformat(text)
    except ValueError as exc:
        raise typer.BadParameter(f"{text!r} is not an ISO 8601 time", param_hint=option) from exc
    return at if at.tzinfo is not None else at.replace(tzinfo=UTC)


_RELEASE_IDS = typer.Argument(None, help="File id(s) to release; or choose them with the filters.")
_REASONS = typer.Option([], "--reason", help="Reason code (repeatable), e.g. hdfs_rejected.")
_STAGES = typer.Option([], "--stage", help="Stage that gave up (repeatable).")
_DATASETS = typer.Option([], "--dataset", help="Dataset (repeatable).")
_SINCE = typer.Option(None, "--since", help="Failed at or after (ISO 8601, UTC by default).")
_UNTIL = typer.Option(None, "--until", help="Failed before (ISO 8601, UTC by default).")


@app.command("release")
def release_(
    file_ids: list[str] | None = _RELEASE_IDS,
    force: bool = typer.Option(
        False, "--force", help="Also re-produce raw bytes of undecodable records to their topic."
    ),
    reasons: list[str] = _REASONS,
    stages: list[str] = _STAGES,
    datasets: list[str] = _DATASETS,
    since: str | None = _SINCE,
    until: str | None = _UNTIL,
    dry_run: bool = typer.Option(
        False, "--dry-run", help="With the filters: list what would move, move nothing."
    ),
) -> None:
    """Re-emit each file's input event to its stage's input topic (nothing is sent if any fails);
    or, with --reason/--stage/--dataset/--since/--until, every open entry they match, extract's
    NAS files moved back from .ferry/failed/ (a table says what moved and what did not, and why)."""
    from ferry.ops.bulk import Selection, close_raw
    from ferry.ops.quarantine import release

    console = literal_console()
    sel = Selection(
        tuple(reasons),
        tuple(stages),
        tuple(datasets),
        _instant(since, "--since"),
        _instant(until, "--until"),
    )
    if file_ids and not sel.empty:
        raise typer.BadParameter("give file ids or filters, not both")
    if not file_ids:
        if sel.empty:
            raise typer.BadParameter("give file ids, or at least one filter (--reason, --stage, …)")
        _release_bulk(console, sel, force, dry_run)
        return
    if dry_run:
        raise typer.BadParameter("--dry-run goes with the filters")
    try:
        read, settings, codec = _load()
        done = release(settings, codec, file_ids, force=force, read=read)
        close_raw(settings, codec, done, read)
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


def _release_bulk(console: Console, sel: Selection, force: bool, dry_run: bool) -> None:
    """The bulk release of :func:`release_`: plan, print the table, carry out unless ``dry_run``.
    Exit status 1 when an entry was skipped or a move did not happen."""
    from ferry.ops.bulk import plan_bulk, run_bulk, select

    try:
        read, settings, codec = _load()
        items = plan_bulk(select(read, sel), settings, codec, force)
        if not dry_run:
            items = run_bulk(items, settings, codec)
    except (FerryError, OSError) as exc:
        console.print(f"{exc}", style="red")
        raise typer.Exit(1) from exc
    console.print(bulk_table(items, dry_run))
    moved = sum(i.outcome in ("done", "would") for i in items)
    verb = "would be released" if dry_run else "released"
    console.print(
        f"{moved} of {len(items)} selected entr{'y' if len(items) == 1 else 'ies'} {verb}"
    )
    if moved < len(items):
        raise typer.Exit(1)


def bulk_table(items: Sequence[BulkItem], dry_run: bool) -> Table:
    """One row per selected entry: key, stage, reason, dataset, failure time (UTC), what
    (re-emit to a topic, move back to a NAS path) and its outcome (``would``, ``done``, or why
    not)."""
    table = Table(title="quarantine release" + (" (dry run: nothing moved)" if dry_run else ""))
    for col in ("key", "stage", "reason", "dataset", "failed", "action", "to", "outcome"):
        table.add_column(col, overflow="fold")
    for i in items:
        f = i.entry.failed
        to = i.release.record.topic if i.release is not None else str(i.dest or "")
        table.add_row(
            i.entry.key,
            f.stage,
            f.reason,
            f.nas_dataset or "?",
            _when(i.entry),
            i.action,
            to,
            i.outcome,
        )
    return table


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
