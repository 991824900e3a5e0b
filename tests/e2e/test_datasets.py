"""Issue 33 on the whole pipeline: datasets are independent, and definitions reload without a
restart.

The module runs its own pipeline with a private copy of the definitions (tables unique to this
run). ``weather`` starts broken (``type: long``): the services start anyway and ``flights``
loads with exact rows while the weather file waits on the NAS, neither taken nor quarantined;
fixing the YAML (no restart) lets it load at the next scan. Then a typo in a derived expression
(``to_dat``), which only Spark's analyzer sees: transform parks the file in the waiting room,
not in quarantine, and releases it once the expression is fixed.
"""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

from ferry.core.identity import derive_file_id, sha256_file
from ferry.core.kafka.admin import scan
from ferry.core.kafka.offsets import topic_bounds
from ferry.datasets.registry import definition_version
from ferry.datasets.spec import load_datasets
from ferry_kit.demo_data import write_demo_files
from ferry_kit.pipeline import Outcomes, drop_file
from tests.e2e.conftest import Pipeline, private_definitions, start_pipeline, stop_pipeline
from tests.e2e.scenario import wait_for_outcomes

pytestmark = pytest.mark.e2e

REPO_DATASETS = Path(__file__).resolve().parents[2] / "datasets"


@pytest.fixture(scope="module")
def two(stack, tmp_path_factory) -> Iterator[tuple[Pipeline, Path, str]]:  # type: ignore[no-untyped-def]
    work = tmp_path_factory.mktemp("datasets")
    token = uuid.uuid4().hex[:8]
    defs = private_definitions(stack, work, token)
    weather = defs / "weather.yaml"
    text = weather.read_text(encoding="utf-8")
    assert "{name: temp, type: double}" in text
    weather.write_text(text.replace("{name: temp, type: double}", "{name: temp, type: long}"))
    p = start_pipeline(stack, work, {"paths.datasets_dir": defs})
    try:
        yield p, defs, token
    finally:
        stop_pipeline(p)


def _day_file(p: Pipeline, dataset: str, day: int, rows: int, name: str) -> Path:
    """The first ``rows`` rows of the demo's day ``day`` of ``dataset``, as ``name``."""
    specs = load_datasets(REPO_DATASETS)
    demo = write_demo_files(p.work / "demo", specs, datasets=[dataset], days=day)
    lines = demo.files[day - 1].path.read_text(encoding="utf-8").splitlines()[: rows + 1]
    dest = p.work / "src" / name
    dest.parent.mkdir(parents=True, exist_ok=True)
    dest.write_text("\n".join(lines) + "\n", encoding="utf-8")
    return dest


def _waiting_keys(p: Pipeline) -> set[str]:
    kafka = p.settings.kafka
    topic = kafka.topic("waiting")
    marks = topic_bounds(kafka, topic)
    latest: dict[str, bytes] = {}
    for rec in scan(kafka, topic, marks):
        latest[(rec.key or b"").decode()] = rec.value or b""
    return {k for k, v in latest.items() if v}


