"""Fixtures of the integration tier's Kafka runner tests (test_kafka_runner.py,
test_kafka_rebalance.py)."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
from tests.support.kafka_io import Running

from ferry.settings import Settings
from ferry.settings.retry import RetrySettings


@pytest.fixture
def ks(stack: Settings, unique: Any) -> Settings:
    """This test's settings: own topic prefix, one partition, fast retries, short poll interval."""
    base = unique.settings(stack)
    return base.model_copy(
        update={
            "kafka": base.kafka.model_copy(
                update={"partitions": 1, "max_poll_interval_ms": 6000, "session_timeout_ms": 6000}
            ),
            "retry": RetrySettings(max_attempts=3, initial_backoff_s=0.05, max_backoff_s=0.2),
        }
    )


@pytest.fixture
def running() -> Iterator[list[Running]]:
    started: list[Running] = []
    yield started
    for r in started:
        if r.thread.is_alive():
            r.runner.stop()
            r.thread.join(60)
