"""``ferry run <stage>``: run one service in the foreground until SIGTERM/SIGINT."""

from __future__ import annotations

import importlib
from enum import StrEnum

from ferry.core.errors import ConfigError


class Service(StrEnum):
    extract = "extract"
    transform = "transform"
    transfer = "transfer"
    load = "load"
    tracker = "tracker"


def run(name: str) -> None:
    """Run service ``name`` (extract, transform, transfer, load or tracker).

    Raises:
        ConfigError: unknown service name.
    """
    try:
        service = Service(name)
    except ValueError as exc:
        raise ConfigError(
            f"unknown service {name!r}; choose one of {[s.value for s in Service]}"
        ) from exc
    module = (
        "ferry.tracker.app"
        if service is Service.tracker
        else f"ferry.stages.{service.value}.service"
    )
    importlib.import_module(module).main()
