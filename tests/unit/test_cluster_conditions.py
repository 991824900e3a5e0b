"""Case C22: a condition of a cluster (a space or name quota exceeded, a NameNode in safe mode, no
DataNode with room) is back-pressure, not a bad file. Its classification (WebHDFS remote
exceptions, Spark's Java stack traces), the retry policy that holds it, and where it is shown
(the board file ``ferry ps`` and ``ferry status`` read, the tracker's gauges and page). Each
stage's hold and resume: test_cluster_conditions_stages.py."""

from __future__ import annotations

import json
from pathlib import Path
from types import SimpleNamespace

import pytest
from hdfs.util import HdfsError as _CliError
from tests.support.webhdfs_stub import WebHdfsStub
from tests.unit.test_hdfs import _cluster

from ferry.clusters.hdfs.errors import _remote_error, condition_in, condition_of
from ferry.clusters.hdfs.webhdfs import WebHdfs
from ferry.core.retry import retrying
from ferry.core.runtime.conditions import (
    ConditionBoard,
    conditions_path,
    read_conditions,
    read_conditions_file,
)
from ferry.errors import (
    ClusterCondition,
    HdfsRequestRejected,
    HdfsUnavailable,
    PermanentError,
    TransientError,
)
from ferry.settings import get_settings
from ferry.settings.retry import RetrySettings
from ferry.tracker.app import TrackerMetrics
from ferry.tracker.pages import conditions_alert

WHAT = "WebHDFS CREATE '/ferry/landing/flights/x.csv' on cluster 'b' via NameNode n:1"
#: Hadoop 3.3's messages (DSQuotaExceededException / NSQuotaExceededException.getMessage,
#: FSNamesystem's safe-mode check, BlockManager.chooseTarget4NewBlock)
DS_QUOTA = (
    "The DiskSpace quota of /ferry/landing is exceeded: quota = 1048576 B = 1 MB but diskspace "
    "consumed = 134217728 B = 128 MB"
)
NS_QUOTA = (
    "The NameSpace quota (directories and files) of directory /ferry/incoming is exceeded: "
    "quota=10 file count=11"
)
SAFE = (
    "Cannot create file/ferry/landing/flights/x.csv. Name node is in safe mode.\nThe reported "
    "blocks 0 needs additional 3 blocks to reach the threshold 0.9990 of total blocks 3."
)
NO_SPACE = (
    "File /ferry/landing/flights/.x.csv.ferry-tmp could only be written to 0 of the 1 "
    "minReplication nodes. There are 1 datanode(s) running and 1 node(s) are excluded in this "
    "operation."
)
#: what str() of a py4j Py4JJavaError of a failed Spark write reads like (abridged)
SPARK_QUOTA = (
    "An error occurred while calling o231.parquet.\n"
    ": org.apache.spark.SparkException: Job aborted due to stage failure: Task 0 in stage 3.0 "
    "failed 1 times, most recent failure: Lost task 0.0 in stage 3.0 (TID 3): "
    "org.apache.hadoop.hdfs.protocol.DSQuotaExceededException: The DiskSpace quota of /warehouse "
    "is exceeded: quota = 1048576 B = 1 MB but diskspace consumed = 134217728 B = 128 MB\n"
    "\tat org.apache.hadoop.hdfs.server.namenode.DirectoryWithQuotaFeature.verifyStoragespaceQuota"
    "(DirectoryWithQuotaFeature.java:195)\n"
)


# -- classification ------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("exception", "message", "reason", "where"),
    [
        ("DSQuotaExceededException", DS_QUOTA, "quota_exceeded", "/ferry/landing"),
        (
            "org.apache.hadoop.hdfs.protocol.NSQuotaExceededException",
            NS_QUOTA,
            "quota_exceeded",
            "/ferry/incoming",
        ),
        ("SafeModeException", SAFE, "safe_mode", ""),
        ("RetriableException", SAFE, "safe_mode", ""),  # an HA NameNode's answer in safe mode
        ("IOException", NO_SPACE, "no_space", ""),
    ],
)
def test_webhdfs_remote_exceptions_of_a_cluster_condition_are_held_not_rejected(
    exception: str, message: str, reason: str, where: str
) -> None:
    err = _remote_error(WHAT, _CliError(message, exception=exception), "b")
    assert type(err) is ClusterCondition
    assert isinstance(err, TransientError) and not isinstance(err, PermanentError)
    assert (err.reason, err.cluster, err.where) == (reason, "b", where)
    assert str(err).startswith(f"{WHAT}: {reason} on cluster 'b'")


def test_the_quota_message_names_the_directory_in_the_condition() -> None:
    err = _remote_error(WHAT, _CliError(DS_QUOTA, exception="DSQuotaExceededException"), "b")
    assert str(err) == (
        f"{WHAT}: quota_exceeded on cluster 'b' at /ferry/landing: "
        f"DSQuotaExceededException: {DS_QUOTA}"
    )


