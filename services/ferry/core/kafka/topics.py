"""The topic plan: ``<prefix>.extracted`` … ``<prefix>.failed``, created at start-up, idempotently.

Every topic has ``settings.kafka.partitions`` partitions (the most instances of one stage that can
share work), ``replication_factor`` replicas and ``retention_ms`` retention; records are keyed by
``file_id`` so one file's events stay in order on one partition.
"""

from __future__ import annotations

import logging
import time

from confluent_kafka import KafkaError, KafkaException
from confluent_kafka.admin import AdminClient, NewTopic

from ferry.core.events import TOPIC_NAMES
from ferry.core.kafka.admin import admin_result
from ferry.core.kafka.clients import login_failure
from ferry.core.retry import retrying
from ferry.errors import ConfigError, TransientError
from ferry.settings.kafka import KafkaSettings
from ferry.settings.retry import RetrySettings

log = logging.getLogger(__name__)


#: The changelog topics of the tracker's faust tables (``files``, ``pruned``), as faust names them
#: (``<app id>-<table>-changelog``, the app id being the tracker's group ``<prefix>.tracker``):
#: created by :func:`ensure_topics` before faust starts. When faust created them itself, its
#: consumer could ask the broker's metadata before the new topics were in it; its assignor then
#: ignored them and the table's agent crashed with ``PartitionsMismatch`` (changelog of 0
#: partitions) every 5 s until the next rebalance, 5 minutes later, and the tracker lost the
#: events it was given meanwhile (the CI nemesis, seed 20707, 2026-12-07).
TRACKER_CHANGELOGS: tuple[str, ...] = ("tracker-files-changelog", "tracker-pruned-changelog")

#: Topics kept by key, not by time (``cleanup.policy=compact``): the waiting room
#: (:mod:`ferry.core.runtime.waiting`), whose files may wait longer than any retention, and the
#: tracker's changelogs (faust's tables are kept by key).
COMPACTED: frozenset[str] = frozenset({"waiting", *TRACKER_CHANGELOGS})


class _Exists(Exception):
    """The topic exists already (TOPIC_ALREADY_EXISTS)."""


class _NotAllowed(Exception):
    """This user may not create the topic (TOPIC_/CLUSTER_AUTHORIZATION_FAILED)."""


def topic_plan(
    kafka: KafkaSettings, names: tuple[str, ...] = TOPIC_NAMES, retention_ms: int | None = None
) -> list[NewTopic]:
    """The NewTopic specs of the plan, full names via ``kafka.topic(name)``; ``retention_ms``
    (default ``kafka.retention_ms``) for the topics kept by time."""
    keep_ms = kafka.retention_ms if retention_ms is None else retention_ms
    return [
        NewTopic(
            kafka.topic(name),
            num_partitions=kafka.partitions,
            replication_factor=kafka.replication_factor,
            config={"cleanup.policy": "compact"}
            if name in COMPACTED
            else {"retention.ms": str(keep_ms), "cleanup.policy": "delete"},
        )
        for name in names
    ]


def refused_login(kafka: KafkaSettings, admin: AdminClient | None = None) -> None:
    """Raise the one-line :class:`ConfigError` of a refused login or TLS handshake a client saw on
    ``kafka``'s brokers (:func:`ferry.core.kafka.clients.login_failure`); return if there was none.
    ``admin``'s pending callbacks are served first (librdkafka reports errors from ``poll``).

    The message names the user, mechanism and broker and librdkafka's reason, never the password.
    """
    if admin is not None:
        admin.poll(0)
    why = login_failure(kafka)
    if why is not None:
        who = f"user {kafka.user!r} ({kafka.sasl_mechanism})" if kafka.secure else "client"
        raise ConfigError(
            f"kafka at {kafka.bootstrap_servers} refused {who} over {kafka.security_protocol}: "
            f"{why}"
        )


