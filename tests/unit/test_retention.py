"""Retention settings, the zones list, what each event's sweep removes, and the listed sweeps of
``.ferry/empty/``, ``.ferry/failed/`` and the dead transforms' batch directories."""

from __future__ import annotations

import os
import time
from datetime import timedelta
from pathlib import Path

import pytest
from tests.support.gc_helpers import T0, Copies, file, sample

from ferry.core.events import FileLoaded, failed
from ferry.errors import ConfigError
from ferry.gc.metrics import GcMetrics
from ferry.gc.nas_copies import sweep_by_age
from ferry.gc.plan import class_label, due_zones, retention_classes
from ferry.gc.service import GcService, describe, warn_short
from ferry.settings import Settings
from ferry.settings.retention import ZONES, RetentionSettings, parse_retention

DAY = timedelta(days=1)


@pytest.mark.parametrize(
    ("given", "expected"),
    [
        ("14d", 14 * DAY),
        ("12h", timedelta(hours=12)),
        ("1.5d", timedelta(hours=36)),
        ("30m", timedelta(minutes=30)),
        ("45s", timedelta(seconds=45)),
        ("until_loaded", timedelta(0)),
        ("keep", None),
        ("P7D", 7 * DAY),
        (90, timedelta(seconds=90)),
    ],
)
def test_a_retention_is_a_duration_until_loaded_or_keep(given, expected):
    assert RetentionSettings(landing=given).landing == expected


def test_a_negative_retention_is_refused():
    with pytest.raises(ValueError, match="cannot be negative"):
        RetentionSettings(staging="-1d")
    assert parse_retention("KEEP") is None


def test_defaults_keep_replay_inputs_as_long_as_kafka_keeps_events():
    s = Settings()
    kafka = timedelta(milliseconds=s.kafka.retention_ms)
    r = s.retention
    assert kafka == 14 * DAY
    assert (r.landing, r.staging, r.incoming, r.quarantined) == (kafka,) * 4
    assert r.rejects == 90 * DAY > r.landing  # rejects longer than data
    assert r.archive == 30 * DAY > r.landing  # re-drop from the archive once copies expired
    assert (r.empty, r.failed) == (30 * DAY, 90 * DAY)
    assert warn_short(s) == []
    short = s.model_copy(update={"retention": r.model_copy(update={"landing": 2 * DAY})})
    assert warn_short(short) == ["landing"]


def test_the_zones_list_names_every_place_ferry_writes_and_each_has_a_retention():
    assert [z.name for z in ZONES] == [
        "landing",
        "staging",
        "rejects",
        "incoming",
        "archive",
        "empty",
        "failed",
    ]
    r = RetentionSettings()
    assert all(r.of(z.name) is not None for z in ZONES)
    paths = Settings().paths
    assert [getattr(paths, z.path_setting) for z in ZONES if z.on_hdfs] == [
        "/ferry/landing",
        "/ferry/staging",
        "/ferry/rejects",
        "/ferry/incoming",
    ]
    assert describe(Settings()) == (
        "landing 14d, staging 14d, rejects 90d, incoming 14d, archive 30d, empty 30d, "
        "failed 90d, quarantined 14d"
    )


def test_each_event_kind_has_its_zones_in_the_class_of_their_retention():
    r = RetentionSettings(rejects="keep")
    assert [class_label(k) for k in retention_classes(r)] == ["14d", "30d"]
    m = file("flights", 1, uris={z: f"hdfs://b/{z}" for z in ("landing", "staging", "incoming")})
    loaded = FileLoaded(m, table="t")
    assert due_zones(loaded, r, 14 * DAY) == ["landing", "staging", "incoming"]
    assert due_zones(loaded, r, 30 * DAY) == ["archive"]
    quarantined = failed(stage="transfer", reason="hdfs_timeout", error="x", manifest=m)
    r2 = r.model_copy(update={"quarantined": 3 * DAY})
    assert due_zones(quarantined, r2, 3 * DAY) == ["landing", "staging", "incoming"]
    assert due_zones(quarantined, r2, 14 * DAY) == []
    assert due_zones(quarantined, r2, 30 * DAY) == ["archive"]
    extract = failed(stage="extract", reason="not_utf8", error="x", manifest=m)
    assert [due_zones(extract, r2, k) for k in retention_classes(r2)] == [[], [], []]
    assert [class_label(k) for k in (timedelta(0), timedelta(hours=6), timedelta(seconds=90))] == [
        "0s",
        "6h",
        "90s",
    ]


