"""Query Hive the way analysts do: against HiveServer2 (the Spark Thrift Server), over its Thrift
protocol — the protocol Hive's JDBC driver and BI tools speak.

Two clients:

* :func:`query` runs statements with impyla (Cloudera's maintained HiveServer2 client, pure
  Python: no JVM and no compiler at run time) and returns each result with its columns' names and
  types as the server describes them, and every value as the text Hive's JDBC driver's
  ``getString`` gives (a timestamp as ``java.sql.Timestamp`` prints it, a decimal with its
  scale's digits) — what a BI tool shows.
* :func:`beeline_argv` is the command line of Hive's own ``beeline`` shell (the Hive JDBC driver
  and BeeLine that pyspark's distribution ships in ``$SPARK_HOME/jars``), for ``ferry sql``
  without a query.

Every call is bounded: the socket timeout of every Thrift call and the connection
(``settings.hiveserver2.query_timeout_s``).

On Kerberos (``hiveserver2.principal``, docs/security.md, "HiveServer2") both log in with Ferry's
ticket: impyla with SASL GSSAPI, beeline with ``;principal=…`` in its JDBC URL.
"""

from __future__ import annotations

import datetime as dt
import logging
import os
import re
import shutil
from collections.abc import Sequence
from dataclasses import dataclass
from decimal import Decimal
from pathlib import Path
from typing import Any

from tenacity import Retrying, retry_if_exception_type, stop_after_attempt, wait_fixed

from ferry.clusters.kerberos import configure_process, is_transient_gss
from ferry.errors import (
    AuthenticationFailed,
    ConfigError,
    FerryError,
    PermanentError,
    TransientError,
)
from ferry.settings import Settings

# impyla and Thrift's socket log a refused connection themselves before raising it (without a
# handler, Python's last resort prints it on stderr); the raised error says it once.
for _name in ("impala", "thrift"):
    logging.getLogger(_name).addHandler(logging.NullHandler())

#: Heap of the beeline shell's JVM, MiB: it only streams result rows to the terminal.
CLIENT_HEAP_MB = 128


class HiveServer2Unavailable(TransientError):
    """HiveServer2 did not answer (refused, timed out, not started yet)."""

    reason = "hiveserver2_unavailable"


class HiveQueryError(PermanentError):
    """HiveServer2 answered with an error for the statement (syntax, missing table, …)."""

    reason = "hive_query_error"


@dataclass(frozen=True)
class Column:
    """A result column as the server describes it: name, type name in lower case (``int``,
    ``decimal``, ``timestamp``, … as JDBC's ``getColumnTypeName``), and for decimals precision
    and scale (0 otherwise)."""

    name: str
    type: str
    precision: int = 0
    scale: int = 0


@dataclass(frozen=True)
class Result:
    """One statement's result: columns and rows (values as JDBC text, see :func:`jdbc_text`)."""

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
    """``jdbc:hive2://host:port/<database>`` of the configured HiveServer2 (for JDBC clients),
    with ``;principal=<hiveserver2.principal>`` on Kerberos (Hive's JDBC URL format: the driver
    then authenticates with the caller's ticket)."""
    hs = settings.hiveserver2
    url = f"jdbc:hive2://{hs.host}:{hs.port}/{database}"
    return f"{url};principal={hs.principal}" if hs.principal else url


