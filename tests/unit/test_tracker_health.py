"""The tracker's health rule (field case C16), on exact times."""

from __future__ import annotations

import pytest

from ferry.tracker.health import Liveness, evaluate

T = 1_700_000_000_000  # epoch ms


@pytest.mark.parametrize(
    ("live", "now", "ok", "reasons"),
    [
        (Liveness(T, T + 1_000, T + 1_000, 0), T + 5_000, True, ()),
        (Liveness(T), T + 5_000, True, ()),  # just started: the broker gets broker_s
        (Liveness(T, None, T + 99_000, 0), T + 100_000, True, ()),  # idle: no lag, no events
        (
            Liveness(T, T, T, 0, "TransientError: list_offsets: no answer within 6s"),
            T + 61_000,
            False,
            (
                "cannot reach the broker: no lag read for 61s: TransientError: list_offsets: "
                "no answer within 6s",
            ),
        ),
        (
            Liveness(T, T, T + 200_000, 7),
            T + 200_500,
            False,
            ("stalled: 7 record(s) behind and nothing consumed for 200s",),
        ),
        (Liveness(T, T + 199_000, T + 200_000, 7), T + 200_500, True, ()),
    ],
)
def test_health_rules(live, now, ok, reasons):  # type: ignore[no-untyped-def]
    h = evaluate(live, now, stall_s=120, broker_s=60)
    assert (h.ok, h.reasons) == (ok, reasons)


def test_health_detail_reports_lag_and_ages():
    h = evaluate(Liveness(T, T + 2_000, T + 3_000, 4), T + 10_000, stall_s=120, broker_s=60)
    assert h.detail == {"lag": 4, "seconds_since_event": 8.0, "seconds_since_lag_read": 7.0}
