"""The short nemesis runs (issue 47) on the real local stack: a fixed seed's faults for
``MINUTES`` while files of both datasets keep arriving (by rename, in place, gzipped, one really
bad) and loaded files are replayed, then a bounded heal time and the checker; then the same with a
fresh seed (``FERRY_NEMESIS_FRESH_SEED`` to repeat one; printed first), so every CI run tries a
schedule no run tried before. A fresh seed that fails is a finding: fix it and keep its seed as a
regression case (docs/operations.md, "What the nemesis found").

Asserts the checker's exact zeros: no file lost, duplicated, with wrong rows, wrongly quarantined,
bad data let through, or disagreed on by the tracker; every fault of the schedule applied and
undone. ``make nemesis`` runs the same with a fresh seed and any length (docs/operations.md).
"""

from __future__ import annotations

import os
import random
import time
from pathlib import Path

import pytest
from rich.console import Console

from ferry_kit.nemesis import schedule
from ferry_kit.nemesis.faults import stranger_records
from ferry_kit.nemesis.runner import run
from ferry_kit.nemesis.schedule import make_schedule
from ferry_kit.settings import KitSettings

# exclusive: kills and pauses the broker, the NameNodes, the Spark masters, the metastore and
# HiveServer2, and sets quotas on the stack's warehouse
pytestmark = [pytest.mark.e2e, pytest.mark.exclusive]

#: Eight faults of eight kinds in 2 min, up to three at once: the metastore paused for 20 s;
#: transform killed for 74 s; a name quota on staging; A's NameNode link silent, then slow; the
#: strangers' records on the extracted topic; a space quota on the warehouse; B's NameNode in safe
#: mode. The schedule spares the Spark daemons (losing the worker's executors or the ALIVE master
#: costs a Spark application minutes to recover: a heal that does not fit CI's budget), and this
#: seed draws no DataNode fault, no pause of a stage past its 10 s Kafka session and no long
#: NameNode, broker or metastore outage: those are open findings with their own regression seeds
#: (3446: load paused 56 s never took its partitions again; 17835: a file quarantined by transfer
#: while A's DataNode was out of disk and its link reset; 693378033, the hour) in
#: docs/operations.md, "Nemesis".
SEED = 20707
MINUTES = 2.0
SPARED = ("spark-master-1", "spark-master-2", "spark-masters", "spark-worker")
COMPONENTS = tuple(c for c in schedule.COMPONENTS if c not in SPARED)
HEAL_S = 180.0  #: the bound on healing after the last fault is undone
#: This run's fresh seed: ``FERRY_NEMESIS_FRESH_SEED``, else drawn from the OS's randomness.
FRESH = int(os.environ.get("FERRY_NEMESIS_FRESH_SEED") or random.SystemRandom().randrange(1, 10**6))


@pytest.mark.parametrize("seed", [SEED, FRESH], ids=["fixed", "fresh"])
def test_a_seeded_nemesis_loses_nothing_and_loads_each_file_exactly_once(
    stack: KitSettings, tmp_path: Path, seed: int
) -> None:
    print(f"\nnemesis seed {seed} ({'fixed' if seed == SEED else 'fresh'}), {MINUTES:g} min")
    t0 = time.monotonic()
    result = run(stack, seed, MINUTES, tmp_path, heal_s=HEAL_S, components=COMPONENTS)
    v = result.verdict
    assert v is not None
    Console(width=120).print(v.table(f"nemesis seed {seed}, {MINUTES:g} min"))
    print(
        f"wall time {time.monotonic() - t0:.0f}s; "
        f"exits after their own pause {dict(result.explained_exits)}; "
        f"tracker states it disagrees on {v.tracker_states}"
    )
    faults = make_schedule(seed, MINUTES * 60, components=COMPONENTS)
    if seed == SEED:
        assert len({f.kind for f in faults}) == 8
    assert faults, f"seed {seed} drew no fault in {MINUTES:g} min"
    # each applied and undone; a fresh seed's fault may meet another that makes it impossible (a
    # quota while its NameNode is down: skipped, with the reason printed) or its process held to
    # the end; the fixed seed's are all applied
    tried = [f for f, _, _ in result.applied] + [f for f, _ in result.skipped]
    assert sorted(tried + result.never_applied) == faults
    if seed == SEED:
        assert (result.skipped, result.never_applied) == ([], [])
    assert v.files >= MINUTES * 60 / 3 - 1  # a drop every 3 s
    assert {
        "lost": v.lost,
        "duplicated": v.duplicated,
        "wrong rows": v.wrong_rows,
        "wrongly quarantined": v.wrongly_quarantined,
        "bad not quarantined": v.bad_not_quarantined,
        "tracker disagrees": v.tracker_disagrees,
        "strangers not set aside": v.strangers_not_set_aside,
        "services' exits no fault explains": v.services_exits,
    } == {
        "lost": [],
        "duplicated": [],
        "wrong rows": [],
        "wrongly quarantined": [],
        "bad not quarantined": [],
        "tracker disagrees": [],
        "strangers not set aside": [],
        "services' exits no fault explains": {},
    }
    # each strangers' fault applied produces the same number of records, each set aside; one
    # skipped (not all its records acknowledged: seed 686632's, the broker paused) produced
    # fewer, those acknowledged set aside too (exact when none was skipped: the fixed seed)
    per_fault = len(stranger_records(0, b"\0" * 8))
    applied = sum(f.kind == "strangers" for f, _, _ in result.applied)
    skipped = sum(f.kind == "strangers" for f, _ in result.skipped)
    assert per_fault * applied <= v.strangers <= per_fault * (applied + skipped)
    assert v.rows_in_hive == v.rows_expected
    assert v.replayed == v.replayed_exact
    assert v.heal_s is not None and v.heal_s <= HEAL_S
