"""Stack.up leaves no orphans: when it fails, it stops what it started and only that.

Real (tiny) processes stand in for the servers: ``sh -c 'sleep 300'`` with the stack's markers
on its command line, so pid ownership works exactly as for the JVMs.
"""

from __future__ import annotations

from dataclasses import replace

import pytest

from ferry.core.errors import StackError
from ferry.settings import get_settings
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
    st = Stack(get_settings().model_copy(update={"var_dir": tmp_path}))
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
    st = Stack(get_settings().model_copy(update={"var_dir": tmp_path}))
    assert [c.name for c in st.select(wanted)] == expected


def test_select_all_and_none_are_every_component_in_start_order(tmp_path):  # type: ignore[no-untyped-def]
    st = Stack(get_settings().model_copy(update={"var_dir": tmp_path}))
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
    st = Stack(get_settings().model_copy(update={"var_dir": tmp_path}))
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
