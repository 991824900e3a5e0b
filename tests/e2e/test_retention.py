"""Issue 30 on the whole pipeline: the gc service removes each zone's copies once their retention
passed (shortened here to seconds) and nothing else, and a replay of an event whose input copy
expired is quarantined as ``input_expired`` at once, with the way back (re-drop) working."""

from __future__ import annotations

import re
import uuid
from collections.abc import Iterator
from datetime import UTC, datetime
from pathlib import Path
from urllib.parse import urlsplit

import pytest
import requests
from prometheus_client.parser import text_string_to_metric_families

from ferry.clusters.hdfs.paths import is_temp_path, temp_path_for
from ferry.clusters.hdfs.webhdfs import WebHdfs
from ferry.core.identity import derive_file_id, sha256_file
from ferry.datasets.spec import load_datasets
from ferry_kit.demo_data import write_demo_files
from ferry_kit.pipeline import Outcomes, drop_file
from ferry_kit.testing.ports import free_port
from ferry_kit.testing.waiting import wait_for
from tests.e2e.conftest import Pipeline, private_definitions, start_pipeline, stop_pipeline
from tests.e2e.scenario import wait_for_outcomes

pytestmark = pytest.mark.e2e

#: Retentions shortened so the sweeps act within the test: data 20 s, archive 40 s, rejects 60 s.
KEEP = {
    "landing": "20s",
    "staging": "20s",
    "incoming": "20s",
    "quarantined": "20s",
    "archive": "40s",
    "rejects": "60s",
}


@pytest.fixture(scope="module")
def gc_pipeline(stack, tmp_path_factory) -> Iterator[tuple[Pipeline, int]]:  # type: ignore[no-untyped-def]
    work = tmp_path_factory.mktemp("retention")
    token = uuid.uuid4().hex[:8]
    defs = private_definitions(
        stack, work, token
    )  # private tables: ferry.flights_<token>, ferry.weather_<token>
    port = free_port()
    extra = {f"retention.{zone}": keep for zone, keep in KEEP.items()} | {
        "retention.interval_s": 2,
        "retention.nas_interval_s": 5,
        "retention.clock_skew_s": 5,
        "retention.metrics_port": port,
        "paths.datasets_dir": defs,
    }
    p = start_pipeline(stack, work, extra)
    p.group.start("gc")
    try:
        yield p, port
    finally:
        stop_pipeline(p)


def _slice(p: Pipeline, dataset: str, first: int, rows: int, name: str, bad: str = "") -> Path:
    """Rows ``first`` .. ``first + rows`` of the demo's first day of ``dataset`` as ``name``;
    with ``bad`` (``column=value``), that column of the first row set to ``value`` (a reject)."""
    specs = load_datasets(p.settings.paths.datasets_dir)
    demo = write_demo_files(p.work / "demo", specs, datasets=[dataset], days=1)
    lines = demo.files[0].path.read_text(encoding="utf-8").splitlines()
    body = lines[1 + first : 1 + first + rows]
    if bad:
        column, value = bad.split("=")
        cells = body[0].split(",")
        cells[lines[0].split(",").index(column)] = value
        body[0] = ",".join(cells)
    dest = p.work / "src" / name
    dest.parent.mkdir(parents=True, exist_ok=True)
    dest.write_text("\n".join([lines[0], *body]) + "\n", encoding="utf-8")
    return dest


def _ports(p: Pipeline) -> tuple[WebHdfs, WebHdfs]:
    return WebHdfs.for_cluster("b", p.settings), WebHdfs.for_cluster("a", p.settings)


def _metrics(port: int, name: str, **labels: str) -> dict[str, float]:
    """Zone → value of the gc service's sample ``name`` with ``labels``."""
    text = requests.get(f"http://127.0.0.1:{port}/metrics", timeout=10).text
    return {
        s.labels["zone"]: s.value
        for family in text_string_to_metric_families(text)
        for s in family.samples
        if s.name == name and labels.items() <= s.labels.items()
    }


#: One gc line per file and retention class (ferry.gc.remover.Remover._log), e.g.
#: ``2026-12-03 14:22:14,521 INFO ferry.gc.remover: gc: flights <id> (flights/x.csv) after
#: FileLoaded at 2026-12-03T14:21:50Z, retention 20s: landing removed 1 file(s) 1.2 KiB; …``
_GC_LINE = re.compile(
    r"^(?P<logged>\d{4}-\d\d-\d\d \d\d:\d\d:\d\d),\d+ \w+ \S+: gc: \S+ (?P<fid>\S+) \(.*?\) "
    r"after \w+ at (?P<event>\S+Z), retention \w+: (?P<zones>.*)$",
    re.M,
)


