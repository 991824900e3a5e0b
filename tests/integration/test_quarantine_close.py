"""Issue 33, items 4 and 5 on the real broker, through the real CLI and a real tracker process: a
quarantine that closes (superseded by a later load of the same NAS name, dismissed with a note,
every stage listed with dataset, NAS name and the whole reason) and files found by NAS name
(``ferry status NAME``, the tracker's ``/lookup``), from the tracker and from the topics.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from dataclasses import replace
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
from tests.integration.test_tracker import Tracker, ferry_cli, free_port, wait_for
from tests.support.factories import failed, manifest
from tests.support.kafka_io import produce

from ferry.core.dismissal import FileDismissed
from ferry.core.events import FileExtracted, FileLoaded
from ferry.core.kafka.clients import build_admin
from ferry.core.kafka.topics import ensure_topics
from ferry.core.wire.avro import default_codec
from ferry.ops.quarantine import read_quarantine
from ferry.settings import Settings

pytestmark = [pytest.mark.integration, pytest.mark.stack("kafka")]

T0 = datetime(2026, 11, 30, 8, 0, tzinfo=UTC)
NAME = "orders/orders_2026-11-30.csv"
GROWN = "orders/orders_2026-12-01.csv"
LINK = "orders/orders_link.csv"
LONG = "[UNRESOLVED_ROUTINE] Cannot resolve routine `to_dat` on search path " * 5


def at(minutes: float) -> datetime:
    return T0 + timedelta(minutes=minutes)


BAD = manifest("orders", "aa" * 32, at=at(0), source_path=NAME)
FIXED = manifest("orders", "bb" * 32, at=at(10), source_path=NAME)
TAKEN = manifest("orders", "cc" * 32, at=at(0), source_path=GROWN)
APPENDED = manifest("orders", "dd" * 32, at=at(20), source_path=GROWN)


@pytest.fixture
def qs(stack: Settings, unique: Any) -> Settings:
    s: Settings = unique.settings(stack)
    ensure_topics(build_admin(s.kafka), s.kafka)
    return s


@pytest.fixture
def tracker(qs: Settings, tmp_path: Path) -> Iterator[Tracker]:
    t = Tracker(qs, free_port(), tmp_path)
    yield t
    t.stop()


def seed(s: Settings) -> None:
    """A header_mismatch re-dropped corrected under its name and loaded; a file changed after
    it was taken whose new version loaded; a link extract refused (no manifest, keyed by its
    NAS path); a spark_job_failed with a long reason, still open."""
    codec = default_codec(s.paths.schemas_dir)
    spark = manifest("orders", "ee" * 32, at=at(1), source_path="orders/orders_2026-11-29.csv")
    events: list[tuple[str, str, Any]] = [
        ("extracted", BAD.file_id, FileExtracted(BAD)),
        ("failed", BAD.file_id, failed("transform", BAD, reason="header_mismatch", at=at(1))),
        (
            "failed",
            spark.file_id,
            failed("transform", spark, reason="spark_job_failed", error=LONG),
        ),
        ("loaded", TAKEN.file_id, FileLoaded(replace(TAKEN, updated_at=at(2)), table="s.orders")),
        (
            "failed",
            TAKEN.file_id,
            failed(
                "extract",
                TAKEN,
                reason="changed_after_extract",
                error=f"{GROWN}: changed after extract took it: taken as 10 bytes, now 20 bytes",
                attempt=1,
                at=at(5),
            ),
        ),
        (
            "failed",
            LINK,
            failed(
                "extract",
                None,
                reason="symlink_refused",
                error=f"{LINK}: is a symbolic link; not landed",
                attempt=1,
                at=at(6),
                raw_key=LINK.encode(),
                dataset="orders",
                source_path=LINK,
            ),
        ),
        ("loaded", FIXED.file_id, FileLoaded(replace(FIXED, updated_at=at(12)), table="s.orders")),
        (
            "loaded",
            APPENDED.file_id,
            FileLoaded(replace(APPENDED, updated_at=at(22)), table="s.orders"),
        ),
    ]
    for topic, key, ev in events:
        produce(s, topic, key.encode(), codec.encode(ev))


def flat(text: str) -> str:
    return " ".join(text.split())


def test_superseded_and_dismissed_entries_leave_the_list_and_stay_visible(
    qs: Settings, tracker: Tracker
) -> None:
    seed(qs)
    spark_id = manifest("orders", "ee" * 32).file_id
    listed = ferry_cli(tracker, "quarantine", "list")
    assert listed.returncode == 0, listed.stdout + listed.stderr
    out = flat(listed.stdout)
    assert "2 file(s) quarantined (0 of them empty); 2 superseded (--all)" in out
    assert (
        f"{LINK} quarantined dataset orders · NAS {LINK} · stage extract · reason symlink_refused"
        in out
    )
    assert f"{spark_id} quarantined dataset orders · NAS orders/orders_2026-11-29.csv" in out
    assert flat(LONG) in out  # the whole reason, wrapped, not cut
    assert BAD.file_id not in out and TAKEN.file_id not in out

    everything = flat(ferry_cli(tracker, "quarantine", "list", "--all").stdout)
    assert f"{BAD.file_id} superseded by {FIXED.file_id} (loaded 2026-11-30 08:12:00)" in everything
    assert (
        f"{TAKEN.file_id} superseded by {APPENDED.file_id} (loaded 2026-11-30 08:22:00)"
        in everything
    )

    done = ferry_cli(tracker, "quarantine", "dismiss", LINK, "--note", "test link; nobody's file")
    assert done.returncode == 0, done.stdout + done.stderr
    assert "1 entry dismissed" in done.stdout
    entry = read_quarantine(qs, default_codec(qs.paths.schemas_dir)).get(LINK)
    assert entry is not None and entry.state == "dismissed"
    dismissal = entry.dismissed
    assert isinstance(dismissal, FileDismissed)
    assert (dismissal.key, dismissal.note, dismissal.failed_at) == (
        LINK,
        "test link; nobody's file",
        at(6),
    )
    again = flat(ferry_cli(tracker, "quarantine", "list").stdout)
    assert "1 file(s) quarantined (0 of them empty); 2 superseded, 1 dismissed (--all)" in again
    assert f"{LINK} dismissed by {dismissal.by}" in flat(
        ferry_cli(tracker, "quarantine", "list", "--all").stdout
    )
    refused = ferry_cli(tracker, "quarantine", "dismiss", BAD.file_id, "--note", "x")
    assert refused.returncode == 1
    assert f"nothing to dismiss: {BAD.file_id} is superseded by {FIXED.file_id}" in flat(
        refused.stdout
    )

    # the tracker, from the same topics
    tracker.start()
    summary = wait_for(
        lambda: (d := tracker.get("/summary")) and d["quarantine"]["dismissed"] == 1 and d,
        "the tracker's quarantine counts",
    )
    assert summary["quarantine"] == {"open": 1, "dismissed": 1, "superseded": 2}
    metrics = tracker.get("/metrics")
    for state, n in (("open", 1), ("dismissed", 1), ("superseded", 2)):
        assert re.search(rf'^ferry_quarantine_entries{{state="{state}"}} {n}\.0$', metrics, re.M)
    assert re.search(
        r'^ferry_tracker_failures_total{reason="changed_after_extract",stage="extract"} 1\.0$',
        metrics,
        re.M,
    )
    listing = tracker.get("/files?state=quarantined")
    assert [f["file_id"] for f in listing["files"]] == [spark_id]
    closed = tracker.get("/files?state=superseded&sort=file_id")
    assert [(f["file_id"], f["quarantine"]) for f in closed["files"]] == sorted(
        [
            (BAD.file_id, {"state": "superseded", "detail": FIXED.file_id}),
            (TAKEN.file_id, {"state": "superseded", "detail": APPENDED.file_id}),
        ]
    )
    link = tracker.get("/files?state=dismissed")["files"]
    assert [(f["file_id"], f["dataset"], f["source_path"]) for f in link] == [
        (LINK, "orders", LINK)
    ]
    page = tracker.get("/ui/files?state=failed&sort=file_id")
    row = re.search(rf"<tr[^>]*data-file='{re.escape(LINK)}'.*?</tr>", page, re.S)
    assert row, page
    assert "<td data-col='dataset'>orders</td>" in row.group(0)
    assert f"<td data-col='source_path'>{LINK}</td>" in row.group(0)
    assert "<td data-col='quarantine'>dismissed: test link; nobody&#x27;s file</td>" in row.group(0)


def test_a_file_is_found_by_its_nas_name_from_the_tracker_and_from_the_topics(
    qs: Settings, tracker: Tracker
) -> None:
    seed(qs)
    tracker.start()
    found = wait_for(
        lambda: (d := tracker.get(f"/lookup?name={NAME}")) and d["count"] == 2 and d,
        "both versions of the NAS name in the tracker",
    )
    assert [f["file_id"] for f in found["files"]] == [FIXED.file_id, BAD.file_id]
    prefix = tracker.get("/lookup?name=orders_2026-1")
    assert {f["source_path"] for f in prefix["files"]} == {
        NAME,
        GROWN,
        "orders/orders_2026-11-29.csv",
    }

    for source in ("tracker", "topics"):
        if source == "topics":
            tracker.stop()
        exact = ferry_cli(tracker, "status", NAME)
        assert exact.returncode == 0, exact.stdout + exact.stderr
        text = flat(exact.stdout)
        assert f"2 versions of {NAME}" in text, source
        assert f"the newest: NAS file: {NAME} file {FIXED.file_id} (orders): loaded" in text, source
        assert f"superseded by {FIXED.file_id}" in text, source  # BAD's row in the versions
        several = ferry_cli(tracker, "status", "orders/orders_2026-1")
        assert several.returncode == 0, several.stdout + several.stderr
        assert "whose NAS name starts with orders/orders_2026-1" in flat(several.stdout), source
        for fid in (FIXED.file_id, BAD.file_id, APPENDED.file_id, TAKEN.file_id):
            assert fid in several.stdout, source
        by_id = ferry_cli(tracker, "status", BAD.file_id)
        assert by_id.returncode == 0, by_id.stdout + by_id.stderr
        assert f"quarantine: superseded by {FIXED.file_id}; last failure: transform" in flat(
            by_id.stdout
        ), source
        none = ferry_cli(tracker, "status", "orders/nothing.csv")
        assert none.returncode == 1
        assert f"no file with id or NAS name orders/nothing.csv on {qs.kafka.topic_prefix}.*" in (
            flat(none.stdout)
        ), source
