"""The ``retry`` section: Ferry's one retry policy for network calls."""

from __future__ import annotations

from pydantic import Field

from ferry.settings.base import Frozen


class RetrySettings(Frozen):
    """Retry policy for network calls: exponential backoff with full jitter and a ceiling."""

    max_attempts: int = Field(
        default=6, description="Attempts per file per stage before quarantine."
    )
    initial_backoff_s: float = Field(default=0.5, description="First backoff, s.")
    max_backoff_s: float = Field(default=30.0, description="Longest single backoff, s.")
    connect_timeout_s: float = Field(
        default=5.0, description="TCP connect timeout of every HTTP call, s."
    )
    read_timeout_s: float = Field(
        default=30.0, description="Socket read timeout of every HTTP call, s."
    )
    min_window_s: float = Field(
        default=0.0,
        description=(
            "Keep retrying a transient failure until both max_attempts attempts were made and this "
            "many seconds passed since the first, s (0: attempts only). Lets a stage ride out an "
            "outage of known length instead of quarantining every file in flight."
        ),
    )
