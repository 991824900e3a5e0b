"""What the stage runtime tells an observer about each file it handles: the one hook for the
consuming stages (lineage, :mod:`ferry.lineage.observer`).

- :meth:`FileObserver.started`: a stage is about to call its handler on a decoded input
  (from the worker thread, before the first attempt).
- :meth:`FileObserver.settled`: the file's outputs, or its one FileFailed, were acknowledged by
  the broker (from the loop thread, after delivery; not called for records dropped on a
  revocation or at shutdown: they are redelivered).

An observer must return at once and never raise: it cannot delay or fail a file (the runner
logs and ignores an exception from it all the same).
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Protocol

from ferry.core.events import Event
from ferry.core.runtime.stage import Record

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class Settled:
    """One input record and what was published for it."""

    record: Record
    #: the decoded input; None when it could not be decoded
    event: Event | None
    #: the output events, or the one FileFailed
    outputs: tuple[Event, ...]


class FileObserver(Protocol):
    def started(self, stage: str, record: Record, event: Event) -> None: ...

    def settled(self, stage: str, files: Sequence[Settled]) -> None: ...

    def close(self) -> None: ...


def notify(what: str, call: object, *args: object) -> None:
    """Call an observer method (``None``: nothing), logging (never raising) what it raised."""
    if call is None:
        return
    try:
        call(*args)  # type: ignore[operator]
    except Exception:  # noqa: BLE001 - an observer must not stop a file or the stage
        log.warning("file observer failed in %s", what, exc_info=True)


__all__ = ["FileObserver", "Settled", "notify"]
