"""What ``ferry up`` runs under supervisord, and the supervisord configuration it writes.

One supervisord program per service (:data:`ferry.core.services.SERVICES`); a stage given
``--replicas stage=N`` is one program with ``numprocs=N`` (processes ``<stage>-1`` … ``<stage>-N``,
all in the stage's consumer group). The configuration is generated from settings, never edited by
hand: :func:`render_config` is a pure function of its arguments (unit-tested to the character).

supervisord semantics used here (supervisord's "Configuration File" documentation,
``[program:x]`` section):

- ``autorestart=true``: a service that exits, for any reason, is started again;
- ``startsecs``: it must stay up this long to count as started; an earlier exit is a failed start,
  retried after 1 s, 2 s, 3 s, … and after ``startretries`` failed retries the process is FATAL
  (the crash-loop limit); a process that ran longer than ``startsecs`` is restarted at once;
- ``stopsignal=TERM`` and ``stopwaitsecs``: ``ferry down`` lets a stage finish its running record
  (``kafka.shutdown_grace_s``) and leave its group before SIGKILL; ``stopasgroup``/``killasgroup``
  reach the Spark driver JVM a stage starts as its child.
"""

from __future__ import annotations

import math
import os
import shlex
import sys
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

from ferry.core.services import SERVICES as REGISTRY
from ferry.core.services import service_argv
from ferry.errors import ConfigError
from ferry_kit.settings import KitSettings

#: The services ``ferry up`` runs, in start order (supervisord ``priority``: lower starts first):
#: the tracker first, so it sees every event, then the stages in pipeline order.
SERVICES: tuple[str, ...] = tuple(s.name for s in sorted(REGISTRY, key=lambda s: s.is_stage))

#: Services that may run as several instances (:attr:`ferry.core.services.Service.scalable`).
SCALABLE: tuple[str, ...] = tuple(s.name for s in REGISTRY if s.scalable)

#: The most instances of one stage ``--replicas`` accepts.
MAX_REPLICAS = 8


@dataclass(frozen=True)
class Paths:
    """supervisord's files under ``settings.supervise.home``."""

    home: Path

    @property
    def conf(self) -> Path:
        return self.home / "conf" / "supervisord.conf"

    @property
    def socket(self) -> Path:
        return self.home / "run" / "supervisord.sock"

    @property
    def pidfile(self) -> Path:
        return self.home / "run" / "supervisord.pid"

    @property
    def log_dir(self) -> Path:
        return self.home / "log"

    @property
    def log(self) -> Path:
        return self.log_dir / "supervisord.log"

    def service_log(self, process: str) -> Path:
        """The log of one process (``extract``, ``load-2``)."""
        return self.log_dir / f"{process}.log"


def parse_replicas(text: str | None) -> dict[str, int]:
    """``"transform=2,load=2"`` → ``{"transform": 2, "load": 2}``; None or ``""`` → ``{}``.

    Raises:
        ConfigError: not ``stage=N`` pairs, a stage that cannot scale (extract, tracker) or is
            unknown, a stage named twice, or N outside 1..:data:`MAX_REPLICAS`.
    """
    out: dict[str, int] = {}
    for part in (text or "").split(","):
        part = part.strip()
        if not part:
            continue
        name, sep, count = part.partition("=")
        name = name.strip()
        if not sep or not count.strip().isdigit():
            raise ConfigError(f"--replicas: expected stage=N, got {part!r}")
        if name not in SCALABLE:
            raise ConfigError(
                f"--replicas: {name!r} cannot run as several instances; choose among {SCALABLE}"
            )
        if name in out:
            raise ConfigError(f"--replicas: {name} given twice")
        n = int(count)
        if not 1 <= n <= MAX_REPLICAS:
            raise ConfigError(f"--replicas: {name}={n}; give 1 to {MAX_REPLICAS} instances")
        out[name] = n
    return out


