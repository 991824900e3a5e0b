"""``ferry status [FILE_ID | NAS_NAME]`` (see :mod:`ferry.ops.status`)."""

from __future__ import annotations

import os
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any

import typer
from rich.table import Table
from rich.text import Text

from ferry.core.timeline import closed_text
from ferry.errors import FerryError
from ferry.ops.console import literal_console

if TYPE_CHECKING:
    from ferry.settings import Settings

#: How ``ferry.cli`` mounts :func:`status` (a command, not a group: no phantom ``COMMAND``).
COMMAND_SETTINGS: dict[str, object] = {}

#: The rows the ``failed`` state is shown as, by quarantine state (the tracker's
#: :data:`~ferry.tracker.state.QUARANTINE_STATES`): open ones are held, the others are not.
_FAILED_ROWS = {
    "open": "failed, in quarantine",
    "superseded": "failed, superseded (loaded since)",
    "dismissed": "failed, dismissed",
}


def _ts(ms: int | None) -> str:
    if ms is None:
        return ""
    return datetime.fromtimestamp(ms / 1000, UTC).strftime("%Y-%m-%d %H:%M:%S.%f")[:-3]


def _file_table(d: dict[str, Any]) -> Table:
    waiting = d.get("waiting")
    t = Table(
        title=f"file {d['file_id']} ({d.get('dataset') or '?'}): {d.get('state')}"
        + (f", waiting in {waiting['stage']} for its definition" if waiting else "")
        + (" — STUCK" if d.get("stuck") else "")
    )
    for col in ("step", "first seen (UTC)", "last seen (UTC)", "events"):
        t.add_column(col)
    for step, m in d.get("steps", {}).items():
        t.add_row(step, _ts(m["first_ms"]), _ts(m["last_ms"]), str(m["events"]))
    return t


def _waiting_table(settings: Settings, waiting: list[dict[str, Any]]) -> Table:
    """Files waiting for their definition per dataset and stage, with why
    (:func:`ferry.ops.status.why_waiting`)."""
    from ferry.ops.status import why_waiting

    t = Table(title=f"files waiting for a definition: {sum(w['files'] for w in waiting)}")
    for col in ("dataset", "stage", "files", "why"):
        t.add_column(col, overflow="fold", justify="right" if col == "files" else "left")
    for w in waiting:
        why = why_waiting(settings, w["dataset"], w["stage"])
        t.add_row(w["dataset"], w["stage"], str(w["files"]), Text(why))
    return t


def _reasons_table(reasons: dict[str, int]) -> Table:
    """Rejected rows per reason code, most frequent first (text shown literally)."""
    t = Table(title="rejected rows by reason")
    t.add_column("reason", overflow="fold")
    t.add_column("rows", justify="right")
    for code, n in sorted(reasons.items(), key=lambda kv: (-kv[1], kv[0])):
        t.add_row(Text(code), str(n))
    return t


def _matches_table(title: str, files: list[dict[str, Any]]) -> Table:
    """Files found by NAS name: id, dataset, NAS path, state and since when (UTC)."""
    t = Table(title=title)
    for col in ("file id", "dataset", "NAS file", "state", "since (UTC)", "quarantine"):
        t.add_column(col, overflow="fold")
    for d in files:
        state = d.get("state")
        since = d.get("steps", {}).get(state, {}).get("last_ms") if state else None
        q = d.get("quarantine") or {}
        t.add_row(
            d["file_id"],
            d.get("dataset") or "",
            d.get("source_path") or "",
            state or "",
            _ts(since),
            closed_text((q.get("state", ""), q.get("detail"))),
        )
    return t


def _resolve(settings: Any, codec: Any, ref: str, console: Any) -> dict[str, Any] | None:
    """The file ``ref`` names: a file id (or a failure's key), else a NAS name, exact or a
    prefix. Prints the matches and returns None when a prefix names several NAS files; prints
    the other versions when one NAS name has several files (the newest is returned)."""
    from ferry.ops.status import file_status, files_by_name

    d = file_status(settings, codec, ref)
    if d is not None:
        return d
    found = files_by_name(settings, codec, ref)
    if not found:
        console.print(
            f"no file with id or NAS name {ref} on {settings.kafka.topic_prefix}.*", style="red"
        )
        raise typer.Exit(1)
    names = {f.get("source_path") for f in found}
    if len(names) > 1:
        console.print(
            _matches_table(f"{len(found)} file(s) whose NAS name starts with {ref}", found)
        )
        console.print("show one with: ferry status FILE_ID (or its whole NAS name)")
        return None
    if len(found) > 1:
        console.print(
            _matches_table(f"{len(found)} versions of {found[0].get('source_path')}", found)
        )
        console.print("the newest:", soft_wrap=True)
    return found[0]


