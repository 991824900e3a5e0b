"""HiveServer2 on Kerberos (profile ``secure``, ``make test-secure``): the Spark Thrift Server logs
in from the hive keytab and takes only Kerberos (SASL GSSAPI) from its JDBC clients.

Real processes: the KDC, the Kerberos NameNode and DataNode of A, the metastore with SASL and the
kerberized Thrift server. ``ferry sql`` runs as a child process, as an analyst runs it: with
Ferry's keytab it is served as Ferry's principal; a client that does not speak Kerberos, and a
Kerberos client with no ticket to be had, are each refused with one line on stderr, exit 1,
within the query timeout.
"""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from ferry.settings import Settings

_SETTINGS = Settings()

pytestmark = [
    pytest.mark.stack("kdc", "hdfs", "hive-metastore", "hiveserver2"),
    pytest.mark.skipif(
        not (_SETTINGS.kerberos.enabled and _SETTINGS.hiveserver2.principal),
        reason="needs a kerberized HiveServer2: FERRY_PROFILE=secure (make test-secure)",
    ),
]

#: Seconds a refusal may take: one login round trip, far inside ``hiveserver2.query_timeout_s``.
REFUSAL_S = 30


def ferry_sql(query: str, **env: str) -> tuple[int, str, str, float]:
    """``ferry sql --format csv2 <query>`` as a child process with ``env`` over this one's; returns
    (exit status, stdout, stderr, seconds)."""
    t0 = time.monotonic()
    proc = subprocess.run(  # noqa: S603 - the CLI under test
        [sys.executable, "-m", "ferry", "sql", "--format", "csv2", query],
        env={**os.environ, **env},
        capture_output=True,
        text=True,
        timeout=180,
        check=False,
    )
    return proc.returncode, proc.stdout, proc.stderr, time.monotonic() - t0


def test_ferry_sql_is_served_as_ferrys_principal(stack: Settings) -> None:
    rc, out, err, _ = ferry_sql("SELECT current_user() AS who, 1 + 1 AS two")
    assert (rc, out, err) == (0, "who,two\nferry,2\n", "")


def test_a_client_without_kerberos_is_refused_with_one_line(stack: Settings) -> None:
    """A JDBC client sending a user name (SASL PLAIN), as one does to an unsecured server."""
    rc, out, err, secs = ferry_sql("SELECT 1", FERRY_HIVESERVER2__PRINCIPAL="")
    assert (rc, out, len(err.splitlines())) == (1, "", 1), err
    assert err.startswith(
        f"ferry: AuthenticationFailed: HiveServer2 jdbc:hive2://{stack.hiveserver2.host}:"
        f"{stack.hiveserver2.port}/default: login refused: "
    ), err
    assert secs < REFUSAL_S


def test_a_kerberos_client_with_no_ticket_is_refused_with_one_line(
    stack: Settings, tmp_path: Path
) -> None:
    """Kerberos on, but the keytab holds no key of Ferry's principal (an empty keytab) and the
    ticket cache is empty: no ticket can be had."""
    empty = tmp_path / "empty.keytab"
    empty.write_bytes(b"\x05\x02")  # a keytab file (format 0x502) with no entry
    empty.chmod(0o600)
    rc, out, err, secs = ferry_sql(
        "SELECT 1",
        FERRY_KERBEROS__KEYTAB=str(empty),
        FERRY_KERBEROS__CCACHE=str(tmp_path / "krb5cc"),
    )
    assert (rc, out, len(err.splitlines())) == (1, "", 1), err
    assert err.startswith("ferry: AuthenticationFailed: HiveServer2 jdbc:hive2://"), err
    assert ": no Kerberos ticket: Kerberos: " in err, err
    assert secs < REFUSAL_S