def process_names(replicas: Mapping[str, int]) -> dict[str, list[str]]:
    """Program → its process names: ``extract`` → ``["extract"]``, ``load`` with 2 replicas →
    ``["load-1", "load-2"]``."""
    out = {}
    for name in SERVICES:
        n = replicas.get(name, 1)
        out[name] = [name] if n == 1 else [f"{name}-{i}" for i in range(1, n + 1)]
    return out


def ferry_environment(environ: Mapping[str, str]) -> dict[str, str]:
    """The ``FERRY_*`` variables of ``environ`` (the caller's settings), sorted by name."""
    return {k: environ[k] for k in sorted(environ) if k.startswith("FERRY_")}


def _env_value(key: str, value: str) -> str:
    """One ``KEY="value"`` of supervisord's ``environment=`` (shlex, non-POSIX: no escapes)."""
    if "\n" in value or "\r" in value or ('"' in value and "'" in value):
        raise ConfigError(f"{key}: a value with a line break or both quote kinds cannot be passed")
    quote = "'" if '"' in value else '"'
    return f"{key}={quote}{value.replace('%', '%%')}{quote}"


def render_config(
    settings: KitSettings,
    replicas: Mapping[str, int],
    environment: Mapping[str, str],
    python: str = sys.executable,
    workdir: Path | None = None,
) -> str:
    """The supervisord configuration of ``ferry up``, as text.

    Args:
        replicas: instances per stage (:func:`parse_replicas`); others run one.
        environment: the ``FERRY_*`` settings every service gets (:func:`ferry_environment`).
        python: the interpreter that runs ``-m ferry run <service>``.
        workdir: the services' working directory (default: this process's), under which
            relative path settings and their defaults (``datasets``, ``var/nas``) are taken,
            as for the ``ferry up`` that starts them.

    Raises:
        ConfigError: an environment value supervisord cannot carry.
    """
    sup = settings.supervise
    paths = Paths(sup.home)
    stopwait = math.ceil(settings.kafka.shutdown_grace_s) + sup.stop_margin_s
    env = ",".join(_env_value(k, v) for k, v in environment.items())
    workdir = workdir or Path.cwd()
    lines = [
        "; Generated by `ferry up` (ferry_kit.supervise.programs); edits are overwritten.",
        "[unix_http_server]",
        f"file={paths.socket}",
        "chmod=0700",
        "",
        "[supervisord]",
        f"logfile={paths.log}",
        "logfile_maxbytes=50MB",
        "logfile_backups=3",
        "loglevel=info",
        f"pidfile={paths.pidfile}",
        f"directory={sup.home}",
        f"childlogdir={paths.log_dir}",
        "identifier=ferry",
        "",
        "[rpcinterface:supervisor]",
        "supervisor.rpcinterface_factory = supervisor.rpcinterface:make_main_rpcinterface",
        "",
        "[supervisorctl]",
        f"serverurl=unix://{paths.socket}",
    ]
    for priority, name in enumerate(SERVICES, start=1):
        n = replicas.get(name, 1)
        process = "%(program_name)s" if n == 1 else "%(program_name)s-%(process_num)d"
        lines += [
            "",
            f"[program:{name}]",
            f"command={shlex.join(service_argv(name, python))}",
            f"directory={workdir}",
            f"process_name={process}",
            f"numprocs={n}",
            "numprocs_start=1",
            f"priority={priority * 10}",
            "autostart=true",
            "autorestart=true",
            f"startsecs={sup.start_secs}",
            f"startretries={sup.start_retries}",
            "stopsignal=TERM",
            f"stopwaitsecs={stopwait}",
            "stopasgroup=true",
            "killasgroup=true",
            "redirect_stderr=true",
            f"stdout_logfile={paths.log_dir}/{process}.log",
            "stdout_logfile_maxbytes=50MB",
            "stdout_logfile_backups=3",
        ]
        if env:
            lines.append(f"environment={env}")
    return "\n".join(lines) + "\n"


def write_config(path: Path, text: str) -> bool:
    """Write ``text`` to ``path`` (atomically) unless it is already there. Returns True when the
    file changed."""
    if path.exists() and path.read_text(encoding="utf-8") == text:
        return False
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_text(text, encoding="utf-8")
    os.replace(tmp, path)
    return True
