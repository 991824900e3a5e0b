"""Compaction of a per-file table: partitions holding more than ``max_files`` data files get
their smallest files merged into files of about ``target_bytes`` (docs/hive-layout.md).

Per partition over the limit (:func:`choose`): its files under ``target_bytes`` are merged,
smallest first, packed into outputs of at most ``target_bytes``, until the partition would hold
half the limit. Merging the smallest files first makes each row
rewritten about log2(rows in the partition / rows per batch) times, not once per batch.

Optimistic, so a compaction holds the table's lock only to commit: the merge (one Spark job for
every chosen partition, :mod:`.merge`) reads the chosen files and writes the outputs into the
table's scratch without the lock; then, under the lock, if every merged file is still where
the index put it and every member's entry is unchanged, ONE journal deletes the merged files,
moves the outputs in (``compact-<generation>-<n>.parquet``), writes a sidecar per output naming
the file ids it holds with their rows, and points their entries at it. If a load replaced one
of those files meanwhile, the compaction of that table is dropped and tried again later.
"""

from __future__ import annotations

import contextlib
import logging
from collections.abc import Callable, Iterable, Sequence
from contextlib import AbstractContextManager
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from ferry.tables.index import TableIndex, parallel
from ferry.tables.journal import Catalog, commit, roll_forward
from ferry.tables.merge import Merged, merge_groups
from ferry.tables.model import CompactedFile, FileEntry, Group, Journal
from ferry.tables.paths import (
    compacted_file_name,
    join,
    new_generation,
    owner_of,
)

if TYPE_CHECKING:
    from pyspark.sql import SparkSession
    from pyspark.sql.types import StructType

log = logging.getLogger(__name__)


def choose(files: dict[str, int], max_files: int, target_bytes: int) -> list[list[tuple[str, int]]]:
    """Bins of files to merge in one partition (``files``: ``{name: bytes}``): none while it
    holds at most ``max_files``; else its files under ``target_bytes``, smallest first, packed
    in order into bins of at most ``target_bytes``, until the partition would hold
    ``max_files // 2`` files (a bin of one file is dropped: nothing to merge). A partition whose
    files are near the target size may stay above ``max_files``: its bytes need that many."""
    if len(files) <= max_files:
        return []
    small = sorted(((n, s) for n, s in files.items() if s < target_bytes), key=lambda x: x[1])
    bins: list[list[tuple[str, int]]] = []
    size = 0
    for merged, (name, s) in enumerate(small):
        if len(files) - merged + len(bins) <= max_files // 2:
            break
        if not bins or size + s > target_bytes:
            bins.append([])
            size = 0
        bins[-1].append((name, s))
        size += s
    return [b for b in bins if len(b) > 1]


@dataclass
class CompactReport:
    """Per partition directory: data files before and after; rows merged; ``skipped`` says why
    nothing was committed (another writer changed a merged file's owner meanwhile)."""

    before: dict[str, int] = field(default_factory=dict)
    after: dict[str, int] = field(default_factory=dict)
    rows: int = 0
    skipped: str | None = None


def data_files(index: TableIndex, partition: str) -> dict[str, int]:
    """``{name: bytes}`` of the data files directly in a partition directory (relative)."""
    return {
        n: s
        for n, is_dir, s in index.fs.list_dir(index.abs(partition))
        if not is_dir and not n.startswith((".", "_"))
    }


