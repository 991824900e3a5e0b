"""Recovery in bulk (issue 47, ``ferry.ops.bulk``): the exact entries each filter combination
selects; extract's NAS files moved back from ``.ferry/failed/`` (found by their moved names,
never over another file, finished when a first move was interrupted); the plan of a mixed
selection; the CLI's dry run."""

from __future__ import annotations

import os
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
from tests.support.factories import failed, numbered
from typer.testing import CliRunner

from ferry.core.events import FileExtracted, FileFailed
from ferry.core.timeline import to_ms
from ferry.core.wire.avro import EventCodec
from ferry.ops import bulk, quarantine_cli
from ferry.ops.bulk import (
    Selection,
    failed_copy,
    move_back,
    plan_bulk,
    rename_noreplace,
    run_bulk,
    select,
)
from ferry.ops.quarantine import QuarantineEntry, QuarantineRead
from ferry.settings import Settings, get_settings

T0 = datetime(2026, 12, 6, 6, 0, tzinfo=UTC)


def at(minutes: float) -> datetime:
    return T0 + timedelta(minutes=minutes)


def entry(key: str, f: FileFailed, offset: int, **kw: Any) -> QuarantineEntry:
    return QuarantineEntry(key, f, 1, 0, offset, to_ms(f.failed_at), **kw)


F = [numbered("flights", n, f"flights_{n}.csv") for n in range(4)]
ORD = [numbered("orders", n, f"orders_{n}.csv") for n in range(2)]
Q = "quota_exceeded"
ENTRIES = [
    entry("f0", failed("extract", F[0], reason="hdfs_rejected", at=at(1)), 0),
    entry("f1", failed("extract", F[1], reason="hdfs_rejected", at=at(2)), 1),
    entry("f2", failed("transform", F[2], reason="hdfs_rejected", at=at(3)), 2),
    entry("o0", failed("load", ORD[0], reason=Q, at=at(4)), 3),
    entry("o1", failed("extract", ORD[1], reason="hdfs_rejected", at=at(20)), 4),
    entry("f3", failed("extract", F[3], reason="hdfs_rejected", at=at(5)), 5, loaded_ms=1),
    entry("e", failed("extract", None, reason="empty_file", at=at(6), dataset="flights"), 6),
]
READ = QuarantineRead(tuple(ENTRIES), ())


@pytest.mark.parametrize(
    ("selection", "keys"),
    [
        (Selection(reasons=("hdfs_rejected",)), ["f0", "f1", "f2", "o1"]),
        (Selection(stages=("extract",)), ["f0", "f1", "o1"]),
        (Selection(datasets=("orders",)), ["o0", "o1"]),
        (
            Selection(reasons=("hdfs_rejected",), stages=("extract",), datasets=("flights",)),
            ["f0", "f1"],
        ),
        (Selection(since=at(2), until=at(4)), ["f1", "f2"]),
        (Selection(since=at(2)), ["f1", "f2", "o0", "o1"]),
        (Selection(until=at(2)), ["f0"]),
        (Selection(reasons=(Q, "hdfs_rejected"), datasets=("orders",), until=at(10)), ["o0"]),
        (Selection(stages=("transfer",)), []),
    ],
)
def test_selection_is_exactly_the_open_entries_every_filter_matches(
    selection: Selection, keys: list[str]
) -> None:
    """Loaded (f3) and empty (e) entries are never selected; ``until`` is exclusive."""
    assert [e.key for e in select(READ, selection)] == keys


# -- the NAS ---------------------------------------------------------------------------------


def drop(nas: Path, rel: str, data: bytes, mtime: datetime | None = None) -> Path:
    path = nas / rel
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(data)
    if mtime is not None:
        os.utime(path, (mtime.timestamp(), mtime.timestamp()))
    return path


def extract_failure(n: int, data: bytes, **kw: Any) -> FileFailed:
    m = numbered("flights", n, f"flights_{n}.csv", size_bytes=len(data), source_mtime=T0)
    return failed("extract", m, reason="hdfs_rejected", at=at(1), **kw)


def test_the_copy_is_found_by_its_moved_names_and_its_size_and_mtime(tmp_path: Path) -> None:
    f = extract_failure(1, b"a,b\n1,2\n")
    tag = f.file_id[:12] if f.file_id else ""
    # the plain name holds another version of that name (another size); the tagged one is it
    drop(tmp_path, ".ferry/failed/flights/flights_1.csv", b"a,b\n", T0)
    mine = drop(tmp_path, f".ferry/failed/flights/flights_1.{tag}.csv", b"a,b\n1,2\n", T0)
    assert failed_copy(tmp_path, f) == mine
    mine.unlink()
    assert failed_copy(tmp_path, f) is None


