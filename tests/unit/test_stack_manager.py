"""Stack.up leaves no orphans: when it fails, it stops what it started and only that.

Real (tiny) processes stand in for the servers: ``sh -c 'sleep 300'`` with the stack's markers
on its command line, so pid ownership works exactly as for the JVMs.
"""

from __future__ import annotations

from dataclasses import replace

import pytest

from ferry_kit.errors import StackError
from ferry_kit.settings import get_kit_settings
from ferry_kit.stack import process
from ferry_kit.stack.base import Component
from ferry_kit.stack.health import Unhealthy
from ferry_kit.stack.manager import Stack


def _sleeper(name: str, var, check) -> Component:  # type: ignore[no-untyped-def]
    argv = ["sh", "-c", "sleep 300; exit 0", *process.markers(name, var)]  # no exec: keeps markers
    launch = process.Launch(
        name, argv, {}, var / "log" / f"{name}.log", var / "run" / f"{name}.pid", var
    )
    return Component(name, "test", launch, check=check)


def _stack(tmp_path, comps: list[Component]) -> Stack:  # type: ignore[no-untyped-def]
    st = Stack(get_kit_settings().model_copy(update={"var_dir": tmp_path}))
    st.components = comps
    st._by_name = {c.name: c for c in comps}
    return st


def _never() -> str:
    raise Unhealthy("never healthy")


def test_failed_up_stops_what_it_started_and_keeps_what_was_running(tmp_path):  # type: ignore[no-untyped-def]
    running = _sleeper("already", tmp_path, lambda: "ok")
    ok = _sleeper("ok", tmp_path, lambda: "ok")
    bad = _sleeper("bad", tmp_path, _never)
    pre = _stack(tmp_path, [running])
    assert pre.up(deadline_s=5) == ["already"]
    already_pid = pre.pid(running)
    st = _stack(tmp_path, [running, ok, bad])
    try:
        with pytest.raises(StackError, match="bad not healthy before the deadline: never healthy"):
            st.up(deadline_s=1.5)
        assert st.pid(ok) is None and st.pid(bad) is None
        assert not ok.launch.pid_file.exists() and not bad.launch.pid_file.exists()
        assert st.pid(running) == already_pid and process.alive(already_pid)
    finally:
        assert st.down() == [("bad", "not running"), ("ok", "not running"), ("already", "stopped")]


#: The Spark and Hive servers, in start order (each after what it requires).
SPARK_AND_HIVE = [
    "spark-master-1",
    "spark-master-2",
    "spark-worker",
    "hive-metastore",
    "hiveserver2",
]


@pytest.mark.parametrize(
    ("wanted", "expected"),
    [
        (["kafka"], ["kafka"]),
        (["zookeeper"], ["zookeeper"]),
        (["hdfs"], ["hdfs-b-namenode", "hdfs-a-namenode", "hdfs-b-datanode", "hdfs-a-datanode"]),
        (["spark"], ["zookeeper", "spark-master-1", "spark-master-2", "spark-worker"]),
        (["hive"], ["hdfs-a-namenode", "hdfs-a-datanode", "hive-metastore", "hiveserver2"]),
        (["hdfs-b-datanode"], ["hdfs-b-namenode", "hdfs-b-datanode"]),
        (
            ["spark", "hive"],
            ["zookeeper", "hdfs-a-namenode", "hdfs-a-datanode", *SPARK_AND_HIVE],
        ),
        (
            ["kafka", "hdfs", "kafka"],
            ["kafka", *[f"hdfs-{c}-{r}" for r in ("namenode", "datanode") for c in "ba"]],
        ),
    ],
)
def test_select_adds_what_each_group_requires_in_start_order(tmp_path, wanted, expected):  # type: ignore[no-untyped-def]
    st = Stack(get_kit_settings().model_copy(update={"var_dir": tmp_path}))
    assert [c.name for c in st.select(wanted)] == expected


def test_select_all_and_none_are_every_component_in_start_order(tmp_path):  # type: ignore[no-untyped-def]
    st = Stack(get_kit_settings().model_copy(update={"var_dir": tmp_path}))
    every = [
        "zookeeper",
        "kafka",
        "hdfs-b-namenode",
        "hdfs-a-namenode",
        "hdfs-b-datanode",
        "hdfs-a-datanode",
        *SPARK_AND_HIVE,
    ]
    assert [c.name for c in st.select(["all"])] == every
    assert [c.name for c in st.select(None)] == every
    assert [c.name for c in st.components] == every


def test_select_refuses_an_unknown_name(tmp_path):  # type: ignore[no-untyped-def]
    st = Stack(get_kit_settings().model_copy(update={"var_dir": tmp_path}))
    with pytest.raises(StackError, match="no stack component or group 'hbase'"):
        st.select(["kafka", "hbase"])


