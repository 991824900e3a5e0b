"""Cross-realm trust on the local stack (profile ``secure``: ``kerberos.trusted_realms``;
docs/security.md, "Cross-realm trust").

Real processes: MIT's krb5kdc serving the clusters' realm and a partner realm, each from its own
database, with ``krbtgt`` keys shared both ways; the NameNodes and DataNodes of clusters A and B
with ``hadoop.security.auth_to_local`` rules that map Ferry's name in the partner realm.
A principal of the partner realm (as an edge node's service account in a corporate domain would
be) reaches both clusters over WebHDFS and Hadoop RPC through a cross-realm ticket, and acts there
as its short name; another principal of that realm, which the clusters' rules do not map, is
refused with one line.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import time
from pathlib import Path

import pytest
from tests.secure.clients import fsshell

from ferry.settings import Settings
from ferry_kit.stack import kdc
from ferry_kit.stack.base import Layout

pytestmark = [
    pytest.mark.stack("kdc", "hdfs"),
    pytest.mark.skipif(
        not (Settings().kerberos.enabled and Settings().kerberos.trusted_realms),
        reason="needs a trusted realm: FERRY_PROFILE=secure (make test-secure)",
    ),
]

#: In the partner realm, as a service account of another domain would be.
NAME = "ferry"
#: Another principal of the partner realm: the clusters map only Ferry's name there, so this one,
#: which a realm-wide rule would make their superuser, is refused.
UNMAPPED = "hdfs"

#: Runs in a child process as ``FERRY_KERBEROS__PRINCIPAL``: writes a file on each cluster over
#: WebHDFS (SPNEGO), prints its HDFS owner per cluster and the service principals of the
#: process's ticket cache; a Ferry error is one line on stderr, exit 1.
CHILD = """
import json, os, subprocess, sys, requests
from ferry.settings import get_settings
from ferry.clusters.hdfs.webhdfs import WebHdfs
from ferry.clusters.kerberos import spnego_auth
from ferry.errors import FerryError
s = get_settings()
owners = {}
try:
    for x in ("a", "b"):
        with WebHdfs.for_cluster(x, s) as h:
            h.upload_stream(sys.argv[1], iter([b"row\\n"]), overwrite=True)
        cs = s.cluster(x)
        r = requests.get(
            f"{cs.webhdfs_url}/webhdfs/v1{sys.argv[1]}?op=GETFILESTATUS",
            auth=spnego_auth(s.kerberos), timeout=(5, 30),
            verify=str(cs.ssl_ca_path) if cs.ssl_ca_path else True,
        )
        r.raise_for_status()
        owners[x] = r.json()["FileStatus"]["owner"]
except FerryError as exc:
    raise SystemExit(f"{type(exc).__name__}: {exc}")
klist = subprocess.run(["klist"], capture_output=True, text=True, check=True).stdout
tickets = []  # a host-based service's ticket is listed as HTTP/host@ with its real server below
for line in klist.splitlines():
    if line[:1].isdigit():
        tickets.append(line.split()[-1])
    elif line.strip().startswith("Ticket server:"):
        tickets[-1] = line.split()[-1]
tickets.sort()
print(json.dumps({"owners": owners, "tickets": tickets}))
"""


@pytest.fixture(scope="module")
def partner(stack: Settings, tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    """Keytabs of ``ferry@PARTNER`` and ``hdfs@PARTNER``, made by the stack's KDC."""
    realm = stack.kerberos.trusted_realms[0]
    d = tmp_path_factory.mktemp("partner")
    keytabs = {}
    for name in (NAME, UNMAPPED):
        principal = f"{name}@{realm}"
        keytabs[principal] = d / f"{name.replace('/', '-')}.keytab"
        kdc.add_principal(stack, Layout(stack.var_dir), principal, keytabs[principal])
    return keytabs


