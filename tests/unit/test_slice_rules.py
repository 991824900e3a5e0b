"""The slices the fault rig and the nemesis drop hold only rows their dataset loads: issue 47's
second hour (seed 693378033, 2026-12-07) counted one weather file as ``wrong rows`` (23 of 24
in Hive) because its slice held the source's wind speed of 1,048.36 mph, which the dataset
rejects by design (datasets/weather.yaml)."""

from __future__ import annotations

import pandas as pd

from ferry.datasets.spec import DatasetSpec
from ferry_kit.testing.slices import rule_breaking_rows


def test_each_rule_on_a_source_column_counts_its_row(specs: dict[str, DatasetSpec]) -> None:
    frame = pd.DataFrame(
        {
            "origin": ["EWR", "EWR", "XYZ", None, "LGA", "JFK"],
            "year": [2013] * 6,
            "month": [2, 2, 2, 2, 2, 2],
            "day": [12, 12, 12, 12, 12, 12],
            "hour": [3, 4, 5, 6, 7, 8],
            "wind_speed": [1048.36058, 6.9, 6.9, 6.9, None, 250.0],
            "humid": [61.63, 50.0, 50.0, 50.0, 50.0, 100.0],
            "time_hour": pd.to_datetime(["2013-02-12T08:00:00Z"] * 6),
        }
    )
    # row 0: range:wind_speed; row 2: not_allowed:origin; row 3: null:origin; row 4's NULL wind
    # speed passes its range, row 5 sits on both bounds' edges
    assert rule_breaking_rows(specs["weather"], frame) == 3
    assert rule_breaking_rows(specs["weather"], frame.iloc[[1, 4, 5]]) == 0
