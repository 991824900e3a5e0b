"""``ferry replay STAGE``: re-emit given files' input events while the stage runs
(:mod:`ferry.ops.reemit`), or move the stage's consumer-group offsets (:mod:`ferry.ops.replay`)."""

from __future__ import annotations

from datetime import datetime

import typer
from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn
from rich.table import Table

from ferry.errors import FerryError
from ferry.ops.console import literal_console
from ferry.ops.replay import ReplayPlan, Target

#: How ``ferry.cli`` mounts :func:`replay` (a command, not a group: no phantom ``COMMAND``).
COMMAND_SETTINGS: dict[str, object] = {
    "no_args_is_help": True,
    "context_settings": {"allow_interspersed_args": True},
}

_TIMESTAMP_OPTION = typer.Option(
    None,
    "--to-timestamp",
    formats=["%Y-%m-%dT%H:%M:%S%z", "%Y-%m-%dT%H:%M:%S.%f%z"],
    help="First event at/after this time, ISO 8601 with zone (2024-03-01T08:00:00+00:00).",
)
_FILE_OPTION = typer.Option(
    [], "--file", help="A file id to replay (repeatable): its input event is produced again."
)
_MOVE_OPTION = typer.Option(
    False,
    "--move-offsets",
    help="With --file: move the group's offsets to the files' earliest events instead "
    "(needs the stage stopped).",
)
_PARTITION_OPTION = typer.Option([], "--partition", help="Limit to partition(s).")


def plan_table(plan: ReplayPlan) -> Table:
    """The dry-run table: partition, current offset, new offset, end, events replayed/pending."""
    table = Table(title=f"replay {plan.stage}: group {plan.group} on {plan.topic} → {plan.target}")
    for col in ("partition", "current", "new", "end (high)", "re-read", "to process", "files"):
        table.add_column(col, justify="left" if col == "files" else "right")
    for m in plan.moves:
        table.add_row(
            str(m.partition),
            "none" if m.current is None else str(m.current),
            str(m.new) + ("" if m.changes else " (same)"),
            str(m.high),
            str(m.replayed),
            str(m.pending),
            ", ".join(m.files),
        )
    return table


def replay(
    stage: str = typer.Argument(..., help="Stage whose group moves: transform, transfer or load."),
    to_offset: int | None = typer.Option(
        None, "--to-offset", min=0, help="Offset (clamped per partition)."
    ),
    to_timestamp: datetime | None = _TIMESTAMP_OPTION,
    file_ids: list[str] = _FILE_OPTION,
    move_offsets: bool = _MOVE_OPTION,
    earliest: bool = typer.Option(False, "--to-earliest", help="The oldest retained event."),
    latest: bool = typer.Option(False, "--to-latest", help="The end: skip everything unread."),
    partitions: list[int] = _PARTITION_OPTION,
    dry_run: bool = typer.Option(False, "--dry-run", help="Show the moves; change nothing."),
    wait: bool = typer.Option(False, "--wait", help="After moving, show the replay draining."),
    timeout_s: float = typer.Option(600.0, "--timeout", help="Longest --wait, s."),
) -> None:
    """Replay STAGE's input: re-emit the events of given files (the stage may run), or move
    STAGE's consumer group to an offset, a time, or (``--move-offsets``) the files' events.

    Moving offsets refuses while the group has active members. Exit 1 on any error, and when
    none of the ``--file`` ids has an event on the input topic (``--dry-run`` included).
    """
    from ferry.core.kafka.clients import build_admin
    from ferry.core.wire.avro import default_codec
    from ferry.ops.replay import apply_plan, build_plan, wait_drained
    from ferry.settings import get_settings

    console = literal_console()
    if file_ids and not move_offsets:
        _reemit(console, stage, file_ids, dry_run)
        return
    try:
        target = Target(
            offset=to_offset,
            timestamp=to_timestamp,
            files=tuple(file_ids),
            earliest=earliest,
            latest=latest,
            partitions=tuple(partitions),
        )
    except ValueError as exc:
        console.print(f"{exc}", style="red")
        raise typer.Exit(2) from exc
    settings = get_settings()
    admin = build_admin(settings.kafka)
    try:
        plan = build_plan(admin, settings, stage, target, default_codec(settings.paths.schemas_dir))
        console.print(plan_table(plan))
        for fid in plan.missing:
            console.print(
                f"file {fid} has no event on {plan.topic}; nothing to replay", style="yellow"
            )
        for note in plan.notes:
            console.print(f"{note}", style="yellow")
        if target.files and len(plan.missing) == len(target.files):
            raise typer.Exit(1)  # none of the files has an event: a mistyped id, say so by status
        if dry_run:
            console.print(f"dry run: {len(plan.changed)} partition(s) would move; nothing changed")
            return
        applied = apply_plan(admin, settings, plan)
        console.print(
            f"moved {len(applied)} partition(s) of group {plan.group}; "
            f"{sum(m.pending for m in plan.moves)} event(s) to process"
        )
        if wait:
            with Progress(
                TextColumn(f"replay {plan.stage}"),
                BarColumn(),
                MofNCompleteColumn(),
                TimeElapsedColumn(),
                console=console,
            ) as progress:
                task = progress.add_task("drain", total=sum(m.pending for m in plan.moves))
                wait_drained(
                    admin,
                    settings,
                    plan,
                    timeout_s,
                    lambda done, total: progress.update(task, completed=done, total=total),
                )
            console.print("replay drained")
    except FerryError as exc:
        console.print(f"{exc}", style="red")
        raise typer.Exit(1) from exc


def _reemit(console: Console, stage: str, file_ids: list[str], dry_run: bool) -> None:
    """``ferry replay STAGE --file ID…`` without ``--move-offsets``: produce the files' latest
    input events again; the running stage picks them up."""
    from ferry.core.kafka.clients import build_producer
    from ferry.core.wire.avro import default_codec
    from ferry.ops.reemit import find_latest_events, reemit
    from ferry.settings import get_settings

    settings = get_settings()
    codec = default_codec(settings.paths.schemas_dir)
    try:
        plan = find_latest_events(settings, stage, file_ids, codec)
        for f in plan.found:
            console.print(f"{f.file_id}: {type(f.event).__name__} at {f.where}", markup=False)
        for fid in plan.missing:
            console.print(
                f"file {fid} has no event on {plan.topic}; nothing to replay",
                style="yellow",
                markup=False,
            )
        if not plan.found:
            raise typer.Exit(1)  # none of the files has an event: a mistyped id, say so by status
        if dry_run:
            console.print(f"dry run: {len(plan.found)} event(s) would be produced to {plan.topic}")
            return
        n = reemit(build_producer(settings.kafka, "ferry-replay"), settings, codec, plan)
        console.print(f"produced {n} event(s) to {plan.topic}; stage {stage} replays them")
    except FerryError as exc:
        console.print(str(exc), style="red", markup=False)
        raise typer.Exit(1) from exc
