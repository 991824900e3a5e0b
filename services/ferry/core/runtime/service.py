"""One entry point for every Ferry service: logging set up once, then ``build()`` and ``run()``.

A service module exposes ``build(settings) -> runnable`` (the one wiring function: clients,
handlers, topics; nothing connects at import time) and ``main = service_main(build)``.
``ferry run <service>`` (:func:`ferry.core.services.run`) ends here.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import Any, Protocol

#: Format of every service's log lines: UTC-less local time, level, logger name, message.
LOG_FORMAT = "%(asctime)s %(levelname)s %(name)s: %(message)s"


class Runnable(Protocol):
    """What ``build()`` returns: something that runs until SIGTERM/SIGINT or ``stop()``."""

    def run(self) -> Any: ...


def configure_logging(level: int = logging.INFO) -> None:
    """Send every logger's records at ``level`` and above to stderr in :data:`LOG_FORMAT`."""
    logging.basicConfig(level=level, format=LOG_FORMAT)


def run_service(build: Callable[[], Runnable]) -> None:
    """Configure logging, wire the service with ``build()`` and run it in the foreground.

    Raises:
        whatever ``build`` or ``run`` raise (a :class:`~ferry.errors.FerryError` is printed
        as one line by the ``ferry`` command).
    """
    configure_logging()
    build().run()


def service_main(build: Callable[[], Runnable]) -> Callable[[], None]:
    """A ``main()`` for a service module: ``main = service_main(build)``."""

    def main() -> None:
        run_service(build)

    main.__doc__ = f"Run the service wired by {build.__module__}.build until SIGTERM/SIGINT."
    return main


__all__ = ["LOG_FORMAT", "configure_logging", "run_service", "service_main"]
