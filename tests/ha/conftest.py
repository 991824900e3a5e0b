"""The HA tier (issue 13): cluster A as an HA nameservice on the local stack (profile ``ha``).

Run with ``make test-ha`` (``FERRY_PROFILE=ha``, stack state in ``var/ha-stack`` so the
one-NameNode tier's DataNode and metastore are never mixed with the HA cluster's).
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from ferry.settings import Settings


@pytest.fixture(scope="module")
def ha_stack(stack: Settings) -> Settings:
    """The running stack's settings; fails at once when cluster A is not an HA nameservice."""
    assert stack.cluster("a").ha, "tests/ha needs FERRY_PROFILE=ha (run `make test-ha`)"
    return stack


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Outside the ``ha`` profile (a bare ``pytest`` run), this tier is skipped, not failed:
    its stack is a different one (``make test-ha`` runs it)."""
    if "ha" in os.environ.get("FERRY_PROFILE", "").split(","):
        return
    here = Path(__file__).parent
    skip = pytest.mark.skip(reason="HA tier: needs FERRY_PROFILE=ha (run `make test-ha`)")
    for item in items:
        if here in Path(str(item.fspath)).parents:
            item.add_marker(skip)
