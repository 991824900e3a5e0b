"""A quarantine that closes (issue 33, item 4), pure: an entry superseded by a later load of the
same NAS name, dismissed by an operator (and opened again by a later failure), extract failures
named by dataset and NAS path, the whole reason printed at any width; the same answers from the
topics (``ferry quarantine``) and from the tracker's index."""

from __future__ import annotations

import io
from dataclasses import replace
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from tests.support.factories import failed, manifest

from ferry.core.dismissal import FileDismissed
from ferry.core.events import FileExtracted, FileLoaded
from ferry.core.timeline import NameLoads, fold, to_ms
from ferry.ops.console import literal_console
from ferry.ops.quarantine import FailedRecord, QuarantineRead, fold_quarantine
from ferry.ops.quarantine_cli import quarantine_blocks
from ferry.tracker.record import apply
from ferry.tracker.state import TrackerState

T0 = datetime(2026, 11, 30, 8, 0, tzinfo=UTC)
NAME = "orders/orders_2026-11-30.csv"


def at(minutes: float) -> datetime:
    return T0 + timedelta(minutes=minutes)


BAD = manifest("orders", "aa" * 32, at=at(0), source_path=NAME)  # header_mismatch
FIXED = manifest("orders", "bb" * 32, at=at(10), source_path=NAME)  # re-dropped, corrected
OTHER = manifest("orders", "cc" * 32, at=at(10), source_path="orders/orders_2026-12-01.csv")
HEADER = failed("transform", BAD, reason="header_mismatch", error="header differs", at=at(1))


def loaded(m: Any, minutes: float) -> FileLoaded:
    return FileLoaded(replace(m, updated_at=at(minutes)), table="shop.orders")


def loads(*events: FileLoaded) -> NameLoads:
    out = NameLoads()
    for e in events:
        m = e.manifest
        out.add(m.source_path, m.dataset, m.file_id, to_ms(m.updated_at))
    return out


def rec(key: str, event: Any, offset: int) -> FailedRecord:
    return FailedRecord(key, 0, offset, to_ms(at(offset)), event)


def test_a_later_load_of_the_same_nas_name_supersedes_the_entry() -> None:
    [entry] = fold_quarantine(
        [rec(BAD.file_id, HEADER, 1)], loads(loaded(FIXED, 12), loaded(OTHER, 13)), {}
    )
    assert (entry.state, entry.superseded_by) == ("superseded", (FIXED.file_id, to_ms(at(12))))
    read = QuarantineRead((entry,), ())
    assert read.quarantined == ()


@pytest.mark.parametrize(
    ("load", "why"),
    [
        (loaded(replace(FIXED, updated_at=at(0)), 0), "loaded before the failure"),
        (loaded(OTHER, 12), "another NAS name"),
        (loaded(replace(FIXED, dataset="returns"), 12), "another dataset"),
        (loaded(BAD, 12), "the file itself (released: 'loaded', not superseded)"),
    ],
)
def test_what_does_not_supersede(load: FileLoaded, why: str) -> None:
    [entry] = fold_quarantine([rec(BAD.file_id, HEADER, 1)], loads(load), {})
    assert entry.superseded_by is None, why


def test_an_extract_failure_without_manifest_is_named_and_superseded() -> None:
    refused = failed(
        "extract",
        None,
        reason="not_utf8",
        error=f"{NAME}: not valid utf-8",
        attempt=1,
        at=at(1),
        raw_key=NAME.encode(),
        dataset="orders",
        source_path=NAME,
    )
    older = replace(refused, dataset=None, source_path=None)  # recorded before the fields
    entries = fold_quarantine(
        [rec(NAME, refused, 1), rec("orders/old.csv", replace(older, raw_key=NAME.encode()), 2)],
        loads(loaded(FIXED, 12)),
        {},
    )
    assert [(e.failed.nas_dataset, e.failed.nas_path, e.state) for e in entries] == [
        ("orders", NAME, "superseded"),
        (None, NAME, "superseded"),  # the dataset unknown: the NAS name alone tells
    ]


def test_a_dismissal_closes_the_entry_until_a_later_failure() -> None:
    d = FileDismissed(BAD.file_id, "vendor sends no more", "ops@edge", at(5), at(1))
    [entry] = fold_quarantine(
        [rec(BAD.file_id, HEADER, 1), rec(BAD.file_id, d, 5)], NameLoads(), {}
    )
    assert (entry.state, entry.dismissed) == ("dismissed", d)
    again = replace(HEADER, failed_at=at(8), attempt=2)
    [entry] = fold_quarantine(
        [rec(BAD.file_id, HEADER, 1), rec(BAD.file_id, d, 5), rec(BAD.file_id, again, 8)],
        NameLoads(),
        {},
    )
    assert (entry.state, entry.failures) == ("quarantined", 2)
    # the newest dismissal counts, loaded-since wins over everything
    d2 = replace(d, note="really", dismissed_at=at(9), failed_at=at(8))
    [entry] = fold_quarantine(
        [rec(BAD.file_id, HEADER, 1), rec(BAD.file_id, again, 8), rec(BAD.file_id, d2, 9)],
        NameLoads(),
        {BAD.file_id: to_ms(at(20))},
    )
    assert (entry.state, entry.dismissed) == ("loaded", d2)


