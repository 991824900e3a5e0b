"""The tracker's pages in headless Chromium, on the real broker with a real tracker process: the
overview, a filtered files page and a file page show exactly what the tracker's JSON says, for
files in every state (one with a name full of HTML and markup characters), and the charts draw
from the vendored uPlot with no network. Set ``FERRY_TRACKER_SHOTS=<dir>`` to save screenshots.
"""

from __future__ import annotations

import html
import os
import re
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka import Producer
from tests.integration.test_tracker import Tracker, dump_dom, free_port, run_chromium, wait_for
from tests.support.factories import failed, named

from ferry.core.events import (
    FileExtracted,
    FileLoaded,
    FileManifest,
    FileTransferred,
    FileTransformed,
)
from ferry.core.kafka.clients import build_admin
from ferry.core.kafka.topics import ensure_topics
from ferry.core.wire.avro import default_codec
from ferry.settings import Settings

pytestmark = pytest.mark.integration

#: The events' time base, two minutes before they are produced (set by :func:`produce`): the
#: overview's rates count the last 5 minutes, so the events must be that fresh when checked.
NOW = datetime.now(UTC).replace(microsecond=0) - timedelta(minutes=2)
NASTY = 'q<1>&"[x]":x:'


def manifest(name: str, minutes: float, dataset: str = "weather", **kw: Any) -> FileManifest:
    return named(
        dataset,
        name,
        at=NOW,
        updated_at=NOW + timedelta(minutes=minutes),
        size_bytes=3_000_000,
        trace_id="3" * 32,
        uris={"landing": f"hdfs://b/landing/{dataset}/{name}.csv"},
        source_mtime=NOW - timedelta(minutes=1),
        **kw,
    )


def fid(name: str, dataset: str = "weather") -> str:
    return manifest(name, 0, dataset).file_id


def events() -> list[tuple[str, Any]]:
    done = [
        ("extracted", FileExtracted(manifest("done", 0, "flights"))),
        (
            "transformed",
            FileTransformed(
                manifest("done", 0.5, "flights", rows_in=10, rows_out=9, rows_rejected=1)
            ),
        ),
        ("transferred", FileTransferred(manifest("done", 1, "flights"))),
        (
            "loaded",
            FileLoaded(manifest("done", 1.5, "flights"), table="ferry.flights", partition={}),
        ),
    ]
    bad = manifest(NASTY, 0)
    return done + [
        ("extracted", FileExtracted(manifest("new", 0))),
        ("extracted", FileExtracted(manifest("mid", 0))),
        ("transformed", FileTransformed(manifest("mid", 0.5))),
        ("extracted", FileExtracted(manifest("late", 0))),
        ("transformed", FileTransformed(manifest("late", 0.5))),
        ("transferred", FileTransferred(manifest("late", 1))),  # stuck: load's SLA is 1 s
        ("extracted", FileExtracted(bad)),
        (
            "failed",
            failed(
                "transform",
                bad,
                reason="rows<invalid>",
                error='no "valid" rows & <b>bold</b>',
                attempt=2,
                at=NOW + timedelta(minutes=1),
            ),
        ),
    ]


def produce(s: Settings) -> None:
    global NOW
    NOW = datetime.now(UTC).replace(microsecond=0) - timedelta(minutes=2)
    codec = default_codec(s.paths.schemas_dir)
    p = Producer({"bootstrap.servers": s.kafka.bootstrap_servers, "enable.idempotence": True})
    for topic, ev in events():
        p.produce(s.kafka.topic(topic), key=ev.manifest.file_id.encode(), value=codec.encode(ev))
    assert p.flush(10) == 0


def shoot(url: str, name: str) -> None:
    shots = os.environ.get("FERRY_TRACKER_SHOTS")
    if not shots:
        return
    Path(shots).mkdir(parents=True, exist_ok=True)
    run_chromium(
        "--window-size=1400,900",
        "--virtual-time-budget=4000",
        f"--screenshot={Path(shots) / name}",
        url,
        text=False,
    )


def text(fragment: str) -> str:
    return html.unescape(re.sub(r"<[^>]+>", "", fragment)).strip()


@pytest.fixture
def ts(stack: Settings, unique: Any) -> Settings:
    s: Settings = unique.settings(stack)
    ensure_topics(build_admin(s.kafka), s.kafka)
    return s


