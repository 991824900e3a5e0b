"""Issue 5 on the whole pipeline: an operator repairs damage with ``ferry replay`` and recovers a
quarantined file with ``ferry quarantine release``, through the real CLI.

The module runs its own pipeline with a private copy of the dataset definitions whose ``flights``
table is unique to this run, so the definition can be changed mid-test without touching others.
"""

from __future__ import annotations

import re
import uuid
from collections.abc import Iterator
from pathlib import Path
from urllib.parse import urlsplit

import pytest

from ferry.clusters.hdfs.webhdfs import WebHdfs
from ferry.core.identity import derive_file_id, sha256_file
from ferry.datasets.spec import load_datasets
from ferry.ops.compact import unload
from ferry_kit.demo_data import write_demo_files
from ferry_kit.pipeline import Outcomes, drop_file
from tests.e2e.conftest import Pipeline, start_pipeline, stop_pipeline
from tests.e2e.scenario import wait_for_outcomes

pytestmark = pytest.mark.e2e


@pytest.fixture(scope="module")
def recovery(stack, tmp_path_factory) -> Iterator[tuple[Pipeline, Path, str]]:  # type: ignore[no-untyped-def]
    work = tmp_path_factory.mktemp("recovery")
    token = uuid.uuid4().hex[:8]
    defs = work / "datasets"
    defs.mkdir()
    for src in stack.paths.datasets_dir.glob("*.yaml"):
        text = src.read_text(encoding="utf-8")
        if src.stem == "flights":
            text = re.sub(r"^  table: flights$", f"  table: flights_{token}", text, flags=re.M)
        (defs / src.name).write_text(text, encoding="utf-8")
    p = start_pipeline(stack, work, {"paths.datasets_dir": defs})
    try:
        yield p, defs, f"ferry.flights_{token}"
    finally:
        stop_pipeline(p)


def _day(p: Pipeline, n: int) -> Path:
    demo = write_demo_files(
        p.work / "demo", load_datasets(p.settings.paths.datasets_dir), datasets=["flights"], days=n
    )
    return demo.files[n - 1].path


def _slice(src: Path, dest: Path, rows: int, *, swap_year_month: bool = False) -> Path:
    lines = src.read_text(encoding="utf-8").splitlines()[: rows + 1]
    if swap_year_month:
        lines = [",".join([c[1], c[0], *c[2:]]) for c in (line.split(",") for line in lines)]
    dest.parent.mkdir(parents=True, exist_ok=True)
    dest.write_text("\n".join(lines) + "\n", encoding="utf-8")
    return dest


def _wait(outcomes: Outcomes, p: Pipeline, done, what: str, deadline_s: float = 300) -> None:  # type: ignore[no-untyped-def]
    wait_for_outcomes(outcomes, done, what, deadline_s, p.group.check_alive)


def test_replay_of_transfer_restores_a_file_deleted_on_a_without_duplicates(  # type: ignore[no-untyped-def]
    recovery, cluster_spark
):
    p, defs, table = recovery
    src = _slice(_day(p, 2), p.work / "src" / "flights_replay.csv", 13)
    fid = derive_file_id("flights", sha256_file(src))
    outcomes = Outcomes(p.settings)
    drop_file(src, p.nas_dir / "flights" / src.name)
    _wait(outcomes, p, lambda: fid in outcomes.loaded, "the first load")
    assert p.hive_rows(table, [fid]) == {fid: 13}

    # Damage: the file's rows dropped from Hive. Its transferred copy on A is gone too: the load
    # moved its data files into the table (docs/hive-layout.md), so no load replay can restore it.
    incoming = urlsplit(outcomes.loaded[fid].manifest.uris["incoming"]).path
    a = WebHdfs.for_cluster("a", p.settings)
    assert not a.exists(incoming)
    spec = load_datasets(defs)["flights"]
    assert unload(cluster_spark, spec, [fid], target_file_bytes=1 << 27) == {fid: 13}
    assert p.hive_rows(table, [fid]) == {}

    # Repair, with every stage running: replay transfer's input event for that file.
    dry = p.ferry("replay", "transfer", "--file", fid, "--dry-run")
    assert dry.returncode == 0, dry.stdout + dry.stderr
    done = p.ferry("replay", "transfer", "--file", fid)
    assert done.returncode == 0, done.stdout + done.stderr
    assert "produced 1 event(s) to " in done.stdout
    _wait(outcomes, p, lambda: outcomes.loaded_count.get(fid, 0) == 2, "the replayed load")
    assert p.hive_rows(table, [fid]) == {fid: 13}
    assert not a.exists(incoming)  # copied to A again by transfer, moved into the table again


def test_quarantined_file_loads_after_the_definition_is_fixed_and_released(recovery, cluster_spark):  # type: ignore[no-untyped-def]
    p, defs, table = recovery
    # Upstream swapped the first two columns (month,year,...): the header no longer matches.
    src = _slice(_day(p, 3), p.work / "src" / "flights_reordered.csv", 9, swap_year_month=True)
    fid = derive_file_id("flights", sha256_file(src))
    outcomes = Outcomes(p.settings)
    drop_file(src, p.nas_dir / "flights" / src.name)
    _wait(outcomes, p, lambda: fid in outcomes.failed, "the quarantine")
    failed = outcomes.failed[fid]
    assert [(f.stage, f.reason) for f in failed] == [("transform", "header_mismatch")]
    listed = p.ferry("quarantine", "list")
    assert listed.returncode == 0 and fid[:8] in listed.stdout, listed.stdout + listed.stderr

    # Fix the rule: the definition now declares the new column order. No restart: transform reads
    # the definitions again before its next batch (ferry.datasets.reload), as an operator expects.
    flights = defs / "flights.yaml"
    text = flights.read_text(encoding="utf-8")
    year, month = "  - {name: year, type: int}\n", "  - {name: month, type: int}\n"
    assert year + month in text
    flights.write_text(text.replace(year + month, month + year), encoding="utf-8")
    released = p.ferry("quarantine", "release", fid)
    assert released.returncode == 0, released.stdout + released.stderr
    _wait(outcomes, p, lambda: fid in outcomes.loaded, "the released file's load")
    m = outcomes.loaded[fid].manifest
    assert (m.rows_in, m.rows_out, m.rows_rejected) == (9, 9, 0)
    assert p.hive_rows(table, [fid]) == {fid: 9}
    rows = cluster_spark.sql(
        f"SELECT DISTINCT year, month FROM {table} WHERE ferry_file_id = '{fid}'"
    ).collect()
    assert [(r.year, r.month) for r in rows] == [(2013, 1)]  # matched by name, not position (C12)

    # Loaded since its failure: out of the quarantine list; its status calls the failure overcome.
    listed = p.ferry("quarantine", "list")
    assert listed.returncode == 0 and fid[:8] not in listed.stdout, listed.stdout + listed.stderr
    shown = p.ferry("status", fid)
    assert shown.returncode == 0, shown.stdout + shown.stderr
    assert "earlier failure, since overcome: transform header_mismatch at " in shown.stdout
