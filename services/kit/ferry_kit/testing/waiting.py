"""Waiting on a condition with a deadline: never sleep-and-hope.

Used by the tests, the fault rig (:mod:`ferry_kit.testing.chaos`) and the benchmarks alike.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import TypeVar

T = TypeVar("T")


def wait_for(
    cond: Callable[[], T],
    what: str | Callable[[], str],
    timeout_s: float = 60.0,
    poll_s: float = 0.1,
) -> T:
    """Call ``cond`` every ``poll_s`` seconds until it returns a truthy value, and return it.

    ``what`` names the condition in the timeout message; a callable is called only on timeout (to
    report the state at that moment).

    Raises:
        AssertionError: ``timeout_s`` seconds passed first; the message names ``what``.
    """
    deadline = time.monotonic() + timeout_s
    while True:
        value = cond()
        if value:
            return value
        if time.monotonic() >= deadline:
            named = what() if callable(what) else what
            raise AssertionError(f"timed out after {timeout_s}s waiting for {named}")
        time.sleep(poll_s)
