"""Dataset definitions loaded one file at a time and reloaded while a service runs (issue 33)."""

from __future__ import annotations

import json
import os
import shutil
from pathlib import Path

import pytest
from tests.support.paths import REPO_ROOT

from ferry.datasets.registry import DefinitionSet, definition_version, load_definitions
from ferry.datasets.reload import Definitions

REPO = REPO_ROOT / "datasets"


@pytest.fixture
def defs(tmp_path: Path) -> Path:
    d = tmp_path / "datasets"
    d.mkdir()
    for p in REPO.glob("*.yaml"):
        shutil.copy(p, d / p.name)
    return d


def edit(path: Path, old: str, new: str) -> None:
    text = path.read_text(encoding="utf-8")
    assert old in text, old
    path.write_text(text.replace(old, new), encoding="utf-8")
    st = os.stat(path)  # a new mtime even within the file system's clock resolution
    os.utime(path, ns=(st.st_atime_ns, st.st_mtime_ns + 1_000_000))


def test_one_invalid_file_leaves_the_others_running(defs: Path) -> None:
    edit(defs / "weather.yaml", "{name: temp, type: double}", "{name: temp, type: long}")
    got = load_definitions(defs)
    assert sorted(got.specs) == ["flights"]
    [bad] = got.invalid
    assert (bad.name, bad.path.name, bad.subdir, bad.named) == (
        "weather",
        "weather.yaml",
        "weather",
        True,
    )
    assert bad.problems == (
        "columns.5.type: unsupported type 'long'; use one of ['bigint', 'boolean', 'date', "
        "'double', 'float', 'int', 'smallint', 'string', 'timestamp', 'tinyint'] or "
        "decimal(p,s)",
    )
    assert got.wait_reason("weather") == (
        f"dataset 'weather' waits for a valid definition (weather.yaml: {bad.problems[0]})"
    )
    assert got.wait_reason("flights") is None
    assert got.wait_reason("nosuch") is None  # every file was readable: unknown is unknown


@pytest.mark.parametrize(
    ("old", "new", "problem"),
    [
        (
            "partition_by: [obs_date]",
            "partition_by: [order_day]",
            "partition column 'order_day' is not a parse or derived column",
        ),
        (
            "not_null: [origin,",
            "not_null: [amont,",
            "validation rule names unknown column 'amont'",
        ),
        (
            "origin: [EWR, JFK, LGA]",
            "origin: [EWR, 7]",
            "allowed_values of column 'origin' (string): 7 is not a value of that type",
        ),
        (
            "humid: {min: 0, max: 100}",
            "origin: {min: 0, max: 100}",
            "range rule on non-numeric column 'origin' (string)",
        ),
        ('  delimiter: ","', '  delimiter: ","\n  delimter: ";"', "csv.delimter: Extra"),
    ],
)
def test_each_rule_error_names_the_field(defs: Path, old: str, new: str, problem: str) -> None:
    edit(defs / "weather.yaml", old, new)
    [bad] = load_definitions(defs).invalid
    assert bad.name == "weather"
    assert any(p.startswith(problem) for p in bad.problems), bad.problems


def test_unreadable_yaml_makes_every_unknown_dataset_wait(defs: Path) -> None:
    (defs / "orders.yaml").write_text("name: orders\ncolumns: [\n", encoding="utf-8")
    got = load_definitions(defs)
    [bad] = got.invalid
    assert (bad.name, bad.named, bad.subdir) == ("orders", False, None)
    assert bad.problems == (
        "cannot read: YAML: expected the node content, but found '<stream end>' at line 3, "
        "column 1",
    )
    # its name is only a guess: a file of any dataset not defined otherwise waits for it
    assert got.waits("shipments") is bad and got.waits("flights") is None


