"""The nemesis's seeded fault schedule (issue 47): from a seed and a duration, a list of faults.

A fault is (``at_s``, ``kind``, ``target``, ``length_s``): at ``at_s`` seconds into the run the
nemesis applies ``kind`` to ``target`` and undoes it ``length_s`` seconds later. Kinds:

* ``kill``: SIGKILL of a process (a Ferry service, or a stack component), restarted after
  ``length_s`` (2–90 s);
* ``stop``: SIGSTOP of a process, SIGCONT after ``length_s`` (2–90 s);
* ``link-reset``: a share of the new connections through a fault proxy in front of cluster A's
  WebHDFS (``proxy:namenode`` / ``proxy:datanode``) reset part-way (case C01), for ``length_s``;
* ``link-stall``: the proxy accepts connections and answers nothing (a link that went silent),
  for ``length_s``;
* ``link-slow``: the proxy relays every chunk after 200 ms plus its size at 256 KB/s (a slow
  link between the clusters), for ``length_s``;
* ``space-quota``: a 1 MB space quota on a zone (``zone:landing`` / ``staging`` on cluster B,
  ``incoming`` / ``warehouse`` on cluster A: every block write there is refused, case C22),
  cleared after ``length_s``;
* ``name-quota``: a name quota of 1 on a zone (the directory itself: every create and mkdir
  under it is refused, ``NSQuotaExceededException``), cleared after ``length_s``;
* ``safe-mode``: a NameNode put in safe mode by hand (``dfsadmin -safemode enter``: read-only,
  every write refused with ``SafeModeException``), left after ``length_s``;
* ``disk-full``: a DataNode restarted with ``dfs.datanode.du.reserved`` above its disk, so it
  reports no space left and its NameNode places no block on it ("could only be written to 0 of
  the 1 minReplication nodes"); restarted with its own configuration after ``length_s``;
* ``strangers``: records that are not Ferry's events produced to a stage's input topic
  (``topic:extracted`` / ``transformed`` / ``transferred``): random bytes, a Ferry header with
  a cut payload, another schema's fingerprint, a tombstone (case C24); each must be set aside
  with a reason while the stage goes on. Nothing to undo.

Targets of ``kill`` and ``stop``: the Ferry services (:data:`SERVICES`) and the stack's processes
(:data:`COMPONENTS`; ``spark-masters`` is both Spark masters at once); of ``safe-mode`` and ``disk-
full``, the NameNode or DataNode process itself (so no kill or pause of it overlaps). Which (kind,
target) comes next is drawn from a shuffled deck of every pair (:func:`catalogue`), reshuffled when
used up: a schedule of at least as many faults as the deck holds has each pair at least once. Start
times are a Poisson process (mean gap ``mean_gap_s``); a fault whose target (or a process it
shares, the two masters) is still faulted is moved to just after that fault ends, so two faults
never hold the same process, and later still while ``max_overlap`` faults would be in force with
it; so up to ``max_overlap`` faults are in force at once (several overlapping, as Jepsen's nemeses
run them). Every fault ends by ``duration_s``.

The same seed and duration give the same schedule (``random.Random(seed)``, nothing else drawn).
"""

from __future__ import annotations

import random
import secrets
from collections.abc import Sequence
from dataclasses import dataclass

from ferry.core.services import STAGES

#: The Ferry services the nemesis kills and pauses (the tracker too: its state must survive).
SERVICES: tuple[str, ...] = (*STAGES, "tracker")

#: The local stack's processes (:mod:`ferry_kit.stack.components`, one NameNode per cluster);
#: ``spark-masters`` is both masters at once. ZooKeeper is left alone: the issue does not list it.
COMPONENTS: tuple[str, ...] = (
    "kafka",
    "hdfs-a-namenode",
    "hdfs-b-namenode",
    "hdfs-a-datanode",
    "hdfs-b-datanode",
    "spark-master-1",
    "spark-master-2",
    "spark-masters",
    "spark-worker",
    "hive-metastore",
    "hiveserver2",
)

#: Fault proxies (``ferry_kit.testing.chaos.FaultRig``: ``nn`` and ``dn``).
LINKS: tuple[str, ...] = ("proxy:namenode", "proxy:datanode")

#: Zones a space or name quota is put on: zone → (cluster, the settings path naming its directory).
ZONES: dict[str, tuple[str, str]] = {
    "landing": ("b", "paths.landing_path"),
    "staging": ("b", "paths.staging_path"),
    "incoming": ("a", "paths.incoming_path"),
    "warehouse": ("a", "metastore.warehouse_path"),
}

#: The stage input topics a stranger's records are produced to (extract reads the NAS).
TOPICS: tuple[str, ...] = ("extracted", "transformed", "transferred")

PROCESS_KINDS: tuple[str, ...] = ("kill", "stop")
LINK_KINDS: tuple[str, ...] = ("link-reset", "link-stall", "link-slow")
ZONE_KINDS: tuple[str, ...] = ("space-quota", "name-quota")
#: kind → the stack processes it is applied to
NODE_KINDS: dict[str, tuple[str, ...]] = {
    "safe-mode": ("hdfs-a-namenode", "hdfs-b-namenode"),
    "disk-full": ("hdfs-a-datanode", "hdfs-b-datanode"),
}
KINDS: tuple[str, ...] = (
    *PROCESS_KINDS,
    *LINK_KINDS,
    *ZONE_KINDS,
    *NODE_KINDS,
    "strangers",
)

#: Length of a kill (down time) or a stop (paused time), seconds: the issue's 2–90 s.
PROCESS_LENGTH_S = (2.0, 90.0)
#: Length of a link or quota fault, seconds.
OTHER_LENGTH_S = (5.0, 60.0)


