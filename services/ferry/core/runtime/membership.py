"""A consumer that lost its partitions and never got back into its group rejoins by itself.

librdkafka rejoins a group on its own after a session timeout, but not always: the CI run of
2026-12-07 (tests/e2e/test_faults.py, the broker stopped and started again) saw load's consumer
time out ("partitions lost") while the broker was down and receive no assignment in the next
3 minutes, while transfer's, in the same outage, was assigned again 11 s after the broker was back
(librdkafka issue #3396 describes consumers stuck the same way after a coordinator change).
A stage that holds nothing while its files wait is an outage nobody sees.

:class:`GroupWatch` is asked by the runner's loop; after ``after_s`` without an assignment it
asks the broker (every ``after_s``) whether this consumer is a member of its group at all. A
member without partitions is normal (a hot standby, more instances than partitions) and is left
alone; a consumer the group does not list is told to subscribe again, which makes it join anew.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from typing import Any

from confluent_kafka import KafkaException

from ferry.core.kafka.admin import active_members
from ferry.core.kafka.clients import build_admin
from ferry.errors import FerryError, TransientError
from ferry.settings.kafka import KafkaSettings

log = logging.getLogger(__name__)


class GroupWatch:
    """Tells the runner when its consumer should subscribe again.

    Args:
        member_id: this consumer's member id now (``Consumer.memberid()``; ``None`` or empty
            while it is not in a group).
        members: the member ids of the group now, from the broker (one ``DescribeGroups``
            call); may raise :class:`~ferry.errors.FerryError` (the broker out: not decided).
        after_s: seconds without an assignment before the first question, and between two.
        clock: monotonic seconds (tests pass a fake).
    """

    def __init__(
        self,
        member_id: Callable[[], str | None],
        members: Callable[[], list[str]],
        after_s: float,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self._member_id = member_id
        self._members = members
        self.after_s = after_s
        self._clock = clock
        self._since: float | None = None  # when the consumer last held nothing, first seen
        self._next: float = 0.0
        #: how many times the consumer was told to subscribe again
        self.rejoins = 0

    @classmethod
    def for_group(cls, consumer: Any, kafka: KafkaSettings, group: str) -> GroupWatch:
        """The watch of ``consumer`` in consumer group ``group``: it asks after three session
        timeouts (at least 30 s), through an admin client made on the first question."""
        admin: list[Any] = []

        def members() -> list[str]:
            if not admin:
                admin.append(build_admin(kafka))
            try:
                return [m.member_id for m in active_members(admin[0], kafka, group)]
            except KafkaException as exc:
                raise TransientError(f"describe group {group}: {exc}") from exc

        return cls(
            lambda: getattr(consumer, "memberid", lambda: None)(),
            members,
            after_s=max(30.0, 3 * kafka.session_timeout_ms / 1000),
        )

    def should_rejoin(self, holding: bool) -> bool:
        """``holding``: the consumer has partitions or a batch runs. True when the consumer held
        nothing for ``after_s`` and the group does not list it (then the clock starts again)."""
        now = self._clock()
        if holding:
            self._since = None
            return False
        if self._since is None:
            self._since = now
            self._next = now + self.after_s
            return False
        if now < self._next:
            return False
        self._next = now + self.after_s
        me = self._member_id() or ""
        try:
            listed = self._members()
        except FerryError as exc:
            log.info("group membership not checked now: %s", exc)
            return False
        if me and me in listed:
            return False  # a member without partitions: a standby, left alone
        log.warning(
            "consumer %r held no partition for %.0f s and its group lists %s, not it: "
            "subscribing again",
            me,
            now - self._since,
            listed,
        )
        self.rejoins += 1
        self._since = now
        return True


__all__ = ["GroupWatch"]
