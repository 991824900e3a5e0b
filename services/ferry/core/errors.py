"""Ferry's exception tree.

Every error is one of three things (house style rule 10): retried by policy
(:class:`TransientError`), sent to quarantine with a reason code (:class:`PermanentError`), or
raised to stop the process (:class:`ConfigError`, :class:`StackError`). Messages name the file,
path, topic/partition/offset involved.
"""

from __future__ import annotations


class FerryError(Exception):
    """Base of every Ferry error."""

    #: Stable reason code recorded in ``FileFailed.reason`` when a file is quarantined.
    reason: str = "error"


class ConfigError(FerryError):
    """Settings or a dataset definition are invalid; the process cannot start."""

    reason = "config"


class StackError(FerryError):
    """A local-stack component failed to start, stop or pass its health check."""

    reason = "stack"


class TransientError(FerryError):
    """Worth retrying: a timeout, a reset connection, a server briefly unavailable."""

    reason = "transient"


class PermanentError(FerryError):
    """Retrying cannot help: the file goes to quarantine with :attr:`reason`."""

    reason = "permanent"

    def __init__(self, message: str, *, reason: str | None = None) -> None:
        super().__init__(message)
        if reason is not None:
            self.reason = reason


class SerializationError(PermanentError):
    """A record cannot be encoded or decoded (not Avro, unknown fingerprint, bad payload)."""

    reason = "undecodable"