@dataclass(frozen=True, order=True)
class Fault:
    """One fault: applied ``at_s`` seconds after the run starts, undone ``length_s`` later."""

    at_s: float
    kind: str
    target: str
    length_s: float

    @property
    def end_s(self) -> float:
        return self.at_s + self.length_s

    @property
    def processes(self) -> frozenset[str]:
        """What the fault holds: the processes (or proxy, or zone) no other fault may hold.

        ``spark-masters`` holds both masters; safe mode and a full disk hold their cluster's
        NameNode and DataNode both (a DataNode restarts only once its NameNode is healthy and
        out of safe mode, so neither may be paused, killed or in safe mode meanwhile); a compose
        target ``<container>/<network>`` holds the container (a partition of a killed container
        cannot be applied)."""
        if self.target == "spark-masters":
            return frozenset({"spark-master-1", "spark-master-2"})
        if self.kind in NODE_KINDS:
            cluster = self.target.split("-")[1]
            return frozenset({f"hdfs-{cluster}-namenode", f"hdfs-{cluster}-datanode"})
        return frozenset({self.target.split("/")[0]})

    def describe(self) -> str:
        return f"{self.at_s:7.1f}s  {self.kind:<10} {self.target:<18} {self.length_s:5.1f}s"


def catalogue(
    services: Sequence[str] = SERVICES, components: Sequence[str] = COMPONENTS
) -> list[tuple[str, str]]:
    """Every (kind, target) pair a schedule draws from, in a fixed order (``safe-mode`` and
    ``disk-full`` only on the nodes among ``components``)."""
    procs = [*services, *components]
    return (
        [(k, t) for k in PROCESS_KINDS for t in procs]
        + [(k, t) for k in LINK_KINDS for t in LINKS]
        + [(k, f"zone:{z}") for k in ZONE_KINDS for z in ZONES]
        + [(k, t) for k, nodes in NODE_KINDS.items() for t in nodes if t in components]
        + [("strangers", f"topic:{t}") for t in TOPICS]
    )


def fresh_seed() -> int:
    """A new seed (to print first and pass back with ``SEED=`` to repeat the run)."""
    return secrets.randbelow(10**9)


def make_schedule(
    seed: int,
    duration_s: float,
    *,
    mean_gap_s: float = 15.0,
    max_overlap: int = 3,
    services: Sequence[str] = SERVICES,
    components: Sequence[str] = COMPONENTS,
    pairs: Sequence[tuple[str, str]] | None = None,
) -> list[Fault]:
    """The faults of a run of ``duration_s`` seconds, sorted by start (see the module docstring).

    ``pairs``: the (kind, target) deck to draw from instead of :func:`catalogue` of ``services``
    and ``components`` (the compose nemesis's partitions); a kind of :data:`PROCESS_KINDS` lasts
    2–90 s, any other 5–60 s.

    Raises:
        ValueError: ``duration_s`` shorter than the shortest fault, or ``max_overlap`` < 1.
    """
    if duration_s < PROCESS_LENGTH_S[0] or max_overlap < 1:
        raise ValueError(f"need duration_s ≥ {PROCESS_LENGTH_S[0]} and max_overlap ≥ 1")
    rnd = random.Random(seed)
    pairs = list(pairs) if pairs is not None else catalogue(services, components)
    deck: list[tuple[str, str]] = []
    out: list[Fault] = []
    t = rnd.expovariate(1 / mean_gap_s)
    while t < duration_s - PROCESS_LENGTH_S[0]:
        if not deck:
            deck = rnd.sample(pairs, len(pairs))
        kind, target = deck.pop()
        low, high = PROCESS_LENGTH_S if kind in PROCESS_KINDS else OTHER_LENGTH_S
        length = round(rnd.uniform(low, high), 1)
        fault = Fault(round(t, 1), kind, target, length)
        start = _first_free(out, fault, max_overlap)
        if start is not None:
            length = round(min(length, duration_s - start), 1)
            if length >= low or (kind in PROCESS_KINDS and length >= PROCESS_LENGTH_S[0]):
                out.append(Fault(start, kind, target, length))
        t += rnd.expovariate(1 / mean_gap_s)
    return sorted(out)


def _first_free(placed: list[Fault], fault: Fault, max_overlap: int) -> float | None:
    """The earliest start ≥ ``fault.at_s`` at which no placed fault holds what ``fault`` holds
    and fewer than ``max_overlap`` are in force at any moment of its length; None if none is
    found within a bounded number of moves (the caller then drops it)."""
    start = fault.at_s
    for _ in range(4 * len(placed) + 4):
        end = start + fault.length_s
        during = [f for f in placed if f.at_s < end and start < f.end_s]
        clash = [f for f in during if f.processes & fault.processes]
        if clash:
            start = round(max(f.end_s for f in clash) + 1.0, 1)
            continue
        points = [start, *(f.at_s for f in during if f.at_s > start)]
        full = next(
            (p for p in points if sum(f.at_s <= p < f.end_s for f in during) >= max_overlap),
            None,
        )
        if full is None:
            return start
        start = round(min(f.end_s for f in during if f.at_s <= full < f.end_s) + 1.0, 1)
    return None


def max_in_force(faults: Sequence[Fault]) -> int:
    """The most faults in force at one moment."""
    edges = sorted([(f.at_s, 1) for f in faults] + [(f.end_s, -1) for f in faults])
    most = now = 0
    for _, step in edges:
        now += step
        most = max(most, now)
    return most