def test_up_of_a_subset_then_more_starts_only_the_missing_ones(tmp_path):  # type: ignore[no-untyped-def]
    base = _sleeper("base", tmp_path, lambda: "ok")
    mid = _sleeper("mid", tmp_path, lambda: "ok")
    other = _sleeper("other", tmp_path, lambda: "ok")
    st = _stack(tmp_path, [base, replace(mid, requires=("base",), group="g"), other])
    try:
        assert st.up(deadline_s=5, components=["g"]) == ["base", "mid"]
        assert st.pid(other) is None
        assert st.up(deadline_s=5, components=["mid"]) == []
        assert st.up(deadline_s=5) == ["other"]
        assert st.up(deadline_s=5) == []
    finally:
        assert st.down() == [("other", "stopped"), ("mid", "stopped"), ("base", "stopped")]


def test_up_of_an_unknown_name_starts_nothing(tmp_path):  # type: ignore[no-untyped-def]
    one = _sleeper("one", tmp_path, lambda: "ok")
    st = _stack(tmp_path, [one])
    with pytest.raises(StackError, match="no stack component or group 'two'"):
        st.up(deadline_s=5, components=["one", "two"])
    assert st.pid(one) is None and not one.launch.pid_file.exists()


def test_kafka_cluster_ids_never_start_with_a_dash(monkeypatch):  # type: ignore[no-untyped-def]
    import uuid

    from ferry_kit.stack import servers

    dash = uuid.UUID(bytes=b"\xfb" + b"\x00" * 15)  # base64url "-w…": what once broke the format
    ok = uuid.UUID(bytes=b"\x00" * 16)
    draws = iter([dash, ok])
    monkeypatch.setattr(servers.uuid, "uuid4", lambda: next(draws))
    assert servers.kafka_cluster_id() == "AAAAAAAAAAAAAAAAAAAAAA"


def _listener(name: str, var, port: int) -> Component:  # type: ignore[no-untyped-def]
    """A stand-in NameNode: a process of the stack listening on ``port`` (its RPC port)."""
    import sys

    code = (
        "import socket, time; s = socket.socket(); "
        f"s.bind(('127.0.0.1', {port})); s.listen(); time.sleep(300)"  # its lifetime (killed)
    )
    argv = [sys.executable, "-c", code, *process.markers(name, var)]
    launch = process.Launch(
        name, argv, {}, var / "log" / f"{name}.log", var / "run" / f"{name}.pid", var
    )
    return Component(
        name,
        "test",
        launch,
        check=lambda: "ok" if process.port_in_use("127.0.0.1", port) else _never(),
    )


def test_fence_kills_a_stopped_namenode_on_its_rpc_port_and_leaves_one_not_listening(tmp_path):  # type: ignore[no-untyped-def]
    """The HA fence as the ZKFC runs it (``dfs.ha.fencing.methods``, ferry_kit.stack.hdfs_ha,
    through ``bash -e -c`` with the ``target_*`` variables ShellCommandFencer sets): a SIGSTOPped
    process listening on the target port is killed, exit 0; fencing it again is exit 0 (not
    running); a process not listening on the port (a NameNode still loading) is left alone."""
    import signal
    import socket
    import subprocess
    import sys

    from ferry_kit.stack.base import Layout
    from ferry_kit.stack.hdfs_ha import fencing_method

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    nn1 = _listener("hdfs-a-nn1", tmp_path, port)
    nn2 = _sleeper("hdfs-a-nn2", tmp_path, lambda: "ok")
    st = _stack(tmp_path, [nn1, nn2])
    st.up(deadline_s=10)
    pid, other_pid = st.pid(nn1), st.pid(nn2)
    assert pid is not None and other_pid is not None
    method = fencing_method(Layout(tmp_path), "a")
    assert method.startswith(f"shell({sys.executable} -m ferry stack fence --var-dir ")
    command = method.removeprefix("shell(").removesuffix(")")

    def run_fence(nn_id: str) -> tuple[int, str]:
        env = {**process.os.environ, "target_namenodeid": nn_id, "target_port": str(port)}
        r = subprocess.run(  # noqa: S603 - as Hadoop runs it
            ["bash", "-e", "-c", command], env=env, capture_output=True, text=True, timeout=60
        )
        return r.returncode, r.stdout.strip()

    try:
        process.os.killpg(pid, signal.SIGSTOP)
        assert run_fence("nn1") == (0, "fence hdfs-a-nn1: killed")
        assert st.pid(nn1) is None and not process.alive(pid)
        assert run_fence("nn1") == (0, "fence hdfs-a-nn1: not running")
        assert run_fence("nn2") == (0, "fence hdfs-a-nn2: not listening")
        assert st.pid(nn2) == other_pid
        with socket.socket() as squatter:  # the port served by a process the stack did not start
            squatter.bind(("127.0.0.1", port))
            squatter.listen()
            assert run_fence("nn1") == (
                1,
                f"fence hdfs-a-nn1 failed: hdfs-a-nn1: no process of this stack, yet port {port} "
                "listens",
            )
    finally:
        st.down()


def test_a_stack_error_stops_a_stage_as_a_config_error_does():
    """The product's runtime never names the kit's StackError: it stops on it as a ConfigError."""
    from ferry.core.runtime.stage import settle
    from ferry.errors import ConfigError

    assert issubclass(StackError, ConfigError) and StackError.reason == "stack"
    with pytest.raises(StackError, match="kdc down"):
        settle(StackError("kdc down"))
