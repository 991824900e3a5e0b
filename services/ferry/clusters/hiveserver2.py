"""Query Hive the way analysts do: over JDBC, against HiveServer2 (the Spark Thrift Server).

Two clients, both the Hive 2.3 JDBC driver that pyspark's distribution ships (``hive-jdbc``,
``hive-beeline`` in ``$SPARK_HOME/jars``):

* :func:`query` runs statements through ``deploy/local/jdbc/FerryJdbcQuery.java`` (Java's
  source launcher, no build step) and returns each result with the column names and types exactly
  as the driver's ``ResultSetMetaData`` reports them — what a BI tool sees.
* :func:`beeline_argv` is the command line of Hive's own ``beeline`` shell (``ferry sql``).

Every call is bounded: the driver's login and query timeouts and a process deadline
(``settings.hiveserver2.query_timeout_s``).
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from ferry.core.errors import PermanentError, TransientError
from ferry.settings import Settings
from ferry.settings.base import REPO_ROOT

#: The JDBC client program (Java source, run by ``java <file>.java``).
JDBC_CLIENT = REPO_ROOT / "deploy" / "local" / "jdbc" / "FerryJdbcQuery.java"
#: Heap of the client JVM, MiB: it only streams result rows to stdout.
CLIENT_HEAP_MB = 128


class HiveServer2Unavailable(TransientError):
    """HiveServer2 did not answer (refused, timed out, not started yet)."""

    reason = "hiveserver2_unavailable"


class HiveQueryError(PermanentError):
    """HiveServer2 answered with an error for the statement (syntax, missing table, …)."""

    reason = "hive_query_error"


@dataclass(frozen=True)
class Column:
    """A result column as the JDBC driver reports it (``getColumnName``/``getColumnTypeName``)."""

    name: str
    type: str
    precision: int = 0
    scale: int = 0


@dataclass(frozen=True)
class Result:
    """One statement's result: columns and rows (values as the driver's ``getString``)."""

    columns: tuple[Column, ...]
    rows: tuple[tuple[str | None, ...], ...]

    def scalar(self) -> str | None:
        """The single value of a one-row, one-column result.

        Raises:
            ValueError: the result is not exactly one row of one column.
        """
        if len(self.rows) != 1 or len(self.columns) != 1:
            raise ValueError(f"expected one value, got {len(self.rows)} row(s)")
        return self.rows[0][0]


def jdbc_url(settings: Settings, database: str = "default") -> str:
    """``jdbc:hive2://host:port/<database>`` of the configured HiveServer2."""
    hs = settings.hiveserver2
    return f"jdbc:hive2://{hs.host}:{hs.port}/{database}"


def java() -> str:
    """The ``java`` of ``JAVA_HOME``, else the one on ``PATH``."""
    home = os.environ.get("JAVA_HOME")
    if home and (Path(home) / "bin" / "java").exists():
        return str(Path(home) / "bin" / "java")
    return shutil.which("java") or "java"


def _jars() -> str:
    import pyspark

    return str(Path(pyspark.__file__).parent / "jars" / "*")


def beeline_argv(settings: Settings, *args: str, database: str = "default") -> list[str]:
    """Command line of Hive's ``beeline`` shell connected to the configured HiveServer2; ``args``
    are passed on (e.g. ``-e "SELECT …"``, ``--outputformat=csv2``)."""
    hs = settings.hiveserver2
    return [
        java(),
        f"-Xmx{CLIENT_HEAP_MB}m",
        "-cp",
        _jars(),
        "org.apache.hive.beeline.BeeLine",
        "-u",
        jdbc_url(settings, database),
        "-n",
        hs.user,
        *args,
    ]


