"""``ferry stack up | down | status``: start, health-check and stop the embedded local stack.

``up`` is idempotent: components already running (pid file + markers) are left alone; the others
start once the components they require are healthy; then every component must pass its real health
check before ``deadline_s``. ``up(components=[...])`` does the same for a subset: the named
components or groups and what they require (see :func:`ferry_kit.stack.components.select`); a later
call with more names starts only the missing ones. Concurrent ``up``/``down`` calls are serialised
by a lock file.
"""

from __future__ import annotations

import contextlib
import fcntl
import time
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, replace

from ferry_kit.errors import StackError
from ferry_kit.settings import KitSettings
from ferry_kit.stack import process
from ferry_kit.stack.base import Component
from ferry_kit.stack.client_conf import write_client_confs
from ferry_kit.stack.components import build_components, select
from ferry_kit.stack.health import Unhealthy

DEFAULT_DEADLINE_S = 300.0


@dataclass(frozen=True)
class ComponentStatus:
    """One row of ``ferry stack status``."""

    name: str
    address: str
    pid: int | None
    healthy: bool
    detail: str
    rss_bytes: int
    log_file: str


class Stack:
    """The local stack described by ``settings``."""

    def __init__(
        self, settings: KitSettings, on_event: Callable[[str], None] | None = None
    ) -> None:
        self.settings = settings
        self.components = build_components(settings)
        self._by_name = {c.name: c for c in self.components}
        self._say = on_event or (lambda _msg: None)

    @contextlib.contextmanager
    def _lock(self) -> Iterator[None]:
        path = self.settings.var_dir / "run" / "stack.lock"
        path.parent.mkdir(parents=True, exist_ok=True)
        with path.open("w") as fh:
            fcntl.flock(fh, fcntl.LOCK_EX)
            try:
                yield
            finally:
                fcntl.flock(fh, fcntl.LOCK_UN)

    def pid(self, comp: Component) -> int | None:
        """Live pid of ``comp`` if this stack started it, else None."""
        return process.owned_pid(comp.name, comp.launch.pid_file, self.settings.var_dir)

    def component(self, name: str) -> Component:
        """The component called ``name``. Raises StackError for an unknown name."""
        try:
            return self._by_name[name]
        except KeyError as exc:
            raise StackError(f"no stack component {name!r}; known: {list(self._by_name)}") from exc

    def select(self, components: Iterable[str] | None = None) -> list[Component]:
        """The components ``up(components=...)`` would bring up, in start order: all for None,
        else the named components or groups and what they require.

        Raises StackError for an unknown name.
        """
        if components is None:
            return list(self.components)
        return select(self.components, components)

    def up(
        self,
        deadline_s: float = DEFAULT_DEADLINE_S,
        components: Iterable[str] | None = None,
        *,
        args: Mapping[str, Sequence[str]] | None = None,
    ) -> list[str]:
        """Start what is not running and wait (at most ``deadline_s`` seconds) until it is healthy.

        ``components``: component or group names (``kafka``, ``hdfs``, ``spark``, ``hive``,
        ``zookeeper``, ``all``) to bring up with what they require; None means every component.
        ``args``: component name → arguments added to its command line when this call starts it
        (the nemesis starts a DataNode with ``-D dfs.datanode.du.reserved=…``).
        Returns the names of the components this call started (empty when all were up). Then
        writes the clusters' client configuration directories
        (:func:`ferry_kit.stack.client_conf.write_client_confs`).
        Raises StackError for an unknown name, or naming the component, what its check saw and its
        log file; before raising, it stops the components this call started (the others keep
        running).
        """
        chosen = self.select(components)
        with self._lock():
            deadline = time.monotonic() + deadline_s
            started: list[str] = []
            try:
                for comp in chosen:
                    if self.pid(comp) is not None:
                        continue
                    for dep in comp.requires:
                        self._wait_healthy(self._by_name[dep], deadline)
                    for port in comp.ports:
                        if process.port_in_use(comp.host, port):
                            raise StackError(
                                f"{comp.name}: port {comp.host}:{port} is already in use by a "
                                "process this stack did not start; stop it or change the port "
                                "setting"
                            )
                    comp.prepare()
                    launch = comp.launch
                    if args and args.get(comp.name):
                        launch = replace(launch, argv=[*launch.argv, *args[comp.name]])
                    pid = process.start(launch)
                    started.append(comp.name)
                    self._say(f"started {comp.name} (pid {pid}), log {comp.launch.log_file}")
                for comp in chosen:
                    self._wait_healthy(comp, deadline)
                write_client_confs(self.settings)
            except BaseException:
                # Leave no orphans: stop what this call started, keep what was already running.
                self._stop_started(started)
                raise
            return started

    def _stop_started(self, started: list[str]) -> None:
        for comp in reversed(self.components):
            if comp.name not in started:
                continue
            pid = self.pid(comp)
            if pid is not None:
                self._say(
                    f"{process.stop(comp.name, pid)} {comp.name} (pid {pid}) after a failed start"
                )
            comp.launch.pid_file.unlink(missing_ok=True)

    def _wait_healthy(self, comp: Component, deadline: float) -> str:
        last = "not checked yet"
        while True:
            pid = self.pid(comp)
            if pid is None:
                raise StackError(
                    f"{comp.name} is not running (exited or never started); "
                    f"see {comp.launch.log_file}:\n"
                    f"{process.tail(comp.launch.log_file)}"
                )
            try:
                detail = comp.check()
            except Unhealthy as exc:
                last = str(exc)
            else:
                return detail
            if time.monotonic() > deadline:
                raise StackError(
                    f"{comp.name} not healthy before the deadline: {last}; "
                    f"see {comp.launch.log_file}:\n"
                    f"{process.tail(comp.launch.log_file)}"
                )
            time.sleep(0.5)

    def down(self, only: list[str] | None = None) -> list[tuple[str, str]]:
        """Stop the components this stack started (all, or those in ``only``), in reverse order.

        Returns (name, "stopped" | "killed" | "not running") per component.
        """
        with self._lock():
            result = []
            for comp in reversed(self.components):
                if only is not None and comp.name not in only:
                    continue
                pid = self.pid(comp)
                if pid is None:
                    result.append((comp.name, "not running"))
                else:
                    outcome = process.stop(comp.name, pid)
                    result.append((comp.name, outcome))
                    self._say(f"{outcome} {comp.name} (pid {pid})")
                comp.launch.pid_file.unlink(missing_ok=True)
            return result

    def status(self) -> list[ComponentStatus]:
        """Each component's pid, address, health and memory."""
        rows = []
        for comp in self.components:
            pid = self.pid(comp)
            healthy, detail = False, "not running"
            if pid is not None:
                try:
                    detail, healthy = comp.check(), True
                except Unhealthy as exc:
                    detail = str(exc)
            rows.append(
                ComponentStatus(
                    comp.name,
                    comp.address,
                    pid,
                    healthy,
                    detail,
                    process.rss_bytes(pid) if pid else 0,
                    str(comp.launch.log_file),
                )
            )
        return rows

    def kill(self, name: str, sig: int) -> int:
        """Send ``sig`` to one component's process group (fault tests). Returns the pid.

        Raises StackError if the component is not running.
        """
        import os

        comp = self.component(name)
        pid = self.pid(comp)
        if pid is None:
            raise StackError(f"{name} is not running")
        os.killpg(pid, sig)
        return pid
