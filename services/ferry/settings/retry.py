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
    condition_window_s: float = Field(
        default=3600.0,
        gt=0,
        description=(
            "Longest a stage holds a file that a cluster condition refuses (a space or name "
            "quota exceeded, a NameNode in safe mode, no DataNode with room: "
            "ferry.errors.ClusterCondition), retrying it, s; after it the file is "
            "quarantined with the condition's reason (quota_exceeded, safe_mode, no_space). "
            "Case C22: a capacity incident delays files, it does not quarantine them."
        ),
    )
    condition_backoff_s: float = Field(
        default=10.0,
        gt=0,
        description=(
            "Longest single backoff while a cluster condition holds a file, s: the stage "
            "resumes within this (plus one attempt) after the condition clears."
        ),
    )
