"""Stack.up leaves no orphans: when it fails, it stops what it started and only that.

Real (tiny) processes stand in for the servers: ``sh -c 'sleep 300'`` with the stack's markers
on its command line, so pid ownership works exactly as for the JVMs.
"""

from __future__ import annotations

import pytest

from ferry.core.config import get_settings
from ferry.core.errors import StackError
from ferry.stack import process
from ferry.stack.components import Component
from ferry.stack.health import Unhealthy
from ferry.stack.manager import Stack


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