def _aged(path: Path, data: bytes = b"x") -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(data)
    return path


def test_empty_and_failed_nas_files_go_by_the_time_they_were_moved(tmp_path: Path):
    nas = tmp_path / "nas"
    mine = _aged(nas / ".ferry" / "empty" / "flights" / "e.csv")
    link = nas / ".ferry" / "failed" / "flights" / "evil.csv"
    link.parent.mkdir(parents=True)
    target = _aged(tmp_path / "outside" / "secret.txt", b"s")
    os.symlink(target, link)
    sub = nas / ".ferry" / "failed" / "flights" / "a-directory"
    sub.mkdir()
    now = time.time()
    assert sweep_by_age(nas, "empty", "flights", now - 3600) == []  # moved just now: kept
    gone = sweep_by_age(nas, "failed", "flights", now + 1)
    assert [g.path for g in gone] == [link]
    assert target.exists() and sub.is_dir()  # a link is removed, never followed
    assert [g.path for g in sweep_by_age(nas, "empty", "flights", now + 1)] == [mine]
    assert sweep_by_age(nas, "empty", "weather", now + 1) == []  # no such directory


class _Copier:
    def pump(self, max_s, stop):  # type: ignore[no-untyped-def]
        return 0


def test_the_listed_sweep_takes_only_its_datasets_files_and_dead_batches(tmp_path: Path):
    copies = Copies(tmp_path / "nas")
    nas = copies.nas
    for outcome in ("empty", "failed"):
        _aged(nas / ".ferry" / outcome / "flights" / f"{outcome}.csv")
        _aged(nas / ".ferry" / outcome / "unknown" / f"{outcome}.csv")  # not a dataset of ours
    dead = "/ferry/staging/flights/_tmp/deadbeef"
    running = "/ferry/staging/flights/_tmp/cafebabe"
    now = time.time()
    Copies.put(copies.b, f"{dead}/part-0.parquet", b"p", T0)
    Copies.put(copies.b, f"{running}/part-0.parquet", b"p", T0)
    copies.b.set_mtime(dead, int((now - 2 * 86400) * 1000))  # a transform killed 2 days ago
    copies.b.set_mtime(running, int(now * 1000))  # one writing now
    settings = Settings(
        paths={"nas_dir": nas},
        retention={"empty": "1h", "failed": "keep", "orphans": "1d"},
    )
    metrics = GcMetrics()
    remover = copies.remover(settings.retention, metrics)
    service = GcService(settings, _Copier(), [], remover, ["flights"], metrics)  # type: ignore[arg-type]
    stats = service.run_once(now_s=now + 7200)
    assert stats.listed_removed == 2  # .ferry/empty/flights/empty.csv and the dead batch
    assert not (nas / ".ferry" / "empty" / "flights" / "empty.csv").exists()
    assert (nas / ".ferry" / "failed" / "flights" / "failed.csv").exists()  # keep
    assert (nas / ".ferry" / "empty" / "unknown" / "empty.csv").exists()
    assert dead not in copies.b.dirs and f"{dead}/part-0.parquet" not in copies.b.files
    assert f"{running}/part-0.parquet" in copies.b.files
    assert sample(metrics, "ferry_gc_removed_files_total", zone="empty") == 1
    assert sample(metrics, "ferry_gc_orphans_total", zone="staging") == 1
    # The next turn within nas_interval_s lists nothing again.
    assert service.run_once(now_s=now + 7300).listed_removed == 0


def test_metrics_on_a_port_taken_is_a_config_error():
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        s.listen()
        port = s.getsockname()[1]
        with pytest.raises(ConfigError, match="cannot serve /metrics"):
            GcMetrics().serve(RetentionSettings(metrics_port=port))
    assert GcMetrics().serve(RetentionSettings(metrics_port=None)) is None
