"""``ferry up``, ``ferry down``, ``ferry ps``: the local stack plus every service, supervised.

``up`` starts the stack (as ``ferry stack up``), then the services under supervisord (restart on
crash, crash-loop limit, logs under ``var/log/``) and waits until each is healthy; it exits 1
naming every service that is FATAL or unhealthy. ``down`` stops the services first (SIGTERM: each
finishes its running record), then the stack. ``ps`` lists each process with its pid, uptime,
restarts and health.
"""

from __future__ import annotations

import os
import time
from pathlib import Path
from typing import TYPE_CHECKING

import typer
from rich.table import Table
from rich.text import Text

from ferry.ops.console import literal_console

if TYPE_CHECKING:
    from ferry_kit.settings import KitSettings
    from ferry_kit.supervise.control import PsRow

#: How ``ferry.cli`` mounts these functions (commands, not groups).
COMMAND_SETTINGS: dict[str, object] = {}

console = literal_console(160)


def _say(msg: str) -> None:
    console.print(msg, style="dim")


def up(
    replicas: str = typer.Option(
        "",
        "--replicas",
        help="Instances per stage, e.g. transform=2,load=2 (hot standby; transform, transfer, "
        "load).",
    ),
    stack: bool = typer.Option(
        True,
        help="Start the local stack first (--no-stack: only the "
        "services, e.g. against other servers).",
    ),
    deadline: float = typer.Option(
        300.0, help="Seconds to wait for the stack, then again for every service to be healthy."
    ),
) -> None:
    """Start the stack and every service of :data:`ferry.core.services.SERVICES` under
    supervision; wait until all are healthy."""
    from ferry_kit.settings import get_kit_settings
    from ferry_kit.supervise.control import Services
    from ferry_kit.supervise.programs import parse_replicas

    settings = get_kit_settings()
    wanted = parse_replicas(replicas)
    t0 = time.monotonic()
    if stack:
        from ferry_kit.stack.manager import Stack

        Stack(settings, on_event=_say).up(deadline)
        _say(f"stack healthy in {time.monotonic() - t0:.1f} s")
    # The local NAS is a directory under var_dir (a real share is mounted by its admin; extract
    # never creates the NAS root)
    Path(settings.paths.nas_dir).mkdir(parents=True, exist_ok=True)
    result = Services(settings, on_event=_say).up(wanted, os.environ, deadline)
    _print(result.rows, settings)
    if result.fatal:
        console.print(
            f"gave up (crash loop, FATAL): {', '.join(result.fatal)}; see their logs", style="red"
        )
        for r in result.rows:
            if r.state == "FATAL":
                line = first_error_line(r.log) or "(no error line in its log)"
                console.print(f"  {r.name}: {line}", style="red", soft_wrap=True)
    if result.unhealthy:
        console.print(
            f"not healthy in {deadline:.0f} s: {', '.join(result.unhealthy)}", style="red"
        )
    if not result.ok:
        raise typer.Exit(1)
    console.print(
        f"pipeline up in {time.monotonic() - t0:.1f} s: drop files in {settings.paths.nas_dir}"
        "/<dataset>/; `ferry ps` to watch, `ferry down` to stop",
        style="green",
    )


def down(
    stack: bool = typer.Option(
        True, help="Stop the local stack after the services (--no-stack: only the services)."
    ),
) -> None:
    """Stop the services gracefully, then the stack."""
    from ferry_kit.settings import get_kit_settings
    from ferry_kit.supervise.control import Services

    settings = get_kit_settings()
    stopped = Services(settings, on_event=_say).down()
    console.print("services stopped" if stopped else "services were not running")
    if stack:
        from ferry_kit.stack.manager import Stack

        for name, outcome in Stack(settings).down():
            console.print(f"{name:18} {outcome}")


def ps() -> None:
    """Each supervised service: state, pid, uptime, restarts, health, log. Exit 1 if any is not
    running and healthy (or nothing runs)."""
    from ferry_kit.settings import get_kit_settings
    from ferry_kit.supervise.control import Services

    settings = get_kit_settings()
    rows = Services(settings).ps()
    if not rows:
        console.print("no services running (ferry up starts them)")
        raise typer.Exit(1)
    _print(rows, settings)
    if not all(r.state == "RUNNING" and r.health.ok for r in rows):
        raise typer.Exit(1)


def _print(rows: list[PsRow], settings: KitSettings) -> None:
    home = f"{settings.supervise.home}/"
    table = Table(title="Ferry services")
    for col in ("service", "state", "pid", "uptime", "restarts", "health", "log"):
        table.add_column(col)
    for r in rows:
        good = r.state == "RUNNING" and r.health.ok
        table.add_row(
            r.name,
            Text(r.state, style="green" if r.state == "RUNNING" else "red"),
            str(r.pid or "-"),
            _duration(r.uptime_s),
            str(r.restarts),
            Text(("ok " if good else "bad ") + r.health.detail, style="green" if good else "red"),
            r.log.replace(home, ""),
        )
    console.print(table)
    invalid: dict[str, dict[str, str]] = {}  # dataset → {error: services}
    for r in rows:
        for name, error in r.health.invalid.items():
            invalid.setdefault(name, {}).setdefault(error, "")
            services = invalid[name][error]
            invalid[name][error] = f"{services}, {r.name}" if services else r.name
    for name, errors in sorted(invalid.items()):
        for error, services in errors.items():
            console.print(
                f"dataset {name} not run ({services}), its files wait: {error}",
                style="yellow",
                soft_wrap=True,
            )
    if invalid:
        console.print("fix the definition (ferry datasets check); it is reloaded, no restart")
    for r in rows:
        for h in r.health.conditions:
            console.print(
                f"{r.name} holds files, not quarantined: {h.line()}: {h.message}",
                style="yellow",
                soft_wrap=True,
            )


def first_error_line(log: str, tail_bytes: int = 64 * 1024) -> str | None:
    """The line that says why a service stopped, from the end of its log: the ``ferry:`` line
    the command prints for a Ferry error, else the last exception line of a traceback
    (``ValueError: …``); ``None`` when there is neither or the log cannot be read."""
    try:
        with open(log, "rb") as fh:
            fh.seek(0, 2)
            fh.seek(max(0, fh.tell() - tail_bytes))
            lines = fh.read().decode("utf-8", "replace").splitlines()
    except OSError:
        return None
    for line in reversed(lines):
        if line.startswith("ferry: "):
            return line.strip()
    for line in reversed(lines):
        head = line.split(":", 1)[0]
        if (
            ":" in line
            and not line.startswith(" ")
            and head.rsplit(".", 1)[-1].endswith(("Error", "Exception"))
        ):
            return line.strip()
    return None


def _duration(seconds: float | None) -> str:
    if seconds is None:
        return "-"
    s = int(seconds)
    return f"{s // 3600}h{s % 3600 // 60:02d}m" if s >= 3600 else f"{s // 60}m{s % 60:02d}s"
