"""bench/arrival.py's verdict of a steady arrival: which rate was kept up with (issue 45)."""

from __future__ import annotations

import sys
from pathlib import Path

BENCH = Path(__file__).resolve().parents[2] / "bench"
sys.path.insert(0, str(BENCH))

from arrival import ArrivalRun, sustained  # noqa: E402


def _run(rate: float, backlog: list[int], drained_s: float, lost: int = 0) -> ArrivalRun:
    run = ArrivalRun(rate)
    run.backlog = [(5.0 * i, n) for i, n in enumerate(backlog)]
    run.last_drop_s = 5.0 * (len(backlog) - 1)
    run.drained_s = drained_s
    run.dropped_ms = {f"f{i}": 0.0 for i in range(10)}
    run.loaded_ms = {f"f{i}": 1.0 for i in range(10 - lost)}
    return run


def test_the_highest_rate_with_a_flat_backlog_a_short_drain_and_every_file_is_sustained() -> None:
    flat = _run(1, [3, 4, 3, 4, 3, 4], drained_s=8)
    also_flat = _run(2, [5, 6, 6, 5, 6, 7], drained_s=20)
    growing = _run(4, [5, 10, 20, 30, 40, 50], drained_s=200)
    assert sustained([flat, also_flat, growing]) == 2
    assert sustained([growing]) is None


def test_a_slow_drain_or_a_file_not_loaded_is_not_kept_up_with() -> None:
    assert sustained([_run(1, [3, 3, 3, 3, 3, 3], drained_s=61)]) is None
    assert sustained([_run(1, [3, 3, 3, 3, 3, 3], drained_s=5, lost=1)]) is None
    assert sustained([_run(1, [3, 3, 3, 3, 3, 3], drained_s=float("nan"))]) is None