def compact(
    spark: SparkSession,
    index: TableIndex,
    catalog: Catalog,
    schema: StructType,
    partitions: Iterable[str],
    *,
    max_files: int,
    target_bytes: int,
    lock: Callable[[], AbstractContextManager[None]] = contextlib.nullcontext,
) -> CompactReport:
    """Compact the partition directories ``partitions`` (relative to the table) that hold more
    than ``max_files`` data files; ``lock()`` holds the table's lock (see the module docstring).

    Raises:
        pyspark errors: the merge failed (nothing committed; its scratch is deleted later).
        ferry.tables.locks.TableLocked: the lock could not be had (nothing committed).
    """
    report = CompactReport()
    dirs = list(dict.fromkeys(partitions))
    listed = dict(zip(dirs, parallel(lambda d: data_files(index, d), dirs), strict=True))
    chosen: dict[str, list[list[tuple[str, int]]]] = {}
    for d, files in listed.items():
        bins = choose(files, max_files, target_bytes)
        if bins:
            chosen[d] = bins
            report.before[d] = len(files)
    if not chosen:
        return report
    paths = [join(d, n).lstrip("/") for d, bins in chosen.items() for b in bins for n, _ in b]
    owners = {p: owner_of(p.rsplit("/", 1)[-1]) for p in paths}
    sidecars = index.sidecars(p for p in paths if owners[p] is None)
    members = {p: _members(owners[p], sidecars.get(p)) for p in paths}
    ids = {fid for m in members.values() for fid in m}
    snapshot = index.entries(ids)
    if not _all_indexed(members, snapshot):
        log.warning("%s: data files the index does not know; left alone", index.location)
        members = {p: m for p, m in members.items() if m and _indexed(p, m, snapshot)}
    groups: dict[int, list[str]] = {}
    group_of: dict[int, tuple[str, list[str]]] = {}
    g = 0
    for d, bins in chosen.items():
        for b in bins:
            names = [join(d, n).lstrip("/") for n, _ in b]
            names = [p for p in names if p in members]
            if len(names) > 1:
                groups[g] = [index.abs(p) for p in names]
                group_of[g] = (d, names)
                g += 1
    if not groups:
        return report
    scratch = index.new_scratch()
    merged = merge_groups(spark, schema, groups, scratch, description="ferry compact")
    with lock():
        roll_forward(index, catalog)
        now = index.entries(ids)
        merged_paths = [p for _, names in group_of.values() for p in names]
        if now != snapshot or not all(
            parallel(lambda p: index.fs.exists(index.abs(p)), merged_paths)
        ):
            index.fs.delete_quiet(scratch)
            report.skipped = "files changed while they were merged"
            return report
        journal = _journal(group_of, merged, members, now, scratch)
        commit(index, journal, catalog)
    for d in chosen:
        report.after[d] = len(data_files(index, d))
    report.rows = sum(m.rows for m in merged.values())
    return report


def _members(owner: str | None, sidecar: CompactedFile | None) -> dict[str, int]:
    """The file ids a data file holds rows of: its owner (rows from the owner's entry), the
    members of its sidecar, or none (a file the index does not know: left alone)."""
    if owner is not None:
        return {owner: -1}
    if sidecar is not None:
        return dict(sidecar.members)
    return {}


def _indexed(path: str, members: dict[str, int], entries: dict[str, FileEntry | None]) -> bool:
    return all(
        (e := entries.get(fid)) is not None and path in e.paths for fid in members if fid
    ) and bool(members)


def _all_indexed(members: dict[str, dict[str, int]], entries: dict[str, FileEntry | None]) -> bool:
    return all(_indexed(p, m, entries) for p, m in members.items())


def _journal(
    group_of: dict[int, tuple[str, list[str]]],
    merged: dict[int, Merged],
    members: dict[str, dict[str, int]],
    entries: dict[str, FileEntry | None],
    scratch: str,
) -> Journal:
    gen = new_generation()
    groups: list[Group] = []
    sidecars: dict[str, CompactedFile | None] = {}
    changed: dict[str, FileEntry] = {fid: e for fid, e in entries.items() if e is not None}
    for g, (d, names) in group_of.items():
        out = merged[g]
        new = join(d, compacted_file_name(gen, g)).lstrip("/")
        groups.append(Group(deletes=tuple(names), moves=((out.path, new),)))
        held: dict[str, int] = {}
        for p in names:
            for fid in members[p]:
                e = changed.get(fid)
                if e is None:  # rows of no file (NULL file id) kept as they were
                    held[fid] = held.get(fid, 0) + members[p][fid]
                    continue
                n = e.files.get(p, e.compacted.get(p, 0))
                held[fid] = held.get(fid, 0) + n
                changed[fid] = FileEntry(
                    e.file_id,
                    e.generation,
                    {k: v for k, v in e.files.items() if k != p},
                    {k: v for k, v in e.compacted.items() if k != p}
                    | {new: e.compacted.get(new, 0) + n},
                    e.source_path,
                )
            if not owner_of(p.rsplit("/", 1)[-1]):
                sidecars[p] = None
        if sum(held.values()) != out.rows:
            raise RuntimeError(
                f"compaction of {d}: the merged file holds {out.rows} rows, the index "
                f"{sum(held.values())} for {names}"
            )
        sidecars[new] = CompactedFile(new, held)
    return Journal(
        "compact",
        groups=tuple(groups),
        entries=dict(changed),
        sidecars=sidecars,
        cleanup=(scratch,),
    )


def partitions_over(index: TableIndex, partitions: Sequence[str], max_files: int) -> list[str]:
    """The partition directories among ``partitions`` holding more than ``max_files`` files."""
    counts = parallel(lambda d: len(data_files(index, d)), list(partitions))
    return [d for d, n in zip(partitions, counts, strict=True) if n > max_files]
