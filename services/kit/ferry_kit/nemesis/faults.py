"""Applying and undoing the nemesis's faults on the real local stack and the rig's services.

:class:`Injector` applies a :class:`~ferry_kit.nemesis.schedule.Fault` and undoes it: SIGKILL →
restart (a service through :class:`ferry_kit.pipeline.ServiceGroup`, a stack component through
:meth:`ferry_kit.stack.manager.Stack.up`), SIGSTOP → SIGCONT, a fault proxy's mode → pass-through,
a space quota (``hdfs dfsadmin -setSpaceQuota 1m``) → ``-clrSpaceQuota``, a name quota
(``-setQuota 1``) → ``-clrQuota``, safe mode (``-safemode enter``) → ``-safemode leave``, a
DataNode restarted with ``-D dfs.datanode.du.reserved=`` :data:`RESERVED` → restarted as
configured; strangers' records are produced (:func:`stranger_records`) and their coordinates kept
in :attr:`Injector.strangers` for the checker. An undo that fails (a
quota cannot be cleared while its NameNode is paused; a component does not come back healthy
within ``restart_deadline_s``) stays pending and is tried again on the next :meth:`Injector.tick`
(undos run in threads, so a slow restart does not delay the schedule);
:meth:`Injector.undo_all` undoes whatever is in force (each in its own thread, at once),
retrying each until its deadline — the runner calls it in a ``finally``.
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

from ferry_kit.nemesis.schedule import (
    COMPONENTS,
    LINK_KINDS,
    PROCESS_KINDS,
    SERVICES,
    ZONES,
    Fault,
)
from ferry_kit.settings import KitSettings
from ferry_kit.stack.base import Layout
from ferry_kit.stack.kdc import superuser_env
from ferry_kit.stack.manager import Stack
from ferry_kit.stack.process import port_in_use
from ferry_kit.stack.servers import hadoop_argv
from ferry_kit.testing.chaos import FaultRig
from ferry_kit.testing.faultproxy import FaultProxy

#: Quota set on a zone: smaller than a block (128 MB), so every block write there is refused.
QUOTA = "1m"
#: Name quota set on a zone: the directory itself counts 1, so every create under it is refused.
NAME_QUOTA = "1"
#: ``dfs.datanode.du.reserved`` of a DataNode whose disk is "full": 1 PiB, above any disk here,
#: so the DataNode reports 0 bytes remaining (hdfs-default.xml: space reserved per volume).
RESERVED = str(2**50)
#: A "slow" link: every chunk waits this long plus its size at this bandwidth.
SLOW_LATENCY_S = 0.2
SLOW_BYTES_PER_S = 256 * 1024
#: Seconds a stranger's records may take to be acknowledged by the broker.
PRODUCE_TIMEOUT_S = 15.0
#: A record schema no Ferry event has: its fingerprint is unknown to every stage.
OTHER_SCHEMA = {
    "type": "record",
    "name": "NotFerry",
    "namespace": "org.example",
    "fields": [{"name": "n", "type": "long"}],
}


def stranger_records(seed: int, known_fingerprint: bytes) -> list[tuple[bytes, bytes | None]]:
    """(key, value) of four records that are not Ferry's events (case C24): random bytes, Ferry's
    header (``C3 01`` and ``known_fingerprint``) with a cut payload, another schema's datum under
    its own fingerprint, and a tombstone. Keys are random hex; the same seed gives the same
    records."""
    import io
    import random

    from fastavro import parse_schema, schemaless_writer

    from ferry.core.wire.avro import MAGIC, schema_fingerprint

    rnd = random.Random(seed)
    other = io.BytesIO()
    schemaless_writer(other, parse_schema(OTHER_SCHEMA), {"n": rnd.randrange(2**40)})

    def key() -> bytes:
        return rnd.randbytes(8).hex().encode()

    return [
        (key(), rnd.randbytes(rnd.randint(1, 200))),
        (key(), MAGIC + known_fingerprint + rnd.randbytes(3)),
        (key(), MAGIC + schema_fingerprint(OTHER_SCHEMA) + other.getvalue()),
        (key(), None),
    ]


def dfsadmin(stack: KitSettings, cluster: str, *args: str, timeout_s: float = 90) -> str:
    """``hdfs dfsadmin <args>`` on ``cluster`` (Hadoop's DFSAdmin, from the stack's jars), as the
    HDFS superuser (on Kerberos with a ticket of its principal: :func:`ferry_kit.stack.kdc.
    superuser_env`); returns its output.

    Raises:
        RuntimeError: it exited non-zero or ran longer than ``timeout_s`` (output in the message).
        ferry_kit.errors.StackError: on Kerberos, no ticket for the HDFS principal.
    """
    lay = Layout(stack.var_dir)
    argv = hadoop_argv(
        lay,
        f"hdfs-{cluster}-dfsadmin",
        128,
        cluster,
        "org.apache.hadoop.hdfs.tools.DFSAdmin",
        *args,
        krb=stack.kerberos,
    )
    try:
        with superuser_env(stack, lay) as env:
            proc = subprocess.run(  # noqa: S603
                argv, capture_output=True, text=True, timeout=timeout_s, check=False, env=env
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


def _cluster_of(node: str) -> str:
    """``a`` of ``hdfs-a-namenode``."""
    return node.split("-")[1]


@dataclass
class Applied:
    """A fault in force: the fault, when it was applied (``time.time()``) and, once undone, when."""

    fault: Fault
    applied_at: float
    undone_at: float | None = None
    worker: threading.Thread | None = None  #: the undo under way, or the last one
    error: str | None = None  #: why the last undo failed
    said: str | None = None  #: the last failure reported (the same one is not said again)


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
    #: (topic, partition, offset) of every stranger's record the broker acknowledged
    strangers: list[tuple[str, int, int]] = field(default_factory=list)
    _reviving: dict[str, threading.Thread] = field(default_factory=dict)

    # -- applying --------------------------------------------------------------------------
    def holds(self, processes: frozenset[str]) -> bool:
        """Whether a fault in force (its undo not finished), or a revival under way, holds one of
        ``processes``: the schedule never overlaps two faults on one process, but an undo may
        finish late."""
        reviving = {n for n, t in self._reviving.items() if t.is_alive()}
        return bool(reviving & processes) or any(
            a.fault.processes & processes for a in self.pending
        )

    def may_start(self, fault: Fault) -> bool:
        """Whether ``fault`` may be applied now: nothing holds its processes and, for a fault
        whose apply restarts a component (``disk-full``), nothing holds what that component
        requires (``Stack.up`` would start a killed NameNode early, or wait on a paused one)."""
        wanted = set(fault.processes)
        if fault.kind == "disk-full":
            wanted |= self._requirements(fault.target)
        return not self.holds(frozenset(wanted))

    def _requirements(self, name: str) -> set[str]:
        """The stack components ``name`` requires (transitively), not itself."""
        return {c.name for c in Stack(self.stack).select([name])} - {name}

    def apply(self, fault: Fault) -> bool:
        """Apply ``fault``; False (and the reason kept in :attr:`skipped`) when it could not be
        applied (its process not running, a NameNode that did not answer dfsadmin). A fault of
        a link, a zone or a node that failed part-way (a dfsadmin call that timed out may still
        have been carried out; a DataNode restarted full whose NameNode did not report it) is
        undone at once, in a thread, so nothing is left in force."""
        try:
            self._apply(fault)
        except Exception as exc:  # noqa: BLE001 - a fault that cannot start is reported, not fatal
            self.skipped.append((fault, str(exc)[:200]))
            self.say(f"nemesis: skipped {fault.kind} {fault.target}: {str(exc)[:200]}")
            if fault.kind not in (*PROCESS_KINDS, "strangers"):
                threading.Thread(target=self._undo_quietly, args=(fault,), daemon=True).start()
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
            elif f.kind == "link-slow":
                proxy.slow(SLOW_BYTES_PER_S, latency_s=SLOW_LATENCY_S)
            else:
                proxy.stall()
        elif f.kind in ("space-quota", "name-quota"):
            cluster, where = self.zone(f.target)
            from ferry.clusters.hdfs.webhdfs import WebHdfs

            WebHdfs.for_cluster(cluster, self.stack).mkdirs(where)
            if f.kind == "space-quota":
                dfsadmin(self.stack, cluster, "-setSpaceQuota", QUOTA, where)
            else:
                dfsadmin(self.stack, cluster, "-setQuota", NAME_QUOTA, where)
        elif f.kind == "safe-mode":
            dfsadmin(self.stack, _cluster_of(f.target), "-safemode", "enter")
        elif f.kind == "disk-full":
            self._restart(f.target, "-D", f"dfs.datanode.du.reserved={RESERVED}")
            self._wait_remaining(_cluster_of(f.target), full=True)
        elif f.kind == "strangers":
            self._produce_strangers(f)
        else:
            raise ValueError(f"unknown fault kind {f.kind!r}")

    def zone(self, target: str) -> tuple[str, str]:
        """(cluster, HDFS directory) of ``zone:<name>`` for the rig's paths."""
        cluster, setting = ZONES[target.removeprefix("zone:")]
        section, name = setting.split(".")
        return cluster, str(getattr(getattr(self.rig.settings, section), name))

    def _names(self, f: Fault) -> list[str]:
        return sorted(f.processes)

    def _require_free(self, name: str, f: Fault) -> None:
        """Raise (the undo is tried again on the next tick) while another fault in force holds a
        component ``name`` requires: starting ``name`` would start a killed one early.

        Raises:
            RuntimeError: naming the held requirements.
        """
        others = {n for a in self.pending if a.fault != f for n in a.fault.processes}
        held = self._requirements(name) & others
        if held:
            raise RuntimeError(f"{name} waits: {sorted(held)} held by another fault")

    def _restart(self, name: str, *args: str) -> None:
        """SIGKILL stack component ``name`` and start it again with ``args`` added to its
        command line (none: as configured), waiting until it is healthy.

        Raises:
            StackError: it did not come back healthy within ``restart_deadline_s``.
        """
        stack = Stack(self.stack)
        comp = stack.component(name)
        pid = stack.pid(comp)
        if pid is not None:
            stack.kill(name, signal.SIGKILL)
            _wait_gone(pid)
        end = time.monotonic() + 30
        while any(port_in_use(comp.host, p) for p in comp.ports) and time.monotonic() < end:
            time.sleep(0.2)  # the killed JVM's listeners closing: a bounded wait
        stack.up(self.restart_deadline_s, components=[name], args={name: list(args)})

    def _wait_remaining(self, cluster: str, *, full: bool, timeout_s: float = 90.0) -> None:
        """Wait until ``cluster``'s NameNode reports no space remaining (``full``) or some (its
        JMX ``FSNamesystem.CapacityRemaining``, from the DataNodes' heartbeats: the NameNode
        places blocks by it).

        Raises:
            RuntimeError: not so within ``timeout_s``.
        """
        import requests

        cs = self.stack.cluster(cluster)
        url = f"{cs.web_scheme}://{cs.host}:{cs.namenode_http_port}/jmx"
        query = {"qry": "Hadoop:service=NameNode,name=FSNamesystem"}
        end = time.monotonic() + timeout_s
        remaining: object = "no answer"
        while time.monotonic() < end:
            try:
                beans = requests.get(url, params=query, timeout=5).json()["beans"]
                remaining = beans[0]["CapacityRemaining"] if beans else "no bean"
            except (requests.RequestException, ValueError, KeyError) as exc:
                remaining = str(exc)[:100]
            if isinstance(remaining, int) and (remaining == 0) == full:
                return
            time.sleep(1.0)  # the next DataNode heartbeat: a bounded wait
        raise RuntimeError(
            f"cluster {cluster}'s NameNode still reports {remaining} bytes remaining "
            f"{timeout_s:.0f}s after its DataNode restarted ({'full' if full else 'as configured'})"
        )

    def _produce_strangers(self, f: Fault) -> None:
        """Produce :func:`stranger_records` to the rig's topic ``f.target`` and keep the
        coordinates the broker acknowledged.

        Raises:
            RuntimeError: not every record was acknowledged within PRODUCE_TIMEOUT_S.
        """
        from confluent_kafka import Producer

        from ferry.core.kafka.clients import client_config
        from ferry.core.wire.avro import default_codec

        topic = self.rig.settings.kafka.topic(f.target.removeprefix("topic:"))
        codec = default_codec(self.rig.settings.paths.schemas_dir)
        known = next(iter(codec.known_fingerprints()))
        acked: list[tuple[str, int, int]] = []
        errors: list[str] = []

        def on_delivery(err: object, msg: object) -> None:
            if err is not None:
                errors.append(str(err))
            else:
                acked.append((msg.topic(), msg.partition(), msg.offset()))  # type: ignore[attr-defined]

        producer = Producer(
            {
                **client_config(self.rig.settings.kafka),
                "message.timeout.ms": int(PRODUCE_TIMEOUT_S * 1000),
            }
        )
        records = stranger_records(int(f.at_s * 10), known)
        for key, value in records:
            producer.produce(topic, key=key, value=value, on_delivery=on_delivery)
        producer.flush(PRODUCE_TIMEOUT_S + 5)
        self.strangers.extend(acked)
        if len(acked) < len(records):
            raise RuntimeError(
                f"{len(acked)} of {len(records)} strangers' records acknowledged on {topic}: "
                f"{errors[:2]}"
            )

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
            if a.error != a.said:  # a restart waiting on a paused NameNode fails every tick
                self.say(
                    f"nemesis: undo of {a.fault.kind} {a.fault.target} failed, retrying: {a.error}"
                )
                a.said = a.error
        a.error = None
        a.worker = threading.Thread(target=self._undo_in_thread, args=(a,), daemon=True)
        a.worker.start()

    def _undo_quietly(self, f: Fault, attempts: int = 5) -> None:
        """Undo a fault that failed part-way (every undo is idempotent), trying again 10 s apart;
        says so when it never succeeded."""
        for _ in range(attempts):
            try:
                self._undo(f)
                return
            except Exception:  # noqa: BLE001 - tried again, then reported
                time.sleep(10)  # the NameNode or DataNode coming back: a bounded wait
        self.say(f"nemesis: could not undo the part-applied {f.kind} {f.target}")

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
                    self._require_free(name, f)
                    Stack(self.stack).up(self.restart_deadline_s, components=[name])
        elif f.kind in LINK_KINDS:
            self._proxy(f.target).pass_through()
        elif f.kind in ("space-quota", "name-quota"):
            cluster, where = self.zone(f.target)
            clear = "-clrSpaceQuota" if f.kind == "space-quota" else "-clrQuota"
            dfsadmin(self.stack, cluster, clear, where)
        elif f.kind == "safe-mode":
            dfsadmin(self.stack, _cluster_of(f.target), "-safemode", "leave")
        elif f.kind == "disk-full":
            self._require_free(f.target, f)
            self._restart(f.target)
            self._wait_remaining(_cluster_of(f.target), full=False)

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