def removal_delays(log: str) -> dict[tuple[str, str], float]:
    """(file id, zone) → seconds from the file's event (its Kafka record's time, whole seconds)
    to the gc line that removed that zone's copy; only ``removed`` outcomes. The log's times are
    the gc process's local time, read as this process's (same machine, same TZ)."""
    out = {}
    for m in _GC_LINE.finditer(log):
        logged = datetime.strptime(m["logged"], "%Y-%m-%d %H:%M:%S").timestamp()
        event = datetime.strptime(m["event"], "%Y-%m-%dT%H:%M:%SZ").replace(tzinfo=UTC)
        for part in m["zones"].split("; "):
            zone, outcome = part.split(" ")[:2]
            if outcome == "removed":
                out[(m["fid"], zone)] = logged - event.timestamp()
    return out


def _at_least(got: dict[str, float], want: dict[str, int]) -> bool:
    return all(got.get(k, 0) >= v for k, v in want.items())


def test_each_zone_is_swept_after_its_retention_and_nothing_else(gc_pipeline):  # type: ignore[no-untyped-def]
    p, port = gc_pipeline
    b, a = _ports(p)
    paths = p.settings.paths
    flights = _slice(p, "flights", 0, 12, "flights_gc.csv", bad="dep_delay=abc")
    weather = _slice(p, "weather", 0, 6, "weather_gc.csv")
    fid = derive_file_id("flights", sha256_file(flights))
    wid = derive_file_id("weather", sha256_file(weather))
    # Not Ferry's to remove: another dataset's copy, another prefix's copy of the SAME file, and
    # a temporary file of a transfer attempt running for another weather file. (The incoming
    # directories of the files loaded here are consumed by their loads: their data files move
    # into the table, docs/hive-layout.md; gc finds them gone.)
    other_prefix = paths.landing_path.replace("/landing", "-other/landing")
    running = f"{paths.incoming_path}/weather/{uuid.uuid4().hex}"
    strays = {
        ("b", f"{paths.landing_path}/otherdataset/{uuid.uuid4().hex}/x.csv"),
        ("b", f"{other_prefix}/flights/{fid}/flights_gc.csv"),
        ("a", temp_path_for(f"{running}/part-00009.parquet")),
    }
    for cluster, path in strays:
        (b if cluster == "b" else a).upload_stream(path, [b"not yours"])
    outcomes = Outcomes(p.settings)
    try:
        drop_file(flights, p.nas_dir / "flights" / flights.name)
        drop_file(weather, p.nas_dir / "weather" / weather.name)
        ids = [fid, wid]
        wait_for_outcomes(
            outcomes,
            lambda: all(f in outcomes.loaded for f in ids),
            "the loads",
            420,
            p.group.check_alive,
        )
        assert not outcomes.failed
        loaded = {f: outcomes.loaded[f].manifest for f in ids}
        # each staged tree: its marker and a directory per partition (gc counts each entry)
        staged = sum(len(b.list(urlsplit(m.uris["staging"]).path)) for m in loaded.values())
    finally:
        outcomes.close()
    assert (loaded[fid].rows_out, loaded[fid].rows_rejected) == (11, 1)
    copies = [
        (a if zone == "incoming" else b, urlsplit(m.uris[zone]).path)
        for zone in ("landing", "staging", "incoming")
        for m in loaded.values()
    ]
    rejects = urlsplit(loaded[fid].uris["rejects"]).path
    archived = [
        p.nas_dir / ".ferry" / "archive" / d / n
        for d, n in (("flights", flights.name), ("weather", weather.name))
    ]

    def gone(port_path: tuple[WebHdfs, str]) -> bool:
        """No copy left: nothing at ``path``, or a directory of temporary files only."""
        port, path = port_path
        st = port.status_or_none(path)
        return st is None or (st.is_dir and all(is_temp_path(e.path) for e in port.list(path)))

    def data_gone() -> bool:
        return all(gone(c) for c in copies)

    wait_for(data_gone, "landing, staging and incoming swept 20 s after the loads", 120, 1)
    wait_for(lambda: not any(f.exists() for f in archived), "the archive swept at 40 s", 120, 1)
    wait_for(lambda: not b.exists(rejects), "the rejects swept at 60 s", 120, 1)
    # Each copy went no earlier than its zone's retention after its file's FileLoaded, told by
    # gc's own lines (asserting the archive and rejects were still there when the data went
    # raced the sweeps on a busy machine: one run in four failed by the 20 s margins).
    log = (p.work / "logs" / "gc.log").read_text(errors="replace")
    delays = removal_delays(log)
    want = {
        (fid, "landing"): 20,
        (fid, "staging"): 20,
        (fid, "archive"): 40,
        (fid, "rejects"): 60,
        (wid, "landing"): 20,
        (wid, "staging"): 20,
        (wid, "archive"): 40,
    }
    assert sorted(delays) == sorted(want), log[-3000:]
    early = {k: round(v, 1) for k, v in delays.items() if v < want[k]}
    assert not early, f"removed before their retention (s after FileLoaded): {early}"
    print(
        "\ngc removals, s after FileLoaded (retention): "
        + ", ".join(
            f"{'flights' if f == fid else 'weather'} {z} {v:.0f} ({want[f, z]})"
            for (f, z), v in sorted(delays.items())
        )
    )
    # The running attempt's directory keeps its temporary file.
    assert [e.name for e in a.list(running)] == [
        Path(path).name for cluster, path in strays if cluster == "a"
    ]
    for cluster, path in strays:
        assert (b if cluster == "b" else a).exists(path), path
    removed = _metrics(port, "ferry_gc_removed_files_total")
    assert removed == {
        "landing": 2.0,
        "staging": float(staged),
        "archive": 2.0,
        "rejects": 1.0,
    }
    incoming = _metrics(port, "ferry_gc_copies_total", zone="incoming", outcome="gone")
    assert incoming == {"incoming": 2.0}
    assert re.search(
        rf"gc: flights {fid} \(flights/flights_gc.csv\) after FileLoaded at \S+, retention 20s: "
        r"landing removed 1 file\(s\) [\d.]+ \w+; staging removed \d+ file\(s\) [\d.]+ \w+; "
        r"incoming gone",
        log,
    ), log[-3000:]


