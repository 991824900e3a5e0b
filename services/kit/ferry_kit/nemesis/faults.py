"""Applying and undoing the nemesis's faults on the real local stack and the rig's services.

:class:`Injector` applies a :class:`~ferry_kit.nemesis.schedule.Fault` and undoes it: SIGKILL →
restart (a service through :class:`ferry_kit.pipeline.ServiceGroup`, a stack component through
:meth:`ferry_kit.stack.manager.Stack.up`), SIGSTOP → SIGCONT, a fault proxy's mode → pass-through,
a space quota (``hdfs dfsadmin -setSpaceQuota 1m``) → ``-clrSpaceQuota``. An undo that fails (a
quota cannot be cleared while its NameNode is paused; a component does not come back healthy
within ``restart_deadline_s``) stays pending and is tried again on the next :meth:`Injector.tick`
(undos run in threads, so a slow restart does not delay the schedule);
:meth:`Injector.undo_all` undoes whatever is in force (processes first, then proxies, then
quotas), retrying each within ``undo_deadline_s`` — the runner calls it in a ``finally``.
"""

from __future__ import annotations

import os
import signal
import subprocess
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from ferry_kit.nemesis.schedule import COMPONENTS, LINK_KINDS, SERVICES, ZONES, Fault
from ferry_kit.settings import KitSettings
from ferry_kit.stack.base import Layout
from ferry_kit.stack.manager import Stack
from ferry_kit.stack.servers import hadoop_argv
from ferry_kit.testing.chaos import FaultRig
from ferry_kit.testing.faultproxy import FaultProxy

#: Quota set on a zone: smaller than a block (128 MB), so every block write there is refused.
QUOTA = "1m"


def dfsadmin(stack: KitSettings, cluster: str, *args: str, timeout_s: float = 90) -> str:
    """``hdfs dfsadmin <args>`` on ``cluster`` (Hadoop's DFSAdmin, from the stack's jars);
    returns its output.

    Raises:
        RuntimeError: it exited non-zero or ran longer than ``timeout_s`` (output in the message).
    """
    argv = hadoop_argv(
        Layout(stack.var_dir),
        f"hdfs-{cluster}-dfsadmin",
        128,
        cluster,
        "org.apache.hadoop.hdfs.tools.DFSAdmin",
        *args,
    )
    try:
        proc = subprocess.run(  # noqa: S603
            argv, capture_output=True, text=True, timeout=timeout_s, check=False
        )
    except subprocess.TimeoutExpired as exc:
        raise RuntimeError(f"dfsadmin {args}: no answer within {timeout_s:.0f}s") from exc
    if proc.returncode != 0:
        raise RuntimeError(f"dfsadmin {args}: {proc.stdout[-300:]}{proc.stderr[-300:]}")
    return proc.stdout


def _wait_gone(pid: int, timeout_s: float = 30.0) -> None:
    """Wait until the killed process ``pid`` has exited (a restart must not find its ports still
    held); reap it if it is this process's child (a component the nemesis restarted earlier).

    Raises:
        RuntimeError: still running after ``timeout_s``.
    """
    end = time.monotonic() + timeout_s
    while time.monotonic() < end:
        try:
            if os.waitpid(pid, os.WNOHANG)[0] == pid:
                return
        except ChildProcessError:  # not our child: look at /proc
            state = Path(f"/proc/{pid}/stat")
            if not state.exists() or state.read_text().split(") ", 1)[-1].startswith("Z"):
                return
        time.sleep(0.2)  # a SIGKILLed JVM unmapping its heap: a bounded wait
    raise RuntimeError(f"pid {pid} still running {timeout_s:.0f}s after SIGKILL")


@dataclass
class Applied:
    """A fault in force: the fault, when it was applied (``time.time()``) and, once undone, when."""

    fault: Fault
    applied_at: float
    undone_at: float | None = None
    worker: threading.Thread | None = None  #: the undo under way, or the last one
    error: str | None = None  #: why the last undo failed


