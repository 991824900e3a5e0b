"""Kafka over SASL_SSL on the local stack (profile ``secure-kafka``, docs/security.md).

Real processes: the broker with TLS and SCRAM-SHA-512 users, HDFS B, extract and the tracker
(faust/aiokafka) as child processes, the ``ferry`` CLI. Files flow NAS → landing → the tracker;
a link leaving the NAS is refused (C15); the tracker answers 401 without its token; a client with
a wrong password stops with one line; and no secret (the SASL password, the wrong one, the
tracker token) appears in any log under ``var/log``, any service log, any captured output, any
event or any tracker page.

Runs only when the settings put Kafka on SASL_SSL (``FERRY_PROFILE=secure`` in ``make
test-secure``, or ``secure-kafka``), so this tier can hold modules of other protections side by
side.
"""

from __future__ import annotations

import os
import re
import secrets
import subprocess
import sys
import time
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import requests
from confluent_kafka import Consumer, TopicPartition

from ferry.core.kafka.clients import build_admin, client_config
from ferry.core.kafka.topics import ensure_topics
from ferry.settings import Settings
from ferry_kit.pipeline import ServiceGroup, settings_env
from ferry_kit.stack import kafka_secure
from ferry_kit.testing.ports import free_port
from ferry_kit.testing.waiting import wait_for

pytestmark = [
    pytest.mark.stack("kafka", "hdfs-b-namenode", "hdfs-b-datanode"),
    pytest.mark.skipif(
        Settings().kafka.security_protocol != "SASL_SSL",
        reason="needs Kafka on SASL_SSL: FERRY_PROFILE=secure or secure-kafka (make test-secure)",
    ),
]

CSV = b"year,month,day,dep_time\n2024,1,1,517\n2024,1,1,533\n"
#: Content of a file outside the NAS root that a link in the drop directory points to.
OUTSIDE = b"outside-the-nas-" + uuid.uuid4().hex.encode() + b"\n"


