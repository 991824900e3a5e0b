"""Issue 33, item 6 on the whole pipeline: a file is never taken while its writer still writes,
and a file that changes after it was taken is reported and its new bytes flow.

- A real writer process writes 10 rows to the local NAS, pauses 10 s with the file open (longer
  than the dataset's stable window, 2 polls x 2 s), writes 10 more rows and closes it: Hive holds
  all 20 rows under one file id, the only file of that NAS name (docs/field-cases.md, I33).
- A file taken whole is later reopened for append in the archive (what a writer that kept its
  descriptor, or one on another NFS host, does to the moved file): ``changed_after_extract`` is
  recorded against the first version at once, naming both sizes, and the appended rows flow as
  a new file version; the table then holds each of the 20 rows once.

The module runs its own pipeline with a private copy of the dataset definitions whose ``flights``
table is unique to this run.
"""

from __future__ import annotations

import hashlib
import re
import subprocess
import sys
import uuid
from collections.abc import Iterator

import pytest

from ferry.core.identity import derive_file_id, sha256_file
from ferry.datasets.spec import load_datasets
from ferry_kit.demo_data import write_demo_files
from ferry_kit.pipeline import Outcomes
from tests.e2e.conftest import Pipeline, start_pipeline, stop_pipeline
from tests.e2e.scenario import wait_for_outcomes

pytestmark = pytest.mark.e2e

#: A writer as upstreams write: open, write a part, flush, pause with the file open, write the
#: rest, close. Prints ``paused`` once the first part is flushed.
WRITER = r"""
import sys, time
path, first, second, pause = sys.argv[1], sys.argv[2], sys.argv[3], float(sys.argv[4])
with open(path, "wb") as out:
    out.write(open(first, "rb").read())
    out.flush()
    print("paused", flush=True)
    time.sleep(pause)
    out.write(open(second, "rb").read())
    out.flush()
print("closed", flush=True)
"""


@pytest.fixture(scope="module")
def writers(stack, tmp_path_factory) -> Iterator[tuple[Pipeline, str]]:  # type: ignore[no-untyped-def]
    work = tmp_path_factory.mktemp("writers")
    token = uuid.uuid4().hex[:8]
    defs = work / "datasets"
    defs.mkdir()
    for src in stack.paths.datasets_dir.glob("*.yaml"):
        text = src.read_text(encoding="utf-8")
        if src.stem == "flights":
            text = re.sub(r"^  table: flights$", f"  table: flights_{token}", text, flags=re.M)
        (defs / src.name).write_text(text, encoding="utf-8")
    p = start_pipeline(stack, work, {"paths.datasets_dir": defs, "extract.watch_check_s": 1})
    # The share's dataset directory exists before any writer writes there (extract creates a
    # missing one when it starts, which may be after the writer's open)
    (p.nas_dir / "flights").mkdir(parents=True, exist_ok=True)
    try:
        yield p, f"ferry.flights_{token}"
    finally:
        stop_pipeline(p)


def _rows(p: Pipeline, day: int) -> tuple[bytes, list[bytes]]:
    """The header line and the data lines of the demo's flights file of ``day`` (1-based)."""
    demo = write_demo_files(
        p.work / "demo",
        load_datasets(p.settings.paths.datasets_dir),
        datasets=["flights"],
        days=day,
    )
    lines = demo.files[day - 1].path.read_bytes().splitlines(keepends=True)
    return lines[0], lines[1:]


def _outcomes_of(outcomes: Outcomes, relative: str) -> list[str]:
    """File ids with an outcome (loaded or failed) whose manifest names the NAS path
    ``relative``."""
    loaded = [fid for fid, ev in outcomes.loaded.items() if ev.manifest.source_path == relative]
    failed = [
        fid
        for fid, evs in outcomes.failed.items()
        if any(e.manifest is not None and e.manifest.source_path == relative for e in evs)
    ]
    return sorted(set(loaded) | set(failed))