def test_a_replay_after_retention_is_quarantined_input_expired_at_once(gc_pipeline):  # type: ignore[no-untyped-def]
    p, _port = gc_pipeline
    b, a = _ports(p)
    src = _slice(p, "flights", 40, 9, "flights_expired.csv")
    fid = derive_file_id("flights", sha256_file(src))
    outcomes = Outcomes(p.settings)
    try:
        drop_file(src, p.nas_dir / "flights" / src.name)
        wait_for_outcomes(
            outcomes, lambda: fid in outcomes.loaded, "the load", 420, p.group.check_alive
        )
        m = outcomes.loaded[fid].manifest
        inputs = {
            "transform": (b, urlsplit(m.uris["landing"]).path),
            "transfer": (b, urlsplit(m.uris["staging"]).path),
            "load": (a, urlsplit(m.uris["incoming"]).path),
        }
        wait_for(
            lambda: all(port.status_or_none(path) is None for port, path in inputs.values()),
            "the inputs swept after 20 s",
            120,
            1,
        )
        table = load_datasets(p.settings.paths.datasets_dir)["flights"].hive.full_name
        # The load moved the file's data files into its table (consuming its incoming copy), so
        # a replay of load finds them there and reports the file loaded again, rows unchanged.
        done = p.ferry("replay", "load", "--file", fid)
        assert done.returncode == 0, done.stdout + done.stderr
        wait_for_outcomes(
            outcomes,
            lambda: outcomes.loaded_count.get(fid, 0) == 2,
            "the replayed load",
            300,
            p.group.check_alive,
        )
        assert p.hive_rows(table, [fid]) == {fid: 9}
        # Its rows removed from the table too, a replay of load has nothing to load.
        done = p.ferry("unload", table, fid, timeout=300)
        assert done.returncode == 0, done.stdout + done.stderr
        assert p.hive_rows(table, [fid]) == {}
        for stage in inputs:
            done = p.ferry("replay", stage, "--file", fid)
            assert done.returncode == 0, done.stdout + done.stderr
        wait_for_outcomes(
            outcomes,
            lambda: len(outcomes.failed.get(fid, [])) == 3,
            "three quarantines",
            300,
            p.group.check_alive,
        )
        failures = {f.stage: f for f in outcomes.failed[fid]}
        assert {s: (f.reason, f.attempt) for s, f in failures.items()} == {
            s: ("input_expired", 1) for s in inputs
        }
        for stage, zone in (
            ("transform", "landing"),
            ("transfer", "staging"),
            ("load", "incoming"),
        ):
            assert (
                f"the {zone} copy {m.uris[zone]} of flights/flights_expired.csv ({fid}) is gone"
                in failures[stage].error
            )
            assert "from .ferry/archive/flights/flights_expired.csv" in failures[stage].error
        # The failures' own sweep (quarantined copies, 20 s) finds those copies gone; wait for it,
        # so it cannot meet the copies the re-drop below writes.
        wait_for(
            lambda: _at_least(
                _metrics(_port, "ferry_gc_copies_total", outcome="gone"),
                {"landing": 3, "staging": 2, "incoming": 1},
            ),
            "the quarantined copies' sweep",
            120,
            1,
        )
        # The way back: the NAS file dropped anew is carried again.
        drop_file(src, p.nas_dir / "flights" / src.name)
        wait_for_outcomes(
            outcomes,
            lambda: outcomes.loaded_count.get(fid, 0) == 3,
            "the re-dropped file's load",
            300,
            p.group.check_alive,
        )
        assert p.hive_rows(table, [fid]) == {fid: 9}
    finally:
        outcomes.close()