def test_a_copy_without_file_id_is_its_name_or_the_time_tag_nearest_its_failure(
    tmp_path: Path,
) -> None:
    f = failed(
        "extract",
        None,
        reason="bad_file_name",
        at=at(1),
        dataset="flights",
        source_path="flights/x.csv",
    )
    far = drop(tmp_path, ".ferry/failed/flights/x.20261206T070000000000Z.csv", b"1")
    near = drop(tmp_path, ".ferry/failed/flights/x.20261206T060105000000Z.csv", b"2")
    assert failed_copy(tmp_path, f) == near
    near.unlink()
    assert failed_copy(tmp_path, f) is None  # 59 minutes away: not this failure's
    plain = drop(tmp_path, ".ferry/failed/flights/x.csv", b"3")
    assert (failed_copy(tmp_path, f), far.exists()) == (plain, True)


def test_move_back_puts_the_whole_file_where_it_was_dropped(tmp_path: Path) -> None:
    src = drop(tmp_path, ".ferry/failed/flights/a.csv", b"rows\n")
    dest = tmp_path / "flights" / "a.csv"
    assert move_back(src, dest) == "moved"
    assert (dest.read_bytes(), src.exists(), dest.stat().st_nlink) == (b"rows\n", False, 1)
    assert move_back(src, dest) == "gone"


def test_move_back_never_overwrites_a_file_dropped_since(tmp_path: Path) -> None:
    src = drop(tmp_path, ".ferry/failed/flights/a.csv", b"old\n")
    dest = drop(tmp_path, "flights/a.csv", b"new, re-dropped\n")
    assert move_back(src, dest) == "name taken"
    assert (dest.read_bytes(), src.read_bytes()) == (b"new, re-dropped\n", b"old\n")


def test_an_interrupted_move_back_is_finished_by_the_next_run(tmp_path: Path) -> None:
    """Interrupted after the link, before the unlink: both names hold the one whole file."""
    src = drop(tmp_path, ".ferry/failed/flights/a.csv", b"rows\n")
    dest = tmp_path / "flights" / "a.csv"
    dest.parent.mkdir()
    os.link(src, dest)
    assert move_back(src, dest) == "moved"
    assert (dest.read_bytes(), src.exists(), dest.stat().st_nlink) == (b"rows\n", False, 1)


def test_the_rename_never_replaces_a_file(tmp_path: Path) -> None:
    src = drop(tmp_path, ".ferry/failed/flights/a.csv", b"old\n")
    dest = drop(tmp_path, "flights/a.csv", b"new\n")
    with pytest.raises(FileExistsError):
        rename_noreplace(src, dest)
    assert (src.read_bytes(), dest.read_bytes()) == (b"old\n", b"new\n")
    dest.unlink()
    assert rename_noreplace(src, dest) is True  # this file system can (else: link, unlink)
    assert (dest.read_bytes(), src.exists()) == (b"old\n", False)


