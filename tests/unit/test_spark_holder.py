"""SparkHolder's rebuild after its context died, with fake sessions (no JVM): what the stages'
handlers rely on to tell a dead session (SparkUnavailable, held) from a failed job."""

from __future__ import annotations

from typing import Any

import pytest

from ferry.clusters import spark as spark_module
from ferry.clusters.spark import SparkHolder
from ferry.settings import get_settings


class FakeSession:
    """A SparkSession as far as SparkHolder sees it: ``sparkContext._jsc.sc().isStopped()``."""

    def __init__(self, n: int) -> None:
        self.n, self.stopped, self.stop_calls = n, False, 0
        sc = type("SC", (), {"isStopped": lambda _s: self.stopped})()
        jsc = type("JSC", (), {"sc": lambda _s: sc})()
        self.sparkContext = type("Ctx", (), {"_jsc": jsc})()

    def stop(self) -> None:
        self.stop_calls += 1


@pytest.fixture
def built(monkeypatch: pytest.MonkeyPatch) -> list[FakeSession]:
    sessions: list[FakeSession] = []

    def build(*args: Any, **kwargs: Any) -> FakeSession:
        sessions.append(FakeSession(len(sessions) + 1))
        return sessions[-1]

    monkeypatch.setattr(spark_module, "build_session", build)
    return sessions


def test_reset_of_a_live_session_keeps_it(built: list[FakeSession]) -> None:
    holder = SparkHolder(get_settings(), "ferry-load", "a")
    assert holder.reset() is False  # none built yet
    first = holder.get()
    assert holder.reset() is False
    assert holder.get() is first and len(built) == 1 and first.stop_calls == 0


def test_reset_of_a_stopped_context_drops_it_and_get_builds_anew(
    built: list[FakeSession],
) -> None:
    holder = SparkHolder(get_settings(), "ferry-load", "a")
    first = holder.get()
    first.stopped = True  # the masters removed the application
    assert holder.reset() is True
    assert (first.stop_calls, holder.built) == (1, False)
    second = holder.get()
    assert (second.n, len(built)) == (2, 2)


def test_reset_drops_a_session_whose_stop_fails(built: list[FakeSession]) -> None:
    holder = SparkHolder(get_settings(), "ferry-load", "a")
    first = holder.get()
    first.stopped = True

    def broken() -> None:
        raise RuntimeError("py4j: the gateway is gone")

    first.stop = broken  # type: ignore[method-assign]
    assert holder.reset() is True
    assert holder.built is False and holder.get().n == 2
