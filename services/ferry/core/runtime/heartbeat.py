"""A liveness file a service's main loop touches on every turn, for ``ferry ps`` health.

A process can be up and still stuck (a hung NFS read, a dead scan thread): a loop that touched its
file less than a few intervals ago is working. The file is ``<var_dir>/run/<service>.<pid>.alive``
(one per instance); its modification time is the last beat.
"""

from __future__ import annotations

import contextlib
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


#: ``<service>.<pid>.alive``, ``.datasets`` and ``.conditions`` in ``<var_dir>/run``, and the
#: Kerberos ticket caches ``krb5cc_<name>-<pid>`` (``kerberos.ccache`` + ``-<pid>``, by default
#: in ``<var_dir>/run``: a killed process's tickets would otherwise stay until the disk is wiped).
_PER_PROCESS = re.compile(
    r"^(?:[A-Za-z0-9_-]+\.(\d+)\.(?:alive|datasets|conditions)|krb5cc_[\w.]+-(\d+))$"
)


def sweep_dead(run_dir: Path) -> list[Path]:
    """Remove the per-process files (liveness, datasets status, cluster conditions, Kerberos
    ticket caches) in ``run_dir`` (``<var_dir>/run``) of processes that no longer run: a killed
    service never removes its own, and every restart has a new pid, so without this
    ``<var_dir>/run`` would grow for the life of the install. A pid that runs again (reused by
    another process) keeps its files until that process ends: they are only small and stale.

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