def test_where_renames_cannot_refuse_to_replace_a_link_then_unlink_moves_it(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(bulk, "rename_noreplace", lambda src, dst: False)
    src = drop(tmp_path, ".ferry/failed/flights/a.csv", b"rows\n")
    dest = tmp_path / "flights" / "a.csv"
    assert move_back(src, dest) == "moved"
    assert (dest.read_bytes(), src.exists(), dest.stat().st_nlink) == (b"rows\n", False, 1)
    taken = drop(tmp_path, ".ferry/failed/flights/b.csv", b"x")
    assert move_back(taken, dest) == "name taken"
    assert (dest.read_bytes(), taken.read_bytes()) == (b"rows\n", b"x")


def test_without_hard_links_the_move_is_a_rename_once_the_name_is_free(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    def no_links(*a: Any, **kw: Any) -> None:
        raise PermissionError(1, "Operation not permitted")

    monkeypatch.setattr(bulk, "rename_noreplace", lambda src, dst: False)
    monkeypatch.setattr(os, "link", no_links)
    src = drop(tmp_path, ".ferry/failed/flights/a.csv", b"rows\n")
    taken = drop(tmp_path, "flights/b.csv", b"other\n")
    assert move_back(drop(tmp_path, ".ferry/failed/flights/b.csv", b"x"), taken) == "name taken"
    assert move_back(src, tmp_path / "flights" / "a.csv") == "moved"
    assert ((tmp_path / "flights" / "a.csv").read_bytes(), src.exists()) == (b"rows\n", False)


# -- a mixed selection: plan, dry run, run -----------------------------------------------------


def nas_settings(nas: Path) -> Settings:
    base = get_settings()
    return base.model_copy(
        update={
            "paths": base.paths.model_copy(update={"nas_dir": nas}),
            "kafka": base.kafka.model_copy(update={"topic_prefix": "unit"}),
        }
    )


def mixed(nas: Path) -> list[QuarantineEntry]:
    """extract with its copy; extract whose name was re-dropped; extract whose copy is gone;
    transform (re-emit); a stranger's bytes (no manifest: skipped without --force)."""
    out = []
    for n, redrop in ((1, False), (2, True), (3, None)):
        data = f"h\n{n}\n".encode()
        f = extract_failure(n, data)
        if redrop is not None:
            tag = f.file_id[:12] if f.file_id else ""
            drop(nas, f".ferry/failed/flights/flights_{n}.{tag}.csv", data, T0)
            drop(nas, f".ferry/failed/flights/flights_{n}.csv", b"another version", T0)
        if redrop:
            drop(nas, f"flights/flights_{n}.csv", b"re-dropped")
        out.append(entry(f"x{n}", f, n))
    out.append(entry("t", failed("transform", F[2], reason="hdfs_rejected", at=at(3)), 4))
    stranger = failed(
        "transform", None, reason="undecodable", raw_value=b"x", source_topic="unit.extracted"
    )
    out.append(entry("unit.extracted-0-9", stranger, 5))
    return out


def test_the_plan_of_a_mixed_selection_and_its_run(tmp_path: Path, codec: EventCodec) -> None:
    s = nas_settings(tmp_path)
    items = plan_bulk(mixed(tmp_path), s, codec)
    assert [(i.entry.key, i.action, i.outcome) for i in items] == [
        ("x1", "move back", "would"),
        ("x2", "skip", "name taken in the drop directory"),
        ("x3", "skip", "no copy under .ferry/failed/ (removed by gc?)"),
        ("t", "re-emit", "would"),
        ("unit.extracted-0-9", "skip", items[4].outcome),
    ]
    assert items[4].outcome.endswith("release it raw with --force")
    assert items[0].dest == tmp_path / "flights" / "flights_1.csv"
    release = items[3].release
    assert release is not None and release.record.topic == "unit.extracted"
    assert codec.decode(release.record.value) == FileExtracted(F[2])
    # run without the broker: only the NAS part (the re-emit is checked by the plan above)
    done = run_bulk([i for i in items if i.action != "re-emit"], s)
    assert [(i.entry.key, i.outcome) for i in done] == [
        ("x1", "done"),
        ("x2", "name taken in the drop directory"),
        ("x3", "no copy under .ferry/failed/ (removed by gc?)"),
        ("unit.extracted-0-9", items[4].outcome),
    ]
    assert (tmp_path / "flights" / "flights_1.csv").read_bytes() == b"h\n1\n"
    assert (tmp_path / "flights" / "flights_2.csv").read_bytes() == b"re-dropped"


def test_the_dry_run_lists_what_would_move_and_moves_nothing(
    tmp_path: Path, codec: EventCodec, monkeypatch: pytest.MonkeyPatch
) -> None:
    s = nas_settings(tmp_path)
    read = QuarantineRead(tuple(mixed(tmp_path)), ())
    monkeypatch.setattr(quarantine_cli, "_load", lambda: (read, s, codec))
    before = sorted(p.relative_to(tmp_path) for p in tmp_path.rglob("*"))
    got = CliRunner().invoke(
        quarantine_cli.app,
        ["release", "--stage", "extract", "--reason", "hdfs_rejected", "--dry-run"],
        env={"COLUMNS": "250"},
    )
    assert sorted(p.relative_to(tmp_path) for p in tmp_path.rglob("*")) == before
    assert got.exit_code == 1  # two of three selected entries cannot move
    lines = got.output.splitlines()
    assert "quarantine release (dry run: nothing moved)" in lines[0]
    rows = [ln for ln in lines if ln.startswith("│ x")]
    assert [r.split("│")[1].strip() for r in rows] == ["x1", "x2", "x3"]
    assert [r.split("│")[-2].strip() for r in rows] == [
        "would",
        "name taken in the drop directory",
        "no copy under .ferry/failed/ (removed by gc?)",
    ]
    assert lines[-1] == "1 of 3 selected entries would be released"


def test_release_without_ids_or_filters_is_refused(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(quarantine_cli, "_load", lambda: pytest.fail("must not read"))
    got = CliRunner().invoke(quarantine_cli.app, ["release"])
    assert got.exit_code == 2
    got = CliRunner().invoke(quarantine_cli.app, ["release", "x", "--stage", "load"])
    assert got.exit_code == 2


def test_a_marker_file_follows_its_file_back(
    tmp_path: Path, codec: EventCodec, monkeypatch: pytest.MonkeyPatch
) -> None:
    """``finished.policy: marker``: the marker (named after the file's moved name) goes back
    after the file, named after the file's NAS name."""
    monkeypatch.setattr(bulk, "marker_suffixes", lambda settings: {"flights": ".done"})
    data = b"h\n1\n"
    f = extract_failure(1, data)
    tag = f.file_id[:12] if f.file_id else ""
    drop(tmp_path, f".ferry/failed/flights/flights_1.{tag}.csv", data, T0)
    drop(tmp_path, f".ferry/failed/flights/flights_1.{tag}.csv.done", b"", T0)
    [item] = plan_bulk([entry("x1", f, 1)], nas_settings(tmp_path), codec)
    assert item.marker is not None and item.marker[1] == tmp_path / "flights/flights_1.csv.done"
    [done] = run_bulk([item], nas_settings(tmp_path))
    assert done.outcome == "done"
    assert sorted(str(p.relative_to(tmp_path)) for p in tmp_path.rglob("*") if p.is_file()) == [
        "flights/flights_1.csv",
        "flights/flights_1.csv.done",
    ]
