"""Issue 48: files through the whole pipeline with Spark on each cluster's own YARN (transform on
B's, load on A's), exactly once, across a SIGKILL in the middle of a load batch of cluster A's
active ResourceManager, then of its NodeManager with its containers, and on sessions older than
their HDFS delegation tokens.

One stack (profiles ``yarn`` and ``yarn-kerberos``: Kerberos everywhere, as on the secure Hadoop
clusters Ferry is for; ``make test-yarn``) and one :class:`~ferry_kit.testing.chaos.FaultRig` for
the module: the four stages run as processes, started with only the clusters' client configuration
directories (``yarn-site.xml`` among them) and ``spark.cluster_managers`` from the profile. Each
test drops its own distinct daily flights slices and ends with every file loaded exactly once with
its exact row count in Hive (over HiveServer2). The fault tests print the seconds from the kill
to the standby ResourceManager becoming ACTIVE (or the NodeManager back) and to the next
FileLoaded (figures, not asserted).
"""

from __future__ import annotations

import contextlib
import re
import signal
import time
from collections.abc import Iterator
from typing import Any

import psutil
import pytest

from ferry.clusters import spark_yarn
from ferry.clusters.hdfs.webhdfs import WebHdfs
from ferry_kit.settings import KitSettings
from ferry_kit.stack import health
from ferry_kit.stack.manager import Stack
from ferry_kit.stack.yarn import active_rm, rm_state, running_apps
from ferry_kit.testing.chaos import FaultRig, running_rig
from ferry_kit.testing.slices import SliceFile
from ferry_kit.testing.waiting import wait_for

pytestmark = [pytest.mark.e2e, pytest.mark.stack("all")]

ROWS = 20  #: rows per file
SETTLE_S = 600  #: deadline for a test's files to settle (2 shared cores: be generous)

_first_slice = iter(range(0, 100_000, 100))

#: the load service's line at the start of each Spark job (ferry.stages.load.handlers)
LOAD_JOB_STARTED = re.compile(r"load: Spark job for \d+ \w+ file\(s\) starting")


@pytest.fixture(scope="module")
def rig(yarn_stack: KitSettings, tmp_path_factory: pytest.TempPathFactory) -> Iterator[FaultRig]:
    # min_window_s 60: a transient failure is retried for at least 60 s, longer than a failover
    extra = {"kafka.session_timeout_ms": 10_000, "retry.min_window_s": 60.0}
    with running_rig(yarn_stack, tmp_path_factory.mktemp("yarn"), seed=48, extra=extra) as r:
        yield r


def states(stack: KitSettings) -> dict[str, str]:
    """{RM id: haState or 'down'} of cluster A's pair, from each RM's /ws/v1/cluster/info."""
    return {rm.id: rm_state(rm) for rm in stack.yarn["a"].resourcemanagers}


def app_names(stack: KitSettings, cluster: str) -> dict[str, str]:
    """{application id: name} of the RUNNING applications on ``cluster``'s active RM."""
    rm = active_rm(stack.yarn[cluster])
    assert rm is not None, f"no ACTIVE ResourceManager on cluster {cluster}"
    return {app["id"]: app["name"] for app in running_apps(rm)}


def test_1_files_through_the_pipeline_on_yarn_exactly_once(
    rig: FaultRig, yarn_stack: KitSettings
) -> None:
    files = rig.slices(30, rows=ROWS, first=next(_first_slice))
    t0 = time.monotonic()
    rig.drop(files)
    rig.settle(files, SETTLE_S)
    took = time.monotonic() - t0
    figures = rig.assert_exactly_once(files)
    # the Spark work ran on the clusters' own YARN: transform's application on B's
    # ResourceManager, load's on A's, in the queue of the settings
    on_b, on_a = app_names(yarn_stack, "b"), app_names(yarn_stack, "a")
    assert "ferry-transform" in on_b.values(), on_b
    assert "ferry-load" in on_a.values(), on_a
    # the jars archive is on each cluster's HDFS once, and a session found it there or staged it
    path = spark_yarn.archive_path(yarn_stack)
    for cluster in ("a", "b"):
        with WebHdfs.for_cluster(cluster, yarn_stack) as hdfs:
            assert hdfs.exists(path), f"{path} on cluster {cluster}"
    logs = {p.name: p.read_text(errors="replace") for p in rig.group.log_dir.glob("*.log")}
    uploads = sum(text.count("(uploaded now)") for text in logs.values())
    assert uploads <= 2, f"the archive was uploaded {uploads} times (once per cluster at most)"
    print(
        f"\nYARN pipeline: {figures}, {took:.1f} s from drop to the last file settled; "
        f"applications on B {on_b}, on A {on_a}; archive uploads this run {uploads}"
    )


