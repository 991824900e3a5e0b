"""Ferry installed like a product (issue 28): its wheel, built with ``python -m build``, installed
into a fresh virtual environment outside the checkout; the four stages and the tracker run from
it against the local stack, configured by nothing but a settings file (clusters and metastore by
their client configuration directories) and a datasets directory, from a working directory that
is not the checkout. The field-case scenario's files flow NAS → Hive with exact counts.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import urllib.request
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest
import yaml

from ferry.clusters.hiveserver2 import rows_by_file
from ferry.core.kafka.clients import build_admin
from ferry.core.kafka.topics import ensure_topics
from ferry.core.services import SERVICES
from ferry.settings import Settings
from ferry_kit.pipeline import private_overrides
from ferry_kit.stack.client_conf import cluster_conf_dir, hive_conf_dir
from ferry_kit.testing.ports import free_port
from ferry_kit.testing.waiting import wait_for
from tests.e2e.conftest import private_definitions
from tests.e2e.scenario import assert_scenario, run_pipeline_scenario
from tests.support.paths import REPO_ROOT

pytestmark = pytest.mark.stack("all")

#: Environment a service on an edge node would have: no PYTHONPATH, no FERRY_* but the settings
#: file, nothing pointing into the checkout.
KEPT_ENV = ("PATH", "HOME", "LANG", "LC_ALL", "JAVA_HOME", "TMPDIR", "PIP_CACHE_DIR")


@dataclass
class Installed:
    venv: Path
    work: Path
    settings: Settings
    env: dict[str, str]
    web_port: int

    def ferry(self, *args: str, timeout: float = 120) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [str(self.venv / "bin" / "ferry"), *args],
            cwd=self.work / "run",
            env=self.env,
            capture_output=True,
            text=True,
            timeout=timeout,
            check=False,
        )


@pytest.fixture(scope="module")
def installed(stack: Settings, tmp_path_factory: pytest.TempPathFactory) -> Installed:
    work = tmp_path_factory.mktemp("wheel")
    dist = work / "dist"
    subprocess.run(
        [sys.executable, "-m", "build", "--wheel", "--outdir", str(dist), str(REPO_ROOT)],
        check=True,
        capture_output=True,
        timeout=600,
    )
    [wheel] = sorted(dist.glob("ferry-*.whl"))
    venv = work / "venv"
    subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True, timeout=120)
    subprocess.run(
        [str(venv / "bin" / "python"), "-m", "pip", "install", "-q", str(wheel)],
        check=True,
        timeout=900,
    )
    token = uuid.uuid4().hex[:10]
    overrides = private_overrides("whl", token, work / "nas")
    web_port = free_port()
    # private tables (ferry.<dataset>_<token>): other modules may load the same sample files
    datasets = private_definitions(stack, work, token[:8])
    config: dict[str, dict[str, object] | str] = {"var_dir": str(work / "var")}
    for key, value in overrides.items():
        section, field = key.split(".", 1)
        config.setdefault(section, {})[field] = str(value) if isinstance(value, Path) else value  # type: ignore[index]
    config["paths"] |= {"datasets_dir": str(datasets)}  # type: ignore[operator]
    config["clusters"] = {
        name: {"hadoop_conf_dir": str(cluster_conf_dir(stack, name))} for name in ("a", "b")
    }
    config["metastore"] = {"hive_conf_dir": str(hive_conf_dir(stack))}
    config["tracker"] = {"web_port": web_port, "data_dir": str(work / "tracker")}
    (work / "ferry.yaml").write_text(yaml.safe_dump(config), encoding="utf-8")
    (work / "run").mkdir()
    env = {k: os.environ[k] for k in KEPT_ENV if k in os.environ}
    env["FERRY_CONFIG"] = str(work / "ferry.yaml")
    settings = stack.model_copy(
        update={
            "kafka": stack.kafka.model_copy(
                update={"topic_prefix": overrides["kafka.topic_prefix"]}
            ),
            "paths": stack.paths.model_copy(
                update={
                    k.split(".", 1)[1]: v for k, v in overrides.items() if k.startswith("paths.")
                }
                | {"datasets_dir": datasets}
            ),
        }
    )
    ensure_topics(build_admin(settings.kafka), settings.kafka)
    return Installed(venv, work, settings, env, web_port)


@pytest.fixture(scope="module")
def services(installed: Installed) -> Iterator[dict[str, subprocess.Popen[bytes]]]:
    logs = installed.work / "logs"
    logs.mkdir()
    procs: dict[str, subprocess.Popen[bytes]] = {}
    for svc in SERVICES:
        with (logs / f"{svc.name}.log").open("ab") as log:
            procs[svc.name] = subprocess.Popen(  # noqa: S603
                [str(installed.venv / "bin" / "ferry"), "run", svc.name],
                cwd=installed.work / "run",
                env=installed.env,
                stdout=log,
                stderr=subprocess.STDOUT,
                stdin=subprocess.DEVNULL,
                start_new_session=True,
            )
    try:
        yield procs
    finally:
        for proc in procs.values():
            if proc.poll() is None:
                os.killpg(proc.pid, signal.SIGTERM)
        for name, proc in procs.items():
            try:
                proc.wait(timeout=90)
            except subprocess.TimeoutExpired:
                os.killpg(proc.pid, signal.SIGKILL)
                proc.wait(timeout=30)
            print(f"{name}: exit {proc.returncode}; log {logs / (name + '.log')}")


def test_the_wheel_holds_the_product_and_not_the_kit(installed: Installed) -> None:
    python = str(installed.venv / "bin" / "python")
    probe = (
        "import importlib.util, ferry, pathlib, sys; "
        "print(importlib.util.find_spec('ferry_kit') is None, "
        "pathlib.Path(ferry.__file__).is_relative_to(pathlib.Path(sys.argv[1])), "
        "sorted(p.name for p in (pathlib.Path(ferry.__file__).parent / 'schemas').glob('*.avsc')))"
    )
    out = subprocess.run(
        [python, "-c", probe, str(REPO_ROOT)],
        cwd=installed.work / "run",
        env=installed.env,
        capture_output=True,
        text=True,
        check=True,
    )
    names = sorted(p.name for p in (REPO_ROOT / "schemas").glob("*.avsc"))
    assert len(names) >= 6  # the manifest and one schema per event type
    assert out.stdout.strip() == f"True False {names}"
    helped = installed.ferry("--help")
    assert helped.returncode == 0, helped.stderr
    commands = {line.split()[1] for line in helped.stdout.splitlines() if line.startswith("│ ")}
    assert {"run", "replay", "status", "sql", "quarantine"} <= commands
    assert commands.isdisjoint({"up", "down", "ps", "stack", "demo"})


def test_the_services_from_the_wheel_carry_the_scenario_to_hive(
    installed: Installed, services: dict[str, subprocess.Popen[bytes]]
) -> None:
    def check_alive() -> None:
        dead = {n: p.returncode for n, p in services.items() if p.poll() is not None}
        assert dead == {}, f"services exited: {dead}; logs in {installed.work / 'logs'}"

    result = run_pipeline_scenario(
        installed.settings,
        installed.settings.paths.nas_dir,
        installed.work,
        lambda table, ids: rows_by_file(installed.settings, table, ids),
        deadline_s=600,
        check_alive=check_alive,
    )
    assert_scenario(result)
    loaded = sorted(d.file_id for d in result.dropped if d.rows is not None)

    def tracked() -> bool:
        url = f"http://127.0.0.1:{installed.web_port}/files?state=loaded&limit=100"
        try:
            with urllib.request.urlopen(url, timeout=5) as resp:  # noqa: S310 - loopback
                files = json.load(resp)["files"]
        except OSError:
            return False
        return sorted(f["file_id"] for f in files) == loaded

    wait_for(tracked, "the tracker from the wheel lists every loaded file", 120)
    status = installed.ferry("status")
    assert status.returncode == 0, status.stderr