def test_a_writer_that_pauses_with_the_file_open_loads_every_row(writers) -> None:  # type: ignore[no-untyped-def]
    p, table = writers
    header, data = _rows(p, 2)
    first, second = p.work / "part1.csv", p.work / "part2.csv"
    first.write_bytes(header + b"".join(data[:10]))
    second.write_bytes(b"".join(data[10:20]))
    whole = p.work / "whole.csv"
    whole.write_bytes(first.read_bytes() + second.read_bytes())
    fid = derive_file_id("flights", sha256_file(whole))
    relative = "flights/flights_paused_writer.csv"
    outcomes = Outcomes(p.settings)
    writer = subprocess.Popen(  # noqa: S603
        [sys.executable, "-c", WRITER, str(p.nas_dir / relative), str(first), str(second), "10"],
        stdout=subprocess.PIPE,
        text=True,
    )
    assert writer.stdout is not None
    assert writer.stdout.readline() == "paused\n"
    assert writer.wait(timeout=60) == 0
    wait_for_outcomes(
        outcomes,
        lambda: _outcomes_of(outcomes, relative) != [],
        f"an outcome for {relative}",
        300,
        p.group.check_alive,
    )
    # the first (and only) version that came out of the pipeline is the whole file
    assert _outcomes_of(outcomes, relative) == [fid]
    assert fid in outcomes.loaded, outcomes.failed.get(fid)
    m = outcomes.loaded[fid].manifest
    assert (m.rows_in, m.rows_out, m.rows_rejected, m.size_bytes) == (
        20,
        20,
        0,
        whole.stat().st_size,
    )
    assert p.hive_rows(table, [fid]) == {fid: 20}


def test_a_file_appended_after_it_was_taken_is_reported_and_its_new_rows_flow(writers) -> None:  # type: ignore[no-untyped-def]
    p, table = writers
    header, data = _rows(p, 3)
    first, appended = header + b"".join(data[:10]), b"".join(data[10:20])
    relative = "flights/flights_appended_later.csv"
    fid1 = derive_file_id("flights", hashlib.sha256(first).hexdigest())
    fid2 = derive_file_id("flights", hashlib.sha256(header + appended).hexdigest())
    outcomes = Outcomes(p.settings)
    (p.nas_dir / relative).write_bytes(first)  # one open-write-close: taken at its close
    wait_for_outcomes(outcomes, lambda: fid1 in outcomes.loaded, "the first version", 300)
    archived = p.nas_dir / ".ferry" / "archive" / relative
    assert archived.read_bytes() == first
    with archived.open("ab") as f:  # reopened for append later, in the moved copy
        f.write(appended)
    wait_for_outcomes(
        outcomes,
        lambda: fid1 in outcomes.failed and fid2 in outcomes.loaded,
        "the change reported and the appended rows loaded",
        300,
        p.group.check_alive,
    )
    [report] = outcomes.failed[fid1]
    assert (report.stage, report.reason, report.manifest.source_path) == (  # type: ignore[union-attr]
        "extract",
        "changed_after_extract",
        relative,
    )
    assert f"taken as {len(first)} bytes" in report.error
    assert f"is now {len(first) + len(appended)} bytes" in report.error
    m = outcomes.loaded[fid2].manifest
    assert (m.source_path, m.size_bytes, m.rows_in, m.rows_out, m.rows_rejected) == (
        relative,
        len(header) + len(appended),
        10,
        10,
        0,
    )
    assert _outcomes_of(outcomes, relative) == sorted([fid1, fid2])
    assert p.hive_rows(table, [fid1, fid2]) == {fid1: 10, fid2: 10}  # every row once
    # the report is closed by the new version's load (issue 33, item 4), and both versions are
    # found by the NAS name (item 5)
    listed = p.ferry("quarantine", "list", "--all")
    assert listed.returncode == 0, listed.stdout + listed.stderr
    assert f"{fid1} superseded by {fid2} (loaded " in " ".join(listed.stdout.split())
    assert fid1 not in p.ferry("quarantine", "list").stdout
    shown = p.ferry("status", relative)
    assert shown.returncode == 0, shown.stdout + shown.stderr
    assert f"2 versions of {relative}" in " ".join(shown.stdout.split())
    assert f"file {fid2} (flights): loaded" in shown.stdout