def test_2_kill9_active_resourcemanager_of_a_mid_load(
    rig: FaultRig, yarn_stack: KitSettings
) -> None:
    """SIGKILL of cluster A's ACTIVE ResourceManager while the load service runs a batch (the
    kill follows the load service's log line that starts a Spark job of these files): the
    standby becomes ACTIVE, the batch finishes or is redone, every file is loaded exactly
    once, and the load service's YARN application is the same one before and after (the new
    ACTIVE recovered it from ZooKeeper: work-preserving recovery)."""
    stack = Stack(yarn_stack)
    before = states(yarn_stack)
    assert sorted(before.values()) == ["ACTIVE", "STANDBY"], before
    load_apps_before = load_apps(yarn_stack)
    files, loaded_at_kill = drop_until_a_load_job_runs(rig)
    old = next(i for i, s in states(yarn_stack).items() if s == "ACTIVE")
    wall, t0 = time.time(), time.monotonic()
    stack.kill(f"yarn-a-{old}", signal.SIGKILL)
    try:
        wait_for(
            lambda: any(s == "ACTIVE" for i, s in states(yarn_stack).items() if i != old),
            lambda: f"the standby of {old} ACTIVE (states {states(yarn_stack)})",
            120,
            poll_s=0.2,
        )
        to_active = time.monotonic() - t0
        rig.settle(files, SETTLE_S)
        figures = {
            "kill_to_standby_active_s": round(to_active, 1),
            "kill_to_next_loaded_s": _round(rig.first_loaded_after(files, wall)),
            "loaded_before_kill": loaded_at_kill,
            **rig.assert_exactly_once(files),
        }
        load_apps_after = running_load_app(yarn_stack)
        print(
            f"\nYARN failover, kill -9 of active ResourceManager {old} of cluster A mid-load: "
            f"{figures}; RMs now {states(yarn_stack)}; load's application before "
            f"{sorted(load_apps_before)}, after {sorted(load_apps_after)}"
        )
    finally:
        restore(yarn_stack)


def test_3_kill9_nodemanager_of_a_with_its_containers_mid_load(
    rig: FaultRig, yarn_stack: KitSettings
) -> None:
    """SIGKILL of cluster A's only NodeManager and every process it started (the load
    application's master and executors: a node lost, not only its daemon) while the load service
    runs a batch; the NodeManager is started again 5 s later. Its containers' work is redone
    (a new attempt of the application's master and new executors, or a new application when
    Spark stops the session): every file is loaded exactly once. Prints the seconds from the
    kill to the next file loaded and load's application before and after (figures, not
    asserted)."""
    stack = Stack(yarn_stack)
    name = "yarn-a-nodemanager"
    load_apps_before = load_apps(yarn_stack)
    files, loaded_at_kill = drop_until_a_load_job_runs(rig)
    pid = stack.pid(stack.component(name))
    assert pid is not None, f"{name} is not running"
    node = psutil.Process(pid)
    tree = [node, *node.children(recursive=True)]
    # the containers run in their own sessions (YARN's DefaultContainerExecutor starts each
    # with setsid), so a signal to the NodeManager's process group would leave them running
    # (each container's JVM runs in its working directory .../appcache/<application>/<container>)
    containers = sum(_container_jvm(p) for p in tree[1:])
    assert containers >= 1, f"no container under {name} (load's executors should be there)"
    wall, t0 = time.time(), time.monotonic()
    for proc in tree:
        with contextlib.suppress(psutil.NoSuchProcess):
            proc.kill()
    psutil.wait_procs(tree, timeout=30)
    time.sleep(5)  # the fault's length: the node stays down 5 s before its NodeManager returns
    stack.up(300, [name])
    back = time.monotonic() - t0
    rig.settle(files, SETTLE_S)
    figures = {
        "processes_killed": len(tree),
        "containers_killed": containers,
        "kill_to_nodemanager_back_s": round(back, 1),
        "kill_to_next_loaded_s": _round(rig.first_loaded_after(files, wall)),
        "loaded_before_kill": loaded_at_kill,
        **rig.assert_exactly_once(files),
    }

    load_apps_after = running_load_app(yarn_stack)
    figures["kill_to_application_running_s"] = round(time.monotonic() - t0, 1)
    print(
        f"\nYARN NodeManager loss, kill -9 of {name} and its containers mid-load: {figures}; "
        f"load's application before {sorted(load_apps_before)}, after {sorted(load_apps_after)}"
    )


