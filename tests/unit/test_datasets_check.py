"""``ferry datasets check`` refuses each kind of error with a message naming dataset and field,
and passes the repository's definitions (the CI gate, in local Spark)."""

from __future__ import annotations

import re
import shutil
import tempfile
from pathlib import Path

import pytest
from tests.support.paths import REPO_ROOT
from typer.testing import CliRunner

from ferry.ops.datasets_check import check
from ferry.ops.datasets_cli import app

REPO = REPO_ROOT / "datasets"


@pytest.fixture
def defs(tmp_path: Path, unique_db: str) -> Path:
    """A copy of the repo's definitions whose tables live in a database private to the test."""
    d = tmp_path / "datasets"
    d.mkdir()
    for p in REPO.glob("*.yaml"):
        text = re.sub(r"^  database: ferry$", f"  database: {unique_db}", p.read_text(), flags=re.M)
        (d / p.name).write_text(text)
    return d


def edit(path: Path, old: str, new: str) -> None:
    text = path.read_text()
    assert old in text, old
    path.write_text(text.replace(old, new))


def problems(results) -> dict[str, list[str]]:  # type: ignore[no-untyped-def]
    return {c.name: c.problems for c in results}


def test_the_repository_definitions_pass(spark) -> None:  # type: ignore[no-untyped-def]
    """What CI runs over datasets/: every definition valid and compiled by Spark's analyzer."""
    results = check([REPO], spark)
    assert [(c.name, c.ok) for c in results] == [("flights", True), ("weather", True)]


@pytest.mark.parametrize(
    ("expr", "problem"),
    [
        (
            "to_dat(format_string('%04d-%02d-%02d', year, month, day))",
            "derived.0 (obs_date): expr \"to_dat(format_string('%04d-%02d-%02d', year, month, "
            'day))": [UNRESOLVED_ROUTINE] Cannot resolve routine `to_dat`',
        ),
        (
            "try_to_date(obs_day)",
            "derived.0 (obs_date): expr 'try_to_date(obs_day)': [UNRESOLVED_COLUMN.WITH_SUGGESTION]"
            " A column, variable, or function parameter with name `obs_day` cannot be resolved.",
        ),
        (
            "try_to_date(year,",
            "derived.0 (obs_date): expr 'try_to_date(year,': [PARSE_SYNTAX_ERROR] Syntax error",
        ),
        (
            "array(year)",
            "derived.0 (obs_date): expr 'array(year)': [DATATYPE_MISMATCH.CAST_WITHOUT_SUGGESTION]",
        ),
    ],
)
def test_an_expression_spark_refuses_is_named_by_dataset_and_field(
    spark, defs: Path, expr: str, problem: str
) -> None:  # type: ignore[no-untyped-def]
    weather = defs / "weather.yaml"
    text = weather.read_text()
    old = re.search(r'^    expr: "(.*)"$', text, flags=re.M)
    assert old is not None
    weather.write_text(text.replace(old.group(0), f'    expr: "{expr}"'))
    got = problems(check([weather], spark))
    assert list(got) == ["weather"]
    [line] = got["weather"]
    assert line.startswith(problem), line


def test_yaml_and_rule_errors_are_refused_before_spark(defs: Path) -> None:
    edit(defs / "weather.yaml", "{name: temp, type: double}", "{name: temp, type: long}")
    edit(defs / "flights.yaml", "origin: [EWR, JFK, LGA]", "origen: [EWR, JFK, LGA]")
    got = problems(check([defs]))
    assert got["weather"][0].startswith("columns.5.type: unsupported type 'long'; use one of")
    assert got["flights"] == ["validation rule names unknown column 'origen'"]


def test_the_cli_exits_1_naming_the_problem(defs: Path) -> None:
    edit(defs / "weather.yaml", "partition_by: [obs_date]", "partition_by: [order_day]")
    out = CliRunner().invoke(app, ["check", "--no-spark", str(defs)])
    assert out.exit_code == 1, out.output
    assert "FAIL weather" in out.output
    assert (
        "dataset 'weather': partition column 'order_day' is not a parse or derived column"
        in out.output
    )
    assert "2 definition(s) checked, 1 refused" in out.output
    edit(defs / "weather.yaml", "partition_by: [order_day]", "partition_by: [obs_date]")
    ok = CliRunner().invoke(app, ["check", "--no-spark", str(defs)])
    assert ok.exit_code == 0, ok.output


