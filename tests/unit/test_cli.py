"""The ``ferry`` command turns Ferry errors into one message and exit status 1, no traceback."""

from __future__ import annotations

import os
import subprocess
import sys


def ferry(*args: str, **env: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "ferry.cli", *args],
        capture_output=True,
        text=True,
        env={**os.environ, **env},
        timeout=60,
        check=False,
    )


def test_unknown_service_is_one_line_and_exit_1():
    out = ferry("run", "bogus")
    assert out.returncode == 1
    assert out.stderr.splitlines() == [
        "ferry: ConfigError: unknown service 'bogus'; "
        "choose one of ['extract', 'transform', 'transfer', 'load', 'tracker', 'gc']"
    ]


def test_invalid_setting_names_the_field_without_a_traceback():
    out = ferry("status", FERRY_KAFKA__PORT="abc")
    assert out.returncode == 1
    assert out.stderr.startswith("ferry: ConfigError: invalid Ferry settings: 1 validation error")
    assert "kafka.port" in out.stderr and "Traceback" not in out.stderr


def test_ferry_debug_shows_the_traceback():
    out = ferry("run", "bogus", FERRY_DEBUG="1")
    assert out.returncode == 1
    assert "Traceback" in out.stderr and "ConfigError: unknown service 'bogus'" in out.stderr
