"""What the compose tests share: whether a Docker engine answers, the containers' logs, figures
printed past pytest's capture."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from tests.compose.compose_checks import REPO

IMAGE = "ferry:0.1.0"


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


def save_logs(compose: list[str], into: Path) -> None:
    """Each container's log (killed replicas included) to ``into/<container>.log`` before the
    project goes down, so a failed scenario can be read after the run (each call bounded)."""
    into.mkdir(parents=True, exist_ok=True)
    names = subprocess.run(
        [*compose, "ps", "-a", "--format", "{{.Name}}"], capture_output=True, text=True, timeout=60
    ).stdout.split()
    for name in names:
        with (into / f"{name}.log").open("wb") as out:
            subprocess.run(
                ["docker", "logs", name], stdout=out, stderr=subprocess.STDOUT, timeout=60
            )


def figure(capsys: pytest.CaptureFixture[str], text: str) -> None:
    """Print a measured figure past pytest's capture (the issue asks for them in the run's log)."""
    with capsys.disabled():
        print(f"\n[compose] {text}", flush=True)


def run_project(
    files: list[str], compose: list[str], nas: Path, logs_into: Path, env_file: Path | None = None
) -> Iterator[object]:
    """A module fixture's body: start the compose project of ``files`` (profile ``test``) with
    testcontainers' ``DockerCompose``, yield it, then save every container's log into
    ``logs_into`` and take the project down (kept with ``FERRY_KEEP_COMPOSE=1``). ``compose`` is
    the ``docker compose`` command line naming the same project. Skips without an engine."""
    reason = docker_unavailable()
    if reason:
        pytest.skip(reason)
    if subprocess.run(["docker", "image", "inspect", IMAGE], capture_output=True).returncode:
        pytest.fail(f"no image {IMAGE}: run `make compose-build` (or `make compose-test`)")
    from testcontainers.compose import DockerCompose

    # The stages run as uid 10001 in their containers; the bind-mounted NAS must be writable.
    nas.mkdir(parents=True, exist_ok=True)
    os.chmod(nas, 0o777)
    stack = DockerCompose(
        str(REPO),
        compose_file_name=files,
        env_file=str(env_file) if env_file else None,
        wait=True,
        profiles=["test"],
    )
    t0 = time.monotonic()
    try:
        stack.start()
    except subprocess.CalledProcessError as exc:
        logs = stack.get_logs()
        stack.stop()
        pytest.fail(
            f"docker compose up failed ({exc.returncode}):\n{exc.stderr.decode(errors='replace')}\n"
            f"{logs[0][-20000:]}"
        )
    print(f"{' + '.join(files)}: compose up --wait: {time.monotonic() - t0:.0f} s")
    try:
        yield stack
    finally:
        try:
            save_logs(compose, logs_into)
        except (OSError, subprocess.SubprocessError) as exc:  # the project still goes down
            print(f"container logs not saved: {exc}")
        if os.environ.get("FERRY_KEEP_COMPOSE") != "1":
            stack.stop()


def run_driver(compose: list[str], args: tuple[str, ...], timeout: float) -> tuple[int, Any, str]:
    """tests/compose/run_scenario.py in the ``scenario`` container of the project ``compose``
    names: (exit code, the JSON of its last stdout line or None, the output's tails)."""
    proc = subprocess.run(
        [*compose, "exec", "-T", "scenario", "python", "-m", "tests.compose.run_scenario", *args],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=timeout,
    )
    lines = proc.stdout.strip().splitlines()
    try:
        doc = json.loads(lines[-1]) if lines else None
    except json.JSONDecodeError:
        doc = None
    return proc.returncode, doc, proc.stdout[-5000:] + proc.stderr[-5000:]
