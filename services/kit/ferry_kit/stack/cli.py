"""``ferry stack up | down | status``."""

from __future__ import annotations

import time
from pathlib import Path

import typer
from rich.table import Table
from rich.text import Text

from ferry.errors import ConfigError
from ferry.ops.console import literal_console
from ferry.settings import use_profile
from ferry_kit.errors import StackError
from ferry_kit.settings import get_kit_settings

app = typer.Typer(no_args_is_help=True)
console = literal_console(150)

_COMPONENTS = typer.Argument(
    None,
    help=(
        "Components or groups to start (kafka, hdfs, spark, hive, zookeeper, a component name), "
        "with what they require. Default: all."
    ),
    show_default=False,
    metavar="COMPONENT",
)


@app.command()
def up(
    components: list[str] | None = _COMPONENTS,
    deadline: float = typer.Option(
        300.0, help="Seconds to wait for every component to be healthy."
    ),
    profile: str = typer.Option(
        "",
        "--profile",
        help="Settings profile(s), as `ferry --profile` (e.g. secure): `ferry stack up --profile "
        "secure` is `ferry --profile secure stack up`.",
        show_default=False,
    ),
) -> None:
    """Start the local stack (idempotent) and wait until every component passes its health check."""
    from ferry_kit.stack.manager import Stack

    if profile:
        try:
            use_profile(profile)
        except ConfigError as exc:
            console.print(f"stack up failed: {exc}", style="red")
            raise typer.Exit(2) from exc

    t0 = time.monotonic()
    try:
        stack = Stack(get_kit_settings(), on_event=lambda m: console.print(f"{m}", style="dim"))
        started = stack.up(deadline, components or None)
    except StackError as exc:
        console.print(f"stack up failed: {exc}", style="red")
        raise typer.Exit(1) from exc
    what = f"started {len(started)} component(s)" if started else "already running"
    console.print(f"stack healthy ({what}) in {time.monotonic() - t0:.1f} s", style="green")


@app.command()
def down() -> None:
    """Stop exactly the processes `ferry stack up` started (by pid, verified by their markers)."""
    from ferry_kit.stack.manager import Stack

    for name, outcome in Stack(get_kit_settings()).down():
        console.print(f"{name:18} {outcome}")


@app.command()
def status() -> None:
    """Print each component, its address, pid, health and memory. Exit 1 if any is unhealthy."""
    from ferry_kit.stack.manager import Stack

    settings = get_kit_settings()
    rows = Stack(settings).status()
    table = Table(title="Ferry local stack")
    for col in ("component", "address", "pid", "health", "RSS MiB", "log"):
        table.add_column(col)
    for r in rows:
        mark = Text("ok ", style="green") if r.healthy else Text("down ", style="red")
        table.add_row(
            r.name,
            r.address,
            str(r.pid or "-"),
            mark + Text(r.detail),
            f"{r.rss_bytes / 2**20:.0f}",
            r.log_file.replace(str(settings.var_dir) + "/", ""),
        )
    console.print(table)
    total = sum(r.rss_bytes for r in rows)
    console.print(
        f"total RSS: {total / 2**20:.0f} MiB over {sum(1 for r in rows if r.pid)} processes"
    )
    if not all(r.healthy for r in rows):
        raise typer.Exit(1)


_ONE = typer.Argument(..., help="Component name, e.g. hdfs-a-namenode, spark-master-1, kafka.")


@app.command("run-one")
def run_one(component: str = _ONE) -> None:
    """Run ONE component in the foreground (a container's command): config from settings, storage
    formatted on first start, then this process becomes the server's JVM
    (ferry_kit.stack.container)."""
    from ferry_kit.stack.container import run_one as run

    try:
        run(component)
    except StackError as exc:
        console.print(f"run-one {component} failed: {exc}", style="red")
        raise typer.Exit(2) from exc


@app.command()
def check(component: str = _ONE) -> None:
    """Run ONE component's health check once; exit 0 healthy, 1 not (a container health check)."""
    from ferry_kit.stack.container import check as run_check

    try:
        ok, detail = run_check(component)
    except StackError as exc:
        console.print(f"check {component} failed: {exc}", style="red")
        raise typer.Exit(2) from exc
    console.print(f"{component}: {detail}")
    if not ok:
        raise typer.Exit(1)


_VAR_DIR = typer.Option(..., "--var-dir", help="The stack's var directory.")


@app.command(hidden=True)
def fence(
    component: str = _ONE,
    var_dir: Path = _VAR_DIR,
    port: int | None = typer.Option(
        None, help="Kill it only if it listens on this TCP port (the fenced RPC port)."
    ),
) -> None:
    """SIGKILL ONE component of the stack at ``--var-dir`` and wait until it is gone; exit 0 once
    it is not running or not listening on ``--port`` (the HA stack's NameNode fence:
    ``dfs.ha.fencing.methods``, see ferry_kit.stack.hdfs_ha), 1 if it survives."""
    from ferry_kit.stack.base import Layout
    from ferry_kit.stack.process import fence as kill

    lay = Layout(var_dir)
    try:
        outcome = kill(component, lay.run / f"{component}.pid", lay.var, port=port)
    except StackError as exc:
        console.print(f"fence {component} failed: {exc}", style="red")
        raise typer.Exit(1) from exc
    console.print(f"fence {component}: {outcome}")