def jdbc_text(value: Any) -> str | None:
    """A value as Hive's JDBC driver's ``getString`` renders it: ``None`` for NULL; a timestamp
    as ``java.sql.Timestamp.toString`` (``2013-01-01 05:00:00.0``: the fraction without trailing
    zeros, at least one digit); a decimal with its digits as sent; booleans ``true``/``false``;
    anything else as ``str``."""
    if value is None:
        return None
    if isinstance(value, dt.datetime):
        fraction = f"{value.microsecond:06d}".rstrip("0") or "0"
        return f"{value:%Y-%m-%d %H:%M:%S}.{fraction}"
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, Decimal):
        return format(value, "f")
    return str(value)


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
    are passed on (e.g. ``-e "SELECT …"``, ``--outputformat=csv2``).

    On Kerberos (``hiveserver2.principal``) the JVM reads ``kerberos.krb5_conf`` and takes its
    ticket from the process's ticket cache (``KRB5CCNAME``, ``useSubjectCredsOnly=false``): call
    :func:`ferry.clusters.kerberos.ticket_cache` first so the cache holds one.
    """
    hs = settings.hiveserver2
    krb = settings.kerberos
    kerberos = (
        [
            f"-Djava.security.krb5.conf={krb.krb5_conf}",
            "-Djavax.security.auth.useSubjectCredsOnly=false",
        ]
        if hs.principal
        else []
    )
    return [
        java(),
        f"-Xmx{CLIENT_HEAP_MB}m",
        *kerberos,
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
    """Run ``statements`` in order in one HiveServer2 session; one :class:`Result` per statement
    that returns rows (DDL/DML return none).

    A statement that read a data file deleted after the server listed it (a load or compaction
    changed the table under it: :class:`FilesChanged`) is run again, :data:`READ_ATTEMPTS`
    times at most, 1 s apart.

    With ``hiveserver2.principal`` the session is opened with Kerberos (SASL GSSAPI, impyla over
    pure-sasl and pykerberos) as ``kerberos.principal``, its ticket from ``kerberos.keytab``
    (:func:`ferry.clusters.kerberos.configure_process`); else with SASL PLAIN and
    ``hiveserver2.user``.

    Raises:
        HiveServer2Unavailable: no connection, or no answer within ``query_timeout_s``.
        AuthenticationFailed: no Kerberos ticket could be had, or the server refused the login
            (e.g. PLAIN at a Kerberos server): one line, never retried (:func:`login_error`).
        ConfigError: a principal without ``kerberos.enabled`` or without pykerberos.
        HiveQueryError: the server refused a statement (the message names it and its first line);
            FilesChanged after the last attempt.
    """
    from impala.dbapi import connect
    from impala.error import Error as ImpylaError
    from thrift.Thrift import TException

    hs = settings.hiveserver2
    where = jdbc_url(settings, database)
    if hs.principal:
        service, host = hs.service_and_host
        auth: dict[str, Any] = {
            "auth_mechanism": "GSSAPI",
            "kerberos_service_name": service,
            "krb_host": host,
        }
        if not settings.kerberos.enabled:
            raise ConfigError("hiveserver2.principal is set: Kerberos needs kerberos.enabled")
        if not _gss_errors():
            raise ConfigError(
                "hiveserver2.principal needs pykerberos for SASL GSSAPI: "
                "pip install -e '.[kerberos]' (make test-secure installs it)"
            )
        configure_process(settings.kerberos)
    else:  # SASL PLAIN needs a password; a server without authentication ignores it
        auth = {"auth_mechanism": "PLAIN", "user": hs.user, "password": "ferry"}
    try:
        conn = connect(
            host=hs.host, port=hs.port, database=database, timeout=hs.query_timeout_s, **auth
        )
    except (OSError, TException, ImpylaError, *_gss_errors()) as exc:
        raise login_error(where, exc) from exc
    results: list[Result] = []
    try:
        cursor = conn.cursor()
        for sql in statements:
            result = Retrying(
                retry=retry_if_exception_type(FilesChanged),
                stop=stop_after_attempt(READ_ATTEMPTS),
                wait=wait_fixed(1.0),
                reraise=True,
            )(_execute, cursor, sql, where)
            if result is not None:
                results.append(result)
    finally:
        conn.close()
    return results


#: Attempts of a statement that read a data file deleted after the server listed it.
READ_ATTEMPTS = 3


class FilesChanged(HiveQueryError):
    """A statement listed a data file that a load or compaction deleted before it was read
    (Spark's ``FAILED_READ_FILE.FILE_NOT_EXIST``, "the underlying files have been updated"):
    the table changed under the query, and a new run lists the new state
    (docs/hive-layout.md, "What a reader sees while a file is replaced")."""


def _files_changed(exc: BaseException) -> bool:
    text = str(exc)
    return "FILE_NOT_EXIST" in text and "underlying files have been updated" in text


def _execute(cursor: Any, sql: str, where: str) -> Result | None:
    """Run one statement on an impyla cursor; its rows, or None for DDL/DML (errors as
    :func:`query`'s)."""
    from impala.error import DatabaseError
    from impala.error import Error as ImpylaError
    from thrift.Thrift import TException

    try:
        cursor.execute(sql)
        if cursor.description is None:
            return None
        columns = tuple(_column(d) for d in cursor.description)
        rows = tuple(tuple(jdbc_text(v) for v in row) for row in cursor.fetchall())
    except DatabaseError as exc:  # the server answered: the statement failed
        message = f"HiveServer2 {where}: {_first_line(exc)}"
        raise (FilesChanged if _files_changed(exc) else HiveQueryError)(message) from exc
    except (OSError, TException, ImpylaError) as exc:  # timeout, reset: the server went away
        raise HiveServer2Unavailable(f"HiveServer2 {where}: {_first_line(exc)}") from exc
    return Result(columns, rows)


def _column(description: Sequence[Any]) -> Column:
    """A PEP 249 ``cursor.description`` item (name, type, …, precision, scale, …) as a Column."""
    name, type_name, _display, _internal, precision, scale = description[:6]
    return Column(str(name), str(type_name).lower(), int(precision or 0), int(scale or 0))


def _gss_errors() -> tuple[type[BaseException], ...]:
    """pykerberos' error types when it is installed (the ``kerberos`` extra), else none."""
    try:
        import kerberos  # type: ignore[import-not-found,unused-ignore]
    except ImportError:
        return ()
    return (kerberos.GSSError, kerberos.KrbError)


#: What a HiveServer2 login refusal says (pykerberos, the server's SASL negotiation status 3/4
#: BAD/ERROR, an unsupported mechanism), as opposed to a server that is away.
_REFUSED = re.compile(r"Bad status: [34]|[Uu]nsupported mechanism|GSS|Kerberos")


def login_error(where: str, exc: BaseException) -> FerryError:
    """The error of a failed HiveServer2 connection ``exc`` at ``where``:
    :class:`AuthenticationFailed` when the server refused the login or no Kerberos ticket could be
    had (never retried), :class:`HiveServer2Unavailable` when the server or the KDC did not
    answer (transient; :func:`ferry.clusters.kerberos.is_transient_gss`)."""
    line = _first_line(exc)
    if is_transient_gss(line):
        return HiveServer2Unavailable(f"HiveServer2 {where}: {line}")
    if isinstance(exc, _gss_errors()):
        return AuthenticationFailed(f"HiveServer2 {where}: no Kerberos ticket: {line}")
    if _REFUSED.search(line):
        return AuthenticationFailed(f"HiveServer2 {where}: login refused: {line}")
    return HiveServer2Unavailable(f"HiveServer2 {where}: {line}")


def _first_line(exc: BaseException) -> str:
    """The error's first line without the server's exception class names."""
    if isinstance(exc, _gss_errors()) and exc.args:  # ((major text, code), (minor text, code))
        parts = [str(a[0]) if isinstance(a, tuple) and a else str(a) for a in exc.args]
        return "Kerberos: " + "; ".join(p for p in parts if p)
    lines = [ln.strip() for ln in str(exc).splitlines() if ln.strip()]
    line = lines[0] if lines else type(exc).__name__
    for prefix in ("org.apache.hive.service.cli.HiveSQLException: ",):
        line = line.removeprefix(prefix)
    return line


_SAFE_ID = re.compile(r"^[A-Za-z0-9_.-]+$")
_SAFE_TABLE = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*(\.[A-Za-z_][A-Za-z0-9_]*)?$")


def rows_by_file(
    settings: Settings, table: str, file_ids: Sequence[str], *, chunk: int = 500
) -> dict[str, int]:
    """Hive rows per ``ferry_file_id`` of ``table`` (``db.table``), through HiveServer2: what an
    analyst querying it sees. File ids with no rows are absent.

    Up to ``chunk`` ids: one query with the ids in an ``IN`` list. More: ONE scan of the table
    grouped by file id, kept for the ids asked — every query reads every data file of the table
    (the predicate only skips row groups), so ids in chunks of ``chunk`` cost a scan each: for
    the long soak's 10,000 files, 20 scans of thousands of small files took over 20 minutes.

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
    if not ids:
        return {}
    where = ""
    if len(ids) <= chunk:
        where = " WHERE ferry_file_id IN (" + ", ".join(f"'{f}'" for f in ids) + ")"
    statement = f"SELECT ferry_file_id, count(*) FROM {table}{where} GROUP BY ferry_file_id"
    wanted = set(ids)
    out: dict[str, int] = {}
    for result in query(settings, statement):
        for fid, n in result.rows:
            if fid in wanted and n is not None:
                out[fid] = int(n)
    return out
