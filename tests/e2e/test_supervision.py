"""``ferry up``'s supervision on the real stack: restart after SIGKILL, the crash-loop limit, and
hot standby (two instances each of transform and load, one of each SIGKILLed mid-run).

Each test runs its own supervisord (``supervise.home`` under tmp), with a private topic prefix,
NAS directory, HDFS paths and tracker port, so it never touches a ``ferry up`` of the checkout.
Figures (restart and failover seconds) are printed; ``-s`` shows them.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import subprocess
import time
import uuid
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path

import pytest
from confluent_kafka import Consumer

from ferry.clusters.hiveserver2 import rows_by_file
from ferry.core.identity import derive_file_id, sha256_file
from ferry.core.kafka.clients import build_admin
from ferry.core.kafka.topics import ensure_topics
from ferry.datasets.spec import load_datasets
from ferry.settings import Settings
from ferry_kit.demo_data import write_demo_files
from ferry_kit.pipeline import Outcomes, drop_file, private_overrides, run_cli, settings_env
from ferry_kit.settings import KitSettings, get_kit_settings
from ferry_kit.supervise.control import PsRow, Services
from ferry_kit.testing.ports import free_port
from ferry_kit.testing.waiting import wait_for
from tests.e2e.conftest import private_definitions

pytestmark = [pytest.mark.e2e, pytest.mark.stack("all")]


@contextlib.contextmanager
def environ(env: Mapping[str, str]) -> Iterator[None]:
    saved = dict(os.environ)
    os.environ.update(env)
    try:
        yield
    finally:
        os.environ.clear()
        os.environ.update(saved)


@dataclass
class Supervised:
    settings: KitSettings
    env: dict[str, str]
    work: Path
    services: Services

    def up(self, replicas: Mapping[str, int] | None = None, deadline_s: float = 300) -> None:
        result = self.services.up(replicas or {}, {**os.environ, **self.env}, deadline_s)
        assert result.ok, f"fatal {result.fatal}, unhealthy {result.unhealthy}: {result.rows}"

    def row(self, name: str) -> PsRow:
        return next(r for r in self.services.ps() if r.name == name)

    def ferry(self, *args: str, timeout: float = 400) -> subprocess.CompletedProcess[str]:
        return run_cli(self.env, *args, timeout=timeout)


def supervised(
    stack: Settings, work: Path, extra: Mapping[str, object] | None = None
) -> Supervised:
    token = uuid.uuid4().hex[:10]
    env = settings_env(
        {
            **private_overrides("sup", token, work / "nas"),
            "tracker.web_port": free_port(),
            "tracker.data_dir": work / "tracker",
            "supervise.home": work / "sup",
            **(extra or {}),
        }
    )
    with environ(env):
        settings = get_kit_settings()  # ``ferry up``'s: Ferry's settings and the kit's (supervise)
    ensure_topics(build_admin(settings.kafka), settings.kafka)
    return Supervised(settings, env, work, Services(settings))


@pytest.fixture
def sup(stack: Settings, tmp_path: Path) -> Iterator[Supervised]:
    # private tables (ferry.<dataset>_<token>): other modules may load the same demo days
    defs = private_definitions(stack, tmp_path, uuid.uuid4().hex[:8])
    s = supervised(stack, tmp_path, {"paths.datasets_dir": defs})
    try:
        yield s
    finally:
        s.services.down()


def test_a_killed_service_is_restarted_and_consuming_again(sup: Supervised):
    sup.up()
    for name in ("transfer", "load"):
        before = sup.row(name)
        assert (before.state, before.restarts, before.health.ok) == ("RUNNING", 0, True)
        t0 = time.monotonic()
        os.kill(before.pid or 0, signal.SIGKILL)
        after = wait_for(
            lambda n=name, old=before.pid: (
                (r := sup.row(n)).pid not in (None, old)
                and r.health.detail.startswith("in group, partitions ")
                and r
            ),
            f"{name} back in its consumer group with its partitions",
            timeout_s=180,
            poll_s=0.5,
        )
        print(f"\n{name}: SIGKILL → new pid in its group in {time.monotonic() - t0:.1f} s")
        assert (after.state, after.restarts) == ("RUNNING", 1)
        assert after.health.detail.startswith("in group, partitions ")
        if name == "load":  # issue 48: the new process's own Spark application, on the masters
            app = after.health.detail.split("; Spark application ", 1)[1]
            assert app.startswith("app-") and " on spark://" in app, after.health.detail
        ps = sup.ferry("ps")
        line = next(ln for ln in ps.stdout.splitlines() if f"│ {name} " in ln)
        cells = [c.strip() for c in line.split("│")[1:-1]]
        assert (cells[0], cells[1], cells[2], cells[4]) == (name, "RUNNING", str(after.pid), "1")


def test_a_service_that_exits_at_once_ends_fatal_and_up_names_it(stack: Settings, tmp_path: Path):
    # start_secs 60: a start that fails is a failed start even when the machine is busy (with
    # the default 10 s, a first start slowed past 10 s by a loaded machine counted as started,
    # reset the retries and ended FATAL after 4 restarts instead of 3: CI of 6d9253d).
    extra = {"paths.datasets_dir": tmp_path / "no-such-dir", "supervise.start_secs": 60}
    sup = supervised(stack, tmp_path, extra)
    try:
        up = sup.ferry("up", "--no-stack", "--deadline", "120")
        assert up.returncode == 1, up.stdout + up.stderr
        fatal = "extract, gc, load, transform"
        assert f"gave up (crash loop, FATAL): {fatal}; see their logs" in up.stdout
        missing = f"ConfigError: datasets directory {tmp_path / 'no-such-dir'} does not exist"
        for name in ("extract", "load", "transform"):  # the first error line of each
            assert f"  {name}: ferry: {missing}" in up.stdout, up.stdout
        states = {r.name: (r.state, r.pid is None) for r in sup.services.ps()}
        assert states == {
            "extract": ("FATAL", True),
            "gc": ("FATAL", True),
            "load": ("FATAL", True),
            "transform": ("FATAL", True),
            "tracker": ("RUNNING", False),
            "transfer": ("RUNNING", False),
        }
        # startretries=3: the first start and three retries, each logged as a spawn.
        restarts = {r.name: r.restarts for r in sup.services.ps() if r.state == "FATAL"}
        assert restarts == {"extract": 3, "gc": 3, "load": 3, "transform": 3}
        ps = sup.ferry("ps")
        assert ps.returncode == 1
        cells = [[c.strip() for c in ln.split("│")[1:3]] for ln in ps.stdout.splitlines()]
        assert sorted(c[0] for c in cells if c[1:] == ["FATAL"]) == [
            "extract",
            "gc",
            "load",
            "transform",
        ]
        log = (tmp_path / "sup" / "log" / "extract.log").read_text()
        assert "ConfigError: datasets directory" in log
    finally:
        sup.services.down()


def test_a_broken_definition_leaves_every_service_running_and_ps_names_it(
    stack: Settings, tmp_path: Path
):
    """Issue 33: one YAML with ``type: long`` used to make extract, transform and load
    crash-loop (FATAL), stopping every dataset. Now they all run and say what they skip."""
    defs = tmp_path / "datasets"
    shutil.copytree(stack.paths.datasets_dir, defs)
    weather = defs / "weather.yaml"
    weather.write_text(
        weather.read_text().replace("{name: temp, type: double}", "{name: temp, type: long}")
    )
    sup = supervised(stack, tmp_path, {"paths.datasets_dir": defs})
    try:
        up = sup.ferry("up", "--no-stack", "--deadline", "240")
        assert up.returncode == 0, up.stdout + up.stderr
        assert "gave up" not in up.stdout
        ps = sup.ferry("ps")
        assert ps.returncode == 0, ps.stdout + ps.stderr
        assert (
            "dataset weather not run (extract, load, transform), its files wait: "
            "columns.5.type: unsupported type 'long'; use one of" in ps.stdout
        ), ps.stdout
        rows = {r.name: r.health for r in sup.services.ps()}
        assert {n: (h.ok, list(h.invalid)) for n, h in rows.items()} == {
            "extract": (True, ["weather"]),
            "gc": (True, []),
            "load": (True, ["weather"]),
            "tracker": (True, []),
            "transfer": (True, []),
            "transform": (True, ["weather"]),
        }
    finally:
        sup.services.down()


#: stage → (its input topic, its output topic)
HOPS = {"transform": ("extracted", "transformed"), "load": ("transferred", "loaded")}


class Stamps:
    """Every event on the stage topics as it arrives: (topic, partition, key, Kafka time in s)."""

    def __init__(self, settings: Settings) -> None:
        self.events: list[tuple[str, int, bytes, float]] = []
        self._c = Consumer(
            {
                "bootstrap.servers": settings.kafka.bootstrap_servers,
                "group.id": f"stamps-{uuid.uuid4().hex[:8]}",
                "auto.offset.reset": "earliest",
                "enable.auto.commit": False,
            }
        )
        topics = ("extracted", "transformed", "transferred", "loaded")
        self._c.subscribe([settings.kafka.topic(t) for t in topics])

    def poll(self, seconds: float) -> None:
        end = time.monotonic() + seconds
        while time.monotonic() < end:
            m = self._c.poll(0.2)
            if m is not None and m.error() is None:
                topic = (m.topic() or "").rsplit(".", 1)[-1]
                part, key = m.partition() or 0, m.key() or b""
                self.events.append((topic, part, key, m.timestamp()[1] / 1000))

    def keys(self, topic: str, partitions: set[int] | None = None) -> set[bytes]:
        return {
            k
            for t, p, k, _ in self.events
            if t == topic and (partitions is None or p in partitions)
        }

    def pending(self, stage: str, partitions: set[int]) -> set[bytes]:
        """Files handed to ``stage`` on ``partitions`` that it has not output yet."""
        src, out = HOPS[stage]
        return self.keys(src, partitions) - self.keys(out)

    def first_after(self, topic: str, t: float, partitions: set[int] | None = None) -> float | None:
        times = [
            ts
            for tp, p, _, ts in self.events
            if tp == topic and ts > t and (partitions is None or p in partitions)
        ]
        return min(times) - t if times else None


def partitions_of(row: PsRow) -> set[int]:
    """The partitions ``ferry ps`` lists for a stage instance: its detail's first part
    (``in group, partitions 0, 2``), before what follows ``; `` (its Spark application, the
    conditions it holds, the datasets it does not run)."""
    detail = row.health.detail.split("; ", 1)[0]
    if "partitions " not in detail:
        return set()
    return {int(p) for p in detail.split("partitions ", 1)[1].split(", ")}


def stuck(sup: Supervised, outcomes: Outcomes, ids: Iterable[str], lines: int = 4) -> str:
    """A timeout's message: which files lack an outcome (and their last stage), each process's
    state and the last ``lines`` lines of its log (the logs live in a temporary directory)."""
    parts = [outcomes.unsettled(ids)]
    for row in sup.services.ps():
        log = sup.services.paths.service_log(row.name)
        tail = log.read_text(errors="replace").splitlines()[-lines:] if log.exists() else []
        parts.append(f"{row.name} {row.state} restarts={row.restarts} {row.health.detail}")
        parts.extend(f"    {line[:300]}" for line in tail)
    return "\n".join(parts)


def test_hot_standby_covers_a_killed_transform_and_load(sup: Supervised):
    """Two instances each of transform and load; once a stage has output and the instance owning
    the most partitions still has files to do, that instance is SIGKILLed. The survivor takes its
    partitions over; every file ends in Hive exactly once."""
    sup.up({"transform": 2, "load": 2})
    specs = load_datasets(sup.settings.paths.datasets_dir)
    files = write_demo_files(sup.work / "source", specs, days=8).files
    assert len(files) == 16
    ids = {derive_file_id(f.dataset, sha256_file(f.path)): f for f in files}
    outcomes = Outcomes(sup.settings)
    stamps = Stamps(sup.settings)
    killed: dict[str, tuple[float, set[int], int]] = {}

    def maybe_kill() -> None:
        for stage, (_src, out) in HOPS.items():
            if stage in killed or not stamps.keys(out):
                continue
            rows = [r for r in sup.services.ps() if r.name.startswith(f"{stage}-")]
            victim = max(rows, key=lambda r: len(partitions_of(r)))
            parts = partitions_of(victim)
            todo = stamps.pending(stage, parts)
            if not todo:
                continue
            os.kill(victim.pid or 0, signal.SIGKILL)
            killed[stage] = (time.time(), parts, len(todo))
            print(
                f"\nSIGKILL {victim.name} (pid {victim.pid}, partitions {sorted(parts)}, "
                f"{len(todo)} file(s) of its partitions not output yet)"
            )

    def settled() -> bool:
        outcomes.poll(0.5)
        stamps.poll(0.5)
        maybe_kill()
        return outcomes.settled(ids)

    try:
        for f in files:
            drop_file(f.path, sup.settings.paths.nas_dir / f.relative_path)
            settled()
        wait_for(settled, lambda: stuck(sup, outcomes, ids), timeout_s=600, poll_s=0)
    finally:
        outcomes.close()
    assert set(killed) == {"transform", "load"}, "a stage had no work left after its first output"
    for stage, (_src, out) in HOPS.items():
        t, parts, todo = killed[stage]
        any_out = stamps.first_after(out, t)
        takeover = stamps.first_after(out, t, parts)
        print(
            f"{stage}: kill → next {out} event {any_out} s; → next on the killed instance's "
            f"partitions {sorted(parts)} ({todo} file(s) pending): "
            + ("none" if takeover is None else f"{takeover:.1f} s")
        )
        # The survivor took the killed instance's partitions over (their files were pending).
        # Seconds are printed, not asserted: figures belong to the note and bench/, not a test.
        assert any_out is not None and takeover is not None, (stage, any_out, takeover)
    assert not outcomes.failed
    for dataset in sorted({f.dataset for f in files}):
        mine = [fid for fid, f in ids.items() if f.dataset == dataset]
        assert {fid: outcomes.loaded[fid].manifest.rows_in for fid in mine} == {
            fid: ids[fid].rows for fid in mine
        }
        expected = {
            fid: (outcomes.loaded[fid].manifest.rows_in or 0)
            - (outcomes.loaded[fid].manifest.rows_rejected or 0)
            for fid in mine
        }
        assert rows_by_file(sup.settings, specs[dataset].hive.full_name, mine) == expected
