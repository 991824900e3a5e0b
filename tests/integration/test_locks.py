"""Hive table locks on the real ZooKeeper: one holder at a time, a refusal that names the holder,
and a dead holder's lock freed with its session."""

from __future__ import annotations

import threading
import uuid

import pytest

from ferry.settings import Settings
from ferry.tables.locks import TableLocked, TableLocks
from ferry_kit.testing.waiting import wait_for

pytestmark = [pytest.mark.integration, pytest.mark.stack("zookeeper")]


@pytest.fixture
def locks_settings(stack: Settings) -> Settings:
    zk = stack.zookeeper.model_copy(
        update={"locks_path": f"/ferry-test/{uuid.uuid4().hex[:8]}", "lock_timeout_s": 1.0}
    )
    return stack.model_copy(update={"zookeeper": zk})


def test_a_second_writer_waits_for_the_first_and_is_refused_after_the_timeout(locks_settings):
    first, second = TableLocks(locks_settings), TableLocks(locks_settings)
    second.identifier = "second-writer"
    events: list[str] = []
    try:
        with first.hold("ferry.flights"):
            events.append("first holds")
            with (
                pytest.raises(
                    TableLocked, match=f"table ferry.flights: lock held by {first.identifier}"
                ),
                second.hold("ferry.flights"),
            ):
                events.append("second holds while first does")  # must not happen
            with second.hold("ferry.weather"):  # another table is not blocked
                events.append("second holds another table")
        released = threading.Event()

        def take() -> None:
            with second.hold("ferry.flights"):
                events.append("second holds after first released")
            released.set()

        t = threading.Thread(target=take)
        t.start()
        wait_for(released.is_set, "the second writer to get the lock", 10)
        t.join(10)
        assert events == [
            "first holds",
            "second holds another table",
            "second holds after first released",
        ]
    finally:
        first.close()
        second.close()


def test_a_holder_whose_session_ends_frees_the_lock(locks_settings):
    dead, alive = TableLocks(locks_settings), TableLocks(locks_settings)
    try:
        held = dead.hold("ferry.flights")
        held.__enter__()
        with pytest.raises(TableLocked), alive.hold("ferry.flights"):
            pass
        dead.close()  # the process's session ends (as when it dies): its ephemeral node goes
        with alive.hold("ferry.flights"):
            assert alive._zk().get_children(f"{alive.root}/ferry.flights") != []
    finally:
        alive.close()
