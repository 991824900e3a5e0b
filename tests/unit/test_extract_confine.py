"""extract: NAS confinement (docs/field-cases.md C15) and capped quotes in reasons (C17).

Each refusal kind with its exact reason code, the refused entry moved away as a link (its target
untouched), and a target's bytes nowhere: not opened, not in an event, a log line or HDFS.
"""

from __future__ import annotations

import builtins
import dataclasses
import os
from pathlib import Path
from typing import Any

import pytest
from tests.support.extract_helpers import DATA, HEADER, drop, failed_events, service, take
from tests.support.fakes import FakeProducer

from ferry.core.events import FileExtracted
from ferry.core.wire.avro import EventCodec
from ferry.datasets.precheck import QUOTE_CHARS, check_header, quoted
from ferry.datasets.spec import DatasetSpec
from ferry.stages.extract import confine
from ferry.stages.extract.handlers import SourceChanged, extract_file
from ferry.stages.extract.scanner import NasScanner
from ferry.stages.extract.service import ExtractService

#: Content of a file outside the NAS root that a link tries to make extract read.
SECRET = b"root-only-secret-7f3a9c\n" + b"x" * 200 + b"\n"


def outside_file(tmp_path: Path) -> Path:
    target = tmp_path / "outside" / "hostname"
    target.parent.mkdir()
    target.write_bytes(SECRET)
    return target


def link(nas: Path, name: str, to: str | Path) -> Path:
    path = nas / "flights" / name
    path.parent.mkdir(parents=True, exist_ok=True)
    os.symlink(to, path)
    return path


def refuse_all(svc: ExtractService) -> list[tuple[str, str]]:
    """One ``run_once`` of ``svc``; the (reason, error) of every FileFailed it published."""
    svc.run_once()
    producer = svc.producer
    assert isinstance(producer, FakeProducer)
    return [(e.reason, e.error) for e in failed_events(svc.codec, producer)]


def test_link_outside_the_nas_root_is_refused_and_moved_away_as_a_link(
    tmp_path: Path, flights: DatasetSpec, codec: EventCodec
) -> None:
    target = outside_file(tmp_path)
    svc, hdfs = service(tmp_path, flights, FakeProducer(), codec)
    path = link(tmp_path / "nas", "flights_2016-01-12.csv", target)
    assert refuse_all(svc) == [
        (
            "symlink_outside_nas",
            "flights/flights_2016-01-12.csv: is a symbolic link leading outside the NAS root "
            "(symlink_outside_nas); not landed",
        )
    ]
    moved = tmp_path / "nas" / ".ferry" / "failed" / "flights" / "flights_2016-01-12.csv"
    assert (os.path.lexists(path), moved.is_symlink(), os.readlink(moved)) == (
        False,
        True,
        str(target),
    )
    assert (target.read_bytes(), hdfs.files, svc.stats.by_reason) == (
        SECRET,
        {},
        {"symlink_outside_nas": 1},
    )


def test_link_loop_is_refused_as_symlink_loop(
    tmp_path: Path, flights: DatasetSpec, codec: EventCodec
) -> None:
    svc, hdfs = service(tmp_path, flights, FakeProducer(), codec)
    link(tmp_path / "nas", "flights_a.csv", "flights_b.csv")
    link(tmp_path / "nas", "flights_b.csv", "flights_a.csv")
    assert refuse_all(svc) == [
        (
            "symlink_loop",
            f"flights/{name}: cannot be read ([Errno 40] Too many levels of symbolic links); "
            "not landed",
        )
        for name in ("flights_a.csv", "flights_b.csv")
    ]
    assert hdfs.files == {}
    assert sorted(os.listdir(tmp_path / "nas" / ".ferry" / "failed" / "flights")) == [
        "flights_a.csv",
        "flights_b.csv",
    ]


def test_link_inside_the_nas_root_is_refused_by_default(
    tmp_path: Path, flights: DatasetSpec, codec: EventCodec
) -> None:
    svc, hdfs = service(tmp_path, flights, FakeProducer(), codec)
    nas = tmp_path / "nas"
    drop(nas, "data.txt", DATA, subdir="elsewhere")
    link(nas, "flights_1.csv", nas / "elsewhere" / "data.txt")
    assert refuse_all(svc) == [
        (
            "symlink_refused",
            "flights/flights_1.csv: is a symbolic link (inside the NAS root) and "
            "extract.follow_symlinks is off (symlink_refused); not landed",
        )
    ]
    assert hdfs.files == {}