def test_a_second_file_claiming_a_name_or_the_same_files_is_refused(defs: Path) -> None:
    shutil.copy(defs / "weather.yaml", defs / "weather2.yaml")
    got = load_definitions(defs)
    assert sorted(got.specs) == ["flights", "weather"]
    [bad] = got.invalid
    assert (bad.path.name, bad.problems) == (
        "weather2.yaml",
        ("dataset 'weather' is also defined by weather.yaml",),
    )
    edit(defs / "weather2.yaml", "name: weather", "name: weather_two")
    [bad] = load_definitions(defs).invalid
    assert bad.problems == ("claims the same NAS files as dataset 'weather' (weather.yaml)",)


def test_version_ignores_comments_and_changes_with_the_content(defs: Path) -> None:
    before = load_definitions(defs).version("weather")
    assert before == definition_version(load_definitions(defs).specs["weather"])
    assert before is not None and len(before) == 12
    edit(defs / "weather.yaml", "# Hourly weather", "# The hourly weather")
    assert load_definitions(defs).version("weather") == before
    edit(defs / "weather.yaml", "max: 250", "max: 260")
    assert load_definitions(defs).version("weather") not in (None, before)


def test_reload_picks_up_new_changed_fixed_and_removed_definitions(
    defs: Path, tmp_path: Path
) -> None:
    status = tmp_path / "run" / "extract.1.datasets"
    d = Definitions(defs, "extract", status_file=status)
    v0 = d.current().version("weather")
    assert json.loads(status.read_text()) == {"invalid": {}}
    assert not d.refresh()  # nothing changed: only a stat of the directory

    edit(defs / "weather.yaml", "{name: temp, type: double}", "{name: temp, type: long}")
    c = d.refresh()
    assert (c.invalid, c.ready, c.changed) == (["weather"], [], [])
    assert not d.ready("weather") and d.ready("flights")
    assert list(json.loads(status.read_text())["invalid"]) == ["weather"]

    edit(defs / "weather.yaml", "{name: temp, type: long}", "{name: temp, type: double}")
    c = d.refresh()
    assert (c.invalid, c.ready) == ([], ["weather"])
    assert d.current().version("weather") == v0 and d.ready("weather")

    flights = d.current().specs["flights"]
    edit(defs / "weather.yaml", "max: 250", "max: 260")
    assert d.refresh().changed == ["weather"]
    assert d.current().specs["flights"] is flights  # unchanged: what was built for it is kept
    shutil.copy(defs / "flights.yaml", defs / "orders.yaml")
    edit(defs / "orders.yaml", "name: flights", "name: orders")
    edit(defs / "orders.yaml", "subdir: flights", "subdir: orders")
    assert d.refresh().added == ["orders"]
    (defs / "orders.yaml").unlink()
    assert d.refresh().removed == ["orders"]


def test_a_compile_problem_makes_the_definition_invalid_and_a_failure_is_retried(
    defs: Path,
) -> None:
    calls: list[str] = []
    broken = {"flights"}

    def compile_spec(spec):  # type: ignore[no-untyped-def]
        calls.append(spec.name)
        if spec.name == "weather" and len(calls) <= 2:
            raise RuntimeError("no Spark session yet")
        return ["derived.0 (flight_date): expr 'to_dat(x)': boom"] if spec.name in broken else []

    d = Definitions(defs, "transform", compile_spec)
    assert [e.name for e in d.current().invalid] == ["flights"]
    assert d.current().get("flights").problems == (  # type: ignore[union-attr]
        "derived.0 (flight_date): expr 'to_dat(x)': boom",
    )
    assert d.ready("weather")  # could not be compiled: run as before, compiled later
    assert d.refresh().invalid == []  # unchanged, but reloaded since weather was unchecked
    assert calls == ["flights", "weather", "weather"]  # flights' result was cached
    d.refresh()
    assert calls == ["flights", "weather", "weather"]  # all checked now: nothing to do


def test_a_fixed_mapping_is_a_set_of_valid_definitions(specs) -> None:  # type: ignore[no-untyped-def]
    got = DefinitionSet.of(specs)
    assert got.specs == specs and got.invalid == []
    assert got.version("flights") == definition_version(specs["flights"])


