"""NAS files held by a condition of cluster B (case C22): the file is not at fault, so it stays
on the NAS and is tried again later, while other files go on.

A :class:`~ferry.errors.ClusterCondition` (landing's space or name quota exceeded, B's
NameNode in safe mode, no DataNode with room) met while landing a file holds it: its next attempt
comes after ``min(retry.condition_backoff_s, retry.initial_backoff_s * 2^(tries-1))`` seconds
(the scanner offers it again every scan; :meth:`NasHolds.due` lets it through once that passed),
and only once ``retry.condition_window_s`` passed since its first hold is it quarantined with the
condition's reason (``quota_exceeded``, ``safe_mode``, ``no_space``). The window is counted from
this process's first attempt: a restart starts it anew. While a condition holds files it is on the
board (:mod:`ferry.core.runtime.conditions`): ``ferry ps``, ``ferry status``, the tracker.

Cluster B out of reach is held the same way (issue 47's nemesis, seeds 47 and 4747: a DataNode
killed for 84 s, a NameNode restarting for 57 s, and extract quarantined 41 good files that every
later stage would have held): an :class:`~ferry.errors.HdfsUnavailable` past its ordinary retries
(NameNode refused or reset, a timeout) and a :class:`~ferry.errors.DataNodeUnreachable` (case
C06: a DataNode that refuses or whose advertised address cannot be reached) say nothing about the
file. They hold it under the condition ``(<their reason>, "b", "")`` and, once the window passed,
quarantine it with their own reason, as before (C06's misconfigured address is then shown as a
condition for the window instead of a quarantined file per drop).
"""

from __future__ import annotations

import logging
import os
import threading
import time
from dataclasses import dataclass
from pathlib import Path

from ferry.core.runtime.conditions import ConditionBoard
from ferry.errors import ClusterCondition, outage_condition
from ferry.settings.retry import RetrySettings
from ferry.stages.extract.scanner import Candidate, display_name

log = logging.getLogger(__name__)


@dataclass
class Hold:
    """One held NAS file: its first hold, attempts, next attempt (monotonic s)."""

    first: float
    tries: int
    next_at: float


class NasHolds:
    """The held NAS files of one extract process; thread-safe (extract's workers share it).

    Attributes:
        board: the conditions holding them, as ``ferry ps`` and the tracker see them.
        held: {NAS path: :class:`Hold`}.
        attempts: attempts a condition refused so far.
    """

    def __init__(self, policy: RetrySettings, board: ConditionBoard | None = None) -> None:
        self.policy = policy
        self.board = board or ConditionBoard("extract")
        self.held: dict[Path, Hold] = {}
        self.attempts = 0
        self._lock = threading.Lock()

    def due(self, cands: list[Candidate], now: float) -> list[Candidate]:
        """``cands`` less the held files whose backoff has not passed at monotonic ``now``; a
        held file gone from the NAS (moved by hand) is no longer held."""
        with self._lock:
            for path in [p for p in self.held if not os.path.lexists(p)]:
                del self.held[path]
                self.board.release(path)
            return [c for c in cands if c.path not in self.held or self.held[c.path].next_at <= now]

    def hold(self, cand: Candidate, exc: BaseException) -> int | None:
        """Hold ``cand`` if ``exc`` is a :class:`ClusterCondition` or cluster B out of reach
        (:func:`ferry.errors.outage_condition` on cluster ``b``, the only cluster extract writes
        to) within its window.

        Returns:
            ``None``: held (leave the file on the NAS); else the attempt count to quarantine it
            with: its attempts once the window passed, 0 when ``exc`` is no condition.
        """
        exc = outage_condition(exc, "b")
        if not isinstance(exc, ClusterCondition):
            return 0
        now = time.monotonic()
        with self._lock:
            self.attempts += 1
            h = self.held.setdefault(cand.path, Hold(now, 0, now))
            h.tries += 1
            if now - h.first >= self.policy.condition_window_s:
                return h.tries
            p = self.policy
            backoff = min(p.condition_backoff_s, p.initial_backoff_s * 2 ** (h.tries - 1))
            h.next_at = now + backoff
            self.board.hold(exc, cand.path)
        where = display_name(cand.relative)
        log.info(
            "extract: %s held on the NAS (attempt %d; next in %.1fs): %s",
            where,
            h.tries,
            backoff,
            exc,
        )
        return None

    def release(self, cand: Candidate) -> None:
        """``cand`` is no longer held (landed, quarantined, gone)."""
        with self._lock:
            if self.held.pop(cand.path, None) is not None:
                self.board.release(cand.path)


__all__ = ["Hold", "NasHolds"]
