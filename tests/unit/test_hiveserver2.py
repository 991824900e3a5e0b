"""The HiveServer2 client's pure parts: JDBC text of values, columns, argument checks, and
``ferry sql``'s output formats."""

from __future__ import annotations

from typing import Any

import pytest

from ferry.clusters.hiveserver2 import (
    Column,
    Result,
    _column,
    beeline_argv,
    jdbc_text,
    jdbc_url,
    rows_by_file,
)
from ferry.settings import Settings, get_settings


def test_values_read_as_the_jdbc_driver_gives_them():
    import datetime as dt
    from decimal import Decimal

    assert [
        jdbc_text(v)
        for v in (
            None,
            dt.datetime(2013, 1, 1, 5, 0),
            dt.datetime(2013, 1, 1, 5, 0, 0, 120000),
            Decimal("12345678.91"),
            Decimal("0.50"),
            True,
            dt.date(2013, 1, 1),
            7,
            'x "q"\n',
        )
    ] == [
        None,
        "2013-01-01 05:00:00.0",
        "2013-01-01 05:00:00.12",
        "12345678.91",
        "0.50",
        "true",
        "2013-01-01",
        "7",
        'x "q"\n',
    ]


def test_columns_from_the_cursor_description():
    assert _column(("d", "DECIMAL", None, None, 10, 2, None)) == Column("d", "decimal", 10, 2)
    assert _column(("ts", "TIMESTAMP", None, None, None, None, None)) == Column("ts", "timestamp")
    assert Result((Column("_c0", "int"),), (("1",),)).scalar() == "1"
    with pytest.raises(ValueError, match="expected one value, got 2 row"):
        Result((Column("a", "int"),), (("1",), ("2",))).scalar()


def test_sql_csv2_and_tsv2_are_valid_and_carry_no_prompt_line():
    """Field case (issue 33, item 7): beeline's csv2 printed `100002, Lamp, desk (LED) ,14.00`
    unquoted and a prompt line first."""
    import csv
    import io

    from ferry.ops.sql_cli import write_result

    res = Result(
        (Column("id", "int"), Column("name", "string"), Column("price", "decimal", 10, 2)),
        (("100002", " Lamp, desk (LED) ", "14.00"), ("7", 'say "hi"\nbye', None)),
    )
    out = io.StringIO()
    write_result(res, "csv2", out)
    assert out.getvalue() == (
        'id,name,price\n100002," Lamp, desk (LED) ",14.00\n7,"say ""hi""\nbye",\n'
    )
    assert list(csv.reader(io.StringIO(out.getvalue()))) == [
        ["id", "name", "price"],
        ["100002", " Lamp, desk (LED) ", "14.00"],
        ["7", 'say "hi"\nbye', ""],
    ]
    out = io.StringIO()
    write_result(res, "tsv2", out)
    assert out.getvalue().splitlines()[:2] == [
        "id\tname\tprice",
        "100002\t Lamp, desk (LED) \t14.00",
    ]


def test_sql_csv2_ends_lines_as_asked_and_says_which_is_the_default(monkeypatch) -> None:
    """RFC 4180 ends each line with CRLF; Unix tools and beeline's csv2 with LF (issue 46)."""
    from typer.testing import CliRunner

    import ferry.clusters.hiveserver2 as hs2
    from ferry.cli import app

    res = Result((Column("id", "int"), Column("name", "string")), (("1", "a\nb"), ("2", None)))
    monkeypatch.setattr(hs2, "query", lambda settings, q, database: [res])
    runner = CliRunner()
    lf = runner.invoke(app, ["sql", "--format", "csv2", "SELECT 1"])
    crlf = runner.invoke(app, ["sql", "--format", "csv2", "--line-end", "crlf", "SELECT 1"])
    # stdout_bytes: click's ``output`` turns CRLF into LF
    assert (lf.exit_code, lf.stdout_bytes) == (0, b'id,name\n1,"a\nb"\n2,\n')
    assert (crlf.exit_code, crlf.stdout_bytes) == (0, b'id,name\r\n1,"a\nb"\r\n2,\r\n')
    text = " ".join(runner.invoke(app, ["sql", "--help"]).output.replace("│", " ").split())
    assert (
        "Line end of csv2 and tsv2: lf (Unix, beeline's) or crlf (RFC 4180's). [default: lf]"
        in text
    )


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


