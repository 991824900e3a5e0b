"""extract: the NAS scanner (``NasScanner``): when a file is finished, its name, what it ignores."""

from __future__ import annotations

import os
import unicodedata
from pathlib import Path
from typing import Any

import pytest
from tests.support.extract_helpers import (
    DATA,
    HEADER,
    LATIN1,
    ODD,
    drop,
    names,
    with_,
)

from ferry.datasets.fields import FinishedPolicy
from ferry.datasets.spec import DatasetSpec
from ferry.stages.extract.scanner import Candidate, NasScanner

# -- scanner: stable policy (C09) -----------------------------------------------------------


def test_stable_file_is_taken_after_stable_polls_unchanged_scans(
    tmp_path: Path, flights: DatasetSpec
) -> None:
    path = drop(tmp_path, "flights_1.csv", DATA)
    scanner = NasScanner(tmp_path, {"flights": flights})
    assert scanner.scan(0.0) == []  # first sight
    assert scanner.scan(2.0) == []  # unchanged once
    [cand] = scanner.scan(4.0)  # unchanged twice, 4 s = 2 polls x 2.0 s
    st = path.stat()
    assert cand == Candidate(path, flights, "flights/flights_1.csv", len(DATA), st.st_mtime_ns)


def test_stable_needs_the_elapsed_time_not_only_the_poll_count(
    tmp_path: Path, flights: DatasetSpec
) -> None:
    drop(tmp_path, "flights_1.csv", DATA)
    scanner = NasScanner(tmp_path, {"flights": flights})
    for t in (0.0, 0.1, 0.2, 0.3, 3.999):
        assert scanner.scan(t) == [], t
    assert names(scanner.scan(4.0)) == ["flights/flights_1.csv"]


def test_stable_needs_the_poll_count_not_only_the_elapsed_time(
    tmp_path: Path, flights: DatasetSpec
) -> None:
    drop(tmp_path, "flights_1.csv", DATA)
    scanner = NasScanner(tmp_path, {"flights": flights})
    assert scanner.scan(0.0) == []
    assert scanner.scan(100.0) == []  # only one unchanged scan so far
    assert names(scanner.scan(100.5)) == ["flights/flights_1.csv"]


def test_growing_file_is_never_taken_until_it_stops(tmp_path: Path, flights: DatasetSpec) -> None:
    """C09: a slow copy grows between every scan; it is taken only once stable, at full size."""
    path = drop(tmp_path, "flights_big.csv", HEADER)
    scanner = NasScanner(tmp_path, {"flights": flights})
    t = 0.0
    for i in range(10):
        assert scanner.scan(t) == [], i
        with path.open("ab") as fh:
            fh.write(b"2013,1,1,%d\n" % i)
        t += 2.0
    final_size = path.stat().st_size
    assert scanner.scan(t) == []  # first sight of the final size
    assert scanner.scan(t + 2.0) == []
    [cand] = scanner.scan(t + 4.0)
    assert (
        cand.size == final_size == len(HEADER) + sum(len(b"2013,1,1,%d\n" % i) for i in range(10))
    )


def test_mtime_change_at_same_size_restarts_the_wait(tmp_path: Path, flights: DatasetSpec) -> None:
    path = drop(tmp_path, "flights_1.csv", DATA, mtime_ns=1_000_000_000)
    scanner = NasScanner(tmp_path, {"flights": flights})
    assert scanner.scan(0.0) == []
    assert scanner.scan(2.0) == []
    path.write_bytes(DATA.replace(b"517", b"518"))  # rewritten in place, same size
    os.utime(path, ns=(2_000_000_000, 2_000_000_000))
    assert scanner.scan(4.0) == []
    assert scanner.scan(6.0) == []
    [cand] = scanner.scan(8.0)
    assert cand.mtime_ns == 2_000_000_000


