"""A liveness file a service's main loop touches on every turn, for ``ferry ps`` health.

A process can be up and still stuck (a hung NFS read, a dead scan thread): a loop that touched its
file less than a few intervals ago is working. The file is ``<var_dir>/run/<service>.<pid>.alive``
(one per instance); its modification time is the last beat.

Beside it, ``<service>.<pid>.datasets`` says which datasets that instance does not run and why
(:func:`datasets_status_path`, written by :class:`ferry.datasets.reload.Definitions`), read by
``ferry ps`` and ``ferry datasets list`` (:func:`not_run_anywhere`); and ``<service>.<pid>.spark``
names the Spark application of its session (:func:`spark_status_path`, written by
:class:`ferry.clusters.spark.SparkHolder` each time it builds one), read by ``ferry ps``.
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import time
from pathlib import Path

from ferry.settings import Settings


def heartbeat_path(settings: Settings, service: str, pid: int | None = None) -> Path:
    """The liveness file of ``service``'s instance ``pid`` (default: this process)."""
    return settings.var_dir / "run" / f"{service}.{pid or os.getpid()}.alive"


def datasets_status_path(settings: Settings, service: str, pid: int | None = None) -> Path:
    """Where ``service``'s instance ``pid`` (default: this process) writes which datasets it
    does not run, and why (:class:`ferry.datasets.reload.Definitions`; ``ferry ps`` reads
    it): ``<var_dir>/run/<service>.<pid>.datasets``."""
    return settings.var_dir / "run" / f"{service}.{pid or os.getpid()}.datasets"


def spark_status_path(settings: Settings, service: str, pid: int | None = None) -> Path:
    """Where ``service``'s instance ``pid`` (default: this process) names the Spark application
    of its session: ``<var_dir>/run/<service>.<pid>.spark`` (:func:`write_spark_status`)."""
    return settings.var_dir / "run" / f"{service}.{pid or os.getpid()}.spark"


def write_spark_status(path: Path, application_id: str, master: str) -> None:
    """Write ``{"application": application_id, "master": master}`` to ``path`` (a YARN session:
    ``application_1765…_0001`` on ``yarn``; standalone: ``app-2026…-0000`` on
    ``spark://h1:p1,h2:p2``). An OSError is not raised (a status file only)."""
    with contextlib.suppress(OSError):
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = path.with_name(path.name + ".tmp")
        tmp.write_text(json.dumps({"application": application_id, "master": master}), "utf-8")
        tmp.replace(path)


def spark_application(path: Path) -> tuple[str, str] | None:
    """``(application id, master)`` of a status file (:func:`write_spark_status`), or ``None``
    when it is missing or unreadable."""
    try:
        body = json.loads(path.read_text("utf-8"))
        return str(body["application"]), str(body["master"])
    except (OSError, ValueError, KeyError, TypeError):
        return None


def not_run(path: Path) -> dict[str, str]:
    """The datasets a service's status file (:func:`datasets_status_path`) says it does not
    run, with why; ``{}`` when none, or when the file is missing or unreadable."""
    try:
        body = json.loads(path.read_text("utf-8"))
    except (OSError, ValueError):
        return {}
    invalid = body.get("invalid") if isinstance(body, dict) else None
    return {str(k): str(v) for k, v in invalid.items()} if isinstance(invalid, dict) else {}


def not_run_anywhere(settings: Settings) -> dict[str, dict[str, str]]:
    """dataset → {service: why} for every dataset an instance running on this host does not run
    (the status files of ``<var_dir>/run``; a dead process's file is ignored). Only the services
    say whether a definition compiles (transform's Spark analyzer), so ``ferry datasets list``
    reads this to agree with ``ferry ps``."""
    out: dict[str, dict[str, str]] = {}
    try:
        entries = sorted((settings.var_dir / "run").iterdir())
    except OSError:
        return out
    for path in entries:
        m = _STATUS.match(path.name)
        if m is None or not _running(int(m.group(2))):
            continue
        for dataset, why in not_run(path).items():
            out.setdefault(dataset, {})[m.group(1)] = why
    return out


def beat(path: Path) -> None:
    """Touch ``path`` now (creates it and its directory). An OSError is not raised: a read-only
    or full disk must not stop the service, only make its health probe report it stale."""
    with contextlib.suppress(OSError):
        path.parent.mkdir(parents=True, exist_ok=True)
        path.touch()


def age_s(path: Path) -> float | None:
    """Seconds since the last beat, or None when there never was one."""
    try:
        return max(0.0, time.time() - path.stat().st_mtime)
    except OSError:
        return None


def remove(path: Path) -> None:
    """Remove the liveness file at a clean exit."""
    path.unlink(missing_ok=True)


#: ``<service>.<pid>.datasets``: (service, pid) of a datasets status file
_STATUS = re.compile(r"^([A-Za-z0-9_-]+)\.(\d+)\.datasets$")

#: ``<service>.<pid>.alive``, ``.datasets``, ``.conditions`` and ``.spark`` in ``<var_dir>/run``,
#: and the
#: Kerberos ticket caches ``krb5cc_<name>-<pid>`` (``kerberos.ccache`` + ``-<pid>``, by default
#: in ``<var_dir>/run``: a killed process's tickets would otherwise stay until the disk is wiped).
_PER_PROCESS = re.compile(
    r"^(?:[A-Za-z0-9_-]+\.(\d+)\.(?:alive|datasets|conditions|spark)|krb5cc_[\w.]+-(\d+))$"
)


def sweep_dead(run_dir: Path) -> list[Path]:
    """Remove the per-process files (liveness, datasets status, cluster conditions, Spark
    application, Kerberos ticket caches) in ``run_dir`` (``<var_dir>/run``) of processes that no
    longer run: a killed service never removes its own, and every restart has a new pid, so
    without this ``<var_dir>/run`` would grow for the life of the install. A pid that runs again
    (reused by another process) keeps its files until that process ends: they are only small and
    stale.

    Returns the files removed. OSError while listing or removing is not raised.
    """
    removed: list[Path] = []
    try:
        entries = list(run_dir.iterdir())
    except OSError:
        return removed
    for path in entries:
        m = _PER_PROCESS.match(path.name)
        if m is None or _running(int(m.group(1) or m.group(2))):
            continue
        with contextlib.suppress(OSError):
            path.unlink()
            removed.append(path)
    return removed


def _running(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # another user's process
        return True
    return True
