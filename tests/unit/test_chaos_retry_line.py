"""The fault rig counts the stages' retried attempts from their logs (``FaultRig.retries_logged``,
``tests/e2e/test_faults.py``): its pattern must match what :func:`ferry.core.retry.retrying` logs
for an ordinary transient error and for an attempt a cluster condition (an outage) held."""

from __future__ import annotations

import logging

import pytest

from ferry.core.retry import retrying
from ferry.errors import ClusterCondition, TransientError
from ferry.settings.retry import RetrySettings
from ferry_kit.testing.chaos import RETRY_LINE

POLICY = RetrySettings(max_attempts=3, initial_backoff_s=0.001, max_backoff_s=0.002)


@pytest.mark.parametrize(
    "error",
    [
        TransientError("reset"),
        ClusterCondition("NameNode refused", reason="hdfs_unavailable", cluster="a"),
    ],
    ids=["transient", "outage-held"],
)
def test_the_rig_counts_each_retried_attempt_retry_logs(
    error: Exception, caplog: pytest.LogCaptureFixture
) -> None:
    calls = [0]

    def flaky() -> str:
        calls[0] += 1
        if calls[0] < 3:
            raise error
        return "done"

    with caplog.at_level(logging.WARNING, logger="ferry.core.retry"):
        assert (
            retrying(POLICY, sleep=lambda s: None, what="stage transfer", conditions="hold")(flaky)
            == "done"
        )
    lines = [r.getMessage() for r in caplog.records]
    assert len(lines) == 2
    assert [bool(RETRY_LINE.search(line)) for line in lines] == [True, True]
