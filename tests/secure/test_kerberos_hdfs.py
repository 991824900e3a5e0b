"""Kerberos on both HDFS clusters of the local stack (profile ``kerberos``, docs/security.md).

Real processes: MIT's krb5kdc (Debian's krb5-kdc) with the realm, principals and keytabs the stack
made; NameNodes and DataNodes of clusters A and B with ``hadoop.security.authentication=kerberos``,
SASL on data transfer and SPNEGO on their web servers. Ferry's WebHDFS client authenticates with
SPNEGO from its keytab: bytes cross B → A as transfer streams them, a client without a ticket is
refused with one line (not a hang, not a retry), a request without SPNEGO gets 401, and tickets
shorter than the run are renewed from the keytab while calls go on.

Runs only when the settings turn Kerberos on (``make test-secure`` runs it on profile ``secure``
with 120 s tickets and a 30 s ``hadoop.auth`` cookie; profile ``kerberos`` alone works too).
"""

from __future__ import annotations

import hashlib
import os
import subprocess
import time
import uuid
from collections.abc import Iterator

import pytest
import requests
from tests.secure.clients import webhdfs_list_error

from ferry.clusters.hdfs.webhdfs import WebHdfs
from ferry.clusters.kerberos import spnego_auth
from ferry.settings import Settings
from ferry.settings.hdfs import HdfsClusterSettings
from ferry_kit.settings import KitSettings

pytestmark = [
    pytest.mark.stack("kdc", "hdfs"),
    pytest.mark.skipif(
        not KitSettings().kerberos.enabled,
        reason="needs Kerberos: FERRY_PROFILE=secure or kerberos (make test-secure)",
    ),
]


def chunks(data: bytes, size: int = 64 * 1024) -> Iterator[bytes]:
    for i in range(0, len(data), size):
        yield data[i : i + size]


def ca(cs: HdfsClusterSettings) -> str | bool:
    """``requests``' ``verify`` for the cluster's web servers: its CA file (WebHDFS over HTTPS on
    profile ``secure``), else the default."""
    return str(cs.ssl_ca_path) if cs.ssl_ca_path is not None else True


def owner(settings: Settings, cluster: str, path: str) -> str:
    """The HDFS owner of ``path`` (raw WebHDFS GETFILESTATUS with SPNEGO)."""
    cs = settings.cluster(cluster)
    resp = requests.get(
        f"{cs.webhdfs_url}/webhdfs/v1{path}?op=GETFILESTATUS",
        auth=spnego_auth(settings.kerberos),
        timeout=(5, 30),
        verify=ca(cs),
    )
    resp.raise_for_status()
    return str(resp.json()["FileStatus"]["owner"])


def test_bytes_cross_from_b_to_a_with_spnego_and_sasl_data_transfer(stack: Settings) -> None:
    assert stack.kerberos.enabled
    data = hashlib.sha256(b"ferry").digest() * (3 * 1024 * 1024 // 32 + 7)
    digest = hashlib.sha256(data).hexdigest()
    path = f"/test/krb-{uuid.uuid4().hex[:8]}/part-0.bin"
    with WebHdfs.for_cluster("b", stack) as b, WebHdfs.for_cluster("a", stack) as a:
        on_b = b.upload_stream(path, chunks(data))
        # what transfer does: B's stream into A, checked against the size and sha256 it expects
        on_a = a.upload_stream(
            path, b.open_stream(path), expected_size=len(data), expected_sha256=digest
        )
        assert a.sha256(path) == (len(data), digest)
    assert [(w.size, w.sha256) for w in (on_b, on_a)] == [(len(data), digest)] * 2
    # the NameNodes took the user from the ticket (auth_to_local: ferry@FERRY.LOCAL → ferry)
    assert [owner(stack, c, path) for c in ("b", "a")] == ["ferry", "ferry"]


def test_a_request_without_spnego_gets_401(stack: Settings) -> None:
    cs = stack.cluster("a")
    codes = [
        requests.get(f"{cs.webhdfs_url}{p}", timeout=(5, 30), verify=ca(cs)).status_code
        for p in ("/webhdfs/v1/?op=LISTSTATUS&user.name=ferry", "/jmx")
    ]
    assert codes == [401, 401]


def test_a_client_without_a_ticket_is_refused_with_one_line(stack: Settings, tmp_path) -> None:
    empty = tmp_path / "nobody.keytab"
    empty.write_bytes(b"\x05\x02")  # a keytab (format 0x502) with no key in it
    empty.chmod(0o600)
    rc, lines, took = webhdfs_list_error(stack, {"FERRY_KERBEROS__KEYTAB": str(empty)})
    line = lines[-1]
    nn = f"127.0.0.1:{stack.cluster('a').namenode_http_port}"
    assert (rc, took < 60) == (1, True), (took, line)
    assert line.startswith(
        f"AuthenticationFailed: WebHDFS LISTSTATUS '/' on cluster 'a' via NameNode {nn}: Kerberos: "
    ), line
    assert "ferry@FERRY.LOCAL" in line, line

    missing = tmp_path / "missing.keytab"
    rc, lines, _ = webhdfs_list_error(stack, {"FERRY_KERBEROS__KEYTAB": str(missing)})
    line = lines[-1]
    assert (rc, line) == (
        1,
        f"AuthenticationFailed: kerberos.keytab '{missing}' of ferry@FERRY.LOCAL: "
        "No such file or directory",
    )


def test_tickets_are_renewed_from_the_keytab_over_a_run_longer_than_their_life(
    stack: Settings,
) -> None:
    krb = stack.kerberos
    if krb.ticket_lifetime_s > 120 or krb.http_token_validity_s > 30:
        pytest.skip("needs 120 s tickets and a 30 s hadoop.auth cookie (make test-secure)")
    run_s = 2.5 * krb.ticket_lifetime_s
    tgts: list[str] = []
    calls = 0
    with WebHdfs.for_cluster("a", stack) as a:
        t0 = time.monotonic()
        while time.monotonic() - t0 < run_s:
            a.status("/")  # raises if the NameNode refused: the ticket was not renewed
            calls += 1
            klist = subprocess.run(
                ["klist", "-c", os.environ["KRB5CCNAME"]],
                capture_output=True,
                text=True,
                timeout=10,
                check=True,
            ).stdout
            tgts += [" ".join(ln.split()[:2]) for ln in klist.splitlines() if "krbtgt/" in ln]
            time.sleep(10)  # the pace of the calls over the run, not a wait for a condition
    starts = sorted(set(tgts))
    print(f"\n{calls} calls over {run_s:.0f} s; ticket-granting tickets started at {starts}")
    # one ticket lives 120 s and is replaced past half its life: a run of 300 s saw at least
    # three, the later ones got from the keytab while the calls went on
    assert len(starts) >= 3, starts
