"""The YARN tier (issue 48): Spark of transform and load on each cluster's own YARN on the local
stack (profile ``yarn``: a ResourceManager HA pair on cluster A, one on cluster B, a NodeManager
each).

Run with ``make test-yarn`` (``FERRY_PROFILE=yarn,yarn-kerberos``: Kerberos on the clusters,
their YARN and Ferry's sessions; stack state in ``var/yarn-stack``: its own ports, KDC and
directories, so it runs beside the other tiers' stacks).
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from ferry.settings import Settings


@pytest.fixture(scope="module")
def yarn_stack(stack: Settings) -> Settings:
    """The running stack's settings; fails at once when the stack runs no YARN."""
    assert getattr(stack, "yarn", None), "tests/yarn needs FERRY_PROFILE=yarn (make test-yarn)"
    return stack


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Outside the ``yarn`` profile (a bare ``pytest`` run), this tier is skipped, not failed:
    its stack is a different one (``make test-yarn`` runs it)."""
    if "yarn" in os.environ.get("FERRY_PROFILE", "").split(","):
        return
    here = Path(__file__).parent
    skip = pytest.mark.skip(reason="YARN tier: needs FERRY_PROFILE=yarn (run `make test-yarn`)")
    for item in items:
        if here in Path(str(item.fspath)).parents:
            item.add_marker(skip)
