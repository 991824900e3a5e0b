"""Is the tracker doing its job? The rule behind ``GET /healthz`` (field case C16: a broker paused
for minutes must show, and the tracker must come back on its own).

Unhealthy, with a reason, when either holds:

- **broker unreachable**: no lag read has succeeded for ``broker_s`` seconds (the tracker's lag
  timer asks the broker every ``lag_refresh_s``; a paused or dead broker makes it time out);
- **stalled**: the tracker's own consumer group is behind (lag > 0 on the Ferry topics) and it has
  consumed nothing for ``stall_s`` seconds.

A tracker that has just started is given ``broker_s`` before the first rule applies. Lag 0 with
no events is healthy (an idle pipeline).
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass
class Liveness:
    """What the tracker records for its health (times in epoch ms, ``None`` = never)."""

    started_ms: int
    last_event_ms: int | None = None  #: the last record the agent consumed
    lag_ok_ms: int | None = None  #: the last successful lag read
    own_lag: int = 0  #: records the tracker's group has not consumed, at that read
    lag_error: str = ""  #: why the last lag read failed ("" when it did not)


@dataclass(frozen=True)
class Health:
    """``ok`` and, when not, why (one line per rule broken); ``detail`` for the JSON body."""

    ok: bool
    reasons: tuple[str, ...]
    detail: dict[str, object]


def evaluate(live: Liveness, now_ms: int, *, stall_s: float, broker_s: float) -> Health:
    """Apply the module's two rules to ``live`` at ``now_ms``."""
    reasons = []
    since_lag = (now_ms - (live.lag_ok_ms or live.started_ms)) / 1000
    if since_lag > broker_s:
        why = f": {live.lag_error}" if live.lag_error else ""
        reasons.append(f"cannot reach the broker: no lag read for {since_lag:.0f}s{why}")
    since_event = (now_ms - (live.last_event_ms or live.started_ms)) / 1000
    if live.own_lag > 0 and since_event > stall_s:
        reasons.append(
            f"stalled: {live.own_lag} record(s) behind and nothing consumed for {since_event:.0f}s"
        )
    detail: dict[str, object] = {
        "lag": live.own_lag,
        "seconds_since_event": None if live.last_event_ms is None else round(since_event, 1),
        "seconds_since_lag_read": round(since_lag, 1),
    }
    return Health(not reasons, tuple(reasons), detail)


__all__ = ["Health", "Liveness", "evaluate"]