def _print_conditions(console: Any, settings: Settings) -> None:
    """The cluster conditions holding files now (case C22), by the stage instances of this host
    (:func:`ferry.core.runtime.conditions.read_conditions`); nothing when none holds."""
    from ferry.core.runtime.conditions import read_conditions

    held = read_conditions(settings)
    if not held:
        return
    t = Table(title=f"held by a cluster condition (not quarantined): {len(held)}")
    for col in ("stage", "pid", "reason", "where", "since (UTC)", "files"):
        t.add_column(col, no_wrap=col != "where", overflow="fold")
    for h in held:
        t.add_row(h.service, str(h.pid), h.reason, h.place, _ts(int(h.since * 1000)), str(h.files))
    console.print(t, style="yellow")
    for h in held:
        console.print(f"{h.service} ({h.pid}): {h.message}", style="yellow", soft_wrap=True)


def settings_line(settings: Settings) -> str:
    """Which settings a command used: the ``FERRY_CONFIG`` file (or none), ``FERRY_PROFILE``,
    the topic prefix and ``var_dir`` — an edge node with several installs, or a shell without
    the service's environment, shows here first."""
    config = os.environ.get("FERRY_CONFIG") or "none (defaults and FERRY_* variables)"
    profile = os.environ.get("FERRY_PROFILE") or "-"
    return (
        f"settings: FERRY_CONFIG {config}; profile {profile}; topic prefix "
        f"{settings.kafka.topic_prefix}; var_dir {settings.var_dir}"
    )


def status(
    ref: str | None = typer.Argument(
        None,
        metavar="[FILE_ID|NAS_NAME]",
        help="Show one file's timeline instead: its file id, or its NAS name "
        "(e.g. flights/flights_2013-01-01.csv; a prefix of the path or of the file name).",
    ),
) -> None:
    """Files per state, consumer lag per stage group, stuck and quarantined files."""
    from ferry.core.wire.avro import default_codec
    from ferry.ops.status import collect_status
    from ferry.settings import get_settings

    console = literal_console()
    settings = get_settings()
    codec = default_codec(settings.paths.schemas_dir)
    try:
        if ref is not None:
            d = _resolve(settings, codec, ref, console)
            if d is None:
                return
            console.print(f"NAS file: {d.get('source_path') or '?'}", soft_wrap=True)
            console.print(_file_table(d))
            if (waiting := d.get("waiting")) is not None:
                from ferry.ops.status import why_waiting

                why = why_waiting(settings, d.get("dataset") or "?", waiting["stage"])
                console.print(
                    f"waiting in {waiting['stage']} since {_ts(waiting.get('since_ms'))} (UTC): "
                    f"{why}",
                    style="yellow",
                    soft_wrap=True,
                )
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
                q = d.get("quarantine") or {}
                if d.get("state") == "failed" and q.get("state", "open") != "open":
                    console.print(
                        f"quarantine: {closed_text((q['state'], q.get('detail')))}; last "
                        f"failure: {f['stage']} {f['reason']}: {f['error']}",
                        soft_wrap=True,
                    )
                elif d.get("state") == "failed":
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

    console.print(settings_line(settings), soft_wrap=True)
    console.print(f"file states from the {rep.source}", soft_wrap=True)
    states = Table(title="files by state")
    states.add_column("state")
    states.add_column("files", justify="right")
    closures = rep.quarantine_counts()
    for s, n in rep.states.items():
        if s != "failed":
            states.add_row(s, str(n))
            continue
        # failed files as the quarantine table below lists them: only the open ones are held
        for closure, label in _FAILED_ROWS.items():
            if closure == "open" or closures.get(closure):
                states.add_row(label, str(closures.get(closure, 0)))
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
    if rep.waiting:
        console.print(_waiting_table(settings, rep.waiting))
    _print_conditions(console, settings)

    held = [
        d for d in rep.quarantined if (d.get("quarantine") or {}).get("state", "open") == "open"
    ]
    closed = len(rep.quarantined) - len(held)
    for title, files in (
        ("stuck files", rep.stuck),
        (
            "quarantined files" + (f" ({closed} more superseded or dismissed)" if closed else ""),
            held,
        ),
    ):
        t = Table(title=f"{title}: {len(files)}")
        for col in (
            "file id",
            "dataset",
            "NAS file",
            "state",
            "waiting in",
            "since (UTC)",
            "failure",
        ):
            t.add_column(col, overflow="fold")
        for d in files[:50]:
            state = d.get("state")
            since = d.get("steps", {}).get(state, {}).get("last_ms") if state else None
            f = d.get("failure") or {}
            t.add_row(
                d["file_id"],
                d.get("dataset") or "",
                d.get("source_path") or "",
                state or "",
                d.get("waiting_in") or "",
                _ts(since),
                f"{f.get('stage', '')} {f.get('reason', '')}".strip(),
            )
        console.print(t)
    if rep.bad_records:
        console.print(f"{rep.bad_records} undecodable record(s) on the topics", style="yellow")
