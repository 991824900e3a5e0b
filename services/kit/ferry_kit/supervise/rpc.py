"""Talk to ``ferry up``'s supervisord over its XML-RPC interface on a unix socket.

The same interface ``supervisorctl`` uses (supervisord's "XML-RPC API" documentation:
``supervisor.getAllProcessInfo``, ``startProcess``, ``stopAllProcesses``, ``shutdown``,
``reloadConfig``, ``addProcessGroup``, ``removeProcessGroup``), through :mod:`xmlrpc.client` with a
transport that connects the socket with a timeout on every call.
"""

from __future__ import annotations

import http.client
import os
import socket
import subprocess
import sys
import time
import xmlrpc.client
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ferry_kit.errors import StackError
from ferry_kit.supervise.programs import Paths

#: supervisord's process states (``supervisor.states.ProcessStates``), name by code.
STATES = {
    0: "STOPPED",
    10: "STARTING",
    20: "RUNNING",
    30: "BACKOFF",
    40: "STOPPING",
    100: "EXITED",
    200: "FATAL",
    1000: "UNKNOWN",
}


class _UnixConnection(http.client.HTTPConnection):
    def __init__(self, path: Path, timeout_s: float) -> None:
        super().__init__("localhost", timeout=timeout_s)
        self._path = path

    def connect(self) -> None:
        sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        sock.settimeout(self.timeout)
        sock.connect(str(self._path))
        self.sock = sock


class _UnixTransport(xmlrpc.client.Transport):
    def __init__(self, path: Path, timeout_s: float) -> None:
        super().__init__()
        self._path, self._timeout_s = path, timeout_s

    def make_connection(self, host: Any) -> http.client.HTTPConnection:
        return _UnixConnection(self._path, self._timeout_s)


def _absolute_pythonpath(environ: Mapping[str, str]) -> dict[str, str]:
    """``environ`` with each ``PYTHONPATH`` entry made absolute: supervisord and the services run
    in another directory, where a relative entry (``PYTHONPATH=services``) would name nothing and
    the services would silently import another copy of Ferry."""
    env = dict(environ)
    if env.get("PYTHONPATH"):
        env["PYTHONPATH"] = os.pathsep.join(
            str(Path(p).resolve()) if p else p for p in env["PYTHONPATH"].split(os.pathsep)
        )
    return env


@dataclass(frozen=True)
class ProcessInfo:
    """One process as supervisord reports it (``getProcessInfo``)."""

    group: str
    name: str
    state: str
    pid: int | None
    start: float
    now: float
    description: str
    exitstatus: int
    logfile: str

    @property
    def full_name(self) -> str:
        """``group:name``, what the RPC calls take."""
        return f"{self.group}:{self.name}"

    @property
    def uptime_s(self) -> float | None:
        """Seconds since the current process started, while it runs."""
        return self.now - self.start if self.pid and self.state == "RUNNING" else None

    @classmethod
    def of(cls, raw: dict[str, Any]) -> ProcessInfo:
        return cls(
            raw["group"],
            raw["name"],
            STATES.get(raw["state"], raw.get("statename", "UNKNOWN")),
            raw["pid"] or None,
            float(raw["start"]),
            float(raw["now"]),
            raw.get("description", ""),
            int(raw.get("exitstatus", 0)),
            raw.get("stdout_logfile", ""),
        )