def test_other_refusals_stay_permanent() -> None:
    err = _remote_error(WHAT, _CliError("denied", exception="AccessControlException"), "b")
    assert (type(err), err.reason) == (HdfsRequestRejected, "hdfs_rejected")
    assert condition_of("AccessControlException: Permission denied", cluster="b") is None


def test_a_spark_jobs_java_stack_trace_is_classified_with_the_stages_cluster() -> None:
    try:
        try:
            raise RuntimeError(SPARK_QUOTA)
        except RuntimeError as inner:
            raise ValueError("load failed") from inner  # wrapped: found along the chain
    except ValueError as exc:
        err = condition_in(exc, cluster="a", what="load of 2 flights file(s)")
    assert err is not None
    assert (err.reason, err.cluster, err.where) == ("quota_exceeded", "a", "/warehouse")
    assert str(err).startswith("load of 2 flights file(s): quota_exceeded on cluster 'a' at ")
    assert condition_in(RuntimeError("executor lost"), cluster="a") is None


def test_a_datanode_with_no_room_over_webhdfs_is_no_space_on_the_named_cluster() -> None:
    with WebHdfsStub() as stub:
        cluster = _cluster(stub.url)
        hdfs = WebHdfs(cluster, RetrySettings(max_attempts=1), name="b", user="ferry")
        stub.state.dn_fail_after_bytes = 4
        with pytest.raises(ClusterCondition) as caught:
            hdfs.upload_stream("/landing/x.csv", iter([b"abcdefgh"]))
    assert (caught.value.reason, caught.value.cluster, caught.value.where) == ("no_space", "b", "")
    assert isinstance(caught.value, HdfsUnavailable)  # C02's cleanup and callers see it as before
    assert stub.state.files == {}


# -- the retry policy ----------------------------------------------------------------------------

POLICY = RetrySettings(
    max_attempts=3,
    initial_backoff_s=0.001,
    max_backoff_s=5.0,
    condition_backoff_s=0.004,
)
QUOTA = ClusterCondition("quota", reason="quota_exceeded", cluster="b", where="/ferry/landing")


class Flaky:
    """Raises ``error`` on the first ``times`` calls, then returns ``"ok"``."""

    def __init__(self, error: BaseException, times: int) -> None:
        self.error, self.times, self.calls = error, times, 0

    def __call__(self) -> str:
        self.calls += 1
        if self.calls <= self.times:
            raise self.error
        return "ok"


def test_hold_retries_a_condition_past_max_attempts_with_the_capped_backoff() -> None:
    waits: list[float] = []
    fn = Flaky(QUOTA, 20)
    assert retrying(POLICY, sleep=waits.append, conditions="hold")(fn) == "ok"
    assert fn.calls == 21
    assert len(waits) == 20 and max(waits) <= 0.004


class Sequence_:
    """Raises the errors of ``errors`` in turn, then returns ``"ok"``."""

    def __init__(self, *errors: BaseException) -> None:
        self.errors, self.calls = list(errors), 0

    def __call__(self) -> str:
        self.calls += 1
        if self.errors:
            raise self.errors.pop(0)
        return "ok"


def test_after_a_hold_an_ordinary_error_gets_its_own_max_attempts() -> None:
    reset = HdfsUnavailable("reset")
    fn = Sequence_(*[QUOTA] * 10, reset, reset)  # 2 ordinary failures < max_attempts (3)
    assert retrying(POLICY, sleep=lambda s: None, conditions="hold")(fn) == "ok"
    assert fn.calls == 13
    fn = Sequence_(*[QUOTA] * 10, reset, reset, reset, reset)
    with pytest.raises(HdfsUnavailable, match="reset"):
        retrying(POLICY, sleep=lambda s: None, conditions="hold")(fn)
    assert fn.calls == 13  # the 3rd ordinary failure after the hold ends it


def test_hold_gives_up_after_the_condition_window(monkeypatch: pytest.MonkeyPatch) -> None:
    import tenacity

    now = [0.0]  #: tenacity's clock: each attempt takes 1 s
    monkeypatch.setattr(tenacity, "time", SimpleNamespace(monotonic=lambda: now[0]))

    def fn() -> str:
        now[0] += 1.0
        raise QUOTA

    calls = []
    policy = POLICY.model_copy(update={"condition_window_s": 5.5})
    with pytest.raises(ClusterCondition):
        retrying(policy, sleep=calls.append, conditions="hold")(fn)
    assert len(calls) == 5  # 6 attempts: the window, not max_attempts (3), ended it