def query(settings: Settings, *statements: str, database: str = "default") -> list[Result]:
    """Run ``statements`` in order in one JDBC session; one :class:`Result` per statement that
    returns rows (DDL/DML return none).

    Raises:
        HiveServer2Unavailable: no connection, or no answer within ``query_timeout_s``.
        HiveQueryError: the server refused a statement (the message names it).
    """
    hs = settings.hiveserver2
    timeout = int(hs.query_timeout_s)
    argv = [
        java(),
        f"-Xmx{CLIENT_HEAP_MB}m",
        "-cp",
        _jars(),
        str(JDBC_CLIENT),
        jdbc_url(settings, database),
        hs.user,
        str(timeout),
        *statements,
    ]
    try:
        done = subprocess.run(
            argv, capture_output=True, text=True, timeout=timeout + 30, check=False
        )
    except subprocess.TimeoutExpired as exc:
        raise HiveServer2Unavailable(
            f"HiveServer2 {jdbc_url(settings, database)}: no answer within {timeout + 30}s"
        ) from exc
    if done.returncode != 0:
        message = _error_line(done.stderr) or f"exit {done.returncode}"
        if any(s in message for s in ("Could not open client transport", "Connection refused")):
            raise HiveServer2Unavailable(f"HiveServer2 {jdbc_url(settings, database)}: {message}")
        raise HiveQueryError(f"HiveServer2 {jdbc_url(settings, database)}: {message}")
    return parse_output(done.stdout)


_SAFE_ID = re.compile(r"^[A-Za-z0-9_.-]+$")
_SAFE_TABLE = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*(\.[A-Za-z_][A-Za-z0-9_]*)?$")


def rows_by_file(
    settings: Settings, table: str, file_ids: Sequence[str], *, chunk: int = 500
) -> dict[str, int]:
    """Hive rows per ``ferry_file_id`` of ``table`` (``db.table``), over JDBC: what an analyst
    querying HiveServer2 sees. File ids with no rows are absent.

    Raises:
        ValueError: a table name or file id that is not a plain identifier (never sent).
        HiveServer2Unavailable, HiveQueryError: see :func:`query`.
    """
    if not _SAFE_TABLE.match(table):
        raise ValueError(f"not a table name: {table!r}")
    bad = [f for f in file_ids if not _SAFE_ID.match(f)]
    if bad:
        raise ValueError(f"not file ids: {bad[:3]!r}")
    ids = list(dict.fromkeys(file_ids))
    statements = [
        f"SELECT ferry_file_id, count(*) FROM {table} WHERE ferry_file_id IN ("
        + ", ".join(f"'{f}'" for f in ids[i : i + chunk])
        + ") GROUP BY ferry_file_id"
        for i in range(0, len(ids), chunk)
    ]
    out: dict[str, int] = {}
    for result in query(settings, *statements) if statements else []:
        for fid, n in result.rows:
            if fid is not None and n is not None:
                out[fid] = int(n)
    return out


def parse_output(text: str) -> list[Result]:
    """The results in ``FerryJdbcQuery``'s JSON-lines output (see the Java file's header)."""
    results: list[Result] = []
    columns: tuple[Column, ...] | None = None
    rows: list[tuple[str | None, ...]] = []
    for line in text.splitlines():
        if not line.startswith(("{", "[")):
            continue  # driver log lines, if any reach stdout
        item = json.loads(line)
        if isinstance(item, list):
            rows.append(tuple(item))
        elif "columns" in item:
            columns, rows = tuple(Column(**c) for c in item["columns"]), []
        elif "end" in item and columns is not None:
            results.append(Result(columns, tuple(rows)))
            columns, rows = None, []
    return results


def _error_line(text: str) -> str:
    """The client's ``FERRY_JDBC_ERROR`` line (the message's first line), else the last line."""
    lines = [ln.strip() for ln in text.splitlines() if ln.strip()]
    for ln in lines:
        if ln.startswith("FERRY_JDBC_ERROR "):
            return ln.removeprefix("FERRY_JDBC_ERROR ")
    return lines[-1] if lines else ""


__all__ = [
    "Column",
    "HiveQueryError",
    "HiveServer2Unavailable",
    "Result",
    "beeline_argv",
    "jdbc_url",
    "parse_output",
    "query",
    "rows_by_file",
]