def test_on_kerberos_the_url_names_the_server_principal_and_beeline_reads_the_ticket_cache():
    s = get_settings().model_copy(
        update={
            "hiveserver2": get_settings().hiveserver2.model_copy(
                update={"principal": "hive/hs2.example.com@EXAMPLE.COM"}
            )
        }
    )
    hs = s.hiveserver2
    assert jdbc_url(s, "ferry") == (
        f"jdbc:hive2://{hs.host}:{hs.port}/ferry;principal=hive/hs2.example.com@EXAMPLE.COM"
    )
    assert hs.service_and_host == ("hive", "hs2.example.com")
    argv = beeline_argv(s)
    assert argv[2:4] == [
        f"-Djava.security.krb5.conf={s.kerberos.krb5_conf}",
        "-Djavax.security.auth.useSubjectCredsOnly=false",
    ]
    assert argv[argv.index("-u") + 1] == jdbc_url(s)


@pytest.mark.parametrize("principal", ["hive", "hive@EXAMPLE.COM", "/h@R"])
def test_a_principal_without_service_and_host_is_refused(principal):
    from ferry.settings.hive import HiveServer2Settings

    with pytest.raises(ValueError, match="is not service/host@REALM"):
        _ = HiveServer2Settings(principal=principal).service_and_host


def test_a_kerberos_server_principal_without_kerberos_is_a_config_error_before_connecting():
    from ferry.clusters.hiveserver2 import query
    from ferry.errors import ConfigError

    s = Settings(
        kerberos={"enabled": False},
        hiveserver2={"principal": "hive/localhost@FERRY.LOCAL", "port": 1},
    )
    with pytest.raises(ConfigError, match="hiveserver2.principal is set: Kerberos needs"):
        query(s, "SELECT 1")


class GSSError(Exception):
    """pykerberos' error shape: ((major text, code), (minor text, code))."""


@pytest.mark.parametrize(
    ("exc", "kind", "message"),
    [
        (
            OSError("Could not connect to any of [('127.0.0.1', 19084)]"),
            "HiveServer2Unavailable",
            "Could not connect to any of [('127.0.0.1', 19084)]",
        ),
        (
            OSError("Bad status: 3 (b'Unsupported mechanism type PLAIN')"),
            "AuthenticationFailed",
            "login refused: Bad status: 3 (b'Unsupported mechanism type PLAIN')",
        ),
        (
            GSSError(("Unspecified GSS failure", 851968), ("No Kerberos credentials available", 0)),
            "AuthenticationFailed",
            "no Kerberos ticket: Kerberos: Unspecified GSS failure; "
            "No Kerberos credentials available",
        ),
        (
            GSSError(("Unspecified GSS failure", 851968), ("Cannot contact any KDC for realm", 0)),
            "HiveServer2Unavailable",
            "Kerberos: Unspecified GSS failure; Cannot contact any KDC for realm",
        ),
    ],
)
def test_a_failed_login_is_refused_for_good_only_when_retrying_cannot_help(
    monkeypatch, exc, kind, message
):
    """Refusals (a mechanism the server does not take, no ticket to be had) are never retried;
    a server or KDC that did not answer is transient."""
    import ferry.clusters.hiveserver2 as hs2

    monkeypatch.setattr(hs2, "_gss_errors", lambda: (GSSError,))
    err = hs2.login_error("jdbc:hive2://h:1/default", exc)
    assert (type(err).__name__, str(err)) == (
        kind,
        f"HiveServer2 jdbc:hive2://h:1/default: {message}",
    )


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


class _Cursor:
    """An impyla cursor whose first ``fail`` executions fail as ``error`` says."""

    def __init__(self, fail: int, error: str) -> None:
        self.fail, self.error, self.calls = fail, error, 0
        self.description: list[tuple[Any, ...]] | None = None

    def execute(self, sql: str) -> None:
        from impala.error import OperationalError

        self.calls += 1
        if self.calls <= self.fail:
            raise OperationalError(self.error)
        self.description = [("n", "BIGINT", None, None, None, None, None)]

    def fetchall(self) -> list[tuple[Any, ...]]:
        return [(7,)]