@dataclass
class Run:
    settings: Settings
    env: dict[str, str]
    work: Path
    group: ServiceGroup
    token: str
    port: int
    outputs: list[str]

    def ferry(self, *args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess:
        """The ``ferry`` CLI with this run's settings; its output is kept for the secret grep."""
        out = subprocess.run(
            [sys.executable, "-m", "ferry.cli", *args],
            capture_output=True,
            text=True,
            env={**os.environ, **self.env, "COLUMNS": "250", **(env or {})},
            timeout=120,
            check=False,
        )
        self.outputs += [out.stdout, out.stderr]
        return out

    def get(self, path: str, token: str | None = None) -> requests.Response:
        headers = {"Authorization": f"Bearer {token}"} if token else {}
        resp = requests.get(f"http://127.0.0.1:{self.port}{path}", headers=headers, timeout=(3, 10))
        self.outputs.append(resp.text)
        return resp


def private(path: Path, text: str) -> Path:
    path.write_text(text)
    path.chmod(0o600)
    return path


@pytest.fixture(scope="module")
def run(stack: Settings, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Run]:
    assert (stack.kafka.security_protocol, stack.kafka.sasl_mechanism) == (
        "SASL_SSL",
        "SCRAM-SHA-512",
    )
    work = tmp_path_factory.mktemp("secure")
    token = f"tok-{secrets.token_hex(12)}"
    port = free_port()
    prefix = f"sec{uuid.uuid4().hex[:8]}"
    (work / "nas").mkdir()  # the share (extract does not create the NAS root)
    overrides: dict[str, Any] = {
        "kafka.topic_prefix": prefix,
        "paths.nas_dir": work / "nas",
        "paths.landing_path": f"/test/{prefix}/landing",
        "extract.poll_interval_s": 0.5,
        "tracker.web_port": port,
        "tracker.data_dir": work / "tracker",
        "tracker.store_url": "memory://",
        "tracker.lag_refresh_s": 2,
        "tracker.token_file": private(work / "tracker.token", token + "\n"),
    }
    env = {**settings_env(overrides), "PYTHONUNBUFFERED": "1"}
    settings = stack.model_copy(
        update={
            "kafka": stack.kafka.model_copy(update={"topic_prefix": prefix}),
            "paths": stack.paths.model_copy(update={"nas_dir": work / "nas"}),
        }
    )
    assert kafka_secure.grant(settings) > 0  # each service's ACLs for this prefix
    ensure_topics(build_admin(settings.kafka), settings.kafka)
    group = ServiceGroup(env, work / "logs", stages=("extract", "tracker"))
    group.start()
    r = Run(settings, env, work, group, token, port, [])
    try:
        yield r
    finally:
        group.stop()


def test_files_flow_over_sasl_ssl_and_a_link_outside_the_nas_is_refused(run: Run) -> None:
    nas = run.work / "nas" / "flights"
    nas.mkdir(parents=True, exist_ok=True)
    outside = run.work / "outside.csv"
    outside.write_bytes(OUTSIDE)
    for day in ("01", "02"):
        (nas / f"flights_2024-01-{day}.csv").write_bytes(CSV.replace(b"1,1,", f"1,{day},".encode()))
    os.symlink(outside, nas / "flights_2016-01-12.csv")

    def files() -> list[dict[str, Any]] | None:
        run.group.check_alive()
        try:
            resp = run.get("/files", run.token)
        except requests.RequestException:
            return None
        got = resp.json().get("files", []) if resp.status_code == 200 else []
        return got if len(got) == 3 and all(f["state"] for f in got) else None

    got = wait_for(files, "3 files in the tracker (2 extracted, 1 refused)", timeout_s=120)
    states = sorted((f["state"], f["source_path"], (f["failure"] or {}).get("reason")) for f in got)
    assert states == [
        ("extracted", "flights/flights_2024-01-01.csv", None),
        ("extracted", "flights/flights_2024-01-02.csv", None),
        # refused before it was hashed: no manifest, the NAS name from the failure event
        ("failed", "flights/flights_2016-01-12.csv", "symlink_outside_nas"),
    ]
    assert outside.read_bytes() == OUTSIDE
    assert (
        run.work / "nas" / ".ferry" / "failed" / "flights" / "flights_2016-01-12.csv"
    ).is_symlink()


def test_tracker_requires_its_token_and_healthz_stays_open(run: Run) -> None:
    wait_for(lambda: run.get("/healthz").status_code == 200, "tracker /healthz 200", 60)
    assert [run.get(p).status_code for p in ("/", "/files", "/table", "/metrics")] == [401] * 4
    assert [run.get(p, "wrong").status_code for p in ("/", "/metrics")] == [401] * 2
    assert [run.get(p, run.token).status_code for p in ("/", "/table", "/metrics")] == [200] * 3
    assert "flights_2024" not in run.get("/table").text


def test_cli_connects_over_sasl_ssl(run: Run) -> None:
    out = run.ferry("status")
    assert out.returncode == 0, out.stderr[-2000:]
    # the tracker answered (its token sent), and the lag came from the broker over SASL_SSL
    assert "file states from the tracker" in out.stdout, out.stdout
    assert "quarantined files: 1" in out.stdout, out.stdout
    assert f"{run.settings.kafka.topic_prefix}.extracted" in out.stdout, out.stdout


def test_wrong_password_is_refused_with_one_line_within_the_timeout(run: Run) -> None:
    bad = private(run.work / "wrong.password", f"wrong-{secrets.token_hex(8)}\n")
    t0 = time.monotonic()
    out = run.ferry(
        "run",
        "extract",
        env={"FERRY_KAFKA__SERVICE_USERS__EXTRACT__SASL_PASSWORD_FILE": str(bad)},
    )
    took = time.monotonic() - t0
    last = out.stderr.strip().splitlines()[-1]
    assert (out.returncode, took < 60) == (1, True), (took, out.stderr[-2000:])
    assert last.startswith(
        "ferry: ConfigError: kafka at 127.0.0.1:19092 refused user 'ferry-extract' "
        "(SCRAM-SHA-512) over SASL_SSL: "
    ), last
    assert "Authentication failed" in last, last


def test_a_service_with_another_services_user_is_refused_with_one_line_naming_the_acl(
    run: Run,
) -> None:
    """transfer run with extract's user: it may describe the prefix's topics (so it starts) but
    neither join transfer's group nor read its input; the first refusal ends it, one line."""
    ext = run.settings.kafka.service_users["extract"]
    t0 = time.monotonic()
    out = run.ferry(
        "run",
        "transfer",
        env={
            "FERRY_KAFKA__SERVICE_USERS__TRANSFER__SASL_USERNAME": ext.sasl_username,
            "FERRY_KAFKA__SERVICE_USERS__TRANSFER__SASL_PASSWORD_FILE": str(ext.sasl_password_file),
        },
    )
    took = time.monotonic() - t0
    last = out.stderr.strip().splitlines()[-1]
    assert (out.returncode, took < 60) == (1, True), (took, out.stderr[-2000:])
    p = run.settings.kafka.topic_prefix
    assert re.fullmatch(
        rf"ferry: ConfigError: kafka refused user 'ferry-extract': .* \(ACL: READ on "
        rf"(group {p}\.transfer|topic {p}\.transformed)\)",
        last,
    ), last


def event_bytes(run: Run) -> bytes:
    """Every record (keys and values) on the run's topics."""
    k = run.settings.kafka
    consumer = Consumer(
        {
            **client_config(k),
            "group.id": f"{k.topic_prefix}.grep-{uuid.uuid4().hex[:8]}",
            "enable.auto.commit": False,
        }
    )
    out = []
    try:
        for name in ("extracted", "failed"):
            for p in range(k.partitions):
                tp = TopicPartition(k.topic(name), p)
                lo, hi = consumer.get_watermark_offsets(tp, timeout=10)
                consumer.assign([TopicPartition(k.topic(name), p, lo)])
                while hi > lo and (msg := consumer.poll(10)) is not None:
                    out += [msg.key() or b"", msg.value() or b""]
                    if msg.offset() + 1 >= hi:
                        break
    finally:
        consumer.close()
    return b"".join(out)


def test_no_secret_in_any_log_output_event_or_page(run: Run) -> None:
    """Runs last in the module: after the flow, the CLI and the refused login."""
    password = run.settings.kafka.password().get_secret_value()
    wrong = (run.work / "wrong.password").read_text().strip()
    conf = run.settings.var_dir / "conf" / "kafka"
    needles = {
        "kafka password": password,
        "wrong password": wrong,
        "tracker token": run.token,
        **{
            f"{svc}'s kafka password": run.settings.kafka.model_copy(update={"service": svc})
            .password()
            .get_secret_value()
            for svc in run.settings.kafka.service_users
        },
        "broker's own SCRAM password": (conf / "broker.password").read_text().strip(),
        "keystore password": (conf / "tls" / "keystore.password").read_text().strip(),
    }
    assert all(len(n) >= 16 for n in needles.values())
    events = event_bytes(run)
    assert events  # the flow's events were read
    pages = [run.get(p, run.token).text for p in ("/", "/files?detail=1", "/table", "/metrics")]
    var_logs = sorted(Path(run.settings.var_dir / "log").rglob("*.log"))
    service_logs = sorted((run.work / "logs").glob("*.log"))
    assert {p.name for p in service_logs} == {"extract.log", "tracker.log"}
    assert "kafka.log" in {p.name for p in var_logs}
    texts = {str(p): p.read_text(errors="replace") for p in var_logs + service_logs}
    texts |= {f"output {i}": o for i, o in enumerate(run.outputs)}
    texts |= {f"page {i}": o for i, o in enumerate(pages)}
    texts["events"] = events.decode("utf-8", "replace")
    hits = {
        (what, where)
        for what, needle in needles.items()
        for where, text in texts.items()
        if needle in text
    }
    assert hits == set()
