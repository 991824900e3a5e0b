"""Start and stop stack processes by pid, and only the ones this stack started.

Every JVM the stack launches carries two system properties on its command line,
``-Dferry.component=<name>`` and ``-Dferry.stack=<var_dir>``. A pid file alone is not proof: before
signalling a pid, :func:`owned_pid` checks ``/proc/<pid>/cmdline`` for both markers, so a recycled
pid or another checkout's stack is never touched.
"""

from __future__ import annotations

import contextlib
import os
import signal
import socket
import subprocess
import time
from dataclasses import dataclass
from pathlib import Path

from ferry_kit.errors import StackError


@dataclass(frozen=True)
class Launch:
    """How to run one component: argv, extra environment, log file and pid file."""

    name: str
    argv: list[str]
    env: dict[str, str]
    log_file: Path
    pid_file: Path
    cwd: Path


def markers(name: str, var_dir: Path) -> list[str]:
    """The JVM system properties that identify a process as this stack's ``name``."""
    return [f"-Dferry.component={name}", f"-Dferry.stack={var_dir}"]


def _cmdline(pid: int) -> list[str]:
    try:
        raw = Path(f"/proc/{pid}/cmdline").read_bytes()
    except OSError:
        return []
    return [p.decode("utf-8", "replace") for p in raw.split(b"\0") if p]


def owned_pid(name: str, pid_file: Path, var_dir: Path) -> int | None:
    """The live pid of component ``name`` if its pid file points at a process carrying its
    markers."""
    try:
        pid = int(pid_file.read_text().strip())
    except (OSError, ValueError):
        return None
    args = _cmdline(pid)
    if all(m in args for m in markers(name, var_dir)):
        return pid
    return None


#: A Kerberos client's own ticket cache and keytab (ferry.clusters.kerberos.process_env): the
#: process that starts the servers may be one (its health checks use SPNEGO), and a server that
#: inherited them would act with Ferry's ticket instead of its own keytab.
CLIENT_KERBEROS_ENV = ("KRB5CCNAME", "KRB5_CLIENT_KTNAME")


def server_environ() -> dict[str, str]:
    """This process's environment without :data:`CLIENT_KERBEROS_ENV`: what a server starts
    with (before its own ``Launch.env``)."""
    return {k: v for k, v in os.environ.items() if k not in CLIENT_KERBEROS_ENV}


def start(launch: Launch) -> int:
    """Start ``launch`` in its own session (process group), stdout+stderr appended to its log.

    Returns the pid once the child runs ``launch.argv`` (exec done). Raises StackError if the
    executable cannot be started.
    """
    launch.log_file.parent.mkdir(parents=True, exist_ok=True)
    launch.pid_file.parent.mkdir(parents=True, exist_ok=True)
    env = {**server_environ(), **launch.env}
    with launch.log_file.open("ab") as log:
        banner = f"\n==== ferry stack: starting {launch.name} at {time.strftime('%F %T')} ====\n"
        log.write(banner.encode())
        log.flush()
        try:
            proc = subprocess.Popen(  # noqa: S603 - argv built from settings, no shell
                launch.argv,
                stdin=subprocess.DEVNULL,
                stdout=log,
                stderr=subprocess.STDOUT,
                env=env,
                cwd=launch.cwd,
                start_new_session=True,
            )
        except OSError as exc:
            raise StackError(f"cannot start {launch.name} ({launch.argv[0]}): {exc}") from exc
    launch.pid_file.write_text(f"{proc.pid}\n")
    # Until the child has exec'd, /proc/<pid>/cmdline is still this process's: wait (≤ 5 s) for
    # the launched argv, so an ownership check right after start() cannot miss the markers.
    deadline = time.monotonic() + 5
    while _cmdline(proc.pid)[: len(launch.argv)] != launch.argv and proc.poll() is None:
        if time.monotonic() > deadline:
            break
        time.sleep(0.005)
    return proc.pid


