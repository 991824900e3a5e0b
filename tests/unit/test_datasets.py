"""Dataset definitions: the repository's YAML files and the loader's errors."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from ferry.datasets.spec import dataset_for, load_dataset, load_datasets
from ferry.errors import ConfigError
from ferry.settings import get_settings

GOOD = """
name: tiny
nas: {subdir: tiny, pattern: "tiny_*.csv"}
columns: [{name: id, type: int}, {name: amount, type: "Decimal(9, 2)"}]
hive: {database: ferry, table: tiny}
"""


def write(tmp_path: Path, name: str, text: str) -> Path:
    p = tmp_path / name
    p.write_text(text, encoding="utf-8")
    return p


def test_repository_definitions_load_from_settings_dir():
    specs = load_datasets(get_settings().paths.datasets_dir)
    assert sorted(specs) == ["flights", "weather"]
    f = specs["flights"]
    assert [c.name for c in f.columns][:3] == ["year", "month", "day"] and len(f.columns) == 19
    assert f.csv.null_value == "NA"
    assert f.hive.full_name == "ferry.flights"
    assert [c.name for c in f.table_partition_columns] == ["flight_date"]
    assert [c.name for c in f.table_columns][-4:] == [
        "time_hour",
        "ferry_file_id",
        "ferry_source_path",
        "flight_date",
    ]
    w = specs["weather"]
    assert [(c.name, c.type) for c in w.table_partition_columns] == [("obs_date", "date")]
    assert [(c.name, c.type) for c in w.table_data_columns][-3:] == [
        ("time_hour", "timestamp"),
        ("ferry_file_id", "string"),
        ("ferry_source_path", "string"),
    ]
    assert w.finished.policy == "stable" and w.finished.stable_polls == 2


@pytest.mark.parametrize(
    ("path", "dataset"),
    [
        ("flights/flights_2013-01-01.csv", "flights"),
        ("weather/weather_2013-12-30.csv", "weather"),
        ("flights/weather_2013-01-01.csv", None),  # wrong sub-directory
        ("flights/sub/flights_2013-01-01.csv", None),  # deeper directory
        ("flights/flights_2013-01-01.csv.part", None),
        ("flights/Flights_2013-01-01.csv", None),  # case-sensitive
        ("flights/flights_données été #1.csv", "flights"),
    ],
)
def test_match(path, dataset):
    specs = load_datasets(get_settings().paths.datasets_dir)
    got = dataset_for(specs, path)
    assert (got.name if got else None) == dataset


def test_decimal_type_is_normalised(tmp_path):
    spec = load_dataset(write(tmp_path, "tiny.yaml", GOOD))
    assert [c.type for c in spec.columns] == ["int", "decimal(9,2)"]
    with pytest.raises(Exception, match="frozen"):
        spec.name = "other"  # type: ignore[misc]


def test_marker_policy_excludes_marker_files(tmp_path):
    spec = load_dataset(
        write(tmp_path, "t.yaml", GOOD + "finished: {policy: marker, marker_suffix: .ok}\n")
    )
    assert spec.match("tiny/tiny_1.csv") and not spec.match("tiny/tiny_1.csv.ok")


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("name: [unclosed", "cannot read"),
        ("- a\n- b\n", "must be a mapping"),
        (GOOD.replace("type: int", "type: integer"), "unsupported type 'integer'"),
        (GOOD + "validation: {not_null: [nope]}\n", "unknown column 'nope'"),
        (
            GOOD.replace("table: tiny}", "table: tiny, partition_by: [day]}"),
            "partition column 'day'",
        ),
        (GOOD + "validation: {ranges: {id: {min: 0}}}\nextra: 1\n", "extra"),
        (GOOD.replace("name: id", "name: ferry_file_id"), "reserved"),
        (GOOD.replace("{name: amount", "{name: id"), "duplicate column names: ['id']"),
    ],
)
def test_bad_definition_raises_config_error_naming_the_file(tmp_path, text, message):
    p = write(tmp_path, "bad.yaml", text)
    with pytest.raises(ConfigError, match=re.escape(message)) as err:
        load_datasets(tmp_path)
    assert str(p) in str(err.value)


def test_duplicate_dataset_name_is_rejected(tmp_path):
    write(tmp_path, "a.yaml", GOOD)
    write(tmp_path, "b.yaml", GOOD.replace("tiny_*.csv", "other_*.csv"))
    with pytest.raises(ConfigError, match="defined twice"):
        load_datasets(tmp_path)


def test_missing_directory(tmp_path):
    with pytest.raises(ConfigError, match="does not exist"):
        load_datasets(tmp_path / "nope")