def test_the_tracker_overview_names_each_invalid_definition(defs: Path) -> None:
    from ferry.tracker.pages import definitions_alert

    assert definitions_alert(load_definitions(defs).entries) == ""
    edit(defs / "weather.yaml", "{name: temp, type: double}", "{name: <temp>, type: double}")
    html = definitions_alert(load_definitions(defs).entries)
    assert (
        "<li data-dataset='weather'>dataset <b>weather</b> (weather.yaml): columns.5.name:" in html
    )
    assert "&#x27;&lt;temp&gt;&#x27; must match" in html and "<temp>" not in html


def test_ferry_ps_reads_which_datasets_a_service_does_not_run(defs: Path, tmp_path: Path) -> None:
    from ferry.core.runtime.heartbeat import datasets_status_path
    from ferry.settings import get_settings
    from ferry_kit.supervise.health import not_run

    base = get_settings()
    settings = base.model_copy(update={"var_dir": tmp_path / "var"})
    assert not_run(settings, "load", 4242) == {}
    edit(defs / "flights.yaml", "partition_by: [flight_date]", "partition_by: [flight_day]")
    Definitions(defs, "load", status_file=datasets_status_path(settings, "load", 4242))
    assert not_run(settings, "load", 4242) == {
        "flights": "partition column 'flight_day' is not a parse or derived column"
    }


def test_a_definition_not_compiled_is_logged_once_with_why(
    defs: Path, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level("INFO", logger="ferry.datasets")
    Definitions(defs, "extract").refresh(force=True)  # extract and load compile nothing
    assert [r.getMessage() for r in caplog.records if "compiled" in r.getMessage()] == []

    calls: list[str] = []

    def compile_spec(spec):  # type: ignore[no-untyped-def]
        calls.append(spec.name)
        if len(calls) <= 4:
            raise RuntimeError("no Spark session yet")
        return []

    d = Definitions(defs, "transform", compile_spec)
    d.refresh()  # both still unchecked: reloaded, compiled again, not logged again
    d.refresh()  # compiled now
    versions = {e.name: e.version for e in d.current().entries}
    assert [r.getMessage() for r in caplog.records if "compiled" in r.getMessage()] == [
        f"transform: dataset {name!r}: definition version {versions[name]} not "
        "compiled yet (RuntimeError: no Spark session yet); it runs, and is compiled at a "
        "later reload"
        for name in ("flights", "weather")
    ]
    assert calls == ["flights", "weather", "flights", "weather", "flights", "weather"]


def test_datasets_list_says_a_definition_a_running_service_does_not_run(
    defs: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Issue 46: ``ferry datasets list`` called a definition whose derived expression does not
    compile ``valid`` while ``ferry ps`` said transform does not run it."""
    from typer.testing import CliRunner

    from ferry.core.runtime.heartbeat import datasets_status_path
    from ferry.ops.datasets_cli import app
    from ferry.settings import get_settings

    base = get_settings()
    settings = base.model_copy(
        update={
            "var_dir": tmp_path / "var",
            "paths": base.paths.model_copy(update={"nas_dir": tmp_path / "nas"}),
        }
    )
    monkeypatch.setattr("ferry.ops.datasets_cli._settings", lambda: settings)
    boom = "derived.0 (flight_date): expr 'to_dat(x)': boom"
    compile_spec = lambda spec: [boom] if spec.name == "flights" else []  # noqa: E731
    # this process as a running transform that compiled flights; a dead one (pid beyond any
    # pid_max) whose report is stale
    Definitions(defs, "transform", compile_spec, datasets_status_path(settings, "transform"))
    dead = datasets_status_path(settings, "load", 2**23)
    dead.write_text(json.dumps({"invalid": {"weather": "old"}}))

    out = CliRunner().invoke(app, ["list", "--dir", str(defs)], terminal_width=400)
    assert out.exit_code == 1, out.output
    states = {
        cells[0]: cells[5]
        for ln in out.output.splitlines()
        if len(cells := [c.strip() for c in ln.split("│")[1:-1]]) == 7 and cells[0]
    }
    assert states == {"flights": "not run (below)", "weather": "valid"}
    assert f"dataset flights (flights.yaml) is not run by transform: {boom}" in " ".join(
        out.output.split()
    )
