"""Issue 13: files keep flowing across NameNode failovers of HA cluster A, none lost or duplicated.

One stack (profile ``ha``) and one :class:`~ferry_kit.testing.chaos.FaultRig` for the module; every
scenario drops its own ``FILES`` distinct daily flights slices, injects its fault once the first
file reached HDFS A (transfer and load running), and ends with every file loaded exactly once
with its exact row count in Hive (over HiveServer2). Each prints the seconds from the fault to
the standby NameNode becoming active and to the next FileLoaded (figures, not asserted).
"""

from __future__ import annotations

import contextlib
import re
import signal
import time
from collections.abc import Callable, Iterator

import pytest

from ferry.settings import Settings
from ferry_kit.errors import StackError
from ferry_kit.stack.hdfs_ha import namenode_state
from ferry_kit.stack.health import Unhealthy
from ferry_kit.stack.manager import Stack
from ferry_kit.testing.chaos import FaultRig, running_rig
from ferry_kit.testing.waiting import wait_for

pytestmark = [pytest.mark.e2e, pytest.mark.stack("all")]

FILES = 60  #: files per scenario (the issue: ≥ 60 daily files)
ROWS = 20  #: rows per file
SETTLE_S = 600  #: deadline for a scenario's files to settle (2 shared cores: be generous)
#: a failed attempt after the first retry: "attempt 2/6 failed", "attempt 3/6 failed", …
SECOND_RETRY = re.compile(r"attempt ([2-9]|\d{2,})/\d+ failed")

_first_slice = iter(range(0, 100_000, FILES))


@pytest.fixture(scope="module")
def rig(ha_stack: Settings, tmp_path_factory: pytest.TempPathFactory) -> Iterator[FaultRig]:
    # read timeout 10 s: a SIGSTOPped NameNode costs each WebHDFS call (and, on HA clusters,
    # each Hadoop RPC: ipc.client.rpc-timeout.ms) 10 s before the next NameNode is tried
    # min_window_s 60: a transient failure is retried for at least 60 s, longer than any
    # fault window here (scenario 3 resets every connection to the active for 20 s)
    extra = {
        "kafka.session_timeout_ms": 10_000,
        "retry.read_timeout_s": 10.0,
        "retry.min_window_s": 60.0,
    }
    with running_rig(ha_stack, tmp_path_factory.mktemp("ha"), seed=13, extra=extra) as r:
        yield r


def states(stack: Settings) -> dict[str, str]:
    """{NameNode id: active/standby/…, or 'down'} of cluster A, straight from each /jmx."""
    out = {}
    for nn in stack.cluster("a").namenodes:
        try:
            out[nn.id] = namenode_state(nn.http_address)
        except Unhealthy:
            out[nn.id] = "down"
    return out


def active(stack: Settings) -> str:
    now = states(stack)
    ids = [i for i, s in now.items() if s == "active"]
    assert len(ids) == 1, f"expected one active NameNode, saw {now}"
    return ids[0]


def wait_other_active(stack: Settings, old: str, since: float, deadline_s: float = 120) -> float:
    """Seconds from ``since`` (monotonic) until a NameNode other than ``old`` is active."""
    wait_for(
        lambda: any(s == "active" for i, s in states(stack).items() if i != old),
        lambda: f"a NameNode other than {old} active (states {states(stack)})",
        deadline_s,
        poll_s=0.2,
    )
    return time.monotonic() - since


def restore(stack: Settings) -> None:
    """Restart whatever HA daemon died (a killed or fenced NameNode) and wait for one active and
    one standby NameNode."""
    Stack(stack).up(300, ["hdfs"])
    wait_for(
        lambda: sorted(states(stack).values()) == ["active", "standby"],
        lambda: f"one active and one standby NameNode (states {states(stack)})",
        120,
        poll_s=0.5,
    )


def second_retries(rig: FaultRig) -> int:
    return sum(
        len(SECOND_RETRY.findall(log.read_text(errors="replace")))
        for log in rig.group.log_dir.glob("*.log")
    )


def run_scenario(
    rig: FaultRig,
    stack: Settings,
    name: str,
    inject: Callable[[str], None],
    *,
    failover: bool = True,
    after: Callable[[str], None] | None = None,
) -> dict[str, float | int | None]:
    """Drop the files, wait for the first transfer to A, ``inject(active id)``, measure, settle,
    check exactly; returns the scenario's figures (also printed)."""
    files = rig.slices(FILES, rows=ROWS, first=next(_first_slice))
    rig.drop(files)
    rig.wait_until(lambda: rig.reached(files, "transferred") >= 1, SETTLE_S, "first transfer")
    old = active(stack)
    wall, t0 = time.time(), time.monotonic()
    inject(old)
    to_active = wait_other_active(stack, old, t0) if failover else None
    if after is not None:
        after(old)
    rig.settle(files, SETTLE_S)
    figures = {
        "fault_to_standby_active_s": None if to_active is None else round(to_active, 1),
        "fault_to_next_loaded_s": _round(rig.first_loaded_after(files, wall)),
        **rig.assert_exactly_once(files),
    }
    print(f"\nHA scenario {name}: {figures}; NameNodes now {states(stack)}")
    return figures


