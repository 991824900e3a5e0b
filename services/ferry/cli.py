"""The ``ferry`` command.

Each area owns a typer sub-application (or one command) in its own module, listed in the tables
below. An area's module is imported only when its command runs (or completes): ``ferry --help``
lists the areas from the tables' help texts without importing them, and nothing connects at import
time.
"""

from __future__ import annotations

import functools
import importlib
import os
from typing import Any

import typer
from typer.core import TyperCommand, TyperGroup

from ferry.core.services import SERVICES

#: The command tables: sub-applications ``(sub-command, module holding an app: typer.Typer,
#: help text)`` and single commands ``(command, module, function, help text)``, the latter mounted
#: with the module's ``COMMAND_SETTINGS`` (a sub-application would print a phantom
#: ``COMMAND [ARGS]`` in usage).
Areas = dict[str, list[tuple[str, ...]]]

#: The product's own commands: what an operator runs on an edge node.
AREAS: Areas = {
    "subapps": [
        (
            "schemas",
            "ferry.ops.schemas_cli",
            "Check Avro schema evolution; release a schema snapshot.",
        ),
        ("quarantine", "ferry.ops.quarantine_cli", "List, show and release quarantined files."),
        ("kafka", "ferry.ops.kafka_cli", "Create the topics; print or apply each service's ACLs."),
        (
            "datasets",
            "ferry.ops.datasets_cli",
            "List and check dataset definitions; print the YAML reference.",
        ),
    ],
    "commands": [
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
            "Run HiveQL on HiveServer2; no query opens Hive's beeline shell.",
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
        (
            "rejects",
            "ferry.ops.rejects_cli",
            "rejects",
            "Print a file's rejected rows: reason and raw record per row.",
        ),
    ],
}

#: Entry point group through which other installed packages add command tables of
#: :data:`Areas`' shape (the kit adds ``stack``, ``up``, ``down``, ``ps``, ``demo``).
PLUGIN_GROUP = "ferry.cli"


@functools.cache
def _tables() -> tuple[list[tuple[str, ...]], list[tuple[str, ...]]]:
    """Sub-applications and commands: the product's, then each plugin's (by entry point name)."""
    from importlib.metadata import entry_points

    subapps, commands = list(AREAS["subapps"]), list(AREAS["commands"])
    for ep in sorted(entry_points(group=PLUGIN_GROUP), key=lambda e: e.name):
        table: Areas = ep.load()
        subapps += table.get("subapps", [])
        commands += table.get("commands", [])
    return subapps, commands


@functools.cache
def _areas() -> TyperGroup:
    """Every area of the tables above, mounted on one group (imports their modules)."""
    areas = typer.Typer()
    subapps, commands = _tables()
    for name, module, help_text in subapps:
        areas.add_typer(importlib.import_module(module).app, name=name, help=help_text)
    for name, module, function, help_text in commands:
        mod = importlib.import_module(module)
        areas.command(name, help=help_text, **mod.COMMAND_SETTINGS)(getattr(mod, function))
    return typer.main.get_group(areas)


class _LazyAreas(TyperGroup):
    """The top-level group: the commands defined here, then the areas of the tables, imported on
    first use; while help is formatted, an area is a stub carrying its help text."""

    _listing = False

    @staticmethod
    def _help() -> dict[str, str]:
        subapps, commands = _tables()
        return {t[0]: t[-1] for t in subapps} | {t[0]: t[-1] for t in commands}

    # ctx, formatter and the returned commands are typer's own (vendored) click types: Any here.

    def list_commands(self, ctx: Any) -> list[str]:
        """Single commands first, then sub-applications (typer's order when all were mounted)."""
        subapps, commands = _tables()
        return [
            *(name for name, *_ in commands),
            *super().list_commands(ctx),
            *(name for name, *_ in subapps),
        ]

    def get_command(self, ctx: Any, cmd_name: str) -> Any:
        helps = self._help()
        if cmd_name in self.commands or cmd_name not in helps:
            return super().get_command(ctx, cmd_name)
        if self._listing:
            return TyperCommand(cmd_name, help=helps[cmd_name])
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
            "Settings profile(s), comma-separated: YAML overlays found in FERRY_PROFILES_DIR or "
            "registered by an installed package (the development kit's: ha, kerberos, "
            "secure-kafka, secure); exported as FERRY_PROFILE to the services started."
        ),
        show_default=False,
    ),
) -> None:
    """Ferry: NAS → HDFS B → Spark → HDFS A → Hive, over Kafka."""
    if profile:
        from ferry.settings import use_profile

        use_profile(profile)


@app.command("run")
def _run(
    service: str = typer.Argument(..., help=" | ".join(s.name for s in SERVICES)),
) -> None:
    """Run one Ferry service in the foreground until SIGTERM/SIGINT."""
    from ferry.core.services import run
    from ferry.core.services import service as registered
    from ferry.settings import get_settings

    # the service's own Kafka user (kafka.service_users), docs/security.md "Kafka ACLs"
    os.environ["FERRY_KAFKA__SERVICE"] = registered(service).name
    get_settings.cache_clear()
    run(service)


def main() -> None:
    """Console entry point: run the CLI; a Ferry error (bad settings, unknown service, a server
    that does not answer, …) prints its one-line message and exits 1 instead of a traceback.
    Set ``FERRY_DEBUG=1`` to see the traceback."""
    import os
    import sys

    from ferry.errors import FerryError

    try:
        app()
    except FerryError as exc:
        if os.environ.get("FERRY_DEBUG") == "1":
            raise
        print(f"ferry: {type(exc).__name__}: {exc}", file=sys.stderr)
        raise SystemExit(1) from None


if __name__ == "__main__":
    main()