def as_principal(
    stack: Settings, principal: str, keytab: Path, tmp: Path
) -> tuple[subprocess.CompletedProcess, float]:
    """Run :data:`CHILD` as ``principal``; (the process, its seconds)."""
    env = {
        **os.environ,
        "FERRY_VAR_DIR": str(stack.var_dir),
        "FERRY_KERBEROS__PRINCIPAL": principal,
        "FERRY_KERBEROS__KEYTAB": str(keytab),
        "FERRY_KERBEROS__CCACHE": str(tmp / "cc"),
    }
    path = f"/test/cross-realm/{principal.split('@')[0].replace('/', '-')}-{os.getpid()}.csv"
    t0 = time.monotonic()
    out = subprocess.run(
        [sys.executable, "-c", CHILD, path],
        capture_output=True,
        text=True,
        env=env,
        timeout=120,
        check=False,
    )
    return out, time.monotonic() - t0


def test_a_partner_principal_reaches_both_clusters_through_the_trust_as_its_short_name(
    stack: Settings, partner: dict[str, Path], tmp_path: Path
) -> None:
    realm, home = stack.kerberos.trusted_realms[0], stack.kerberos.realm
    principal = f"{NAME}@{realm}"
    out, _ = as_principal(stack, principal, partner[principal], tmp_path)
    assert out.returncode == 0, out.stderr[-2000:]
    got = json.loads(out.stdout.strip().splitlines()[-1])
    # the NameNodes mapped ferry@PARTNER to ferry (auth_to_local) ...
    assert got["owners"] == {"a": NAME, "b": NAME}
    # ... after the partner KDC gave a cross-realm TGT for the clusters' realm
    assert got["tickets"] == sorted(
        [f"krbtgt/{realm}@{realm}", f"krbtgt/{home}@{realm}", f"HTTP/127.0.0.1@{home}"]
    )


def test_hadoop_rpc_takes_a_partner_principal_too(
    stack: Settings, partner: dict[str, Path], tmp_path: Path
) -> None:
    realm = stack.kerberos.trusted_realms[0]
    principal = f"{NAME}@{realm}"
    cache = tmp_path / "cc"
    env = {**os.environ, "KRB5_CONFIG": str(stack.kerberos.krb5_conf), "KRB5CCNAME": str(cache)}
    subprocess.run(
        ["kinit", "-k", "-t", str(partner[principal]), principal], env=env, check=True, timeout=30
    )
    # Hadoop's own client on cluster A's client configuration (its auth_to_local maps the
    # partner realm: a Hadoop client refuses to log in as a principal it cannot map)
    path = f"/test/cross-realm-rpc-{os.getpid()}"
    outs = [
        fsshell(stack, tmp_path, *cmd, env=env)
        for cmd in (["-mkdir", "-p", path], ["-stat", "%u", path])
    ]
    assert [(o.returncode, o.stdout.strip()) for o in outs] == [(0, ""), (0, NAME)], [
        o.stderr[-2000:] for o in outs
    ]


def test_a_partner_principal_the_clusters_do_not_map_is_refused_with_one_line(
    stack: Settings, partner: dict[str, Path], tmp_path: Path
) -> None:
    realm = stack.kerberos.trusted_realms[0]
    principal = f"{UNMAPPED}@{realm}"
    out, took = as_principal(stack, principal, partner[principal], tmp_path)
    nn = f"127.0.0.1:{stack.cluster('a').namenode_http_port}"
    assert (out.returncode, took < 60, len(out.stderr.strip().splitlines())) == (1, True, 1)
    # extract's first call, the landing write: refused for good, not retried as a server error
    # (the NameNode answers the PUT with an empty HTTP 500; Ferry asks it why with a GET)
    assert re.fullmatch(
        re.escape("AuthenticationFailed: WebHDFS CREATE '/test/cross-realm/.hdfs-")
        + r"\d+\.csv\.ferry-tmp-[0-9a-f]{32}"
        + re.escape(
            f"' on cluster 'a' via NameNode {nn}: the cluster maps {principal} to no user (No "
            "rules applied: its hadoop.security.auth_to_local has no rule for this principal)"
        ),
        out.stderr.strip(),
    ), out.stderr