def test_list_prints_every_stage_alike_with_the_whole_reason_wrapped() -> None:
    error = "spark_job_failed: [UNRESOLVED_ROUTINE] Cannot resolve routine `to_dat` " * 6
    long_fail = failed("transform", BAD, reason="spark_job_failed", error=error + "\nline 2")
    refused = failed(
        "extract",
        None,
        reason="symlink_refused",
        error="is a link",
        dataset="orders",
        source_path=NAME,
    )
    entries = fold_quarantine(
        [rec(BAD.file_id, long_fail, 1), rec(NAME, refused, 2)], NameLoads(), {}
    )
    out = io.StringIO()
    console = literal_console(60, file=out)
    for block in quarantine_blocks(entries):
        console.print(block)
    text = out.getvalue()
    assert max(len(line) for line in text.splitlines()) <= 60
    assert " ".join(text.split()).count("Cannot resolve routine `to_dat`") == 6  # nothing cut
    assert "line 2" in text
    flat = " ".join(text.split())
    for key in (BAD.file_id, NAME):
        assert f"{key} quarantined" in flat
    assert f"dataset orders · NAS {NAME} · stage transform · reason spark_job_failed" in flat
    assert f"dataset orders · NAS {NAME} · stage extract · reason symlink_refused" in flat


# -- the same in the tracker: the fold, the index -------------------------------------------------


def build(events: list[tuple[str, Any]]) -> TrackerState:
    store: dict[str, dict[str, Any]] = {}
    for key, ev in events:
        store[key] = apply(store.get(key), ev, key, 0)[1]
    state = TrackerState()
    state.load(store.values(), {})
    return state


def test_the_tracker_tells_superseded_dismissed_and_open_entries() -> None:
    refused = failed(
        "extract",
        None,
        reason="symlink_refused",
        error="a link",
        at=at(2),
        dataset="orders",
        source_path="orders/link.csv",
        raw_key=b"orders/link.csv",
    )
    state = build(
        [
            (BAD.file_id, FileExtracted(BAD)),
            (BAD.file_id, HEADER),
            (FIXED.file_id, loaded(FIXED, 12)),
            ("orders/link.csv", refused),
            (
                "orders/link.csv",
                FileDismissed("orders/link.csv", "a test link", "ops", at(3), at(2)),
            ),
            (OTHER.file_id, failed("load", OTHER, reason="schema_mismatch", at=at(11))),
        ]
    )
    e = state.entries
    assert (e["orders/link.csv"].dataset, e["orders/link.csv"].source_path) == (
        "orders",
        "orders/link.csv",
    )
    assert state.closure(e[BAD.file_id]) == ("superseded", FIXED.file_id)
    assert state.closure(e["orders/link.csv"]) == ("dismissed", "a test link")
    assert state.closure(e[OTHER.file_id]) == ("open", None)
    assert state.closure(e[FIXED.file_id]) == ("", None)
    assert state.counts(to_ms(at(20)), {})["quarantine"] == {
        "open": 1,
        "dismissed": 1,
        "superseded": 1,
    }
    # the loaded file that supersedes an entry is kept past the retention, to keep telling it
    assert state.expired(0, to_ms(at(10_000))) == []
    assert [x.file_id for x in state.by_name(NAME)] == [FIXED.file_id, BAD.file_id]
    assert [x.file_id for x in state.by_name("orders_2026-11")] == [FIXED.file_id, BAD.file_id]
    assert [x.file_id for x in state.by_name("orders/orders_2026-1")] == [
        FIXED.file_id,
        OTHER.file_id,
        BAD.file_id,
    ]


def test_a_dismissal_in_the_timeline_covers_failures_up_to_its_time() -> None:
    tl = fold(None, HEADER, BAD.file_id)
    tl = fold(tl, FileDismissed(BAD.file_id, "n", "ops", at(5), at(1)), BAD.file_id)
    assert tl.dismissal is not None and tl.state == "failed"
    tl = fold(tl, replace(HEADER, failed_at=at(6)), BAD.file_id)
    assert tl.dismissal is None  # a later failure opens it again
    assert tl.to_dict()["dismissed"] == {
        "note": "n",
        "by": "ops",
        "at_ms": to_ms(at(5)),
        "covers_ms": to_ms(at(1)),
    }
