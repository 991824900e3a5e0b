"""The tracker's file page shows the file's lineage chain, read with the same reader as the
OpenLineage topic from the events the stages' builder makes of the tracker's manifests."""

from __future__ import annotations

from datetime import datetime, timedelta
from pathlib import Path
from typing import Any

from tests.unit.test_lineage_events import COUNTS, FID, LANDING, STAGED, T0, A, B, manifest

from ferry.core.events import FileExtracted, FileLoaded, FileTransferred, FileTransformed, failed
from ferry.lineage.chain import chain
from ferry.lineage.naming import Names
from ferry.tracker import filepage
from ferry.tracker.lineage import record_hops
from ferry.tracker.record import apply

NAMES = Names("ferry", Path("/nas"), "hive://127.0.0.1:19083", f"{A}/warehouse")
INCOMING = {"incoming": f"{A}/ferry/incoming/{FID}"}


def record_of(events: list[Any]) -> dict[str, Any]:
    rec: dict[str, Any] | None = None
    for ev in events:
        rec = apply(rec, ev, FID, 0)[1]
    assert rec is not None
    return rec


def at(seconds: int) -> datetime:
    """T0 plus ``seconds``: hops are ordered by event time, so each event gets its own (the wall
    clock put them in the wrong order whenever a test spanned a millisecond)."""
    return T0 + timedelta(seconds=seconds)


def loaded_file() -> dict[str, Any]:
    landed = manifest(uris=LANDING, updated_at=at(1))
    tr = landed.advance(uris=STAGED, updated_at=at(2), **COUNTS)
    moved = tr.advance(uris=INCOMING, updated_at=at(3))
    return record_of(
        [
            FileExtracted(landed),
            FileTransformed(tr),
            FileTransferred(moved),
            FileLoaded(
                moved.advance(uris={"table": "ferry.flights"}, updated_at=at(4)), "ferry.flights"
            ),
        ]
    )


def test_chain_of_a_loaded_file_with_rows_at_each_step() -> None:
    hops = record_hops(loaded_file(), NAMES)
    assert [(h.stage, h.state) for h in hops] == [
        ("extract", "COMPLETE"),
        ("transform", "COMPLETE"),
        ("transfer", "COMPLETE"),
        ("load", "COMPLETE"),
    ]
    assert [(n.where, n.rows) for n in chain(hops)] == [
        ("/nas/flights/flights_1.csv", None),
        (f"{B}/ferry/landing/flights/{FID}/flights_1.csv", 10),
        (f"{B}/ferry/staging/flights/{FID}", 7),
        (f"{B}/ferry/rejects/flights/{FID}", 3),
        (f"{A}/ferry/incoming/{FID}", 7),
        ("hive://127.0.0.1:19083/ferry.flights", 7),
        (f"{A}/warehouse/ferry.db/flights", 7),
    ]


def test_a_quarantined_file_ends_in_fail_with_its_reason() -> None:
    landed = manifest(uris=LANDING, updated_at=at(1))
    tr = landed.advance(uris=STAGED, updated_at=at(2), **COUNTS)
    bad = failed(
        stage="transfer",
        reason="hdfs_timeout",
        error="timed out",
        attempt=5,
        manifest=tr,
        failed_at=at(3),
    )
    hops = record_hops(record_of([FileExtracted(landed), FileTransformed(tr), bad]), NAMES)
    assert [(h.stage, h.state, h.error) for h in hops][-1] == (
        "transfer",
        "FAIL",
        "hdfs_timeout: timed out",
    )
    assert [h.state for h in hops] == ["COMPLETE", "COMPLETE", "FAIL"]


def test_file_page_holds_the_chain() -> None:
    html = filepage.file_body(loaded_file(), False, 0, names=NAMES)
    assert "<p id='lineage-chain'>" in html
    assert "hive://127.0.0.1:19083/ferry.flights (7 rows)" in html
    assert "<table id='lineage'>" in html and html.count("<tr class='hop complete'>") == 4
    assert "lineage" not in filepage.file_body(loaded_file(), False, 0)  # no names: no section
