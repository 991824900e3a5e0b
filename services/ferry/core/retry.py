"""Ferry's one retry policy (tenacity), used by the stage runner, extract, transfer and HDFS.

Rule (docs/architecture.md, "Delivery and idempotency"): every retry has a ceiling. Only
:class:`~ferry.errors.TransientError` is retried; the wait before attempt ``n+1`` is
``uniform(0, min(max_backoff_s, initial_backoff_s × 2^(n-1)))`` — exponential backoff with full
jitter (AWS Architecture Blog, "Exponential Backoff And Jitter"); after ``max_attempts`` attempts
(and, when ``min_window_s`` > 0, not before that many seconds passed since the first one) the last
error is re-raised unchanged. Permanent errors are raised at once.

A :class:`~ferry.errors.ClusterCondition` (a quota, safe mode, no space: case C22) is the
cluster's, not the file's; the caller says what it gets (``conditions``): ``"retry"``, an ordinary
transient error (the inner retries of one call); ``"hold"``, retried until
``condition_window_s`` passed since the first attempt, whatever ``max_attempts`` says, with the
backoff capped at ``condition_backoff_s`` (a stage's retries of a file; an ordinary error met
after a hold gets its ``max_attempts`` counted from there); ``"raise"``, raised at once (extract
holds the file itself, on the NAS).
"""

from __future__ import annotations

import logging
import random
import threading
import time
from collections.abc import Callable
from typing import Literal

from tenacity import RetryCallState, Retrying, retry_if_exception

from ferry.errors import ClusterCondition, TransientError
from ferry.settings.retry import RetrySettings

log = logging.getLogger(__name__)


def retrying(
    policy: RetrySettings,
    should_stop: threading.Event | None = None,
    *,
    sleep: Callable[[float], None] | None = None,
    what: str = "",
    conditions: Literal["retry", "hold", "raise"] = "retry",
) -> Retrying:
    """A ``tenacity.Retrying`` for ``policy`` (``settings.retry`` or a copy of it).

    Args:
        should_stop: when given, a backoff sleep ends early once it is set (shutdown).
        sleep: the sleep function (tests pass a fake clock); default :func:`time.sleep`, or a
            wait on ``should_stop``.
        what: names the call in the warning logged before each backoff.
        conditions: what a :class:`ClusterCondition` gets (module docstring).

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
        if held(state):
            log.warning(
                "%s: held by a cluster condition for %.0fs of at most %.0fs, attempt %d (%s); "
                "next in %.2fs",
                what or "retry",
                state.seconds_since_start or 0.0,
                policy.condition_window_s,
                state.attempt_number,
                exc,
                state.next_action.sleep if state.next_action else 0.0,
            )
            return
        log.warning(
            "%s: attempt %d/%d failed (%s); next in %.2fs",
            what or "retry",
            state.attempt_number - last_held[0],
            policy.max_attempts,
            exc,
            state.next_action.sleep if state.next_action else 0.0,
        )

    #: ``"hold"``: the last attempt that met a condition; the ordinary ceiling counts the
    #: attempts after it, so a file held for an hour still gets its max_attempts afterwards
    last_held = [0]

    def held(state: RetryCallState) -> bool:
        exc = state.outcome.exception() if state.outcome else None
        return conditions == "hold" and isinstance(exc, ClusterCondition)

    def ordinary(state: RetryCallState) -> int:
        """Attempts since the last one a condition held (all of them, without ``"hold"``)."""
        if state.attempt_number == 1:
            last_held[0] = 0  # a Retrying may be called again
        if held(state):
            last_held[0] = state.attempt_number
        return state.attempt_number - last_held[0]

    def stop(state: RetryCallState) -> bool:
        elapsed = state.seconds_since_start or 0.0
        n = ordinary(state)
        if held(state):
            return elapsed >= policy.condition_window_s
        return n >= policy.max_attempts and elapsed >= policy.min_window_s

    def wait(state: RetryCallState) -> float:
        """Full jitter (as tenacity's ``wait_random_exponential``), capped at
        ``condition_backoff_s`` while held."""
        cap = policy.max_backoff_s
        if held(state):
            cap = min(cap, policy.condition_backoff_s)
            n = state.attempt_number
        else:
            n = state.attempt_number - last_held[0]
        return random.uniform(0, min(cap, policy.initial_backoff_s * 2 ** min(n - 1, 60)))

    def retry_on(exc: BaseException) -> bool:
        if isinstance(exc, ClusterCondition) and conditions == "raise":
            return False
        return isinstance(exc, TransientError)

    return Retrying(
        retry=retry_if_exception(retry_on),
        stop=stop,
        wait=wait,
        sleep=_sleep,
        before_sleep=before_sleep,
        reraise=True,
    )


__all__ = ["retrying"]
