"""One way to wait on the AdminClient's futures (:func:`ferry.core.kafka.admin.admin_result`),
used by the topic plan, the ACLs and the gc topic, which the topic plan now creates."""

from __future__ import annotations

import concurrent.futures
from typing import Any

import pytest
from confluent_kafka import KafkaError, KafkaException

from ferry.core.kafka.admin import OpsError, admin_result
from ferry.core.kafka.topics import TRACKER_CHANGELOGS, ensure_topics
from ferry.errors import ConfigError, TransientError
from ferry.gc.copier import ensure_gc_topic
from ferry.settings.kafka import KafkaSettings
from ferry.settings.retry import RetrySettings


def _done(value: Any = None, error: int | None = None) -> concurrent.futures.Future[Any]:
    f: concurrent.futures.Future[Any] = concurrent.futures.Future()
    if error is None:
        f.set_result(value)
    else:
        f.set_exception(KafkaException(KafkaError(error)))
    return f


def test_admin_result_classifies_every_answer():
    assert admin_result(_done(7), 1.0, "x") == 7
    with pytest.raises(TransientError, match="x: no answer within 0s"):
        admin_result(concurrent.futures.Future(), 0.0, "x")
    with pytest.raises(TransientError, match="^x: "):
        admin_result(_done(error=KafkaError._TRANSPORT), 1.0, "x")
    with pytest.raises(OpsError, match="^x: "):
        admin_result(_done(error=KafkaError.INVALID_CONFIG), 1.0, "x")
    with pytest.raises(ConfigError, match="^x: "):
        admin_result(_done(error=KafkaError.INVALID_CONFIG), 1.0, "x", refusal=ConfigError)

    class Mine(Exception):
        pass

    with pytest.raises(Mine):
        codes = {KafkaError.TOPIC_ALREADY_EXISTS: Mine}
        admin_result(_done(error=KafkaError.TOPIC_ALREADY_EXISTS), 1.0, "x", codes=codes)


class _Metadata:
    def __init__(self, topics: set[str]) -> None:
        self.topics = dict.fromkeys(topics)


class _Config:
    def __init__(self, value: str) -> None:
        self.value = value


class FakeAdmin:
    """create_topics answers each topic with the error code ``answers`` holds (None: created); a
    topic created is listed by the ``lag + 1``-th list_topics after it (a broker's metadata
    cache learns of it after the controller), never when ``lag`` is None."""

    def __init__(
        self, known: set[str], answers: dict[str, int | None], lag: int | None = 0
    ) -> None:
        self.known, self.answers, self.created = known, answers, []  # type: ignore[var-annotated]
        self.lag, self.listings = lag, 0
        self.pending: dict[str, int] = {}

    def list_topics(self, timeout: float) -> _Metadata:
        self.listings += 1
        for topic, at in list(self.pending.items()):
            if self.lag is not None and self.listings > at + self.lag:
                self.known.add(topic)
                del self.pending[topic]
        return _Metadata(self.known)

    def create_topics(self, specs: list[Any], **_: Any) -> dict[str, concurrent.futures.Future]:
        self.created += [(s.topic, s.config) for s in specs]
        self.pending |= {s.topic: self.listings for s in specs if not self.answers.get(s.topic)}
        return {s.topic: _done(error=self.answers.get(s.topic)) for s in specs}

    def describe_configs(self, resources: list[Any], **_: Any) -> dict[Any, Any]:
        return {r: _done({"retention.ms": _Config("999")}) for r in resources}

    def poll(self, _t: float) -> None:
        pass


def test_ensure_topics_tells_created_from_existing_and_refused():
    k = KafkaSettings(topic_prefix="t")
    admin = FakeAdmin({"t.loaded"}, {"t.failed": KafkaError.TOPIC_ALREADY_EXISTS})
    got = ensure_topics(admin, k, ("loaded", "failed", "extracted"))  # type: ignore[arg-type]
    assert got == {"t.loaded": "exists", "t.failed": "exists", "t.extracted": "created"}
    denied = FakeAdmin(set(), {"t.loaded": KafkaError.TOPIC_AUTHORIZATION_FAILED})
    with pytest.raises(ConfigError, match="may not create it"):
        ensure_topics(denied, k, ("loaded",))  # type: ignore[arg-type]


def test_the_gc_topic_is_created_by_the_topic_plan_with_its_own_retention():
    k = KafkaSettings(topic_prefix="t")
    admin = FakeAdmin(set(), {})
    assert ensure_gc_topic(admin, k, 999) == "t.gc"  # type: ignore[arg-type]
    assert admin.created == [("t.gc", {"retention.ms": "999", "cleanup.policy": "delete"})]


def test_ensure_topics_returns_once_the_brokers_metadata_lists_what_it_created():
    """The tracker's changelogs (faust's names) are in the plan, compacted; ensure_topics returns
    only when list_topics shows them (here on the third listing after the create), and says so
    when they never show up."""
    k = KafkaSettings(topic_prefix="t")
    admin = FakeAdmin(set(), {}, lag=2)
    got = ensure_topics(admin, k, TRACKER_CHANGELOGS)  # type: ignore[arg-type]
    assert got == {"t.tracker-files-changelog": "created", "t.tracker-pruned-changelog": "created"}
    assert admin.listings == 4  # the plan's listing, then three while waiting
    assert admin.created == [
        ("t.tracker-files-changelog", {"cleanup.policy": "compact"}),
        ("t.tracker-pruned-changelog", {"cleanup.policy": "compact"}),
    ]
    never = FakeAdmin(set(), {}, lag=None)
    with pytest.raises(TransientError, match=r"not in its metadata after 0.5 s"):
        ensure_topics(never, KafkaSettings(topic_prefix="t", request_timeout_s=0.5), ("loaded",))  # type: ignore[arg-type]


class _OutFor(FakeAdmin):
    """A broker out for its first ``out`` metadata requests (a pause, a restart)."""

    def __init__(self, out: int) -> None:
        super().__init__({"t.loaded"}, {})
        self.out = out

    def list_topics(self, timeout: float) -> _Metadata:
        if self.out > 0:
            self.out -= 1
            self.listings += 1
            raise KafkaException(KafkaError(KafkaError._TRANSPORT))
        return super().list_topics(timeout)


def test_a_service_start_waits_for_the_broker_under_its_retry_policy():
    """Seed 686632: extract, restarted while the broker was paused, exited on the first metadata
    timeout. With the service's retry policy the topic plan waits for the broker, up to the
    policy's ceiling; an operator's command (no policy) still gets the first error."""
    k = KafkaSettings(topic_prefix="t")
    policy = RetrySettings(max_attempts=4, initial_backoff_s=0.001, max_backoff_s=0.001)
    admin = _OutFor(3)
    assert ensure_topics(admin, k, ("loaded",), retry=policy) == {"t.loaded": "exists"}  # type: ignore[arg-type]
    assert admin.listings == 4
    with pytest.raises(TransientError, match="metadata of .* failed"):
        ensure_topics(_OutFor(4), k, ("loaded",), retry=policy)  # type: ignore[arg-type]
    with pytest.raises(TransientError, match="metadata of .* failed"):
        ensure_topics(_OutFor(1), k, ("loaded",))  # type: ignore[arg-type]
