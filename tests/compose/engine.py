"""What the compose tests share: whether a Docker engine answers, the containers' logs, figures
printed past pytest's capture."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest


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