def test_4_sessions_outlive_their_delegation_tokens(rig: FaultRig, yarn_stack: KitSettings) -> None:
    """Kerberos on YARN (profile ``yarn-kerberos``): the stack's HDFS delegation tokens live
    60 s unless renewed and 120 s at most. Transform's and load's applications, started with the
    rig, are older than that (the test waits if not); new files still go through them exactly
    once, in the same applications (no session rebuilt), on tokens Spark obtained after the
    applications' first ones died: each cluster's NameNode created tokens for Ferry's user with
    the ResourceManager (``yarn``) as renewer after the application started, the first of them
    past its max date when the files were dropped and one alive then. Prints how many Spark
    obtained and how many the ResourceManager obtained for the application as a proxy user
    (``realUser=yarn/…``: what a restarted application master would localize with)."""
    krb = yarn_stack.kerberos
    assert krb.enabled, "tests/yarn runs on Kerberos (make test-yarn: profile yarn-kerberos)"
    max_life_ms = 1000 * (krb.delegation_token_max_lifetime_s or 0)
    assert 0 < max_life_ms <= 300_000, "the tier's tokens die within minutes (yarn-kerberos)"
    apps = {
        "b": _one_app(yarn_stack, "b", "ferry-transform"),
        "a": _one_app(yarn_stack, "a", "ferry-load"),
    }
    started = {c: _app_started_ms(yarn_stack, c, app) for c, app in apps.items()}
    past = max(started.values()) + max_life_ms + 5_000
    wait_for(
        lambda: time.time() * 1000 > past,
        lambda: "both applications older than the tokens' max lifetime",
        max_life_ms / 1000 + 60,
        poll_s=1.0,
    )
    files = rig.slices(10, rows=ROWS, first=next(_first_slice))
    dropped_ms = time.time() * 1000
    rig.drop(files)
    rig.settle(files, SETTLE_S)
    figures = rig.assert_exactly_once(files)
    assert _one_app(yarn_stack, "b", "ferry-transform") == apps["b"]
    assert _one_app(yarn_stack, "a", "ferry-load") == apps["a"]
    counts = {}
    for cluster, app in apps.items():
        ferry = krb.principal.split("@")[0].split("/")[0]
        tokens = [
            t
            for t in namenode_tokens(yarn_stack, cluster)
            if t["renewer"] == "yarn" and t["owner"].split("@")[0] == ferry
        ]
        sparks = [t for t in tokens if not t["real"] and t["issue"] >= started[cluster] - 30_000]
        proxied = [
            t
            for t in tokens
            if t["real"].startswith("yarn/") and t["issue"] >= started[cluster] - 30_000
        ]
        assert len(sparks) >= 2, f"{app} on {cluster}: Spark obtained {sparks}"
        first = min(sparks, key=lambda t: t["issue"])
        assert first["max"] < dropped_ms, f"{app}: its first token was alive at the drop"
        assert any(t["issue"] <= dropped_ms <= t["max"] for t in sparks), (
            f"{app}: no token of Spark's alive at the drop: {sparks}"
        )
        counts[cluster] = {
            "application": app,
            "age_s": round((dropped_ms - started[cluster]) / 1000),
            "spark_tokens": len(sparks),
            "resourcemanager_tokens": len(proxied),
        }
    print(f"\nYARN on Kerberos, sessions older than their tokens: {figures}; {counts}")


_TOKEN = re.compile(
    r"Creating password for identifier: \(token for \S+: HDFS_DELEGATION_TOKEN "
    r"owner=(?P<owner>[^,]*), renewer=(?P<renewer>[^,]*), realUser=(?P<real>[^,]*), "
    r"issueDate=(?P<issue>\d+), maxDate=(?P<max>\d+)"
)