def test_hidden_and_non_matching_names_are_ignored(tmp_path: Path, flights: DatasetSpec) -> None:
    every = with_(flights, nas=flights.nas.model_copy(update={"pattern": "*"}))
    for name in (".flights_1.csv.part", ".flights_2.csv"):
        drop(tmp_path, name, DATA)
    drop(tmp_path, "visible.csv", DATA)
    (tmp_path / "flights" / "subdir.csv").mkdir()
    scanner = NasScanner(tmp_path, {"flights": every})
    for t in (0.0, 2.0):
        assert scanner.scan(t) == []
    assert names(scanner.scan(4.0)) == ["flights/visible.csv"]
    # with the real pattern, the visible non-matching name is ignored too
    strict = NasScanner(tmp_path, {"flights": flights})
    assert [strict.scan(t) for t in (0.0, 2.0, 4.0)] == [[], [], []]


def test_missing_dataset_directory_is_skipped(
    tmp_path: Path, flights: DatasetSpec, specs: dict[str, DatasetSpec]
) -> None:
    drop(tmp_path, "flights_1.csv", DATA)  # no weather/ directory at all
    scanner = NasScanner(tmp_path, dict(specs))
    assert [names(scanner.scan(t)) for t in (0.0, 2.0, 4.0)] == [[], [], ["flights/flights_1.csv"]]


def test_forget_makes_the_scanner_wait_again(tmp_path: Path, flights: DatasetSpec) -> None:
    path = drop(tmp_path, "flights_1.csv", DATA)
    scanner = NasScanner(tmp_path, {"flights": flights})
    assert [len(scanner.scan(t)) for t in (0.0, 2.0, 4.0)] == [0, 0, 1]
    assert len(scanner.scan(5.0)) == 1  # not forgotten: still finished
    scanner.forget(path)
    assert [len(scanner.scan(t)) for t in (6.0, 8.0, 10.0)] == [0, 0, 1]


def test_done_file_is_not_taken_again_until_it_changes(
    tmp_path: Path, flights: DatasetSpec
) -> None:
    path = drop(tmp_path, "flights_1.csv", DATA)
    scanner = NasScanner(tmp_path, {"flights": flights})
    [cand] = [c for t in (0.0, 2.0, 4.0) for c in scanner.scan(t)]
    scanner.done(cand)
    assert [scanner.scan(t) for t in (6.0, 8.0, 10.0, 12.0)] == [[], [], [], []]
    with path.open("ab") as fh:
        fh.write(b"2013,1,2,600\n")
    assert [len(scanner.scan(t)) for t in (14.0, 16.0, 18.0)] == [0, 0, 1]


# -- scanner: marker policy -----------------------------------------------------------------


def test_marker_policy_takes_a_file_only_once_its_marker_exists(
    tmp_path: Path, flights: DatasetSpec
) -> None:
    spec = with_(flights, finished=FinishedPolicy(policy="marker", marker_suffix=".done"))
    path = drop(tmp_path, "flights_1.csv", DATA)
    scanner = NasScanner(tmp_path, {"flights": spec})
    assert [scanner.scan(t) for t in (0.0, 10.0, 20.0)] == [[], [], []]
    marker = drop(tmp_path, "flights_1.csv.done", b"")
    [cand] = scanner.scan(20.1)  # at once: no stability wait under the marker policy
    assert (cand.path, cand.marker, cand.relative, cand.size) == (
        path,
        marker,
        "flights/flights_1.csv",
        len(DATA),
    )


def test_marker_file_itself_is_never_a_candidate(tmp_path: Path, flights: DatasetSpec) -> None:
    spec = with_(
        flights,
        nas=flights.nas.model_copy(update={"pattern": "*"}),
        finished=FinishedPolicy(policy="marker", marker_suffix=".ok"),
    )
    drop(tmp_path, "a.csv", DATA)
    drop(tmp_path, "a.csv.ok", b"")
    drop(tmp_path, "b.csv.ok", b"")  # a marker without its file
    scanner = NasScanner(tmp_path, {"flights": spec})
    assert names(scanner.scan(0.0)) == ["flights/a.csv"]


