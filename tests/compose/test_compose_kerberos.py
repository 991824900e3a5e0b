"""The two-realm deployment (docker-compose.kerberos.yml over docker-compose.yml, project
``ferry-kerberos``; marker ``compose``; docs/compose.md, "Two realms").

Cluster B's servers, extract and transform are in realm B.FERRY.LOCAL; cluster A's, the metastore,
HiveServer2 and load in A.FERRY.LOCAL; each realm has its own KDC container and the two trust each
other. Transfer and gc log in as ferry@B.FERRY.LOCAL and reach NameNode A with cross-realm tickets.
Ferry's tickets live 120 s.

In order, on one running project:

1. the daily-files scenario of tests/e2e/scenario.py (both datasets, field cases) with its exact
   expectations, then each file's rows read back through the kerberized HiveServer2 as an analyst
   reads them, equal to the rows Spark counts through the metastore; the stages read their
   clusters from the client configuration the NameNodes and the metastore wrote;
2. after the first ticket of every stage has expired, more files flow: every one loaded, and the
   KDCs' logs show transfer's container getting a new ticket (one process, never restarted) and
   its cross-realm tickets (krbtgt/A@B from kdc-b, HTTP/namenode-a@A from kdc-a);
3. no secret (the trust's password, any key of any keytab) in any container's output nor in the
   scenario's.

``make compose-test`` builds the image and writes the trust's password first (``make
compose-secrets``). Skips with the reason when no Docker engine or no compose v2 answers.
"""

from __future__ import annotations

import json
import re
import subprocess
import time
from collections.abc import Iterator
from typing import Any

import pytest
from tests.compose.compose_checks import REPO
from tests.compose.engine import figure, run_driver, run_project

pytestmark = pytest.mark.compose

FILES = ["docker-compose.yml", "docker-compose.kerberos.yml"]
ENV_FILE = REPO / "deploy" / "docker" / "kerberos.env"
KRB = ["docker", "compose", "--env-file", str(ENV_FILE), "-f", FILES[0], "-f", FILES[1]]
KRB += ["--profile", "test"]
TRUST = REPO / "var" / "compose-secrets" / "kerberos-trust.password"
NAS = REPO / "var" / "compose-nas-kerberos"
TICKET_S = 120  #: FERRY_KERBEROS__TICKET_LIFETIME_S of docker-compose.kerberos.yml
A, B = "A.FERRY.LOCAL", "B.FERRY.LOCAL"
KEYTABS = "/var/lib/ferry/conf/krb5"
#: Every command's output, scanned for secrets at the end.
OUTPUTS: list[str] = []


@pytest.fixture(scope="module")
def realms() -> Iterator[object]:
    if not TRUST.is_file():
        pytest.fail(f"no {TRUST.relative_to(REPO)}: run `make compose-secrets` (compose-test does)")
    logs = REPO / "var" / "log" / "compose-kerberos"
    yield from run_project(FILES, KRB, NAS, logs, env_file=ENV_FILE)


def compose(*args: str, timeout: float = 120) -> str:
    """``docker compose`` on the two-realm project; its stdout (fails the test on an error)."""
    proc = subprocess.run(
        [*KRB, *args], cwd=REPO, capture_output=True, text=True, timeout=timeout, check=False
    )
    assert proc.returncode == 0, f"{args} exited {proc.returncode}: {proc.stderr[-3000:]}"
    return proc.stdout


def driver(*args: str, timeout: float = 900) -> tuple[int, Any, str]:
    """tests/compose/run_scenario.py in the scenario container (ferry@A.FERRY.LOCAL); its output
    is kept for the secrets check."""
    code, doc, out = run_driver(KRB, args, timeout)
    OUTPUTS.append(out)
    return code, doc, out


def kdc_log(service: str) -> list[str]:
    """The audit log of KDC container ``service`` (krb5kdc's ``[logging] kdc``), as lines."""
    return compose("exec", "-T", service, "cat", "/var/lib/ferry/log/kdc-audit.log").splitlines()


def ip_of(service: str, network_suffix: str) -> str:
    cid = compose("ps", "-q", service).split()[0]
    nets = json.loads(
        subprocess.check_output(
            ["docker", "inspect", "-f", "{{json .NetworkSettings.Networks}}", cid], timeout=30
        )
    )
    [ip] = [n["IPAddress"] for name, n in nets.items() if name.endswith(network_suffix)]
    return ip