def test_a_broken_definition_stops_only_its_dataset_and_reloads_when_fixed(two):  # type: ignore[no-untyped-def]
    p, defs, token = two
    flights = _day_file(p, "flights", 1, 13, "flights_2099-01-01.csv")
    lines = flights.read_text(encoding="utf-8").splitlines()
    bad = lines[1].split(",")
    bad[1] = "13"  # month 13: rejected by the range rule, kept in rejects
    flights.write_text("\n".join([*lines, ",".join(bad)]) + "\n", encoding="utf-8")
    weather = _day_file(p, "weather", 1, 12, "weather_2099-01-01.csv")
    f_id = derive_file_id("flights", sha256_file(flights))
    w_id = derive_file_id("weather", sha256_file(weather))
    outcomes = Outcomes(p.settings)
    w_nas = p.nas_dir / "weather" / weather.name
    drop_file(weather, w_nas)
    drop_file(flights, p.nas_dir / "flights" / flights.name)
    wait_for_outcomes(
        outcomes, lambda: f_id in outcomes.loaded, "flights", 300, p.group.check_alive
    )
    assert p.hive_rows(f"ferry.flights_{token}", [f_id]) == {f_id: 13}
    loaded = outcomes.loaded[f_id].manifest
    assert (loaded.rows_in, loaded.rows_out, loaded.rows_rejected) == (14, 13, 1)
    # the rejected row, by the file's NAS name: its reason and its record
    shown = p.ferry("rejects", flights.name, timeout=180)
    assert shown.returncode == 0, shown.stdout + shown.stderr
    assert f"1 rejected row(s) of flights/{flights.name} (flights, file id {f_id})" in shown.stdout
    assert "reason: range:month\n" in shown.stdout
    record = next(ln for ln in shown.stdout.splitlines() if ln.startswith("  record: "))
    assert record.split(",")[:3] == ["  record: 2013", "13", "1"]
    # The weather file waits on the NAS: not taken, not quarantined; every service still runs.
    outcomes.poll(3.0)
    p.group.check_alive()
    assert w_nas.exists() and w_id not in outcomes.failed and w_id not in outcomes.loaded
    assert outcomes.events["extracted"] == 1
    log = (p.work / "logs" / "extract.log").read_text(encoding="utf-8")
    assert "dataset 'weather' is not run: definition" in log
    assert "columns.5.type: unsupported type 'long'" in log

    # Fixed in place, no restart: picked up at the next scan, loaded with exact rows.
    weather_yaml = defs / "weather.yaml"
    text = weather_yaml.read_text(encoding="utf-8")
    weather_yaml.write_text(text.replace("{name: temp, type: long}", "{name: temp, type: double}"))
    wait_for_outcomes(
        outcomes, lambda: w_id in outcomes.loaded, "weather", 300, p.group.check_alive
    )
    m = outcomes.loaded[w_id].manifest
    assert (m.rows_in, m.rows_out + m.rows_rejected) == (12, 12)
    assert p.hive_rows(f"ferry.weather_{token}", [w_id]) == {w_id: m.rows_out}
    assert m.definition_version == definition_version(load_datasets(defs)["weather"])
    assert outcomes.failed == {}


def test_a_typo_in_an_expression_parks_the_file_until_it_is_fixed(two):  # type: ignore[no-untyped-def]
    p, defs, token = two
    flights_yaml = defs / "flights.yaml"
    good = flights_yaml.read_text(encoding="utf-8")
    assert 'expr: "try_to_date(' in good
    flights_yaml.write_text(good.replace('expr: "try_to_date(', 'expr: "to_dat('))
    src = _day_file(p, "flights", 2, 9, "flights_2099-01-02.csv")
    fid = derive_file_id("flights", sha256_file(src))
    outcomes = Outcomes(p.settings)
    drop_file(src, p.nas_dir / "flights" / src.name)
    wait_for_outcomes(
        outcomes,
        lambda: fid in _waiting_keys(p),
        "the file parked in the waiting room",
        300,
        p.group.check_alive,
    )
    assert fid not in outcomes.failed and fid not in outcomes.loaded
    log = (p.work / "logs" / "transform.log").read_text(encoding="utf-8")
    assert "dataset 'flights' is not run: definition" in log
    assert 'derived.0 (flight_date): expr "to_dat(format_string(' in log
    assert "UNRESOLVED_ROUTINE" in log

    flights_yaml.write_text(good)
    wait_for_outcomes(outcomes, lambda: fid in outcomes.loaded, "the released file", 300)
    m = outcomes.loaded[fid].manifest
    assert (m.rows_in, m.rows_out, m.rows_rejected) == (9, 9, 0)
    assert p.hive_rows(f"ferry.flights_{token}", [fid]) == {fid: 9}
    assert fid not in _waiting_keys(p)
    assert fid not in outcomes.failed
