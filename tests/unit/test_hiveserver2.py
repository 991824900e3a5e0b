"""The HiveServer2 JDBC client's pure parts: output parsing, error lines, argument checks."""

from __future__ import annotations

import pytest

from ferry.clusters.hiveserver2 import (
    Column,
    Result,
    _error_line,
    beeline_argv,
    jdbc_url,
    parse_output,
    rows_by_file,
)
from ferry.settings import get_settings

OUTPUT = "\n".join(
    [
        "SLF4J: a driver warning that reached stdout",
        '{"updated":0}',
        '{"columns":[{"name":"d","type":"decimal","precision":10,"scale":2},'
        '{"name":"ts","type":"timestamp","precision":29,"scale":9}]}',
        '["12345678.91","2013-01-01 05:00:00"]',
        '[null,"x \\"q\\"\\n"]',
        '{"end":2}',
        '{"columns":[{"name":"_c0","type":"int","precision":10,"scale":0}]}',
        '["1"]',
        '{"end":1}',
    ]
)


def test_parse_output_gives_columns_as_the_driver_reports_them_and_rows_as_strings():
    assert parse_output(OUTPUT) == [
        Result(
            (Column("d", "decimal", 10, 2), Column("ts", "timestamp", 29, 9)),
            (("12345678.91", "2013-01-01 05:00:00"), (None, 'x "q"\n')),
        ),
        Result((Column("_c0", "int", 10, 0),), (("1",),)),
    ]
    assert parse_output(OUTPUT)[1].scalar() == "1"
    with pytest.raises(ValueError, match="expected one value, got 2 row"):
        parse_output(OUTPUT)[0].scalar()


def test_the_error_line_is_the_clients_marker_line_else_the_last_line():
    stderr = "log4j: warn\nFERRY_JDBC_ERROR Error running query: Table or view not found\n"
    assert _error_line(stderr) == "Error running query: Table or view not found"
    assert _error_line("a\n\nb\n") == "b"
    assert _error_line("") == ""


def test_urls_and_the_beeline_command_come_from_settings():
    s = get_settings()
    hs = s.hiveserver2
    assert jdbc_url(s, "ferry") == f"jdbc:hive2://{hs.host}:{hs.port}/ferry"
    argv = beeline_argv(s, "-e", "SELECT 1")
    assert argv[argv.index("org.apache.hive.beeline.BeeLine") :] == [
        "org.apache.hive.beeline.BeeLine",
        "-u",
        jdbc_url(s),
        "-n",
        hs.user,
        "-e",
        "SELECT 1",
    ]


@pytest.mark.parametrize(
    ("table", "ids", "message"),
    [
        ("ferry.flights; DROP TABLE x", ["ab"], "not a table name"),
        ("ferry.flights", ["ab", "x' OR '1'='1"], "not file ids"),
    ],
)
def test_rows_by_file_refuses_anything_but_identifiers_before_connecting(table, ids, message):
    with pytest.raises(ValueError, match=message):
        rows_by_file(get_settings(), table, ids)


def test_rows_by_file_of_no_ids_asks_nothing():
    assert rows_by_file(get_settings(), "ferry.flights", []) == {}
