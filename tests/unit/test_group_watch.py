"""A consumer that held no partition for a while and is not a member of its group subscribes
again; a member without partitions (a hot standby) is left alone (ferry.core.runtime.membership;
the CI run of 2026-12-07 saw load's consumer out of its group for 3 minutes after a broker
restart)."""

from __future__ import annotations

from ferry.core.runtime.membership import GroupWatch
from ferry.errors import TransientError


class Clock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def test_a_consumer_the_group_does_not_list_rejoins_after_the_wait() -> None:
    clock, listed, asked = Clock(), [["other"]], []

    def members() -> list[str]:
        asked.append(clock.now)
        return listed[0]

    watch = GroupWatch(lambda: "me", members, after_s=30.0, clock=clock)
    assert watch.should_rejoin(holding=True) is False
    assert watch.should_rejoin(holding=False) is False  # the clock starts
    clock.now = 129.0
    assert watch.should_rejoin(holding=False) is False and asked == []
    clock.now = 130.0
    assert watch.should_rejoin(holding=False) is True and asked == [130.0]
    assert watch.rejoins == 1
    clock.now = 140.0
    assert watch.should_rejoin(holding=False) is False and asked == [130.0]  # not before 160
    listed[0] = ["other", "me"]  # back in the group, still without partitions: a standby
    clock.now = 160.0
    assert watch.should_rejoin(holding=False) is False and asked == [130.0, 160.0]
    assert watch.rejoins == 1


def test_holding_partitions_resets_the_wait_and_an_unanswered_question_decides_nothing() -> None:
    clock = Clock()

    def members() -> list[str]:
        raise TransientError("broker out")

    watch = GroupWatch(lambda: "", members, after_s=30.0, clock=clock)
    watch.should_rejoin(holding=False)
    clock.now = 125.0
    assert watch.should_rejoin(holding=True) is False  # assigned again: the wait starts over
    watch.should_rejoin(holding=False)
    clock.now = 150.0
    assert watch.should_rejoin(holding=False) is False  # 25 s only
    clock.now = 155.0
    assert watch.should_rejoin(holding=False) is False  # asked, no answer: not decided
    assert watch.rejoins == 0
