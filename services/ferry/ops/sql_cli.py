"""``ferry sql ["<query>"]``: HiveQL on HiveServer2, as an analyst runs it.

With a query, Ferry runs it (:func:`ferry.clusters.hiveserver2.query`) and prints the result in
``--format``: ``table`` (a grid), ``csv2`` / ``tsv2`` (CSV / tab-separated values quoted as RFC 4180
says, with a header line and nothing else: fields holding the separator, a quote or a line break
are quoted, NULL is an empty field) or ``json`` (one object per row). ``--line-end`` ends each
csv2/tsv2 line with ``lf`` (the default: what beeline's csv2 and Unix tools write and read) or
``crlf`` (RFC 4180 section 2, rule 1: what a strict RFC 4180 reader expects); a line break inside
a quoted field is printed as the value holds it. Without a query it opens Hive's
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

#: ``--line-end`` values of csv2/tsv2 → the characters ending a line (the first is the default).
LINE_ENDS = {"lf": "\n", "crlf": "\r\n"}


def write_result(result: object, fmt: str, out: TextIO, line_end: str = "\n") -> None:
    """Print one :class:`ferry.clusters.hiveserver2.Result` to ``out`` in ``fmt``
    (:data:`FORMATS`); ``line_end`` ends each csv2/tsv2 line (a value of :data:`LINE_ENDS`)."""
    from ferry.clusters.hiveserver2 import Result

    assert isinstance(result, Result)
    names = [c.name for c in result.columns]
    if fmt in ("csv2", "tsv2"):
        writer = csv.writer(
            out,
            delimiter="," if fmt == "csv2" else "\t",
            lineterminator=line_end,
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
    line_end: str = typer.Option(
        "lf",
        "--line-end",
        help="Line end of csv2 and tsv2: lf (Unix, beeline's) or crlf (RFC 4180's).",
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
    if line_end not in LINE_ENDS:
        raise typer.BadParameter(
            f"{line_end!r}: choose one of {', '.join(LINE_ENDS)}", param_hint="--line-end"
        )
    for result in run_query(settings, query, database=database):
        write_result(result, output, sys.stdout, LINE_ENDS[line_end])
