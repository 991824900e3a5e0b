"""The end-to-end scenario on the Docker Compose deployment (marker ``compose``).

Starts docker-compose.yml with testcontainers' ``DockerCompose`` (building Ferry's image, waiting
until every health check passes, profile ``test`` adds the ``scenario`` container), then runs the
same scenario as tests/e2e inside the compose network (``run_scenario.py``) and requires its exact
counts. Skips with the reason when no Docker engine answers or ``docker compose`` is missing.
"""

from __future__ import annotations

import os
import shutil
import subprocess
from collections.abc import Iterator

import pytest
from tests.compose.compose_checks import REPO

pytestmark = pytest.mark.compose

NAS = REPO / "var" / "compose-nas"


def docker_unavailable() -> str | None:
    """Why the compose stack cannot run here, or None. Each probe has a timeout."""
    if shutil.which("docker") is None:
        return "no Docker engine: the docker client is not installed"
    try:
        import docker

        client = docker.from_env(timeout=5)
        client.ping()
    except Exception as exc:  # noqa: BLE001 - any failure means: no engine to talk to
        return f"no Docker engine: {type(exc).__name__}: {exc}".strip()
    try:
        probe = subprocess.run(["docker", "compose", "version"], capture_output=True, timeout=15)
    except (OSError, subprocess.TimeoutExpired) as exc:
        return f"no docker compose plugin: {exc}"
    if probe.returncode != 0:
        return f"no docker compose plugin: {probe.stderr.decode(errors='replace').strip()}"
    return None


@pytest.fixture(scope="module")
def compose() -> Iterator[object]:
    reason = docker_unavailable()
    if reason:
        pytest.skip(reason)
    from testcontainers.compose import DockerCompose

    # The stages run as uid 10001 in their containers; the bind-mounted NAS must be writable.
    NAS.mkdir(parents=True, exist_ok=True)
    os.chmod(NAS, 0o777)
    stack = DockerCompose(
        str(REPO),
        compose_file_name=["docker-compose.yml"],
        build=True,
        wait=True,
        profiles=["test"],
    )
    try:
        stack.start()
    except subprocess.CalledProcessError as exc:
        logs = stack.get_logs()
        stack.stop()
        pytest.fail(
            f"docker compose up failed ({exc.returncode}):\n{exc.stderr.decode(errors='replace')}\n"
            f"{logs[0][-20000:]}"
        )
    try:
        yield stack
    finally:
        if os.environ.get("FERRY_KEEP_COMPOSE") != "1":
            stack.stop()


def test_every_service_is_up(compose) -> None:  # type: ignore[no-untyped-def]
    states = {c.Service: c.State for c in compose.get_containers()}
    expected = {
        "zookeeper",
        "kafka",
        "hdfs-b-namenode",
        "hdfs-b-datanode",
        "hdfs-a-namenode",
        "hdfs-a-datanode",
        "spark-master-1",
        "spark-master-2",
        "spark-worker",
        "hive-metastore",
        "extract",
        "transform",
        "transfer",
        "load",
        "tracker",
        "scenario",
    }
    assert {s for s, st in states.items() if st == "running"} == expected, states


def test_pipeline_scenario_with_exact_counts(compose) -> None:  # type: ignore[no-untyped-def]
    # Imported lazily so this module collects without a Docker engine; fails early on the host if
    # the shared scenario is missing or renamed.
    from tests.e2e.scenario import assert_scenario, run_pipeline_scenario  # noqa: F401

    try:
        out, err, code = compose.exec_in_container(
            ["python", "-m", "tests.compose.run_scenario"], service_name="scenario"
        )
    except subprocess.CalledProcessError as exc:
        out, err, code = (
            exc.stdout.decode(errors="replace"),
            exc.stderr.decode(errors="replace"),
            exc.returncode,
        )
    if code != 0:
        logs, _ = compose.get_logs("extract", "transform", "transfer", "load")
        pytest.fail(
            f"scenario exited {code}\nstdout:\n{out}\nstderr:\n{err[-10000:]}\n"
            f"stage logs (tail):\n{logs[-10000:]}"
        )