def alive(pid: int) -> bool:
    """True while ``pid`` exists and is not a zombie."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return False
    return stat.rsplit(")", 1)[1].split()[0] != "Z"


def stop(name: str, pid: int, *, grace_s: float = 20.0) -> str:
    """SIGTERM the process group of ``pid``, wait up to ``grace_s`` seconds, then SIGKILL.

    Returns ``"stopped"`` or ``"killed"``.
    """
    try:
        os.killpg(pid, signal.SIGTERM)
    except ProcessLookupError:
        return "stopped"
    deadline = time.monotonic() + grace_s
    while time.monotonic() < deadline:
        if not alive(pid):
            _reap(pid)
            return "stopped"
        time.sleep(0.2)
    return _sigkill(name, pid)


def _sigkill(name: str, pid: int, wait_s: float = 10.0) -> str:
    """SIGKILL the process group of ``pid`` and wait up to ``wait_s`` seconds for it to go;
    ``"stopped"`` if it was already gone, else ``"killed"``. Raises StackError if it survives."""
    try:
        os.killpg(pid, signal.SIGKILL)
    except ProcessLookupError:
        return "stopped"
    deadline = time.monotonic() + wait_s
    while alive(pid) and time.monotonic() < deadline:
        time.sleep(0.05)
    _reap(pid)
    if alive(pid):
        raise StackError(f"{name} (pid {pid}) survived SIGKILL for {wait_s:.0f} s")
    return "killed"


def fence(
    name: str, pid_file: Path, var_dir: Path, *, port: int | None = None, wait_s: float = 10.0
) -> str:
    """SIGKILL component ``name``'s process group, the HA fence of a NameNode that may still
    believe it is active (a SIGSTOPped or hung JVM), and wait up to ``wait_s`` seconds for it to go.

    Hadoop's "HDFS High Availability Using the Quorum Journal Manager" (Fencing): the JournalNodes'
    epochs stop an old active from writing, but it "could serve out-of-date read responses to
    clients" until it next tries to write, so a fencing method must still stop the process. This is
    the one-machine form of ``sshfence``, which kills whatever listens on the target's RPC port
    (``fuser -k -n tcp <port>``) and counts "nothing listens" as fenced: with ``port``, a process
    not listening on it (a NameNode still loading its namespace, which the ZKFC of the other may
    fence at start from an old breadcrumb in ZooKeeper) is left alone. A SIGSTOPped process keeps
    its listening socket and dies on SIGKILL without running again.

    Returns ``"killed"``, ``"not listening"`` (with ``port``) or ``"not running"`` (already dead,
    or the pid file points at another process): each means fenced.

    Raises:
        StackError: the process is still alive after ``wait_s`` seconds; with ``port``, no process
            of the stack but something listens on it, or its sockets cannot be read.
    """
    import psutil

    pid = owned_pid(name, pid_file, var_dir)
    try:
        if pid is None:
            # no process of ours: fenced, unless something else serves the fenced port (a stale
            # or unreadable pid file must not let an old active go on answering)
            if port is not None and any(
                c.status == psutil.CONN_LISTEN and c.laddr.port == port
                for c in psutil.net_connections(kind="tcp")
            ):
                raise StackError(f"{name}: no process of this stack, yet port {port} listens")
            return "not running"
        if port is not None:
            sockets = psutil.Process(pid).net_connections(kind="tcp")
            if not any(c.status == psutil.CONN_LISTEN and c.laddr.port == port for c in sockets):
                return "not listening"
    except psutil.NoSuchProcess:
        return "not running"
    except psutil.AccessDenied as exc:
        raise StackError(f"{name}: cannot see the sockets of pid {pid}: {exc}") from None
    return "killed" if _sigkill(name, pid, wait_s) == "killed" else "not running"


def _reap(pid: int) -> None:
    # ChildProcessError: not our child (started by an earlier `ferry stack up`): init reaps it.
    with contextlib.suppress(ChildProcessError):
        os.waitpid(pid, os.WNOHANG)


def rss_bytes(pid: int) -> int:
    """Resident set size of ``pid`` in bytes (0 if gone), from /proc/<pid>/status VmRSS."""
    try:
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) * 1024
    except OSError:
        return 0
    return 0


def port_in_use(host: str, port: int) -> bool:
    """True if something accepts TCP connections on host:port (0.5 s connect timeout)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.settimeout(0.5)
        return sock.connect_ex((host, port)) == 0


def tail(path: Path, lines: int = 15) -> str:
    """Last ``lines`` lines of a log file, for error messages."""
    try:
        with path.open("rb") as fh:
            fh.seek(0, os.SEEK_END)
            fh.seek(max(0, fh.tell() - 16_384))
            data = fh.read().decode("utf-8", "replace")
    except OSError:
        return "(no log)"
    return "\n".join(data.splitlines()[-lines:])