def test_pages_show_what_the_json_says(ts: Settings, tmp_path: Path) -> None:
    t = Tracker(ts, free_port(), tmp_path)
    base = f"http://127.0.0.1:{t.port}"
    try:
        t.start()
        produce(ts)
        # The five files' events come on five topics, folded in whatever order they arrive:
        # wait until every one is folded (one file in each state), then check the count.
        states = {"extracted": 1, "transformed": 1, "transferred": 1, "loaded": 1, "failed": 1}
        summary = wait_for(
            lambda: (d := t.get("/summary")) and d["states"] == states and d,
            f"the tracker's states to be {states}",
        )
        assert summary["files"] == 5

        # Overview: every figure on the page equals /overview's (all datasets).
        dom = dump_dom(f"{base}/", "--virtual-time-budget=4000")
        ov = t.get("/overview")["datasets"]["*"]
        shown = {
            (m[0], m[1]): m[2]
            for m in re.findall(r'data-stage="(\w+)" data-fig="(\w+)">([^<]*)<', dom)
        }
        for stage, figs in ov.items():
            for name in ("waiting", "stuck", "quarantined", "done", "files_per_min", "mb_per_min"):
                if stage == "extract" and name == "waiting":
                    continue
                assert shown[(stage, name)] == str(figs[name]), (stage, name)
        assert (shown[("transform", "waiting")], shown[("load", "stuck")]) == ("1", "1")
        assert shown[("transform", "quarantined")] == "1" and shown[("hive", "loaded")] == "1"
        assert shown[("transform", "mb_per_min")] == "1.8"  # 3 files × 3 MB over 5 min
        assert 'id="files-total">5<' in dom
        assert 'data-drawn="1"' in dom and dom.count("<canvas") == 2  # uPlot, served locally
        shoot(f"{base}/", "overview.png")

        # Files page, filtered: the rows and count are /files's with the same filter.
        dom = dump_dom(f"{base}/ui/files?dataset=weather&stage=transform")
        listed = t.get("/files?dataset=weather&stage=transform&sort=attention")
        rows = re.findall(r'<tr class="row (\w+)" data-file="(\w+)">(.*?)</tr>', dom, re.S)
        assert [r[1] for r in rows] == [f["file_id"] for f in listed["files"]]
        assert [r[1] for r in rows] == [fid(NASTY), fid("new")]  # quarantined first
        assert re.search(r'id="count">(\d+)<', dom).group(1) == str(listed["count"]) == "2"  # type: ignore[union-attr]
        cells = dict(re.findall(r'<td data-col="(\w+)">(.*?)</td>', rows[0][2], re.S))
        assert (
            text(cells["source_path"])
            == f"weather/{NASTY}.csv"
            == listed["files"][0]["source_path"]
        )
        assert text(cells["reason"]) == "rows<invalid>" == listed["files"][0]["failure"]["reason"]
        assert f'<a href="/ui/files/{fid(NASTY)}">' in cells["file_id"]
        assert "<b>bold</b>" not in dom
        stuck = dump_dom(f"{base}/ui/files?state=stuck")
        assert re.findall(r'data-file="(\w+)"', stuck) == [
            f["file_id"] for f in t.get("/stuck")["files"]
        ]
        shoot(f"{base}/ui/files?dataset=weather&stage=transform", "files.png")
        shoot(f"{base}/ui/files", "files-all.png")

        # File page: facts, failures and commands equal /files/{id}?detail=1.
        f = fid(NASTY)
        detail = t.get(f"/files/{f}?detail=1")
        dom = dump_dom(f"{base}/ui/files/{f}")
        facts = dict(re.findall(r'<td data-fact="([^"]+)">(.*?)</td>', dom, re.S))
        assert text(facts["sha256"]) == detail["detail"]["sha256"] == manifest(NASTY, 0).sha256
        assert text(facts["NAS file"]) == detail["source_path"]
        assert text(facts["attempts"]) == str(detail["attempts"]) == "2"
        assert text(facts["URI landing"]) == detail["detail"]["uris"]["landing"]
        reasons = re.findall(r'<td data-col="reason">(.*?)</td>', dom)
        errors = re.findall(r'<td data-col="error">(.*?)</td>', dom)
        assert [text(r) for r in reasons] == [x["reason"] for x in detail["detail"]["failures"]]
        assert [text(e) for e in errors] == ['no "valid" rows & <b>bold</b>']
        cmds = [text(c) for c in re.findall(r'<pre class="cmd">(.*?)</pre>', dom)]
        assert (
            cmds
            == detail["commands"]
            == [
                f"ferry replay transform --file {f}",
                f"ferry quarantine release {f}",
                f"ferry status {f}",
            ]
        )
        shoot(f"{base}/ui/files/{f}", "file-quarantined.png")
        done = fid("done", "flights")
        dom = dump_dom(f"{base}/ui/files/{done}")
        bars = re.findall(r'<div class="bar-row" data-stage="(\w+)">', dom)
        assert bars == [b["stage"] for b in t.get(f"/files/{done}?detail=1")["bars"]]
        assert bars == ["extract", "transform", "transfer", "load"]
        shoot(f"{base}/ui/files/{done}", "file-loaded.png")

        # The store is on disk: a restart indexes it again without the changelog being replayed.
        t.stop()
        t.start()
        again = wait_for(lambda: (d := t.get("/summary")) and d["files"] == 5 and d, "restart")
        assert again["states"] == summary["states"]
        assert t.get(f"/files/{f}?detail=1") == {**detail, "stuck": False}
        assert list((tmp_path / "data").rglob("files-*.db")), "no RocksDB under the data dir"
    finally:
        t.stop()