def test_link_inside_the_nas_root_is_followed_when_allowed(
    tmp_path: Path, flights: DatasetSpec, codec: EventCodec
) -> None:
    producer = FakeProducer()
    svc, hdfs = service(tmp_path, flights, producer, codec)
    nas = tmp_path / "nas"
    drop(nas, "data.txt", DATA, subdir="elsewhere")
    link(nas, "flights_1.csv", "../elsewhere/data.txt")
    svc.scanner = NasScanner(nas, {"flights": flights}, follow_symlinks=True)
    cand = take(svc)
    assert (cand.relative, cand.source) == ("flights/flights_1.csv", nas / "elsewhere" / "data.txt")
    svc.handle(cand)
    [(topic, _, value)] = producer.acked
    ev = codec.decode(value)
    assert isinstance(ev, FileExtracted)
    assert (topic, ev.manifest.source_path, list(hdfs.files.values())) == (
        "unit.extracted",
        "flights/flights_1.csv",
        [DATA],
    )
    # the link is archived, the file it points to stays where it is
    assert os.path.islink(nas / ".ferry" / "archive" / "flights" / "flights_1.csv")
    assert (nas / "elsewhere" / "data.txt").read_bytes() == DATA


def test_followed_link_leaving_the_root_is_still_refused(
    tmp_path: Path, flights: DatasetSpec, codec: EventCodec
) -> None:
    svc, hdfs = service(tmp_path, flights, FakeProducer(), codec)
    nas = tmp_path / "nas"
    link(nas, "flights_1.csv", outside_file(tmp_path))
    svc.scanner = NasScanner(nas, {"flights": flights}, follow_symlinks=True)
    assert [r for r, _ in refuse_all(svc)] == ["symlink_outside_nas"]
    assert hdfs.files == {}


def test_hard_linked_file_is_refused_when_the_setting_asks(
    tmp_path: Path, flights: DatasetSpec, codec: EventCodec
) -> None:
    svc, hdfs = service(tmp_path, flights, FakeProducer(), codec)
    nas = tmp_path / "nas"
    (nas / "flights").mkdir(parents=True)
    os.link(outside_file(tmp_path), nas / "flights" / "flights_1.csv")
    svc.scanner = NasScanner(nas, {"flights": flights}, refuse_hardlinks=True)
    assert refuse_all(svc) == [
        (
            "hardlink_refused",
            "flights/flights_1.csv: has 2 hard links (its content is shared with another path) "
            "and extract.refuse_hardlinks is on (hardlink_refused); not landed",
        )
    ]
    assert hdfs.files == {}


def test_hard_linked_file_flows_by_default(
    tmp_path: Path, flights: DatasetSpec, codec: EventCodec
) -> None:
    producer = FakeProducer()
    svc, hdfs = service(tmp_path, flights, producer, codec)
    other = drop(tmp_path, "copy.csv", DATA, subdir="other")
    (tmp_path / "nas" / "flights").mkdir(parents=True)
    os.link(other, tmp_path / "nas" / "flights" / "flights_1.csv")
    svc.handle(take(svc))
    assert list(hdfs.files.values()) == [DATA]


def test_a_refused_targets_bytes_are_never_opened_nor_seen_anywhere(
    tmp_path: Path,
    flights: DatasetSpec,
    codec: EventCodec,
    monkeypatch: pytest.MonkeyPatch,
    caplog: pytest.LogCaptureFixture,
) -> None:
    target = outside_file(tmp_path)
    opened: list[str] = []
    real_os_open, real_open = os.open, builtins.open

    def spy_os_open(path: Any, *a: Any, **kw: Any) -> int:
        opened.append(os.path.realpath(path))
        return real_os_open(path, *a, **kw)

    def spy_open(file: Any, *a: Any, **kw: Any) -> Any:
        if isinstance(file, str | bytes | os.PathLike):
            opened.append(os.path.realpath(file))
        return real_open(file, *a, **kw)

    monkeypatch.setattr(os, "open", spy_os_open)
    monkeypatch.setattr(builtins, "open", spy_open)
    producer = FakeProducer()
    svc, hdfs = service(tmp_path, flights, producer, codec)
    nas = tmp_path / "nas"
    for name in ("flights_2016-01-12.csv", "flights_2016-01-13.csv"):
        link(nas, name, target)
    os.link(target, nas / "flights" / "flights_hard.csv")
    svc.scanner = NasScanner(nas, {"flights": flights}, refuse_hardlinks=True)
    svc.deps = dataclasses.replace(svc.deps, refuse_hardlinks=True)
    for _ in range(3):
        svc.run_once()
    assert sorted(svc.stats.by_reason.items()) == [
        ("hardlink_refused", 1),
        ("symlink_outside_nas", 2),
    ]
    assert str(target) not in opened
    needle = SECRET[:12]
    assert [v for _, _, v in producer.acked if needle in v] == []
    assert needle.decode() not in caplog.text
    assert hdfs.files == {}


