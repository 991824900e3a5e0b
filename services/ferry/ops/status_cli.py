"""``ferry status [FILE_ID]`` (see :mod:`ferry.ops.status`)."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

import typer
from rich.table import Table
from rich.text import Text

from ferry.core.console import literal_console
from ferry.core.errors import FerryError

#: How ``ferry.cli`` mounts :func:`status` (a command, not a group: no phantom ``COMMAND``).
COMMAND_SETTINGS: dict[str, object] = {}


def _ts(ms: int | None) -> str:
    if ms is None:
        return ""
    return datetime.fromtimestamp(ms / 1000, UTC).strftime("%Y-%m-%d %H:%M:%S.%f")[:-3]


def _file_table(d: dict[str, Any]) -> Table:
    t = Table(
        title=f"file {d['file_id']} ({d.get('dataset') or '?'}): {d.get('state')}"
        + (" — STUCK" if d.get("stuck") else "")
    )
    for col in ("step", "first seen (UTC)", "last seen (UTC)", "events"):
        t.add_column(col)
    for step, m in d.get("steps", {}).items():
        t.add_row(step, _ts(m["first_ms"]), _ts(m["last_ms"]), str(m["events"]))
    return t


def _reasons_table(reasons: dict[str, int]) -> Table:
    """Rejected rows per reason code, most frequent first (text shown literally)."""
    t = Table(title="rejected rows by reason")
    t.add_column("reason", overflow="fold")
    t.add_column("rows", justify="right")
    for code, n in sorted(reasons.items(), key=lambda kv: (-kv[1], kv[0])):
        t.add_row(Text(code), str(n))
    return t


def status(
    file_id: str | None = typer.Argument(None, help="Show one file's timeline instead."),
) -> None:
    """Files per state, consumer lag per stage group, stuck and quarantined files."""
    from ferry.core.avro import default_codec
    from ferry.core.config import get_settings
    from ferry.ops.status import collect_status, file_status

    console = literal_console()
    settings = get_settings()
    codec = default_codec(settings.paths.schemas_dir)
    try:
        if file_id is not None:
            d = file_status(settings, codec, file_id)
            if d is None:
                console.print(
                    f"no event of file {file_id} on {settings.kafka.topic_prefix}.*", style="red"
                )
                raise typer.Exit(1)
            console.print(_file_table(d))
            rows = d.get("rows") or {}
            console.print(
                f"rows: {rows}   attempts: {d.get('attempts')}   table: {d.get('table')}   "
                f"definition version: {d.get('definition_version') or '-'}"
            )
            reasons = d.get("reject_reasons") or {}
            if reasons:
                console.print(_reasons_table(reasons))
            if d.get("failure"):
                f = d["failure"]
                if d.get("state") == "failed":
                    console.print(
                        f"last failure: {f['stage']} {f['reason']}: {f['error']}",
                        style="red",
                        soft_wrap=True,
                    )
                else:  # the file went on after it (released, replayed): a one-line reminder
                    first_line = (f["error"].splitlines() or [""])[0][:160]
                    console.print(
                        f"earlier failure, since overcome: {f['stage']} {f['reason']} at "
                        f"{_ts(f.get('at_ms'))}: {first_line}",
                        soft_wrap=True,
                    )
            return
        rep = collect_status(settings, codec)
    except FerryError as exc:
        console.print(f"{exc}", style="red")
        raise typer.Exit(1) from exc

    console.print(f"file states from the {rep.source}", soft_wrap=True)
    states = Table(title="files by state")
    states.add_column("state")
    states.add_column("files", justify="right")
    for s, n in rep.states.items():
        states.add_row(s, str(n))
    console.print(states)

    lag = Table(title="consumer lag")
    for col in ("group", "topic", "partition", "committed", "high", "lag"):
        lag.add_column(
            col, justify="right" if col in ("partition", "committed", "high", "lag") else "left"
        )
    for pl in rep.lag:
        lag.add_row(
            pl.group,
            pl.topic,
            str(pl.partition),
            "none" if pl.committed is None else str(pl.committed),
            str(pl.high),
            str(pl.lag),
        )
    console.print(lag)

    for title, files in (("stuck files", rep.stuck), ("quarantined files", rep.quarantined)):
        t = Table(title=f"{title}: {len(files)}")
        for col in ("file id", "dataset", "state", "waiting in", "since (UTC)", "failure"):
            t.add_column(col, overflow="fold")
        for d in files[:50]:
            state = d.get("state")
            since = d.get("steps", {}).get(state, {}).get("last_ms") if state else None
            f = d.get("failure") or {}
            t.add_row(
                d["file_id"],
                d.get("dataset") or "",
                state or "",
                d.get("waiting_in") or "",
                _ts(since),
                f"{f.get('stage', '')} {f.get('reason', '')}".strip(),
            )
        console.print(t)
    if rep.bad_records:
        console.print(f"{rep.bad_records} undecodable record(s) on the topics", style="yellow")
