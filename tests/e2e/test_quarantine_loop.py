"""Issue 33, items 4 and 5 on the whole pipeline, through the real CLI: a quarantined file's
entry closes when the corrected file is re-dropped under its NAS name and loads (superseded), an
extract failure is listed with its dataset and NAS name and dismissed with a note, and a file is
found by its NAS name.

The module runs its own pipeline with a private copy of the dataset definitions whose ``flights``
table is unique to this run.
"""

from __future__ import annotations

import os
import re
import uuid
from collections.abc import Iterator

import pytest

from ferry.core.identity import derive_file_id, sha256_file
from ferry.datasets.spec import load_datasets
from ferry_kit.demo_data import write_demo_files
from ferry_kit.pipeline import Outcomes, drop_file, run_cli
from tests.e2e.conftest import Pipeline, start_pipeline, stop_pipeline
from tests.e2e.scenario import wait_for_outcomes

pytestmark = pytest.mark.e2e


@pytest.fixture(scope="module")
def loop(stack, tmp_path_factory) -> Iterator[tuple[Pipeline, str]]:  # type: ignore[no-untyped-def]
    work = tmp_path_factory.mktemp("qloop")
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
        yield p, f"ferry.flights_{token}"
    finally:
        stop_pipeline(p)


def flat(text: str) -> str:
    return " ".join(text.split())


def test_a_corrected_redrop_supersedes_and_a_dismissal_closes_the_rest(loop) -> None:  # type: ignore[no-untyped-def]
    p, table = loop
    day = write_demo_files(
        p.work / "demo", load_datasets(p.settings.paths.datasets_dir), datasets=["flights"], days=4
    ).files[3]
    lines = day.path.read_text(encoding="utf-8").splitlines()[:8]
    good = p.work / "src" / "good.csv"
    good.parent.mkdir(parents=True, exist_ok=True)
    good.write_text("\n".join(lines) + "\n", encoding="utf-8")
    swapped = [",".join([c[1], c[0], *c[2:]]) for c in (line.split(",") for line in lines)]
    bad = p.work / "src" / "bad.csv"
    bad.write_text("\n".join(swapped) + "\n", encoding="utf-8")
    relative = "flights/flights_qloop.csv"
    fid_bad = derive_file_id("flights", sha256_file(bad))
    fid_good = derive_file_id("flights", sha256_file(good))
    outcomes = Outcomes(p.settings)

    drop_file(bad, p.nas_dir / relative)
    wait_for_outcomes(outcomes, lambda: fid_bad in outcomes.failed, "the quarantine", 300)
    [failure] = outcomes.failed[fid_bad]
    assert (failure.stage, failure.reason) == ("transform", "header_mismatch")
    listed = p.ferry("quarantine", "list")
    assert listed.returncode == 0, listed.stdout + listed.stderr
    assert f"{fid_bad} quarantined" in flat(listed.stdout)
    assert f"dataset flights · NAS {relative} · stage transform · reason header_mismatch" in flat(
        listed.stdout
    )
    # the whole reason, wrapped (a long path is folded inside the word)
    assert "".join(failure.error.split()) in "".join(listed.stdout.split())

    # fixed upstream, re-dropped under the same name: loads, and closes the entry
    drop_file(good, p.nas_dir / relative)
    wait_for_outcomes(outcomes, lambda: fid_good in outcomes.loaded, "the corrected file", 300)
    assert p.hive_rows(table, [fid_good]) == {fid_good: 7}
    listed = p.ferry("quarantine", "list")
    assert fid_bad not in listed.stdout, listed.stdout
    everything = p.ferry("quarantine", "list", "--all")
    assert f"{fid_bad} superseded by {fid_good} (loaded " in flat(everything.stdout)

    # an extract failure (a link the NAS confinement refuses): named, then dismissed
    link = "flights/flights_qloop_link.csv"
    os.symlink(good, p.nas_dir / link)
    wait_for_outcomes(
        outcomes,
        lambda: link in p.ferry("quarantine", "list").stdout,
        "the refused link in the quarantine",
        120,
    )
    listed = flat(p.ferry("quarantine", "list").stdout)
    assert f"{link} quarantined dataset flights · NAS {link} · stage extract · reason " in listed
    dismissed = p.ferry("quarantine", "dismiss", link, "--note", "a link someone left; removed")
    assert dismissed.returncode == 0, dismissed.stdout + dismissed.stderr
    after = flat(p.ferry("quarantine", "list").stdout)
    assert link not in after and "1 superseded, 1 dismissed (--all)" in after
    assert "dismissed by " in p.ferry("quarantine", "list", "--all").stdout

    # both versions of the NAS name, found by name (from the topics: no tracker runs here)
    shown = run_cli({**p.env, "COLUMNS": "250"}, "status", relative, timeout=120)
    assert shown.returncode == 0, shown.stdout + shown.stderr
    text = flat(shown.stdout)
    assert f"2 versions of {relative}" in text
    assert f"superseded by {fid_good}" in text
    assert f"NAS file: {relative} file {fid_good} (flights): loaded" in text
    by_prefix = run_cli({**p.env, "COLUMNS": "250"}, "status", "flights_qloop", timeout=120)
    assert by_prefix.returncode == 0, by_prefix.stdout + by_prefix.stderr
    assert "3 file(s) whose NAS name starts with flights_qloop" in by_prefix.stdout
    for shown_id in (fid_bad, fid_good, link):
        assert shown_id in by_prefix.stdout
