"""``ferry sql ["<query>"]``: HiveQL on HiveServer2, as an analyst runs it.

With a query, Ferry runs it (:func:`ferry.clusters.hiveserver2.query`) and prints the result in
``--format``: ``table`` (a grid), ``csv2`` / ``tsv2`` (RFC 4180 CSV / tab-separated values with a
header line and nothing else: fields holding the separator, a quote or a line break are quoted,
NULL is an empty field) or ``json`` (one object per row). Without a query it opens Hive's
``beeline`` shell on the same server. Exit status 1 with one line on stderr when the server is
unreachable or refuses the query.
"""

from __future__ import annotations

import csv
import json
import os
import sys
from typing import TextIO

import typer

#: How ``ferry.cli`` mounts :func:`sql` (a command, not a group).
COMMAND_SETTINGS: dict[str, object] = {}

#: ``--format`` values: the names beeline uses for the same outputs.
FORMATS = ("table", "csv2", "tsv2", "json")


def write_result(result: object, fmt: str, out: TextIO) -> None:
    """Print one :class:`ferry.clusters.hiveserver2.Result` to ``out`` in ``fmt``
    (:data:`FORMATS`)."""
    from ferry.clusters.hiveserver2 import Result

    assert isinstance(result, Result)
    names = [c.name for c in result.columns]
    if fmt in ("csv2", "tsv2"):
        writer = csv.writer(
            out,
            delimiter="," if fmt == "csv2" else "\t",
            lineterminator="\n",
            quoting=csv.QUOTE_MINIMAL,
        )
        writer.writerow(names)
        writer.writerows(["" if v is None else v for v in row] for row in result.rows)
    elif fmt == "json":
        for row in result.rows:
            out.write(json.dumps(dict(zip(names, row, strict=True)), ensure_ascii=False) + "\n")
    else:
        from rich.table import Table

        from ferry.ops.console import literal_console

        table = Table(*names)
        for row in result.rows:
            table.add_row(*["NULL" if v is None else v for v in row])
        literal_console(file=out).print(table)


def sql(
    query: str | None = typer.Argument(None, help="HiveQL to run; none opens the beeline shell."),
    database: str = typer.Option("default", "--database", "-d", help="Database to connect to."),
    output: str = typer.Option(
        "table", "--format", help=f"Output of a query: {', '.join(FORMATS)}."
    ),
) -> None:
    """Run QUERY (or open beeline) on HiveServer2, as an analyst would."""
    from ferry.clusters.hiveserver2 import beeline_argv
    from ferry.clusters.hiveserver2 import query as run_query
    from ferry.settings import get_settings

    settings = get_settings()
    if query is None:
        if settings.hiveserver2.principal:  # beeline's JVM reads the ticket cache
            from ferry.clusters.kerberos import ticket_cache

            ticket_cache(settings.kerberos)
        argv = beeline_argv(settings, f"--outputformat={output}", database=database)
        os.execvp(argv[0], argv)  # beeline owns the terminal (and the exit status) from here
    if output not in FORMATS:
        raise typer.BadParameter(
            f"{output!r}: choose one of {', '.join(FORMATS)}", param_hint="--format"
        )
    for result in run_query(settings, query, database=database):
        write_result(result, output, sys.stdout)
