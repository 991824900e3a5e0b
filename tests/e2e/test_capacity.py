"""Field case C22 on the real stack: a space quota exceeded on landing (cluster B), on incoming
(cluster A) and on the warehouse (cluster A) while files flow, cleared later.

For each zone: its directory gets a 1 MB space quota (``hdfs dfsadmin -setSpaceQuota``: WebHDFS has
no quota operation; a block needs 128 MB of quota, so every write there is refused), distinct
files are dropped, and the test asserts that none is quarantined while the stage that writes
there holds them for longer than its ordinary retries last, that the condition is shown (the
stage's board, which ``ferry ps`` reads, and ``ferry status``), and, once the quota is cleared
with no other command, that every file is loaded exactly once with its exact rows in Hive within
a minute. The figure printed is the time from clearing the quota to the last file loaded.
"""

from __future__ import annotations

import subprocess
import time
import uuid
from collections.abc import Iterator
from itertools import count

import pytest

from ferry.clusters.hdfs.webhdfs import WebHdfs
from ferry.core.runtime.conditions import Held, read_conditions
from ferry.settings import Settings
from ferry_kit.pipeline import run_cli
from ferry_kit.stack.base import Layout
from ferry_kit.stack.servers import hadoop_argv
from ferry_kit.testing.chaos import FaultRig, running_rig
from ferry_kit.testing.slices import SliceFile
from ferry_kit.testing.waiting import wait_for
from tests.e2e.conftest import private_definitions

# exclusive: sets a quota on the stack's warehouse directory, which every table lives under
pytestmark = [pytest.mark.e2e, pytest.mark.exclusive]

FILES = 4  #: files per zone
ROWS = 60  #: rows per file
HOLD_S = 25.0  #: held at least this long: longer than the ordinary retries (≤ 15.5 s of backoff)
HEAL_DEADLINE_S = 60.0  #: every file loaded within a minute of clearing the quota (C22)


def dfsadmin(stack: Settings, cluster: str, *args: str) -> None:
    """``hdfs dfsadmin <args>`` (Hadoop's DFSAdmin tool, from the stack's jars) on ``cluster``.

    Raises:
        AssertionError: it exited non-zero (its output in the message).
    """
    argv = hadoop_argv(
        Layout(stack.var_dir),
        f"hdfs-{cluster}-dfsadmin",
        128,
        cluster,
        "org.apache.hadoop.hdfs.tools.DFSAdmin",
        *args,
    )
    proc = subprocess.run(argv, capture_output=True, text=True, timeout=120, check=False)  # noqa: S603
    assert proc.returncode == 0, f"dfsadmin {args}: {proc.stdout[-500:]}{proc.stderr[-500:]}"


_first = count(5_000, FILES)  #: slices no other e2e test drops (5,450 in all)


@pytest.fixture(scope="module")
def rig(stack: Settings, tmp_path_factory: pytest.TempPathFactory) -> Iterator[FaultRig]:
    work = tmp_path_factory.mktemp("capacity")
    # private tables: the slices' bytes are fixed, so their file ids may have rows in the shared
    # ferry.<dataset> tables from other runs
    defs = private_definitions(stack, work, uuid.uuid4().hex[:8])
    with running_rig(stack, work, seed=22, extra={"paths.datasets_dir": defs}) as r:
        # one file through first: the heal time measured is the hold's, not the first Spark
        # jobs' of fresh sessions (transform's took 59 s on the busy 2-core machine)
        warm = r.slices(1, rows=ROWS, first=next(_first))
        r.drop(warm)
        r.settle(warm, 300)
        assert r.quarantined(warm) == {}
        yield r


def held_by(rig: FaultRig, stage: str, cluster: str, where: str) -> list[Held]:
    """The conditions ``stage``'s running instances hold files for at ``cluster:where``."""
    return [
        h
        for h in read_conditions(rig.settings, stage)
        if (h.reason, h.cluster, h.where) == ("quota_exceeded", cluster, where)
    ]


@pytest.mark.parametrize(
    ("zone", "cluster", "stage", "before"),
    [
        ("landing", "b", "extract", None),
        ("incoming", "a", "transfer", "transformed"),
        ("warehouse", "a", "load", "transferred"),
    ],
)
def test_a_quota_holds_files_until_it_is_cleared_then_each_loads_once(
    rig: FaultRig, stack: Settings, zone: str, cluster: str, stage: str, before: str | None
) -> None:
    paths = rig.settings.paths
    where = {
        "landing": paths.landing_path,
        "incoming": paths.incoming_path,
        "warehouse": rig.settings.metastore.warehouse_path,
    }[zone]
    files: list[SliceFile] = rig.slices(FILES, rows=ROWS, first=next(_first))
    WebHdfs.for_cluster(cluster, stack).mkdirs(where)
    dfsadmin(stack, cluster, "-setSpaceQuota", "1m", where)
    try:
        rig.drop(files)
        if before is not None:  # every file got as far as the zone's stage
            rig.wait_until(lambda: rig.reached(files, before) == FILES, 120, f"{before} events")
        held = wait_for(
            lambda: held_by(rig, stage, cluster, where),
            f"{stage} to show quota_exceeded at {cluster}:{where}",
            timeout_s=60,
            poll_s=0.5,
        )
        since = held[0].since
        rig.wait_until(lambda: time.time() - since >= HOLD_S, HOLD_S + 5, "the hold")
        assert rig.quarantined(files) == {}
        assert rig.reached(files, "loaded") == 0
        [h] = held_by(rig, stage, cluster, where)
        assert h.since == since and h.last > since  # retried meanwhile, still held
        if stage == "extract":  # every file waits on the NAS, none moved to .ferry/failed
            assert h.files == FILES
            assert all((rig.nas_dir / f.relative).exists() for f in files)
            assert not (rig.nas_dir / ".ferry" / "failed").exists()
        status = run_cli({**rig.group.env, "COLUMNS": "200"}, "status", timeout=180)
        assert status.returncode == 0, status.stderr
        shown = [ln for ln in status.stdout.splitlines() if "quota_exceeded" in ln]
        assert any(f" {stage} " in ln and f"{cluster}:{where}" in ln for ln in shown), status.stdout
    finally:
        dfsadmin(stack, cluster, "-clrSpaceQuota", where)
    cleared = time.time()
    rig.settle(files, HEAL_DEADLINE_S + 60)
    out = rig.outcomes
    last = max(out.stamps[f.file_id]["loaded"] for f in files) / 1000
    print(
        f"\nC22 {zone} ({cluster}:{where}, {stage}): held {cleared - since:.1f}s, "
        f"{FILES} files loaded {last - cleared:.1f}s after the quota was cleared"
    )
    assert rig.quarantined(files) == {}
    assert {f.file_id: out.loaded_count.get(f.file_id) for f in files} == {
        f.file_id: 1 for f in files
    }
    assert rig.hive_rows(files) == {f.file_id: ROWS for f in files}  # none lost, none twice
    assert last - cleared <= HEAL_DEADLINE_S
    wait_for(
        lambda: not held_by(rig, stage, cluster, where), "the condition to clear", timeout_s=10
    )
