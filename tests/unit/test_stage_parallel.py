"""in_parallel: a plain handler run on several events of a batch at once (transfer's copies)."""

from __future__ import annotations

import threading
from typing import Any

import pytest

from ferry.core.events import FileTransformed
from ferry.core.runtime.stage import HandlerBug, in_parallel
from ferry.errors import ConfigError, PermanentError, TransientError
from ferry.settings import get_settings
from ferry.stages.transfer import service


def test_results_keep_the_events_order_and_each_failure_is_settled_for_its_file() -> None:
    def handler(event: int, deps: Any) -> list[str]:
        if event == 2:
            raise TransientError("A is down")
        if event == 3:
            raise PermanentError("bad", reason="bad_manifest")
        if event == 4:
            raise KeyError("bug")
        return [f"out-{event}-{deps}"]

    results = in_parallel(handler, 3)([1, 2, 3, 4, 5], "d")
    assert results[0] == ["out-1-d"]
    assert isinstance(results[1], TransientError) and str(results[1]) == "A is down"
    assert isinstance(results[2], PermanentError) and results[2].reason == "bad_manifest"
    assert isinstance(results[3], HandlerBug) and results[3].reason == "handler_error"
    assert results[4] == ["out-5-d"]


def test_up_to_threads_events_run_at_once_and_never_more() -> None:
    """Four handlers block on a barrier: they can only all return if the four ran together."""
    barrier = threading.Barrier(4, timeout=10)
    running, most = 0, 0
    lock = threading.Lock()

    def handler(event: int, deps: Any) -> list[int]:
        nonlocal running, most
        with lock:
            running += 1
            most = max(most, running)
        if event < 4:
            barrier.wait()
        with lock:
            running -= 1
        return [event]

    assert in_parallel(handler, 4)(list(range(8)), None) == [[i] for i in range(8)]
    assert most == 4


class _Ev:
    """An event about file ``file_id`` (what :func:`file_key` reads), numbered ``n``."""

    def __init__(self, file_id: str | None, n: int) -> None:
        self.file_id, self.n = file_id, n


def test_two_events_of_one_file_run_one_after_the_other_beside_other_files() -> None:
    """The compose nemesis's seed 4711 (2026-12-07): a transfer batch held two FileTransformed
    of one file (transformed twice); copied at once into the same incoming directory, one copy
    deleted the other's output and its file was quarantined as hdfs_not_found. The first event
    of file "a" waits (up to 1 s) for the second to start beside it: that must never happen,
    while files "b" and c and an event of no file run during that wait."""
    started = {n: threading.Event() for n in range(6)}
    lock = threading.Lock()
    running: dict[int, str | None] = {}
    order: list[int] = []
    beside_first: list[int] = []  # events that started while event 0 (file a) ran

    def handler(event: _Ev, deps: Any) -> list[int]:
        with lock:
            if 0 in running and event.n != 0:
                beside_first.append(event.n)
            running[event.n] = event.file_id
            order.append(event.n)
        started[event.n].set()
        if event.n == 0:
            started[3].wait(timeout=1.0)  # the next event of file a: never while this one runs
        with lock:
            del running[event.n]
        return [event.n]

    events = [_Ev("a", 0), _Ev("b", 1), _Ev("c", 2), _Ev("a", 3), _Ev(None, 4), _Ev("a", 5)]
    assert in_parallel(handler, 4)(events, None) == [[n] for n in range(6)]
    assert order.index(0) < order.index(3) < order.index(5)  # one file's events in batch order
    assert 3 not in beside_first and 5 not in beside_first
    assert {1, 2, 4} <= set(beside_first)  # the other files did not wait for file a


def test_a_config_error_stops_the_batch() -> None:
    def handler(event: int, deps: Any) -> list[int]:
        raise ConfigError("kafka refused user")

    with pytest.raises(ConfigError, match="kafka refused user"):
        in_parallel(handler, 2)([1, 2], None)


def test_threads_below_one_is_refused() -> None:
    with pytest.raises(ValueError, match="threads must be >= 1, got 0"):
        in_parallel(lambda e, d: [], 0)


def test_transfer_copies_files_in_parallel_batches_by_default(monkeypatch) -> None:
    monkeypatch.setattr(service, "build_runner", lambda stage, *a, **k: stage)
    stage = service.build(get_settings())
    assert (stage.name, stage.batch_size, stage.batch_wait_s) == ("transfer", 32, 0.5)
    assert stage.batching
    one = get_settings().model_copy(
        update={"transfer": get_settings().transfer.model_copy(update={"parallel_files": 1})}
    )
    stage = service.build(one)
    assert (stage.batch_size, stage.handlers[FileTransformed]) == (1, service.transfer_file)