@dataclass
class Injector:
    """Applies faults to ``rig``'s services and proxies and to the stack ``stack`` describes."""

    stack: KitSettings
    rig: FaultRig
    say: Callable[[str], None] = print
    restart_deadline_s: float = 240.0
    pending: list[Applied] = field(default_factory=list)
    done: list[Applied] = field(default_factory=list)
    skipped: list[tuple[Fault, str]] = field(default_factory=list)
    _reviving: dict[str, threading.Thread] = field(default_factory=dict)

    # -- applying --------------------------------------------------------------------------
    def apply(self, fault: Fault) -> bool:
        """Apply ``fault``; False (and the reason kept in :attr:`skipped`) when it could not be
        applied (its process not running, a NameNode that did not answer dfsadmin)."""
        try:
            self._apply(fault)
        except Exception as exc:  # noqa: BLE001 - a fault that cannot start is reported, not fatal
            self.skipped.append((fault, str(exc)[:200]))
            self.say(f"nemesis: skipped {fault.kind} {fault.target}: {str(exc)[:200]}")
            return False
        self.pending.append(Applied(fault, time.time()))
        self.say(f"nemesis: {fault.kind} {fault.target} for {fault.length_s:.1f}s")
        return True

    def _apply(self, f: Fault) -> None:
        if f.kind in ("kill", "stop"):
            sig = signal.SIGKILL if f.kind == "kill" else signal.SIGSTOP
            for name in self._names(f):
                self._signal(name, sig)
        elif f.kind in LINK_KINDS:
            proxy = self._proxy(f.target)
            if f.kind == "link-reset":
                proxy.reset_rate(0.5, within_bytes=64 * 1024, direction="down")
            else:
                proxy.stall()
        elif f.kind == "quota":
            cluster, where = self.zone(f.target)
            from ferry.clusters.hdfs.webhdfs import WebHdfs

            WebHdfs.for_cluster(cluster, self.stack).mkdirs(where)
            dfsadmin(self.stack, cluster, "-setSpaceQuota", QUOTA, where)
        else:
            raise ValueError(f"unknown fault kind {f.kind!r}")

    def zone(self, target: str) -> tuple[str, str]:
        """(cluster, HDFS directory) of ``zone:<name>`` for the rig's paths."""
        cluster, setting = ZONES[target.removeprefix("zone:")]
        section, name = setting.split(".")
        return cluster, str(getattr(getattr(self.rig.settings, section), name))

    def _names(self, f: Fault) -> list[str]:
        return sorted(f.processes)

    def _proxy(self, target: str) -> FaultProxy:
        return self.rig.nn if target == "proxy:namenode" else self.rig.dn

    def _signal(self, name: str, sig: int) -> None:
        if name in SERVICES:
            proc = self.rig.group.procs[name]
            if proc.poll() is not None:
                raise RuntimeError(f"service {name} is not running")
            os.killpg(proc.pid, sig)
            if sig == signal.SIGKILL:
                proc.wait(timeout=30)
        else:
            pid = Stack(self.stack).kill(name, sig)
            if sig == signal.SIGKILL:
                _wait_gone(pid)

    def revive_components(self) -> list[str]:
        """Start again, each in a thread, the stack components that exited while no fault holds
        them (a Spark master that lost its ZooKeeper leadership during a pause exits by design:
        its supervisor restarts it). Returns the names found exited (none while a revival of
        theirs is under way)."""
        held = {n for a in self.pending for n in a.fault.processes}
        stack = Stack(self.stack)
        gone = []
        for comp in stack.components:
            reviving = self._reviving.get(comp.name)
            if comp.name in held or (reviving is not None and reviving.is_alive()):
                continue
            if comp.name in COMPONENTS and stack.pid(comp) is None:
                gone.append(comp.name)
                self.say(f"nemesis: {comp.name} exited with no fault holding it; starting it")
                worker = threading.Thread(target=self._revive_one, args=(comp.name,), daemon=True)
                self._reviving[comp.name] = worker
                worker.start()
        return gone

    def _revive_one(self, name: str) -> None:
        try:
            Stack(self.stack).up(self.restart_deadline_s, components=[name])
        except Exception as exc:  # noqa: BLE001 - found again by the next revive_components
            self.say(f"nemesis: {name} did not come back: {str(exc)[:200]}")

    # -- undoing ---------------------------------------------------------------------------
    def tick(self) -> None:
        """Undo each pending fault whose length has passed since it was applied (an apply that
        came late, behind a slow one, still lasts its length). Each undo runs in a thread of its
        own (a restart waits for health, a quota clear starts a JVM) so the schedule keeps its
        times; one that failed is tried again."""
        now = time.time()
        for a in list(self.pending):
            if now >= a.applied_at + a.fault.length_s:
                self._step(a)

    def _step(self, a: Applied) -> None:
        """Start ``a``'s undo, or collect it once its thread has ended."""
        if a.worker is not None and a.worker.is_alive():
            return
        if a.worker is not None:  # ended
            if a.error is None:
                a.undone_at = a.undone_at or time.time()
                self.say(
                    f"nemesis: undone {a.fault.kind} {a.fault.target} "
                    f"{a.undone_at - a.applied_at:.1f}s after it was applied"
                )
                self.pending.remove(a)
                self.done.append(a)
                return
            self.say(
                f"nemesis: undo of {a.fault.kind} {a.fault.target} failed, retrying: {a.error}"
            )
        a.error = None
        a.worker = threading.Thread(target=self._undo_in_thread, args=(a,), daemon=True)
        a.worker.start()

    def _undo_in_thread(self, a: Applied) -> None:
        try:
            self._undo(a.fault)
        except Exception as exc:  # noqa: BLE001 - collected by _step, tried again
            a.error = str(exc)[:300]
        else:
            a.undone_at = time.time()

    def _undo(self, f: Fault) -> None:
        if f.kind == "stop":
            for name in self._names(f):
                self._signal(name, signal.SIGCONT)
        elif f.kind == "kill":
            for name in self._names(f):
                if name in SERVICES:
                    self.rig.group.start(name)
                else:
                    Stack(self.stack).up(self.restart_deadline_s, components=[name])
        elif f.kind in LINK_KINDS:
            self._proxy(f.target).pass_through()
        elif f.kind == "quota":
            cluster, where = self.zone(f.target)
            dfsadmin(self.stack, cluster, "-clrSpaceQuota", where)

    def undo_all(self, deadline_s: float = 600.0) -> list[Applied]:
        """Undo every fault in force now (each in its thread; a quota clear whose NameNode is still
        down fails and is tried again), retrying those that fail until ``deadline_s`` has
        passed. Returns the faults still not undone (empty when all were)."""
        end = time.monotonic() + deadline_s
        while self.pending and time.monotonic() < end:
            for a in list(self.pending):
                self._step(a)
            if self.pending:
                time.sleep(1.0)  # undos under way in their threads: a bounded wait
        return list(self.pending)
