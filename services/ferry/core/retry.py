"""Ferry's one retry policy (tenacity), used by the stage runner, extract, transfer and HDFS.

Rule (docs/architecture.md, "Delivery and idempotency"): every retry has a ceiling. Only
:class:`~ferry.errors.TransientError` is retried; the wait before attempt ``n+1`` is
``uniform(0, min(max_backoff_s, initial_backoff_s × 2^(n-1)))`` — exponential backoff with full
jitter (AWS Architecture Blog, "Exponential Backoff And Jitter"); after ``max_attempts`` attempts
(and, when ``min_window_s`` > 0, not before that many seconds passed since the first one) the last
error is re-raised unchanged. Permanent errors are raised at once.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable

from tenacity import (
    RetryCallState,
    Retrying,
    retry_if_exception_type,
    stop_after_attempt,
    stop_after_delay,
    wait_random_exponential,
)

from ferry.errors import TransientError
from ferry.settings.retry import RetrySettings

log = logging.getLogger(__name__)


def retrying(
    policy: RetrySettings,
    should_stop: threading.Event | None = None,
    *,
    sleep: Callable[[float], None] | None = None,
    what: str = "",
) -> Retrying:
    """A ``tenacity.Retrying`` for ``policy`` (``settings.retry`` or a copy of it).

    Args:
        should_stop: when given, a backoff sleep ends early once it is set (shutdown).
        sleep: the sleep function (tests pass a fake clock); default :func:`time.sleep`, or a
            wait on ``should_stop``.
        what: names the call in the warning logged before each backoff.

    Returns:
        a callable ``Retrying`` object: ``retrying(policy)(fn, *args)`` runs ``fn`` under it.
    """

    def _sleep(seconds: float) -> None:
        if sleep is not None:
            sleep(seconds)
        elif should_stop is not None:
            should_stop.wait(seconds)
        else:
            time.sleep(seconds)

    def before_sleep(state: RetryCallState) -> None:
        exc = state.outcome.exception() if state.outcome else None
        log.warning(
            "%s: attempt %d/%d failed (%s); next in %.2fs",
            what or "retry",
            state.attempt_number,
            policy.max_attempts,
            exc,
            state.next_action.sleep if state.next_action else 0.0,
        )

    return Retrying(
        retry=retry_if_exception_type(TransientError),
        stop=stop_after_attempt(policy.max_attempts) & stop_after_delay(policy.min_window_s),
        wait=wait_random_exponential(multiplier=policy.initial_backoff_s, max=policy.max_backoff_s),
        sleep=_sleep,
        before_sleep=before_sleep,
        reraise=True,
    )


__all__ = ["retrying"]
