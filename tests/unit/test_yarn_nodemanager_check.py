"""The local stack's NodeManager is healthy only once the ACTIVE ResourceManager has heard from
the running process (tests/yarn, 2026-12-07: after a SIGKILL and a restart, counting the RM's
active nodes passed at once, on the lost process's registration, 25 s before the new one
registered)."""

from __future__ import annotations

from typing import Any

import pytest

from ferry_kit.settings import StackResourceManager, StackYarn
from ferry_kit.stack import health, yarn

STARTED = 1_796_655_445_023  #: the NodeManager's nmStartupTime, ms

YARN = StackYarn(
    resourcemanagers=(
        StackResourceManager(
            port=30032, scheduler_port=30030, tracker_port=30031, admin_port=30033, web_port=30088
        ),
    ),
    nodemanager_port=30042,
    nodemanager_localizer_port=30040,
    nodemanager_web_port=30043,
)


def answers(monkeypatch: pytest.MonkeyPatch, node: dict[str, Any] | None) -> list[str]:
    """The NodeManager started at STARTED; the RM lists ``node`` for it (None: no NodeManager
    answers). Returns the URLs asked."""
    asked: list[str] = []

    def get_json(url: str, *_: Any) -> Any:
        asked.append(url)
        if url.endswith("/ws/v1/node/info"):
            if node is None:
                raise health.Unhealthy(f"GET {url}: connection refused")
            return {"nodeInfo": {"id": "localhost:30042", "nmStartupTime": STARTED}}
        assert url == "http://127.0.0.1:30088/ws/v1/cluster/nodes/localhost:30042", url
        return {"node": node}

    monkeypatch.setattr(yarn, "active_rm", lambda y: y.resourcemanagers[0])
    monkeypatch.setattr(health, "_get_json", get_json)
    return asked


def test_the_lost_process_registration_is_not_health(monkeypatch: pytest.MonkeyPatch) -> None:
    answers(monkeypatch, {"state": "RUNNING", "lastHealthUpdate": 1_796_655_399_016})
    with pytest.raises(health.Unhealthy, match="has not heard from NodeManager localhost:30042"):
        yarn._nodemanager_check(YARN)


def test_a_nodemanager_that_does_not_answer_is_not_healthy(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    answers(monkeypatch, None)
    with pytest.raises(health.Unhealthy, match="connection refused"):
        yarn._nodemanager_check(YARN)


def test_a_lost_node_is_not_healthy(monkeypatch: pytest.MonkeyPatch) -> None:
    answers(monkeypatch, {"state": "LOST", "lastHealthUpdate": STARTED + 5_000})
    with pytest.raises(health.Unhealthy, match="state LOST"):
        yarn._nodemanager_check(YARN)


def test_registered_anew_is_healthy(monkeypatch: pytest.MonkeyPatch) -> None:
    asked = answers(
        monkeypatch,
        {"state": "RUNNING", "lastHealthUpdate": STARTED + 5_478, "availMemoryMB": 4096},
    )
    assert yarn._nodemanager_check(YARN) == "localhost:30042 RUNNING at rm1, 4096 MB free"
    assert asked == [
        "http://127.0.0.1:30043/ws/v1/node/info",
        "http://127.0.0.1:30088/ws/v1/cluster/nodes/localhost:30042",
    ]