class Supervisor:
    """The supervisord of one ``supervise.home``: start it, call it, shut it down."""

    def __init__(self, paths: Paths, timeout_s: float = 10.0) -> None:
        self.paths = paths
        self.timeout_s = timeout_s

    def proxy(self) -> Any:
        """An XML-RPC proxy (``proxy.supervisor.<method>``); each call times out after
        ``timeout_s``."""
        transport = _UnixTransport(self.paths.socket, self.timeout_s)
        return xmlrpc.client.ServerProxy("http://localhost", transport=transport)

    def running(self) -> bool:
        """True when supervisord answers on its socket and is RUNNING."""
        if not self.paths.socket.exists():
            return False
        try:
            return bool(self.proxy().supervisor.getState()["statename"] == "RUNNING")
        except (OSError, xmlrpc.client.Error):
            return False

    def start(self, deadline_s: float = 30.0) -> None:
        """Start supervisord on :attr:`paths` ``.conf`` (it daemonizes) and wait until it answers.

        Raises:
            StackError: it exited or did not answer within ``deadline_s``; names its log.
        """
        self.paths.log_dir.mkdir(parents=True, exist_ok=True)
        self.paths.socket.parent.mkdir(parents=True, exist_ok=True)
        with self.paths.log.open("ab") as log:
            proc = subprocess.run(  # noqa: S603 - fixed argv
                [sys.executable, "-m", "supervisor.supervisord", "-c", str(self.paths.conf)],
                stdin=subprocess.DEVNULL,
                stdout=log,
                stderr=subprocess.STDOUT,
                env=_absolute_pythonpath(os.environ),
                timeout=deadline_s,
                check=False,
            )
        if proc.returncode != 0:
            raise StackError(f"supervisord exited {proc.returncode}; see {self.paths.log}")
        deadline = time.monotonic() + deadline_s
        while not self.running():
            if time.monotonic() > deadline:
                raise StackError(
                    f"supervisord did not answer on {self.paths.socket} in {deadline_s} s; "
                    f"see {self.paths.log}"
                )
            time.sleep(0.2)

    def processes(self) -> list[ProcessInfo]:
        """Every process, in supervisord's order."""
        return [ProcessInfo.of(p) for p in self.proxy().supervisor.getAllProcessInfo()]

    def apply_config(self) -> list[str]:
        """Re-read the configuration file and apply it as ``supervisorctl update`` does: programs
        added are started, changed ones restarted, removed ones stopped. Returns the changed
        program names."""
        rpc = self.proxy().supervisor
        [[added, changed, removed]] = rpc.reloadConfig()
        for name in changed + removed:
            rpc.stopProcessGroup(name, True)
            rpc.removeProcessGroup(name)
        for name in changed + added:
            rpc.addProcessGroup(name)
        return sorted(added + changed + removed)

    def shutdown(self, deadline_s: float) -> bool:
        """Stop every process gracefully (each gets its ``stopwaitsecs``), then supervisord.
        Returns False when it was not running. Raises StackError if it is still up after
        ``deadline_s``."""
        if not self.running():
            return False
        pid = int(self.proxy().supervisor.getPID())
        slow = Supervisor(self.paths, timeout_s=deadline_s)
        slow.proxy().supervisor.stopAllProcesses(True)
        self.proxy().supervisor.shutdown()
        deadline = time.monotonic() + deadline_s
        while Path(f"/proc/{pid}").exists():
            if time.monotonic() > deadline:
                raise StackError(f"supervisord still running after {deadline_s} s")
            time.sleep(0.2)
        return True

    def restarts(self) -> dict[str, int]:
        """Restarts per process since this supervisord started: its ``spawned: '<name>'`` log
        lines after the last ``supervisord started`` line, minus the first spawn.

        supervisord keeps no restart count in its process info; its log records every spawn by
        process name (an event listener could count them too, but would be one more process to
        supervise). A ``stop`` + ``start`` by hand counts as a restart as well.
        """
        try:
            text = self.paths.log.read_text(encoding="utf-8", errors="replace")
        except OSError:
            return {}
        last = text.rfind("supervisord started with pid")
        spawns: dict[str, int] = {}
        for line in text[max(0, last) :].splitlines():
            marker = line.find("spawned: '")
            if marker >= 0:
                name = line[marker + len("spawned: '") :].split("'", 1)[0]
                spawns[name] = spawns.get(name, 0) + 1
        return {name: n - 1 for name, n in spawns.items()}
