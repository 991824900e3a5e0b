"""SparkHolder's rebuild after its context died, with fake sessions (no JVM): what the stages'
handlers rely on to tell a dead session (SparkUnavailable, held) from a failed job."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from ferry.clusters import spark as spark_module
from ferry.clusters.spark import SparkHolder
from ferry.core.runtime.heartbeat import spark_application, spark_status_path
from ferry.settings import get_settings


class FakeSession:
    """A SparkSession as far as SparkHolder sees it: ``sparkContext._jsc.sc().isStopped()``,
    its ``applicationId`` and ``master``."""

    def __init__(self, n: int) -> None:
        self.n, self.stopped, self.stop_calls = n, False, 0
        sc = type("SC", (), {"isStopped": lambda _s: self.stopped})()
        jsc = type("JSC", (), {"sc": lambda _s: sc})()
        ctx = {"_jsc": jsc, "applicationId": f"app-20261207-000{n}", "master": "spark://m:1"}
        self.sparkContext = type("Ctx", (), ctx)()

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


@pytest.mark.parametrize(("manager", "rebuilt"), [("standalone", True), ("yarn", False)])
def test_a_kerberos_session_is_rebuilt_for_new_tokens_only_off_yarn(
    built: list[FakeSession], monkeypatch: pytest.MonkeyPatch, manager: str, rebuilt: bool
) -> None:
    """Standalone executors hold the token file of their session's start: past
    ``kerberos.session_max_age_s`` the session is rebuilt. On YARN Spark's own token manager
    obtains new tokens from the keytab (tests/yarn test_4): the session is kept."""
    base = get_settings()
    settings = base.model_copy(
        update={
            "kerberos": base.kerberos.model_copy(update={"enabled": True, "session_max_age_s": 60}),
            "spark": base.spark.model_copy(update={"cluster_managers": {"a": manager}}),
        }
    )
    clock = [1000.0]
    monkeypatch.setattr(spark_module.time, "monotonic", lambda: clock[0])
    holder = SparkHolder(settings, "ferry-load", "a")
    first = holder.get()
    clock[0] += 59
    assert holder.get() is first
    clock[0] += 2  # 61 s after the build
    second = holder.get()
    assert (second is not first, len(built), first.stop_calls) == (rebuilt, 1 + rebuilt, rebuilt)


def test_reset_drops_a_session_whose_stop_fails(built: list[FakeSession]) -> None:
    holder = SparkHolder(get_settings(), "ferry-load", "a")
    first = holder.get()
    first.stopped = True

    def broken() -> None:
        raise RuntimeError("py4j: the gateway is gone")

    first.stop = broken  # type: ignore[method-assign]
    assert holder.reset() is True
    assert holder.built is False and holder.get().n == 2


class AppSession(FakeSession):
    """A session on YARN."""

    def __init__(self, n: int) -> None:
        super().__init__(n)
        self.sparkContext.applicationId = f"application_1765000000000_000{n}"
        self.sparkContext.master = "yarn"


def test_each_session_built_names_its_application_for_ferry_ps(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    """Issue 48: ``ferry ps`` names the YARN (or standalone) application of each stage's
    session; a session rebuilt after its context died names the new one."""
    from ferry.core.kafka.admin import Member
    from ferry_kit.supervise.health import probe
    from ferry_kit.supervise.rpc import ProcessInfo

    sessions: list[AppSession] = []

    def build(*args: Any, **kwargs: Any) -> AppSession:
        sessions.append(AppSession(len(sessions) + 1))
        return sessions[-1]

    monkeypatch.setattr(spark_module, "build_session", build)
    settings = get_settings().model_copy(update={"var_dir": tmp_path})
    status = spark_status_path(settings, "load", 4242)
    holder = SparkHolder(settings, "ferry-load", "a", hive=True, status=status)
    holder.get()
    assert spark_application(status) == ("application_1765000000000_0001", "yarn")
    sessions[0].stopped = True
    holder.get()
    assert spark_application(status) == ("application_1765000000000_0002", "yarn")

    info = ProcessInfo("load", "load", "RUNNING", 4242, 0.0, 0.0, "", 0, "")
    member = Member("m1", "ferry-load-4242", "127.0.0.1", (("ferry.transferred", 0),))
    health = probe(settings, info, {"load": [member]})
    assert health.ok
    assert health.detail.endswith("; Spark application application_1765000000000_0002 on yarn")


class StoppedContext:
    """pyspark's active SparkContext whose JVM side stopped while its session was built."""

    def __init__(self, stop_fails: bool = False) -> None:
        sc = type("SC", (), {"isStopped": lambda _s: True})()
        self._jsc = type("JSC", (), {"sc": lambda _s: sc})()
        self.stop_calls, self.stop_fails = 0, stop_fails

    def stop(self) -> None:
        self.stop_calls += 1
        if self.stop_fails:
            raise RuntimeError("py4j: the gateway is gone")


@pytest.mark.parametrize("stop_fails", [False, True])
def test_a_build_that_failed_on_a_stopped_context_forgets_it_so_the_next_build_can_work(
    monkeypatch: pytest.MonkeyPatch, stop_fails: bool
) -> None:
    """Issue 47's second hour (seed 693378033): load started while both Spark masters were
    killed; the SparkContext stopped itself inside the build ("All masters are unresponsive!
    Giving up."), the session around it failed, and pyspark kept that context as its active one:
    every later build returned it ("Cannot call methods on a stopped SparkContext") for 9
    minutes, until the process was killed. A failed build now drops it (whether its stop
    succeeds or fails)."""
    from pyspark import SparkContext

    dead = StoppedContext(stop_fails)
    monkeypatch.setattr(SparkContext, "_active_spark_context", dead)
    builds: list[Any] = []

    def build(*args: Any, **kwargs: Any) -> FakeSession:
        builds.append(SparkContext._active_spark_context)
        if SparkContext._active_spark_context is dead:
            raise RuntimeError("Cannot call methods on a stopped SparkContext.")
        return FakeSession(len(builds))

    monkeypatch.setattr(spark_module, "build_session", build)
    holder = SparkHolder(get_settings(), "ferry-load", "a")
    with pytest.raises(RuntimeError, match="stopped SparkContext"):
        holder.get()
    assert (dead.stop_calls, SparkContext._active_spark_context) == (1, None)
    assert holder.get().n == 2
    assert builds == [dead, None]


def test_a_failed_build_leaves_a_live_active_context_alone(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    from pyspark import SparkContext

    live = StoppedContext()
    live._jsc = type(
        "JSC", (), {"sc": lambda _s: type("SC", (), {"isStopped": lambda _s: False})()}
    )()
    monkeypatch.setattr(SparkContext, "_active_spark_context", live)

    def build(*args: Any, **kwargs: Any) -> FakeSession:
        raise RuntimeError("the metastore did not answer")

    monkeypatch.setattr(spark_module, "build_session", build)
    with pytest.raises(RuntimeError, match="metastore"):
        SparkHolder(get_settings(), "ferry-load", "a").get()
    assert (live.stop_calls, SparkContext._active_spark_context) == (0, live)