def test_daily_files_flow_across_two_realms_and_read_back_through_hiveserver2(
    realms: object, capsys: pytest.CaptureFixture[str]
) -> None:
    t0 = time.monotonic()
    code, doc, out = driver("daily")
    assert code == 0 and doc, out
    daily_s = time.monotonic() - t0
    hive: dict[str, int] = doc["hive"]
    assert len(hive) == 7 and all(rows > 0 for rows in hive.values()), hive
    code, via_hs2, out = driver("hs2", *hive, timeout=300)
    assert code == 0, out
    assert via_hs2 == hive
    # transform's settings took cluster B's principals from the files namenode-b wrote
    own = "from ferry.settings import get_settings as g; p = g().cluster('b').hadoop_properties; "
    own += "print(p['dfs.namenode.kerberos.principal'])"
    assert compose("exec", "-T", "transform", "python", "-c", own).strip() == f"hdfs/namenode-b@{B}"
    figure(
        capsys,
        f"two realms: daily scenario {daily_s:.0f} s, {len(doc['files'])} files; "
        f"{sum(hive.values())} rows of {len(hive)} files read back through HiveServer2",
    )


def test_files_flow_after_the_first_tickets_expired_and_transfer_crossed_realms(
    realms: object, capsys: pytest.CaptureFixture[str]
) -> None:
    transfer_b = ip_of("transfer", "_cluster-b")
    transfer_a = ip_of("transfer", "_cluster-a")
    as_req = re.compile(rf"AS_REQ .* {re.escape(transfer_b)}: ISSUE: .*, ferry@{B} for krbtgt/")
    first = [line for line in kdc_log("kdc-b") if as_req.search(line)]
    assert first, "transfer never got a ticket from kdc-b"
    # Not a sleep that hopes: the new files must need a ticket newer than transfer's first one,
    # which has surely expired once its lifetime (and 10 s) passed since the KDC issued it.
    first_at = time.strptime(f"{time.gmtime().tm_year} {first[0][:15]}", "%Y %b %d %H:%M:%S")
    wait_s = time.mktime(first_at) + TICKET_S + 10 - time.mktime(time.gmtime())
    time.sleep(max(0.0, wait_s))
    code, dropped, out = driver("drop", "0", "3", "25", timeout=180)
    assert code == 0 and dropped, out
    ids = [f["file_id"] for f in dropped]
    code, settled, out = driver("settle", "480", *ids)
    assert settled is not None, out
    assert (settled["failed"], sorted(settled["loaded"])) == ({}, sorted(ids)), out
    code, rows, out = driver("hive", *ids, timeout=300)
    assert rows == {f["file_id"]: 25 for f in dropped}, out

    tickets = [line for line in kdc_log("kdc-b") if as_req.search(line)]
    transfer = compose("ps", "-q", "transfer").split()[0]
    restarts = subprocess.check_output(
        ["docker", "inspect", "-f", "{{.RestartCount}}", transfer],
        text=True,
        timeout=30,
    ).strip()
    assert (restarts, len(tickets) >= 2) == ("0", True), tickets
    cross = f"{transfer_b}: ISSUE: .*, ferry@{B} for krbtgt/{A}@{B}"
    assert [line for line in kdc_log("kdc-b") if re.search(cross, line)]
    http_a = f"{transfer_a}: ISSUE: .*, ferry@{B} for HTTP/namenode-a@{A}"
    assert [line for line in kdc_log("kdc-a") if re.search(http_a, line)]
    figure(capsys, f"two realms: transfer got {len(tickets)} tickets of {TICKET_S} s from kdc-b")


def keys_of_every_keytab() -> list[str]:
    """Every key (hex) of every keytab both KDCs wrote (``klist -k -K``)."""
    keys: list[str] = []
    for kdc in ("kdc-a", "kdc-b"):
        listing = compose(
            "exec", "-T", kdc, "sh", "-c", f"for k in {KEYTABS}/*.keytab; do klist -k -K $k; done"
        )
        keys += re.findall(r"\(0x([0-9a-f]{32,})\)", listing)
    return keys


def test_no_secret_is_in_any_output(realms: object) -> None:
    keys = keys_of_every_keytab()
    # per realm: hdfs/, HTTP/ of the NameNode, the DataNode and 127.0.0.1, hive/ and ferry; two
    # enctypes each
    assert len(keys) == 2 * 6 * 2, keys
    secrets = [TRUST.read_text(encoding="utf-8").strip(), *keys]
    logs = compose("logs", "--no-color", timeout=300)
    assert len(logs) > 100_000, "the containers' logs are missing"
    found = [
        (i, where)
        for i, secret in enumerate(secrets)
        for where, text in (("container logs", logs), *(("scenario", o) for o in OUTPUTS))
        if secret in text or secret.upper() in text
    ]
    assert found == []