def _round(x: float | None) -> float | None:
    return None if x is None else round(x, 1)


def test_4_graceful_failover_retries_no_file_twice(rig: FaultRig, ha_stack: Settings) -> None:
    before = second_retries(rig)

    def failover(old: str) -> None:
        new = next(nn.id for nn in ha_stack.cluster("a").namenodes if nn.id != old)
        res = haadmin(ha_stack, "-failover", old, new)
        assert res == 0

    run_scenario(rig, ha_stack, "(4) haadmin -failover", failover)
    assert second_retries(rig) - before == 0  # no file retried more than once


def test_1_kill9_active_namenode(rig: FaultRig, ha_stack: Settings) -> None:
    def kill(old: str) -> None:
        Stack(ha_stack).kill(f"hdfs-a-{old}", signal.SIGKILL)

    run_scenario(rig, ha_stack, "(1) kill -9 active NameNode", kill)
    restore(ha_stack)


def test_3_resets_on_active_namenode_ports(rig: FaultRig, ha_stack: Settings) -> None:
    window_s = 20.0
    fired: dict[str, int] = {}

    def resets(old: str) -> None:
        for proxy in rig.namenode_proxies[old]:
            proxy.reset_rate(1.0)

    def heal(old: str) -> None:
        time.sleep(window_s)  # the fault's length, by design: resets for window_s seconds
        for kind, proxy in zip(("rpc", "http"), rig.namenode_proxies[old], strict=True):
            # a port no client opened a connection to in the window has no count (Hadoop's RPC
            # client keeps its connections; one CI run saw none on RPC)
            fired[kind] = proxy.counts.get("reset_rate", 0)
            proxy.pass_through()

    try:
        run_scenario(
            rig, ha_stack, "(3) resets on active RPC+HTTP", resets, failover=False, after=heal
        )
    finally:  # a failure here must not leave the next scenario a NameNode that resets all
        for proxy in [p for pair in rig.namenode_proxies.values() for p in pair]:
            proxy.pass_through()
    assert fired["http"] >= 1, fired  # the fault fired on the HTTP port
    print(f"resets fired: {fired}")


def test_2_sigstop_active_namenode_is_fenced(rig: FaultRig, ha_stack: Settings) -> None:
    """A hung active NameNode (SIGSTOP) is fenced, killed, before the standby becomes active:
    unfenced, it answers stale reads once continued (ferry_kit.stack.hdfs_ha.fencing_method)."""
    stack = Stack(ha_stack)

    def stop(old: str) -> None:
        stack.kill(f"hdfs-a-{old}", signal.SIGSTOP)

    def fenced(old: str) -> None:
        # the ZKFC fences before it makes the standby active, so by now the process is gone
        assert stack.pid(stack.component(f"hdfs-a-{old}")) is None

    try:
        run_scenario(rig, ha_stack, "(2) SIGSTOP active NameNode, fenced", stop, after=fenced)
    finally:
        for nn in ha_stack.cluster("a").namenodes:  # never leave a stopped JVM behind
            with contextlib.suppress(StackError):  # a NameNode that is down needs no SIGCONT
                stack.kill(f"hdfs-a-{nn.id}", signal.SIGCONT)
    restore(ha_stack)


def haadmin(stack: Settings, *args: str) -> int:
    """``hdfs haadmin <args>`` (the DFSHAAdmin tool) with cluster A's client configuration;
    returns its exit code."""
    import subprocess

    from ferry_kit.stack.base import Layout
    from ferry_kit.stack.servers import hadoop_argv

    lay = Layout(stack.var_dir)
    argv = hadoop_argv(
        lay,
        "hdfs-a-haadmin",
        128,
        "a",
        "org.apache.hadoop.hdfs.tools.DFSHAAdmin",
        *args,
        conf_name="hdfs-a-nn1",  # the HA server keys: automatic failover, every ZKFC's port
    )
    proc = subprocess.run(argv, capture_output=True, text=True, timeout=120, check=False)  # noqa: S603
    print(f"haadmin {' '.join(args)} → {proc.returncode}: {proc.stdout[-500:]}{proc.stderr[-500:]}")
    return proc.returncode