GONE = (
    "org.apache.hive.service.cli.HiveSQLException: Error running query: "
    "[FAILED_READ_FILE.FILE_NOT_EXIST] Encountered error while reading file hdfs://a/t/p=1/"
    "ferry-x-0.parquet. File does not exist. It is possible the underlying files have been updated."
)


@pytest.mark.parametrize(
    ("fail", "error", "expected", "calls"),
    [
        (2, GONE, [("7",)], 3),  # a load or compaction changed the table twice: third run reads
        (3, GONE, "FilesChanged", 3),  # still changing: refused after the last attempt
        (1, "ParseException: syntax error", "HiveQueryError", 1),  # not retried
    ],
)
def test_a_statement_that_read_a_deleted_data_file_is_run_again(
    monkeypatch: pytest.MonkeyPatch, fail: int, error: str, expected: Any, calls: int
) -> None:
    import impala.dbapi

    from ferry.clusters import hiveserver2

    cursor = _Cursor(fail, error)

    class _Conn:
        def cursor(self) -> _Cursor:
            return cursor

        def close(self) -> None:
            pass

    monkeypatch.setattr(impala.dbapi, "connect", lambda **kw: _Conn())
    no_wait = hiveserver2.wait_fixed(0)
    monkeypatch.setattr(hiveserver2, "wait_fixed", lambda _s: no_wait)
    if isinstance(expected, list):
        [result] = hiveserver2.query(Settings(), "SELECT count(*) FROM t")
        assert list(result.rows) == expected
    else:
        with pytest.raises(hiveserver2.HiveQueryError) as exc:
            hiveserver2.query(Settings(), "SELECT count(*) FROM t")
        assert type(exc.value).__name__ == expected
    assert cursor.calls == calls


def test_rows_by_file_lists_few_ids_and_scans_the_table_once_for_many(monkeypatch):
    """Up to ``chunk`` ids: an IN list; more: one GROUP BY over the table, kept for the ids asked
    (a scan per chunk of ids read every data file of the table each time)."""
    import ferry.clusters.hiveserver2 as hs2

    sent: list[tuple[str, ...]] = []

    def fake_query(settings: Any, *statements: str) -> list[Result]:
        sent.append(statements)
        rows = (("a", "3"), ("b", "1"), ("c", "7"), (None, "2"))
        return [Result((), rows)]

    monkeypatch.setattr(hs2, "query", fake_query)
    assert rows_by_file(get_settings(), "ferry.flights", ["a", "c", "d", "a"], chunk=2) == {
        "a": 3,
        "c": 7,
    }
    assert rows_by_file(get_settings(), "ferry.flights", ["b", "z"], chunk=2) == {"b": 1}
    assert sent == [
        ("SELECT ferry_file_id, count(*) FROM ferry.flights GROUP BY ferry_file_id",),
        (
            "SELECT ferry_file_id, count(*) FROM ferry.flights WHERE ferry_file_id IN "
            "('b', 'z') GROUP BY ferry_file_id",
        ),
    ]


def test_a_server_that_is_not_there_is_said_once_by_ferrys_error_alone():
    """Thrift's socket logs the refused connection itself; without a handler Python would print
    it on stderr before Ferry's one-line error (``ferry sql`` in a process of its own: pytest's
    log capture would hide the difference)."""
    import os
    import socket
    import subprocess
    import sys

    with socket.socket() as s:  # a port nothing listens on: bound, never listening
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
        out = subprocess.run(
            [sys.executable, "-m", "ferry", "sql", "SELECT 1"],
            capture_output=True,
            text=True,
            env={
                **{k: v for k, v in os.environ.items() if not k.startswith("FERRY_")},
                "FERRY_HIVESERVER2__HOST": "127.0.0.1",
                "FERRY_HIVESERVER2__PORT": str(port),
            },
            timeout=120,
            check=False,
        )
    assert (out.returncode, out.stderr.splitlines()) == (
        1,
        [
            f"ferry: HiveServer2Unavailable: HiveServer2 jdbc:hive2://127.0.0.1:{port}/default: "
            f"Could not connect to any of [('127.0.0.1', {port})]"
        ],
    )
