"""``ferry up`` / ``ferry down`` / ``ferry ps`` for the services: supervisord driven from settings.

:class:`Services` writes the configuration (:func:`ferry_kit.supervise.programs.render_config`),
starts supervisord or applies a changed configuration to the running one, waits until every
process is running and healthy (or FATAL: the crash-loop limit), lists them, and stops them.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass

from ferry_kit.pipeline import LOCAL_STACK_ENV
from ferry_kit.settings import KitSettings
from ferry_kit.stack.client_conf import yarn_client_env
from ferry_kit.supervise.health import Health, group_members, probe
from ferry_kit.supervise.programs import (
    SCALABLE,
    Paths,
    ferry_environment,
    render_config,
    write_config,
)
from ferry_kit.supervise.rpc import ProcessInfo, Supervisor


def service_environment(settings: KitSettings, environ: Mapping[str, str]) -> dict[str, str]:
    """The ``FERRY_*`` settings every service gets: the caller's (``environ``) over the kit's
    stack defaults (lineage on); when a cluster's Spark runs on YARN, also the clusters read from
    the client configuration directories the stack wrote (:func:`yarn_client_env`): Spark finds
    each ResourceManager in ``yarn-site.xml`` there, as the test tiers start the services
    (docs/yarn.md)."""
    env = ferry_environment({**LOCAL_STACK_ENV, **environ})
    return env | yarn_client_env(settings, env.get("FERRY_PROFILE", ""))


#: States after which supervisord will not start the process again by itself.
GAVE_UP = ("FATAL", "STOPPED", "EXITED")


@dataclass(frozen=True)
class PsRow:
    """One line of ``ferry ps``."""

    name: str
    state: str
    pid: int | None
    uptime_s: float | None
    restarts: int
    health: Health
    log: str


@dataclass(frozen=True)
class UpResult:
    """What ``up`` ended with: every process's row, the FATAL ones and the unhealthy ones."""

    rows: list[PsRow]
    fatal: list[str]
    unhealthy: list[str]

    @property
    def ok(self) -> bool:
        return not self.fatal and not self.unhealthy


class Services:
    """Every service (:data:`ferry.core.services.SERVICES`) under the supervisord of
    ``settings.supervise.home``."""

    def __init__(
        self, settings: KitSettings, on_event: Callable[[str], None] | None = None
    ) -> None:
        self.settings = settings
        self.paths = Paths(settings.supervise.home)
        self.supervisor = Supervisor(self.paths, settings.supervise.rpc_timeout_s)
        self._say = on_event or (lambda _msg: None)

    def running(self) -> bool:
        """True while supervisord answers."""
        return self.supervisor.running()

    def up(
        self,
        replicas: Mapping[str, int],
        environ: Mapping[str, str],
        deadline_s: float = 300.0,
    ) -> UpResult:
        """Run every service (``replicas`` instances of a stage) with the ``FERRY_*`` settings of
        ``environ``; idempotent: a running supervisord gets the changed programs only, and
        processes that gave up (FATAL, stopped) are started again.

        Waits at most ``deadline_s`` until each process is RUNNING and healthy, or FATAL.

        Raises:
            ConfigError: a setting supervisord cannot carry.
            StackError: supervisord did not start or answer.
        """
        env = service_environment(self.settings, environ)
        text = render_config(self.settings, replicas, env)
        changed = write_config(self.paths.conf, text)
        if not self.supervisor.running():
            self._say(f"starting supervisord ({self.paths.conf})")
            self.supervisor.start()
        elif changed:
            self._say(f"applied the new configuration: {self.supervisor.apply_config()}")
        rpc = self.supervisor.proxy().supervisor
        for info in self.supervisor.processes():
            if info.state in GAVE_UP:
                self._say(f"starting {info.name} ({info.state.lower()} before)")
                rpc.startProcess(info.full_name, False)
        return self.wait(deadline_s)

    def wait(self, deadline_s: float) -> UpResult:
        """Poll until every process is RUNNING and healthy, or FATAL, or ``deadline_s`` passed."""
        deadline = time.monotonic() + deadline_s
        while True:
            rows = self.ps()
            fatal = [r.name for r in rows if r.state == "FATAL"]
            unhealthy = [r.name for r in rows if r.state != "FATAL" and not r.health.ok]
            if not unhealthy or time.monotonic() > deadline:
                return UpResult(rows, fatal, unhealthy)
            time.sleep(1.0)

    def ps(self) -> list[PsRow]:
        """Each supervised process with its state, pid, uptime, restarts and health; empty when
        supervisord is not running."""
        if not self.supervisor.running():
            return []
        infos = self.supervisor.processes()
        restarts = self.supervisor.restarts()
        stages = sorted({i.group for i in infos if i.group in SCALABLE and i.state == "RUNNING"})
        members = group_members(self.settings, stages) if stages else {}
        return [self._row(i, restarts, members) for i in infos]

    def _row(self, info: ProcessInfo, restarts: Mapping[str, int], members: Mapping) -> PsRow:
        return PsRow(
            info.name,
            info.state,
            info.pid,
            info.uptime_s,
            restarts.get(info.name, 0),
            probe(self.settings, info, members),
            info.logfile,
        )

    def down(self) -> bool:
        """Stop every service gracefully (SIGTERM, then SIGKILL after ``stopwaitsecs``), then
        supervisord. Returns False when it was not running.

        Raises:
            StackError: supervisord still runs after the services' grace and a minute.
        """
        grace = self.settings.kafka.shutdown_grace_s + self.settings.supervise.stop_margin_s
        return self.supervisor.shutdown(deadline_s=grace + 60)
