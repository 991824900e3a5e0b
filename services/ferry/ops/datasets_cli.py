"""``ferry datasets list | check | reference``: the dataset definitions, seen and checked.

``check`` is :mod:`ferry.ops.datasets_check` with a local Spark session (``local[1]``, no cluster
needed) that also reaches the Hive metastore when it answers; ``list`` reads the definitions
directory and what the services running on this host say they do not run (a derived expression
that does not compile is found by transform's Spark analyzer: no Spark, no server here;
:func:`ferry.core.runtime.heartbeat.not_run_anywhere`); ``reference`` prints or rewrites the
YAML reference of docs/datasets.md (:mod:`ferry.datasets.reference`).
"""

from __future__ import annotations

import fnmatch
import os
import socket
from pathlib import Path
from typing import Any

import typer
from rich.table import Table
from rich.text import Text

from ferry.ops.console import literal_console

app = typer.Typer(no_args_is_help=True)
console = literal_console(160)

_DIR = typer.Option(
    None, "--dir", help="Definitions directory (default: settings.paths.datasets_dir)."
)
_PATHS = typer.Argument(
    None, help="Definition files or directories (default: settings.paths.datasets_dir)."
)
_WRITE = typer.Option(
    None, "--write", help="Rewrite the reference table in this file (docs/datasets.md)."
)


def _settings() -> Any:
    from ferry.settings import get_settings

    return get_settings()


def _nas_waiting(nas_dir: Path, subdir: str | None, pattern: str | None) -> int:
    """Visible files of a dataset's NAS directory matching its pattern (not taken yet)."""
    if subdir is None:
        return 0
    try:
        names = os.listdir(nas_dir / subdir)
    except OSError:
        return 0
    return sum(
        1
        for n in names
        if not n.startswith(".") and (pattern is None or fnmatch.fnmatchcase(n, pattern))
    )


@app.command("list")
def list_(
    directory: Path | None = _DIR,
) -> None:
    """Each dataset: definition file, NAS directory and pattern, Hive table, version, state
    (valid; invalid; or not run by a service running here, e.g. transform when an expression
    does not compile) and the files waiting in its NAS directory. Exit 1 unless all are valid."""
    from ferry.core.runtime.heartbeat import not_run_anywhere
    from ferry.datasets.registry import load_definitions

    settings = _settings()
    defs = load_definitions(directory or settings.paths.datasets_dir)
    refused = not_run_anywhere(settings)
    if not defs.entries:
        console.print(f"no dataset definitions in {defs.directory}")
        raise typer.Exit(1)
    t = Table(title=f"datasets in {defs.directory}")
    for col in ("dataset", "file", "NAS directory", "table", "version", "state", "on NAS"):
        t.add_column(col, overflow="fold")
    for d in defs.entries:
        spec = d.spec
        pattern = spec.nas.pattern if spec else None
        nas = f"{settings.paths.nas_dir / d.subdir}/{pattern or ''}" if d.subdir else "?"
        if not d.valid:
            state = Text("invalid (below)", "red")
        elif d.name in refused:
            state = Text("not run (below)", "red")
        else:
            state = Text("valid", style="green")
        t.add_row(
            d.name,
            d.path.name,
            nas,
            d.table or "?",
            d.version or "-",
            state,
            str(_nas_waiting(settings.paths.nas_dir, d.subdir, pattern)),
        )
    console.print(t)
    for d in defs.invalid:
        console.print(
            Text(f"dataset {d.name} ({d.path.name}) is invalid: {d.error}", "red"), soft_wrap=True
        )
    not_run = [d for d in defs.entries if d.valid and d.name in refused]
    for d in not_run:
        for service, why in sorted(refused[d.name].items()):
            console.print(
                Text(f"dataset {d.name} ({d.path.name}) is not run by {service}: {why}", "red"),
                soft_wrap=True,
            )
    if defs.invalid or not_run:
        console.print("their files wait until fixed (check one with: ferry datasets check FILE)")
        raise typer.Exit(1)


def _metastore_answers(host: str, port: int, timeout_s: float = 3.0) -> bool:
    try:
        with socket.create_connection((host, port), timeout=timeout_s):
            return True
    except OSError:
        return False


@app.command("check")
def check(
    paths: list[Path] = _PATHS,
    spark: bool = typer.Option(
        True, help="Compile expressions and rules with Spark's analyzer (local Spark)."
    ),
    hive: bool = typer.Option(
        True, help="Compare with the existing Hive tables when the metastore answers."
    ),
    master: str = typer.Option("local[1]", help="Spark master of the check's session."),
) -> None:
    """Validate definitions (YAML, rules, Spark analysis, existing Hive table); exit 1 on any
    problem. Each problem names the dataset and the field."""
    from ferry.ops.datasets_check import check as run

    settings = _settings()
    targets = paths or [settings.paths.datasets_dir]
    session = None
    compare = False
    if spark:
        from ferry.clusters.spark import build_session

        m = settings.metastore
        compare = hive and _metastore_answers(m.host, m.port)
        if hive and not compare:
            console.print(f"Hive tables not compared: no metastore answers at {m.uri}")
        session = build_session(settings, "ferry-datasets-check", "a", hive=compare, master=master)
    results = run(targets, session, compare)
    for c in results:
        mark = Text("ok  ", "green") if c.ok else Text("FAIL", "red")
        line = Text.assemble(mark, f" {c.name}  {c.path}")
        if c.version:
            line.append(f"  version {c.version}")
        console.print(line)
        for p in c.problems:
            console.print(Text(f"    dataset {c.name!r}: {p}", "red"), soft_wrap=True)
        for n in c.notes:
            console.print(f"    {n}", soft_wrap=True)
    bad = sum(not c.ok for c in results)
    console.print(f"{len(results)} definition(s) checked, {bad} refused")
    if bad or not results:
        raise typer.Exit(1)


@app.command("reference")
def reference(
    write: Path | None = _WRITE,
) -> None:
    """Print the reference of the dataset YAML (every key: type, default, description,
    example), generated from the model; --write puts it into docs/datasets.md."""
    from ferry.datasets import reference as ref

    if write is None:
        typer.echo(ref.markdown(), nl=False)
        return
    changed = ref.write(write)
    typer.echo(f"{write}: {'updated' if changed else 'already up to date'}")
