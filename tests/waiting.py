"""Waiting on a condition with a deadline (house style 15): never sleep-and-hope."""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import TypeVar

T = TypeVar("T")


def wait_for(cond: Callable[[], T], what: str, timeout_s: float = 60.0, poll_s: float = 0.1) -> T:
    """Call ``cond`` every ``poll_s`` seconds until it returns a truthy value, and return it.

    Raises:
        AssertionError: ``timeout_s`` seconds passed first; the message names ``what``.
    """
    deadline = time.monotonic() + timeout_s
    while True:
        value = cond()
        if value:
            return value
        assert time.monotonic() < deadline, f"timed out after {timeout_s}s waiting for {what}"
        time.sleep(poll_s)