def test_the_existing_table_may_grow_but_not_lose_or_retype_a_column(
    spark, defs: Path, unique_db: str
) -> None:  # type: ignore[no-untyped-def]
    from ferry.datasets.spec import load_datasets
    from ferry.stages.load.job import ensure_table

    weather = defs / "weather.yaml"
    ensure_table(spark, load_datasets(defs)["weather"])
    [same] = check([weather], spark, compare_hive=True)
    assert (same.problems, same.notes) == ([], [f"table {unique_db}.weather: matches"])

    edit(
        weather,
        "  - {name: time_hour, type: timestamp}",
        "  - {name: time_hour, type: timestamp}\n  - {name: station, type: string}",
    )
    [grown] = check([weather], spark, compare_hive=True)
    assert grown.problems == []
    assert grown.notes == [
        f"table {unique_db}.weather: the next load adds column(s) station string"
    ]

    edit(weather, "{name: dewp, type: double}", "{name: dewp, type: float}")
    edit(weather, "  - {name: visib, type: double}         # miles\n", "")
    [bad] = check([weather], spark, compare_hive=True)
    assert bad.problems == [
        f"table {unique_db}.weather: column 'visib' (double) of the table is not in the "
        "definition (a column cannot be removed)",
        f"table {unique_db}.weather: column 'dewp' has type double in the table, the "
        "definition says float (a type cannot change)",
    ]


def test_load_adds_the_new_column_and_reads_null_for_earlier_rows(spark, defs: Path) -> None:  # type: ignore[no-untyped-def]
    from ferry.datasets.spec import load_datasets
    from ferry.stages.load.job import ensure_table

    spec = load_datasets(defs)["weather"]
    ensure_table(spark, spec)
    table = spec.hive.full_name
    spark.sql(
        f"INSERT INTO {table} SELECT "
        + ", ".join(
            [
                "'EWR'",
                *["1"] * 4,
                *["1.0"] * 6,
                "1.5",
                "1.0",
                "1.0",
                "TIMESTAMP'2013-01-01 00:00:00'",
                "'f1'",
                "'weather/w.csv'",
                "DATE'2013-01-01'",
            ]
        )
    )
    edit(
        defs / "weather.yaml",
        "  - {name: time_hour, type: timestamp}",
        "  - {name: time_hour, type: timestamp}\n  - {name: station, type: string}",
    )
    grown = load_datasets(defs)["weather"]
    schema = ensure_table(spark, grown)
    assert schema.fields[-2].name == "station"  # after the data columns, before the partition
    assert [r.station for r in spark.table(table).collect()] == [None]
    shutil.rmtree(defs)


def test_list_shows_each_dataset_its_nas_directory_table_version_and_state(
    defs: Path, unique_db: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    from ferry.datasets.registry import load_definitions

    tmp_path = Path(tempfile.mkdtemp(prefix="n", dir="/tmp"))  # short: the table fits in 160
    from ferry.settings import get_settings

    base = get_settings()
    paths = base.paths.model_copy(update={"nas_dir": tmp_path / "nas"})
    monkeypatch.setattr(
        "ferry.ops.datasets_cli._settings", lambda: base.model_copy(update={"paths": paths})
    )
    (tmp_path / "nas" / "weather").mkdir(parents=True)
    (tmp_path / "nas" / "weather" / "weather_1.csv").write_text("x\n")
    (tmp_path / "nas" / "weather" / ".weather_2.csv.part").write_text("x\n")
    edit(defs / "weather.yaml", "{name: temp, type: double}", "{name: temp, type: long}")
    out = CliRunner().invoke(app, ["list", "--dir", str(defs)])
    assert out.exit_code == 1, out.output
    rows = {
        cells[0]: cells
        for ln in out.output.splitlines()
        if len(cells := [c.strip() for c in ln.split("│")[1:-1]]) == 7 and cells[0]
    }
    version = load_definitions(defs).version("flights")
    assert rows["flights"] == [
        "flights",
        "flights.yaml",
        f"{tmp_path / 'nas'}/flights/flights_*.csv",
        f"{unique_db}.flights",
        version,
        "valid",
        "0",
    ]
    assert rows["weather"][:5] == [
        "weather",
        "weather.yaml",
        f"{tmp_path / 'nas'}/weather/",
        f"{unique_db}.weather",
        "-",
    ]
    assert rows["weather"][5:] == ["invalid (below)", "1"]
    assert (
        "dataset weather (weather.yaml) is invalid: columns.5.type: unsupported type 'long'"
        in out.output
    )
    assert rows["weather"][6] == "1"  # the file waiting on the NAS (a hidden one is not counted)
    shutil.rmtree(tmp_path)