def namenode_tokens(stack: KitSettings, cluster: str) -> list[dict[str, Any]]:
    """The HDFS delegation tokens ``cluster``'s NameNode created, from its log (Hadoop's
    ``AbstractDelegationTokenSecretManager.createPassword`` logs each at INFO): owner, renewer,
    real user (a proxy user's), issue and max dates (epoch ms)."""
    text = (stack.var_dir / "log" / f"hdfs-{cluster}-namenode.log").read_text(errors="replace")
    return [
        {**m.groupdict(), "issue": int(m["issue"]), "max": int(m["max"])}
        for m in _TOKEN.finditer(text)
    ]


def _one_app(stack: KitSettings, cluster: str, name: str) -> str:
    """The id of the one RUNNING application ``name`` on ``cluster``'s ACTIVE RM."""
    ids = [i for i, n in app_names(stack, cluster).items() if n == name]
    assert len(ids) == 1, f"{name} on {cluster}: {app_names(stack, cluster)}"
    return ids[0]


def _app_started_ms(stack: KitSettings, cluster: str, app: str) -> int:
    """``startedTime`` (epoch ms) of application ``app`` (``/ws/v1/cluster/apps/<id>``)."""
    rm = active_rm(stack.yarn[cluster])
    assert rm is not None, f"no ACTIVE ResourceManager on cluster {cluster}"
    return int(health._get_json(f"{rm.web_url}/ws/v1/cluster/apps/{app}")["app"]["startedTime"])  # noqa: SLF001


def _container_jvm(proc: psutil.Process) -> bool:
    """A JVM started in a YARN container's working directory (an executor or a master)."""
    try:
        argv = proc.cmdline()
    except (psutil.NoSuchProcess, psutil.AccessDenied, psutil.ZombieProcess):
        return False
    return bool(argv) and argv[0].endswith("java") and any("/container_" in a for a in argv)


def load_apps(stack: KitSettings) -> set[str]:
    """Ids of the RUNNING ``ferry-load`` applications on cluster A's ACTIVE ResourceManager."""
    return {i for i, n in app_names(stack, "a").items() if n == "ferry-load"}


def running_load_app(stack: KitSettings) -> set[str]:
    """Wait (up to SETTLE_S) until a ``ferry-load`` application RUNS on cluster A's ACTIVE
    ResourceManager and return the ids: after a fault its files may all be loaded before its
    master has re-registered with a new ACTIVE RM or its next attempt runs (CI runs of
    2026-12-07 checked at once and failed, test_3 4 s after its NodeManager came back).

    Raises:
        AssertionError: none within SETTLE_S.
    """
    return wait_for(
        lambda: load_apps(stack),
        lambda: f"a ferry-load application RUNNING on A (running: {app_names(stack, 'a')})",
        SETTLE_S,
        poll_s=1.0,
    )


def drop_until_a_load_job_runs(rig: FaultRig) -> tuple[list[SliceFile], int]:
    """Drop 40 new files and wait until a load job of them has started (its log line is
    written just before the job); returns the files and how many were loaded by then."""
    files = rig.slices(40, rows=ROWS, first=next(_first_slice))
    jobs_before = load_jobs_started(rig)
    rig.drop(files)
    rig.wait_until(lambda: load_jobs_started(rig) > jobs_before, SETTLE_S, "a load job started")
    return files, rig.reached(files, "loaded")


def load_jobs_started(rig: FaultRig) -> int:
    """Load jobs started so far: the load service's "Spark job for … starting" log lines."""
    log = rig.group.log_dir / "load.log"
    text = log.read_text(errors="replace") if log.exists() else ""
    return len(LOAD_JOB_STARTED.findall(text))


def restore(stack: KitSettings) -> None:
    """Restart the killed ResourceManager and wait for one ACTIVE and one STANDBY."""
    Stack(stack).up(300, ["yarn"])
    wait_for(
        lambda: sorted(states(stack).values()) == ["ACTIVE", "STANDBY"],
        lambda: f"one ACTIVE and one STANDBY ResourceManager (states {states(stack)})",
        120,
        poll_s=0.5,
    )


def _round(x: float | None) -> float | None:
    return None if x is None else round(x, 1)
