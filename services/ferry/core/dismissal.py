"""``FileDismissed``: an operator closed a quarantine entry that nobody will fix.

Its own module (beside :mod:`ferry.core.events`, which lists it in ``EVENT_TYPES``) because it
is about a quarantine entry, not a file's journey: it carries no manifest and moves no file.
Why it lives on the failed topic itself, keyed like the entry, is told in docs/operations.md
("Closing a quarantine entry"): it lands on the partition of the failures it closes, after them,
expires with them, and needs no other topic nor subscription.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from datetime import datetime
from typing import Any, ClassVar

from ferry.errors import SerializationError


@dataclass(frozen=True)
class FileDismissed:
    """Quarantine entry ``key`` dismissed with ``note`` by ``by`` at ``dismissed_at``; it closes
    the failures up to ``failed_at`` (the latest one when dismissed), not a later one
    (``schemas/ferry.FileDismissed.avsc``). Times are timezone-aware UTC."""

    SCHEMA: ClassVar[str] = "ferry.FileDismissed"
    TOPIC: ClassVar[str] = "failed"

    key: str
    note: str
    by: str
    dismissed_at: datetime
    failed_at: datetime

    @property
    def file_id(self) -> str:
        """The entry's key, which is also the record's Kafka key (:func:`event_key`)."""
        return self.key

    def to_dict(self) -> dict[str, Any]:
        return {
            "key": self.key,
            "note": self.note,
            "by": self.by,
            "dismissed_at": self.dismissed_at,
            "failed_at": self.failed_at,
        }

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> FileDismissed:
        try:
            return cls(
                key=data["key"],
                note=data["note"],
                by=data["by"],
                dismissed_at=data["dismissed_at"],
                failed_at=data["failed_at"],
            )
        except KeyError as exc:
            raise SerializationError(f"{cls.SCHEMA} datum lacks field {exc}") from exc

    def closes(self, failed_at_ms: int) -> bool:
        """True when this dismissal covers a failure at ``failed_at_ms`` (epoch ms)."""
        return failed_at_ms <= int(self.failed_at.timestamp() * 1000)
