"""Issue 6: no file lost or duplicated under connection resets, hangs, crashes and failover.

Real faults on the real local stack. One :class:`~ferry.testing.chaos.FaultRig` for the module:
the four services run as processes under a private topic prefix, NAS directory and HDFS paths,
with cluster A's NameNode and DataNode HTTP traffic going through fault proxies (pass-through
unless a scenario switches them). Each scenario drops its own distinct flights slices and asserts
the exact outcome: N files in, N loaded, 0 quarantined, each file's exact row count in Hive (so
0 duplicate rows), plus a figure showing the fault really fired (so the test can fail).
"""

from __future__ import annotations

import random
import signal
import time
from collections.abc import Iterator

import pytest

from ferry.core.config import Settings
from ferry.stack.manager import Stack
from ferry.testing.chaos import FaultRig, SliceFile, kill_active_master, master_states, wait_failover

pytestmark = pytest.mark.e2e

FILES = 6  #: files per scenario
ROWS = 60  #: rows per file
SCENARIO_DEADLINE_S = 170  #: each scenario must settle well inside 3 minutes


@pytest.fixture(scope="module")
def rig(stack: Settings, tmp_path_factory: pytest.TempPathFactory) -> Iterator[FaultRig]:
    r = FaultRig(stack, tmp_path_factory.mktemp("faults"), seed=4)
    try:
        yield r
    finally:
        codes = r.close()
        print(f"\nservice exit codes: {codes}; logs in {r.group.log_dir}")


_next_slice = iter(range(0, 10_000, FILES))


def _files(rig: FaultRig) -> list[SliceFile]:
    """Distinct slices for one scenario (never reused by another scenario of the module)."""
    return rig.slices(FILES, rows=ROWS, first=next(_next_slice))


def _assert_all_landed(rig: FaultRig, files: list[SliceFile], spark) -> None:  # type: ignore[no-untyped-def]
    out = rig.outcomes
    quarantined = {f.relative: [x.reason for x in out.failed[f.file_id]] for f in files if f.file_id in out.failed}
    assert quarantined == {}
    assert sorted(f.file_id for f in files if f.file_id in out.loaded) == sorted(f.file_id for f in files)
    for f in files:
        m = out.loaded[f.file_id].manifest
        assert (m.rows_in, m.rows_out, m.rows_rejected) == (f.rows, f.rows, 0), f.relative
    hive = rig.hive_rows(spark, files)
    assert hive == {f.file_id: f.rows for f in files}  # none lost, none duplicated
    assert sum(hive.values()) == FILES * ROWS


def test_resets_on_cluster_a(rig: FaultRig, cluster_spark) -> None:  # type: ignore[no-untyped-def]
    """(1) C01: 10% of connections to A's NameNode and DataNode get a TCP RST part-way."""
    files = _files(rig)
    # NameNode requests are a few hundred bytes, so a reset point within 2 KiB lands on a later
    # request of a kept-alive connection; DataNode bodies (Parquet parts) are a few KiB.
    rig.nn.reset_rate(0.10, within_bytes=2048)
    rig.dn.reset_rate(0.10, within_bytes=8192)
    before = rig.nn.faults + rig.dn.faults
    try:
        rig.drop(files)
        took = rig.settle(files, SCENARIO_DEADLINE_S)
    finally:
        rig.nn.pass_through()
        rig.dn.pass_through()
    injected = rig.nn.faults + rig.dn.faults - before
    print(f"\n(1) resets: {injected} faults injected (NN {rig.nn.counts}, DN {rig.dn.counts}); "
          f"retries logged so far {rig.retries_logged()}; settled in {took:.1f}s")
    assert injected > 0
    _assert_all_landed(rig, files, cluster_spark)
