"""``ferry sql ["<query>"]``: Hive's beeline shell against the stack's HiveServer2 (JDBC).

With a query, beeline runs it and exits with its status; without one, it opens the interactive
shell. ``--format`` picks beeline's output format (``table``, ``csv2``, ``tsv2``, ``json``, …).
"""

from __future__ import annotations

import os

import typer

#: How ``ferry.cli`` mounts :func:`sql` (a command, not a group).
COMMAND_SETTINGS: dict[str, object] = {}


def sql(
    query: str | None = typer.Argument(None, help="HiveQL to run; none opens the beeline shell."),
    database: str = typer.Option("default", "--database", "-d", help="Database to connect to."),
    output: str = typer.Option("table", "--format", help="beeline --outputformat."),
) -> None:
    """Run QUERY (or open beeline) on HiveServer2 over JDBC, as an analyst would."""
    from ferry.clusters.hiveserver2 import beeline_argv
    from ferry.settings import get_settings

    args = [f"--outputformat={output}", "--silent=true", "--showHeader=true"]
    if query is not None:
        args += ["-e", query]
    argv = beeline_argv(get_settings(), *args, database=database)
    os.execvp(argv[0], argv)  # beeline owns the terminal (and the exit status) from here
