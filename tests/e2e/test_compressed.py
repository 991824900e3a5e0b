"""Compressed drops through the whole pipeline (issue 29, field case C21): a daily flights file
dropped as ``.csv.gz`` and as ``.csv.bz2`` loads exactly its rows, its manifest keeps the
archive's own size and sha256; a gzip cut in the middle and a plain CSV named ``.csv.gz`` are
quarantined ``corrupt_archive`` by extract, and nothing of them reaches Hive."""

from __future__ import annotations

import bz2
import gzip
import hashlib
import shutil
import uuid
from collections.abc import Iterator

import pytest

from ferry.core.identity import derive_file_id
from ferry.datasets.spec import load_datasets
from ferry_kit.demo_data import write_demo_files
from ferry_kit.pipeline import Outcomes, drop_file
from tests.e2e.conftest import Pipeline, start_pipeline, stop_pipeline
from tests.e2e.scenario import wait_for_outcomes
from tests.support.paths import REPO_ROOT


@pytest.fixture(scope="module")
def compressed(stack, tmp_path_factory) -> Iterator[Pipeline]:  # type: ignore[no-untyped-def]
    """A private pipeline whose flights dataset takes ``flights_*.csv*`` (the pattern decides
    which compressed files a dataset takes)."""
    work = tmp_path_factory.mktemp("compressed")
    defs = shutil.copytree(REPO_ROOT / "datasets", work / "datasets")
    flights = defs / "flights.yaml"
    text = flights.read_text(encoding="utf-8")
    assert 'pattern: "flights_*.csv"' in text
    text = text.replace('pattern: "flights_*.csv"', 'pattern: "flights_*.csv*"')
    # a private table: the shared ferry.flights may hold these same bytes' rows from other runs
    assert "\n  table: flights\n" in text
    text = text.replace("\n  table: flights\n", f"\n  table: flights_{uuid.uuid4().hex[:8]}\n")
    flights.write_text(text)
    p = start_pipeline(stack, work, {"paths.datasets_dir": defs})
    try:
        yield p
    finally:
        stop_pipeline(p)


def test_gzip_and_bzip2_drops_load_exactly_and_broken_archives_are_quarantined(
    compressed: Pipeline,
) -> None:
    p = compressed
    specs = load_datasets(p.settings.paths.datasets_dir)
    demo = write_demo_files(p.work / "src", specs, datasets=["flights"], days=3)
    days = [f for f in demo.files if f.dataset == "flights"]
    plain = [f.path.read_bytes() for f in days]
    archives = {
        "flights_2098-01-01.csv.gz": (gzip.compress(plain[0]), days[0].rows),
        "flights_2098-01-02.csv.bz2": (bz2.compress(plain[1]), days[1].rows),
        "flights_2098-01-03.csv.gz": (gzip.compress(plain[2])[:20_000], None),
        # not gzip at all; one row less than day 3, so bytes no other test loaded
        "flights_2098-01-04.csv.gz": (plain[2][: plain[2].rstrip(b"\n").rfind(b"\n") + 1], None),
    }
    ids = {}
    for name, (data, _rows) in archives.items():
        src = p.work / "src" / name
        src.write_bytes(data)
        ids[name] = derive_file_id("flights", hashlib.sha256(data).hexdigest())
    outcomes = Outcomes(p.settings)
    for name in archives:
        drop_file(p.work / "src" / name, p.nas_dir / "flights" / name)
    wait_for_outcomes(
        outcomes,
        lambda: outcomes.settled(ids.values()),
        lambda: outcomes.unsettled(ids.values()),
        300,
        p.group.check_alive,
    )
    table = specs["flights"].hive.full_name
    hive = p.hive_rows(table, list(ids.values()))
    for name, (data, rows) in archives.items():
        fid = ids[name]
        if rows is None:
            assert fid not in outcomes.loaded, name
            assert [f.reason for f in outcomes.failed[fid]] == ["corrupt_archive"], name
            assert hive.get(fid, 0) == 0, name
            continue
        assert fid not in outcomes.failed, (name, outcomes.failed.get(fid))
        m = outcomes.loaded[fid].manifest
        assert (m.size_bytes, m.sha256) == (len(data), hashlib.sha256(data).hexdigest()), name
        assert (m.rows_in, m.rows_out, m.rows_rejected) == (rows, rows, 0), name
        assert hive[fid] == rows, name