def test_open_confined_sees_a_swap_after_the_scan(
    tmp_path: Path, flights: DatasetSpec, codec: EventCodec
) -> None:
    """The race: the scanner judged a regular file; by the time it is opened it is a link, or
    another file. Nothing is read; the next scan judges the entry again."""
    nas = tmp_path / "nas"
    path = drop(nas, "flights_1.csv", HEADER + b"1,2,3,4\n")
    svc, hdfs = service(tmp_path, flights, FakeProducer(), codec)
    cand = take(svc)
    path.rename(path.with_name(".scanned"))  # kept: the new file cannot reuse its inode
    os.symlink(outside_file(tmp_path), path)
    with pytest.raises(SourceChanged, match="became a symbolic link after the scan"):
        extract_file(cand, svc.deps)
    path.unlink()
    path.write_bytes(HEADER + b"1,2,3,4\n")  # same bytes and mtime, another inode
    os.utime(path, ns=(cand.mtime_ns, cand.mtime_ns))
    with pytest.raises(SourceChanged, match="was replaced by another file after the scan"):
        extract_file(cand, svc.deps)
    assert hdfs.files == {}


def test_open_confined_refuses_a_descriptor_outside_the_root(tmp_path: Path) -> None:
    target = outside_file(tmp_path)
    root = tmp_path / "nas"
    root.mkdir()
    with pytest.raises(confine.Refused) as exc:
        confine.open_confined(target, root, identity=None)
    assert exc.value.reason == "symlink_outside_nas"


def test_dataset_directory_leading_outside_the_root_is_skipped(
    tmp_path: Path, flights: DatasetSpec, caplog: pytest.LogCaptureFixture
) -> None:
    nas = tmp_path / "nas"
    nas.mkdir()
    elsewhere = tmp_path / "elsewhere"
    drop(tmp_path, "flights_1.csv", DATA, subdir="elsewhere")
    os.symlink(elsewhere, nas / "flights")
    scanner = NasScanner(nas, {"flights": flights})
    assert [scanner.scan(t) for t in (0.0, 2.0, 4.0)] == [[], [], []]
    assert scanner.take_refusals() == []
    assert [r.getMessage() for r in caplog.records if r.levelname == "WARNING"] == [
        f"extract: NAS path {nas / 'flights'} leads outside the NAS root (a symbolic link); skipped"
    ]


# -- C17: a reason quotes at most QUOTE_CHARS characters of a file ------------------------------


def test_quoted_cuts_long_text_and_hides_control_characters() -> None:
    assert QUOTE_CHARS == 40
    assert quoted("yr") == "'yr'"
    assert quoted("a\tb") == "'a?b'"
    assert quoted("x" * 41) == repr("x" * 40 + "…")


def test_header_mismatch_quotes_at_most_a_short_prefix_of_the_file(flights: DatasetSpec) -> None:
    first_line = "root:x:0:0:root:/root:/bin/bash-" + "s" * 500
    problem = check_header(first_line.encode() + b"\n1,2\n", flights)
    assert problem == (
        f"header column 1 is {'root:x:0:0:root:/root:/bin/bash-ssssssss…'!r}, definition "
        "'flights' expects 'year'"
    )
    cols = [c.name for c in flights.columns]
    extra = ",".join(cols + ["k" * 30, "secret" * 20]).encode()
    assert check_header(extra + b"\n", flights) == (
        f"header has 2 extra column(s) ({('k' * 30 + ',secretsec…')!r}) not in definition 'flights'"
    )
    short = ",".join(cols + ["z"]).encode()
    assert check_header(short + b"\n", flights) == (
        "header has extra column(s) ['z'] not in definition 'flights'"
    )
