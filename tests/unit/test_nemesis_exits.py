"""The nemesis's account of exits (issue 47): a process that exits while a kill holds it is the
fault's; one that exits within a minute of its own pause is explained; any other is counted
against the run. A fault waits while an undo on its process (or what it requires) runs late."""

from __future__ import annotations

import time
from types import SimpleNamespace
from typing import Any

from ferry_kit.nemesis.faults import Applied
from ferry_kit.nemesis.runner import EXPLAINED_AFTER_PAUSE_S, Run, _revive
from ferry_kit.nemesis.schedule import Fault


class _Proc:
    def __init__(self, code: int | None) -> None:
        self.code = code

    def poll(self) -> int | None:
        return self.code


def _rig(codes: dict[str, int | None]) -> Any:
    started: list[str] = []
    group = SimpleNamespace(
        procs={n: _Proc(c) for n, c in codes.items()}, start=started.append, started=started
    )
    return SimpleNamespace(group=group)


def _injector(pending: list[Applied], done: list[Applied], exited: list[str]) -> Any:
    return SimpleNamespace(
        pending=pending, done=done, revive_components=lambda: list(exited), say=lambda _m: None
    )


def test_a_service_exit_counts_unless_a_kill_holds_it_and_each_is_restarted() -> None:
    rig = _rig({"load": 1, "transfer": -9, "extract": None})
    killed = Applied(Fault(1.0, "kill", "transfer", 30.0), time.time())
    result = Run(seed=1, schedule=[])
    _revive(rig, _injector([killed], [], []), result)
    assert dict(result.unexplained_exits) == {"load": 1}
    assert rig.group.started == ["load"]  # transfer waits for its kill's undo


def test_a_component_exit_right_after_its_own_pause_is_explained_and_others_are_not() -> None:
    now = time.time()
    paused = Applied(Fault(1.0, "stop", "spark-master-2", 60.0), now - 70, undone_at=now - 5)
    long_ago = Applied(
        Fault(1.0, "stop", "spark-worker", 5.0),
        now - 300,
        undone_at=now - EXPLAINED_AFTER_PAUSE_S - 30,
    )
    result = Run(seed=1, schedule=[])
    exited = ["spark-master-2", "spark-worker", "hiveserver2"]
    _revive(_rig({}), _injector([], [paused, long_ago], exited), result)
    assert dict(result.explained_exits) == {"spark-master-2": 1}
    assert dict(result.unexplained_exits) == {"spark-worker": 1, "hiveserver2": 1}


def _real_injector(pending: list[Applied]) -> Any:
    from ferry_kit.nemesis.faults import Injector
    from ferry_kit.settings import get_kit_settings

    return Injector(get_kit_settings(), rig=None, say=lambda _m: None, pending=pending)  # type: ignore[arg-type]


def test_a_fault_waits_while_its_process_is_held_or_being_revived() -> None:
    import threading

    late = Applied(Fault(1.0, "kill", "hdfs-a-namenode", 5.0), time.time() - 60)
    inj = _real_injector([late])
    assert not inj.may_start(Fault(70.0, "disk-full", "hdfs-a-datanode", 10.0))  # its NameNode
    assert inj.may_start(Fault(70.0, "disk-full", "hdfs-b-datanode", 10.0))
    gate = threading.Event()
    reviving = threading.Thread(target=gate.wait, daemon=True)
    reviving.start()
    inj._reviving["kafka"] = reviving
    try:
        assert not inj.may_start(Fault(70.0, "stop", "kafka", 10.0))
    finally:
        gate.set()
        reviving.join(5)
    assert inj.may_start(Fault(70.0, "stop", "kafka", 10.0))


def test_a_restart_waits_while_another_fault_holds_what_the_component_requires() -> None:
    import pytest

    datanode = Applied(Fault(1.0, "kill", "hdfs-a-datanode", 60.0), time.time())
    metastore = Fault(2.0, "kill", "hive-metastore", 5.0)
    inj = _real_injector([datanode, Applied(metastore, time.time())])
    with pytest.raises(RuntimeError, match="hdfs-a-datanode"):
        inj._require_free("hive-metastore", metastore)
    inj.pending.remove(datanode)
    inj._require_free("hive-metastore", metastore)  # nothing held: it may start


def test_only_a_services_unexplained_exit_fails_the_run() -> None:
    from collections import Counter

    from ferry_kit.nemesis.checker import Verdict

    v = Verdict(unexplained_exits=Counter({"spark-master-1": 3}))
    assert v.ok and v.services_exits == {}
    v.unexplained_exits["tracker"] += 1
    assert not v.ok and v.services_exits == {"tracker": 1}