def test_retry_treats_a_condition_as_any_transient_error_and_raise_returns_it_at_once() -> None:
    fn = Flaky(QUOTA, 10)
    with pytest.raises(ClusterCondition):
        retrying(POLICY, sleep=lambda s: None)(fn)
    assert fn.calls == 3
    fn = Flaky(QUOTA, 10)
    with pytest.raises(ClusterCondition):
        retrying(POLICY, sleep=lambda s: None, conditions="raise")(fn)
    assert fn.calls == 1
    fn = Flaky(HdfsUnavailable("reset"), 1)
    assert retrying(POLICY, sleep=lambda s: None, conditions="raise")(fn) == "ok"


# -- the board -----------------------------------------------------------------------------------


def test_board_counts_files_per_condition_and_mirrors_them_to_its_file(tmp_path: Path) -> None:
    clock = iter([100.0, 101.0, 102.0, 103.0]).__next__
    board = ConditionBoard("extract", tmp_path / "run" / "extract.7.conditions", clock=clock)
    safe = ClusterCondition("safe", reason="safe_mode", cluster="a")
    board.hold(QUOTA, "f1")
    board.hold(QUOTA, "f2")
    board.hold(safe, "f3")
    [q, s] = board.current()
    assert (q.reason, q.place, q.since, q.last, q.files) == (
        "quota_exceeded",
        "b:/ferry/landing",
        100.0,
        101.0,
        2,
    )
    assert (s.reason, s.place, s.files) == ("safe_mode", "cluster a", 1)
    assert (
        q.line()
        == "quota_exceeded at b:/ferry/landing since 1970-01-01 00:01:40 UTC (2 file(s) held)"
    )
    body = json.loads((tmp_path / "run" / "extract.7.conditions").read_text())
    assert [(c["reason"], c["files"]) for c in body["conditions"]] == [
        ("quota_exceeded", 2),
        ("safe_mode", 1),
    ]
    assert read_conditions_file(tmp_path / "run" / "extract.7.conditions")[0].files == 2
    board.hold(safe, "f1")  # a file meets another condition: it moves
    assert [(h.reason, h.files) for h in board.current()] == [
        ("quota_exceeded", 1),
        ("safe_mode", 2),
    ]
    board.release("f1", "f2", "f3")
    assert board.current() == []
    assert not (tmp_path / "run" / "extract.7.conditions").exists()


def test_read_conditions_lists_running_instances_only(tmp_path: Path) -> None:
    settings = get_settings().model_copy(update={"var_dir": tmp_path})
    ConditionBoard("load", conditions_path(settings, "load")).hold(QUOTA, "f")
    dead = tmp_path / "run" / "transfer.999999999.conditions"
    dead.write_text((tmp_path / "run").joinpath(conditions_path(settings, "load").name).read_text())
    assert [(h.service, h.reason, h.files) for h in read_conditions(settings)] == [
        ("load", "quota_exceeded", 1)
    ]


# -- shown: the tracker ------------------------------------------------------------------------


def test_tracker_gauges_and_page_show_each_condition_and_forget_a_cleared_one() -> None:
    board = ConditionBoard("load", clock=lambda: 1765000000.0)
    board.hold(QUOTA, "f1")
    board.hold(QUOTA, "f2")
    metrics = TrackerMetrics()
    metrics.show_conditions(board.current())
    labels = {
        "stage": "load",
        "reason": "quota_exceeded",
        "cluster": "b",
        "where": "/ferry/landing",
    }
    reg = metrics.registry
    assert reg.get_sample_value("ferry_condition_held_files", labels) == 2.0
    assert reg.get_sample_value("ferry_condition_since_timestamp_seconds", labels) == 1765000000.0
    html = conditions_alert(board.current())
    assert "<b>load</b> holds <b>2</b> file(s): <b>quota_exceeded</b> at b:/ferry/landing" in html
    assert "since 2025-12-06 05:46:40" in html
    board.release("f1", "f2")
    metrics.show_conditions(board.current())
    assert reg.get_sample_value("ferry_condition_held_files", labels) is None
    assert conditions_alert(board.current()) == ""


# -- shown: ferry ps -------------------------------------------------------------------------------


def test_ferry_ps_health_ends_with_each_condition_and_stays_ok(tmp_path: Path) -> None:
    from ferry_kit.supervise.health import probe
    from ferry_kit.supervise.rpc import ProcessInfo

    settings = get_settings().model_copy(update={"var_dir": tmp_path})
    board = ConditionBoard("extract", conditions_path(settings, "extract", 4242), lambda: 0.0)
    board.hold(QUOTA, "f1")
    info = ProcessInfo("extract", "extract", "RUNNING", 4242, 0.0, 0.0, "", 0, "")
    (tmp_path / "run" / "extract.4242.alive").touch()
    health = probe(settings, info, {})
    assert health.ok
    assert health.detail.endswith(
        "; HOLDING quota_exceeded at b:/ferry/landing since 1970-01-01 00:00:00 UTC "
        "(1 file(s) held)"
    )
    assert [(h.reason, h.files) for h in health.conditions] == [("quota_exceeded", 1)]