def ensure_topics(
    admin: AdminClient,
    kafka: KafkaSettings,
    names: tuple[str, ...] = TOPIC_NAMES,
    retention_ms: int | None = None,
    *,
    retry: RetrySettings | None = None,
) -> dict[str, str]:
    """Create the plan's topics that do not exist yet (``retention_ms`` as in
    :func:`topic_plan`); existing ones are left as they are.

    Asks the broker's metadata first and creates only what it lacks, so a service whose user may
    DESCRIBE the topics but not CREATE them (:mod:`ferry.core.kafka.acls`) starts once the
    operator made them.

    ``retry``: a service's start passes its ``settings.retry``, so a start while the broker is out
    waits for it (a :class:`TransientError` retried under that policy, to its ceiling) instead of
    exiting: the CI nemesis (seed 686632, 2026-12-07) restarted extract during a 47 s pause of the
    broker and it exited at once on the metadata timeout. Without it (an operator's command) the
    first error is raised.

    Returns:
        full topic name → ``"created"`` or ``"exists"``.

    Raises:
        TransientError: the broker did not answer within ``kafka.request_timeout_s`` or
            returned a retriable error (after ``retry``'s last attempt, when given).
        ConfigError: the broker refused a topic for good (e.g. replication factor larger than
            the number of brokers, invalid config; a missing topic this user may not create,
            naming the ACL), or refused this client's login or TLS handshake
            (:func:`refused_login`): retrying cannot fix a wrong password.
    """
    if retry is not None:
        return retrying(retry, what=f"topic plan on {kafka.bootstrap_servers}")(
            _ensure_topics, admin, kafka, names, retention_ms
        )
    return _ensure_topics(admin, kafka, names, retention_ms)


def _ensure_topics(
    admin: AdminClient,
    kafka: KafkaSettings,
    names: tuple[str, ...],
    retention_ms: int | None,
) -> dict[str, str]:
    timeout = kafka.request_timeout_s
    try:
        known = set(admin.list_topics(timeout=timeout).topics)
    except KafkaException as exc:
        refused_login(kafka, admin)
        raise TransientError(f"metadata of {kafka.bootstrap_servers} failed: {exc}") from exc
    plan = topic_plan(kafka, names, retention_ms)
    outcome: dict[str, str] = {t.topic: "exists" for t in plan if t.topic in known}
    missing = [t for t in plan if t.topic not in known]
    if not missing:
        log.info("topic plan on %s: %s", kafka.bootstrap_servers, outcome)
        return outcome
    try:
        futures = admin.create_topics(missing, operation_timeout=timeout, request_timeout=timeout)
    except KafkaException as exc:
        refused_login(kafka, admin)
        raise TransientError(f"create_topics on {kafka.bootstrap_servers} failed: {exc}") from exc
    codes = {
        KafkaError.TOPIC_ALREADY_EXISTS: _Exists,
        KafkaError.TOPIC_AUTHORIZATION_FAILED: _NotAllowed,
        KafkaError.CLUSTER_AUTHORIZATION_FAILED: _NotAllowed,
    }
    for topic, future in futures.items():
        try:
            admin_result(
                future, timeout, f"creating topic {topic}", refusal=ConfigError, codes=codes
            )
            outcome[topic] = "created"
        except _Exists:
            outcome[topic] = "exists"
        except TransientError:
            refused_login(kafka, admin)
            raise
        except _NotAllowed as exc:
            raise ConfigError(
                f"topic {topic} does not exist and user {kafka.user!r} may not create it "
                f"(ACL: CREATE on topic {topic}); create it as the operator: "
                "`ferry kafka topics`"
            ) from exc
    _wait_listed(admin, kafka, [t for t, how in outcome.items() if how == "created"])
    log.info("topic plan on %s: %s", kafka.bootstrap_servers, outcome)
    return outcome


def _wait_listed(admin: AdminClient, kafka: KafkaSettings, topics: list[str]) -> None:
    """Return once the broker's metadata lists every one of ``topics`` (just created: the
    controller has them before the broker's metadata cache does), polled every 0.2 s.

    Raises:
        TransientError: some are still not listed after ``kafka.request_timeout_s``.
    """
    deadline = time.monotonic() + kafka.request_timeout_s
    while True:
        try:
            listed = set(admin.list_topics(timeout=kafka.request_timeout_s).topics)
        except KafkaException as exc:
            raise TransientError(f"metadata of {kafka.bootstrap_servers} failed: {exc}") from exc
        absent = sorted(set(topics) - listed)
        if not absent:
            return
        if time.monotonic() >= deadline:
            raise TransientError(
                f"topics {absent} created on {kafka.bootstrap_servers} but not in its metadata "
                f"after {kafka.request_timeout_s:g} s"
            )
        time.sleep(0.2)
