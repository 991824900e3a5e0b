"""librdkafka's log goes through Python logging, one line per distinct message per interval."""

from __future__ import annotations

import logging
import socket
import time

import pytest
from confluent_kafka import Producer

from ferry.core.kafka.clients import LIBRDKAFKA_LOG, client_logging
from ferry.core.kafka.ratelimit import RateLimitFilter, message_kind


def record(msg: str, *args: object, level: int = logging.ERROR) -> logging.LogRecord:
    return logging.LogRecord("ferry.librdkafka", level, __file__, 1, msg, args, None)


def test_one_record_per_kind_per_interval_then_the_suppressed_count():
    now = [100.0]
    f = RateLimitFilter(interval_s=60, clock=lambda: now[0])
    refused = "Connect to ipv4#127.0.0.1:%d failed: Connection refused (after %dms in state %s)"
    passed = [f.filter(record(refused, 19092, ms, "CONNECT")) for ms in (0, 1, 2, 3)]
    other = f.filter(record("1/1 brokers are down"))
    now[0] += 60
    later = record(refused, 19092, 7, "CONNECT")
    assert (passed, other, f.filter(later)) == ([True, False, False, False], True, True)
    assert later.getMessage() == (
        "Connect to ipv4#127.0.0.1:19092 failed: Connection refused (after 7ms in state CONNECT) "
        "(3 more like it in the last 60s)"
    )
    assert message_kind(later)[2].startswith("Connect to ipv#") is True


def test_interval_must_be_positive():
    with pytest.raises(ValueError, match="interval_s must be > 0"):
        RateLimitFilter(interval_s=0)


def test_a_client_without_a_broker_logs_each_kind_once_not_every_reconnect(caplog):
    with socket.socket() as closed:  # bound, never listening: every connect is refused at once
        closed.bind(("127.0.0.1", 0))
        port = closed.getsockname()[1]
        producer = Producer(
            {
                "bootstrap.servers": f"127.0.0.1:{port}",
                "reconnect.backoff.ms": 10,
                "reconnect.backoff.max.ms": 10,
                **client_logging(),
            }
        )
        with caplog.at_level(logging.DEBUG, logger=LIBRDKAFKA_LOG.name):
            deadline = time.monotonic() + 2.0
            while time.monotonic() < deadline:
                producer.poll(0.1)
        del producer
    mine = [r for r in caplog.records if r.name == LIBRDKAFKA_LOG.name]
    refused = [r for r in mine if "Connection refused" in r.getMessage()]
    assert len(refused) == 1, [r.getMessage() for r in mine]
    kinds = [message_kind(r) for r in mine]
    assert len(kinds) == len(set(kinds))