def test_odd_names_are_kept_and_relative_is_nfc(tmp_path: Path, flights: DatasetSpec) -> None:
    nfd, nfc = unicodedata.normalize("NFD", ODD), unicodedata.normalize("NFC", ODD)
    assert nfd != nfc
    p_nfd = drop(tmp_path, nfd, DATA)
    p_nfc = drop(tmp_path, nfc, DATA + b"2013,1,1,600\n")
    scanner = NasScanner(tmp_path, {"flights": flights})
    cands = [c for t in (0.0, 2.0, 4.0) for c in scanner.scan(t)]
    assert sorted((c.path, c.relative, c.size) for c in cands) == sorted(
        [
            (p_nfd, f"flights/{nfc}", len(DATA)),
            (p_nfc, f"flights/{nfc}", len(DATA) + 13),
        ]
    )
    assert all(c.path.exists() for c in cands)  # the on-disk (NFD) name is kept for opening


def test_non_ascii_pattern_matches_an_nfd_name(tmp_path: Path, flights: DatasetSpec) -> None:
    spec = with_(flights, nas=flights.nas.model_copy(update={"pattern": "données_*.csv"}))
    drop(tmp_path, unicodedata.normalize("NFD", "données_1.csv"), DATA)
    scanner = NasScanner(tmp_path, {"flights": spec})
    assert [names(scanner.scan(t)) for t in (0.0, 2.0, 4.0)] == [[], [], ["flights/données_1.csv"]]


# -- scanner: file-system errors and what it ignores (warned once) ----------------------------


def warnings_of(caplog: pytest.LogCaptureFixture) -> list[str]:
    return [
        r.getMessage()
        for r in caplog.records
        if r.name == "ferry.stages.extract.scanner" and r.levelname == "WARNING"
    ]


def test_symlink_loop_is_skipped_and_warned_once(
    tmp_path: Path, flights: DatasetSpec, caplog: pytest.LogCaptureFixture
) -> None:
    drop(tmp_path, "flights_1.csv", DATA)
    loop = tmp_path / "flights" / "flights_loop.csv"
    os.symlink("flights_loop.csv", loop)  # ln -s x.csv x.csv
    scanner = NasScanner(tmp_path, {"flights": flights})
    assert [names(scanner.scan(t)) for t in (0.0, 2.0, 4.0)] == [[], [], ["flights/flights_1.csv"]]
    assert warnings_of(caplog) == [
        f"extract: NAS path {loop} cannot be read ([Errno 40] Too many levels of symbolic "
        "links); skipped"
    ]


def test_plain_file_where_the_dataset_directory_should_be_is_warned_once(
    tmp_path: Path, specs: dict[str, DatasetSpec], caplog: pytest.LogCaptureFixture
) -> None:
    drop(tmp_path, "flights_1.csv", DATA)
    weather = tmp_path / specs["weather"].nas.subdir
    weather.write_bytes(b"not a directory")
    scanner = NasScanner(tmp_path, dict(specs))
    assert [names(scanner.scan(t)) for t in (0.0, 2.0, 4.0)] == [[], [], ["flights/flights_1.csv"]]
    assert warnings_of(caplog) == [
        f"extract: NAS path {weather} should be the directory of dataset 'weather' but is not "
        "a directory; skipped"
    ]


