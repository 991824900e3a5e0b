"""The gc service renews its Kafka admin client after a turn failed on the broker (a client that
met a broker restart can keep timing out on group offsets: ferry.gc.service's docstring)."""

from __future__ import annotations

import logging
from pathlib import Path

from tests.unit.gc_helpers import sample

from ferry.core.errors import TransientError
from ferry.core.kafka.admin import OpsError
from ferry.gc.metrics import GcMetrics
from ferry.gc.service import GcService
from ferry.settings import Settings


class _Copier:
    def __init__(self) -> None:
        self.admin = "admin-0"

    def pump(self, max_s, stop):  # type: ignore[no-untyped-def]
        return 0


class _Sweeper:
    """Fails with ``errors[i]`` on its i-th sweep (None: sweeps 1 record); records the admin
    client each sweep used."""

    label = "10m"

    def __init__(self, errors: list[Exception | None]) -> None:
        self.admin = "admin-0"
        self.errors = errors
        self.used: list[str] = []

    def sweep(self, now_ms, stop):  # type: ignore[no-untyped-def]
        self.used.append(self.admin)
        err = self.errors[len(self.used) - 1]
        if err is not None:
            raise err
        return 1


def _service(tmp_path: Path, sweeper: _Sweeper) -> tuple[GcService, GcMetrics, list[str]]:
    made: list[str] = []

    def factory() -> str:
        made.append(f"admin-{len(made) + 1}")
        return made[-1]

    settings = Settings(paths={"nas_dir": tmp_path})
    metrics = GcMetrics()
    service = GcService(
        settings,
        _Copier(),  # type: ignore[arg-type]
        [sweeper],  # type: ignore[list-item]
        None,  # type: ignore[arg-type]
        [],
        metrics,
        admin_factory=factory,
    )
    return service, metrics, made


def test_a_turn_failed_on_the_broker_gives_the_next_turn_a_new_admin_client(tmp_path, caplog):
    timed_out = TransientError("committed offsets of group p.gc.10m: _TIMED_OUT")
    sweeper = _Sweeper([timed_out, timed_out, None, None])
    service, metrics, made = _service(tmp_path, sweeper)
    with caplog.at_level(logging.INFO, logger="ferry.gc.service"):
        turns = [service.run_once(now_s=1_000 + i) for i in range(4)]
    assert [t.errors for t in turns] == [1, 1, 0, 0]
    assert [t.swept for t in turns] == [{}, {}, {"10m": 1}, {"10m": 1}]
    assert sweeper.used == ["admin-0", "admin-1", "admin-2", "admin-2"]
    assert (made, service.copier.admin) == (["admin-1", "admin-2"], "admin-2")
    assert sample(metrics, "ferry_gc_admin_renewals_total") == 2
    renewed = [r.getMessage() for r in caplog.records if "new Kafka admin" in r.getMessage()]
    assert renewed == [
        "gc: a new Kafka admin client for the next turn (this one failed: "
        "committed offsets of group p.gc.10m: _TIMED_OUT)"
    ] * 2


def test_a_refusal_that_is_not_the_broker_keeps_the_admin_client(tmp_path):
    sweeper = _Sweeper([OpsError("topic p.gc does not exist"), None])
    service, metrics, made = _service(tmp_path, sweeper)
    assert [service.run_once(now_s=1_000 + i).errors for i in range(2)] == [1, 0]
    assert (sweeper.used, made) == (["admin-0", "admin-0"], [])
    assert sample(metrics, "ferry_gc_admin_renewals_total") == 0
