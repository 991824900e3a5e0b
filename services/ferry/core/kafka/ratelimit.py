"""A logging filter that lets one record per distinct message through per interval.

Used for librdkafka's own log (:data:`ferry.core.kafka.clients.LIBRDKAFKA_LOG`): while a broker is
down,
every client logs the same failed connect every few tens of milliseconds. Messages are "the same"
when they differ only in numbers (milliseconds, counts, ports), so ``Connect to …:19092 failed:
Connection refused (after 0ms …)`` and ``(after 1ms …)`` are one kind. The first record of a kind
in each interval passes; the rest are counted, and the next one that passes says how many were
suppressed.
"""

from __future__ import annotations

import logging
import re
import threading
import time
from collections.abc import Callable

_NUMBER = re.compile(r"\d+")


def message_kind(record: logging.LogRecord) -> tuple[str, int, str]:
    """(logger name, level, message with every digit run replaced by ``#``)."""
    return record.name, record.levelno, _NUMBER.sub("#", record.getMessage())


class RateLimitFilter(logging.Filter):
    """Pass at most one record of each :func:`message_kind` per ``interval_s`` seconds.

    Args:
        interval_s: seconds between two records of one kind, > 0.
        clock: monotonic clock in seconds (tests pass a fake one).
    """

    def __init__(
        self, interval_s: float = 60.0, clock: Callable[[], float] = time.monotonic
    ) -> None:
        super().__init__()
        if interval_s <= 0:
            raise ValueError(f"interval_s must be > 0, not {interval_s}")
        self.interval_s = interval_s
        self._clock = clock
        self._lock = threading.Lock()
        self._last: dict[tuple[str, int, str], float] = {}
        self._suppressed: dict[tuple[str, int, str], int] = {}

    def filter(self, record: logging.LogRecord) -> bool:
        kind = message_kind(record)
        now = self._clock()
        with self._lock:
            last = self._last.get(kind)
            if last is not None and now - last < self.interval_s:
                self._suppressed[kind] = self._suppressed.get(kind, 0) + 1
                return False
            self._last[kind] = now
            n = self._suppressed.pop(kind, 0)
        if n:
            record.msg = (
                f"{record.getMessage()} ({n} more like it in the last {self.interval_s:.0f}s)"
            )
            record.args = ()
        return True


__all__ = ["RateLimitFilter", "message_kind"]