def test_unlistable_dataset_directory_is_warned_once_and_others_flow(
    tmp_path: Path,
    specs: dict[str, DatasetSpec],
    caplog: pytest.LogCaptureFixture,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    import ferry.stages.extract.scanner as scanner_mod

    drop(tmp_path, "flights_1.csv", DATA)
    weather = tmp_path / specs["weather"].nas.subdir
    weather.mkdir()
    real = os.listdir

    def listdir(path: Any) -> list[str]:
        if Path(path) == weather:
            raise PermissionError(13, "Permission denied", str(path))
        return real(path)

    monkeypatch.setattr(scanner_mod.os, "listdir", listdir)
    scanner = NasScanner(tmp_path, dict(specs))
    assert [names(scanner.scan(t)) for t in (0.0, 2.0, 4.0)] == [[], [], ["flights/flights_1.csv"]]
    assert warnings_of(caplog) == [
        f"extract: NAS path {weather} directory of dataset 'weather' cannot be listed "
        "([Errno 13] Permission denied); skipped"
    ]


def test_non_matching_names_and_unknown_root_entries_are_warned_once(
    tmp_path: Path, flights: DatasetSpec, caplog: pytest.LogCaptureFixture
) -> None:
    drop(tmp_path, "flights_1.csv", DATA)
    drop(tmp_path, "Flights_2.CSV", DATA)  # wrong case: the pattern is case-sensitive
    drop(tmp_path, ".hidden.csv", DATA)  # hidden: silent
    drop(tmp_path, "flights_3.csv", DATA, subdir="Flights")  # typed for flights/
    (tmp_path / ".ferry").mkdir()  # Ferry's own: silent
    scanner = NasScanner(tmp_path, {"flights": flights})
    for t in (0.0, 2.0, 4.0, 6.0):
        scanner.scan(t)
    assert warnings_of(caplog) == [
        f"extract: NAS path {tmp_path / 'Flights'} is not a sub-directory any dataset defines "
        "(flights); ignored",
        f"extract: NAS path {tmp_path / 'flights' / 'Flights_2.CSV'} does not match dataset "
        "'flights''s pattern 'flights_*.csv'; ignored",
    ]


def test_a_warning_comes_back_once_the_problem_recurs(
    tmp_path: Path, flights: DatasetSpec, caplog: pytest.LogCaptureFixture
) -> None:
    stray = drop(tmp_path, "notes.txt", b"x")
    scanner = NasScanner(tmp_path, {"flights": flights})
    scanner.scan(0.0)
    scanner.scan(1.0)
    stray.unlink()
    scanner.scan(2.0)
    stray.write_bytes(b"x")
    scanner.scan(3.0)
    scanner.scan(4.0)
    assert len(warnings_of(caplog)) == 2


def test_non_utf8_name_is_a_candidate_with_a_safe_warning_free_scan(
    tmp_path: Path, flights: DatasetSpec, caplog: pytest.LogCaptureFixture
) -> None:
    path = drop(tmp_path, LATIN1, DATA)
    scanner = NasScanner(tmp_path, {"flights": flights})
    [cand] = [c for t in (0.0, 2.0, 4.0) for c in scanner.scan(t)]
    assert (cand.path, cand.relative) == (path, "flights/flights_caf\udce9.csv")
    assert warnings_of(caplog) == []


def test_a_directory_of_an_unparseable_definition_says_its_files_wait(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """Issue 46: the NAS directory of a definition that does not parse was called "not a
    sub-directory any dataset defines … ignored", yet its files flow once the YAML is fixed."""
    from tests.support.paths import REPO_ROOT

    from ferry.datasets.registry import load_definitions
    from ferry.settings import Settings
    from ferry.stages.extract.datasets import apply_definitions

    defs, nas = tmp_path / "datasets", tmp_path / "nas"
    defs.mkdir()
    (defs / "flights.yaml").write_bytes((REPO_ROOT / "datasets" / "flights.yaml").read_bytes())
    (defs / "weather.yaml").write_text("name: weather\nnas: [subdir: weather\n")
    drop(nas, "weather_1.csv", DATA, subdir="weather")
    settings = Settings(paths={"nas_dir": nas, "datasets_dir": defs})
    scanner = NasScanner(nas, {})
    apply_definitions(settings, scanner, load_definitions(defs))
    for t in (0.0, 2.0, 4.0):
        assert scanner.scan(t) == []
    assert warnings_of(caplog) == [
        f"extract: NAS path {nas / 'weather'} is not the sub-directory of a valid dataset "
        "(flights) but may be that of the definition in weather.yaml, which is invalid (cannot "
        "read: YAML: expected ',' or ']', but got '<stream end>' at line 3, column 1): its "
        "files are left in place and taken once that definition is fixed"
    ]
