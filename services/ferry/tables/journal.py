"""Applying a change of a per-file table so that a crash at any point is repaired by applying
it again (a redo log; docs/hive-layout.md, "What a crash leaves").

A :class:`~ferry.tables.model.Journal` record is written (whole, by rename) before
anything of the change is done, and deleted after all of it is. :func:`apply` does, in order:

1. register the new partitions in the metastore (one ``ADD IF NOT EXISTS`` call);
2. per group: delete its old data files, then move its new ones in (a rename each, into the
   directory the metastore made when it registered the partition; one missing is made then);
3. write and remove the index records;
4. drop the partitions the change left without a data file (one call);
5. delete the scratch and staged directories the change emptied, then the record.

Every step is idempotent: a delete of what is gone, a move whose source is gone and whose
target is there, a record written again, ``IF NOT EXISTS``/``IF EXISTS``. So every pending
record is applied again, oldest first, before the next change of the table
(:func:`roll_forward`), under the table's lock; the redelivered batch of a load that crashed
finds its files loaded. A move whose source and target are both gone (someone deleted the
staged file) cannot be finished: it is logged, and the index records drop that data file and
its rows, so the load's row reconciliation reports the loss instead of hiding it.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

from ferry.core.failpoints import hit
from ferry.errors import TransientError
from ferry.tables.index import TableIndex, parallel
from ferry.tables.model import CompactedFile, FileEntry, Journal
from ferry.tables.paths import parent, parse_partition_dir

log = logging.getLogger(__name__)

#: Partition values as strings (``None``: the default partition), in partition-column order.
Values = tuple[str | None, ...]


@dataclass(frozen=True)
class Catalog:
    """The metastore side of a table: its partition columns and two calls, each ONE metastore
    statement for any number of partitions (:func:`ferry.tables.hive.add_partitions`,
    :func:`ferry.tables.hive.drop_partitions`)."""

    columns: tuple[str, ...]
    add: Callable[[Sequence[Values]], None]
    drop: Callable[[Sequence[Values]], None]


@dataclass
class Applied:
    """What applying a journal did: data files deleted and moved, partitions dropped, and the
    relative targets that could not be moved (source and target both gone)."""

    deleted: int = 0
    moved: int = 0
    dropped: list[Values] = field(default_factory=list)
    lost: list[str] = field(default_factory=list)


def _move(index: TableIndex, src: str, dst_rel: str) -> bool:
    """One move, idempotent; ``False`` when source and target are both gone.

    One NameNode call when the target's directory exists, as it does for a partition the
    metastore knows (it makes a partition's directory when it registers the partition, which
    :func:`apply` does first); a directory missing all the same (removed by hand) is made when the
    move fails for it, instead of a ``mkdirs`` before every move (issue 45: one call per
    partition a batch touches, on every batch)."""
    fs, dst = index.fs, index.abs(dst_rel)
    try:
        fs.move(src, dst)
        return True
    except TransientError:
        src_there, dst_there = fs.exists(src), fs.exists(dst)
        if dst_there and not src_there:
            return True  # moved by the attempt that crashed
        if src_there and dst_there:  # an earlier copy of the same name: the journal's is newer
            fs.delete_quiet(dst, recursive=False)
            fs.move(src, dst)
            return True
        if not src_there and not dst_there:
            return False
        fs.mkdirs(index.abs(parent(dst_rel)))  # the target's directory is missing
        fs.move(src, dst)
        return True


def _replace(index: TableIndex, src: str, dst_rel: str) -> bool:
    """One replace (rename onto the existing file), idempotent; ``False`` when source and
    target are both gone."""
    fs, dst = index.fs, index.abs(dst_rel)
    try:
        fs.replace(src, dst)
        return True
    except TransientError:
        src_there, dst_there = fs.exists(src), fs.exists(dst)
        if dst_there and not src_there:
            return True  # replaced by the attempt that crashed
        if src_there and not dst_there:  # removed meanwhile: the journal's is the one to keep
            fs.move(src, dst)
            return True
        if not src_there and not dst_there:
            return False
        raise


def apply(index: TableIndex, journal: Journal, name: str, catalog: Catalog) -> Applied:
    """Carry out journal record ``name`` (already written by :meth:`TableIndex.write_journal`)
    on the table; see the module docstring. Safe to call again after a crash at any point.

    Raises:
        TransientError: an HDFS call failed (the record stays; the next attempt re-applies it).
        ferry.core.failpoints.FailpointHit: a test armed a fail point with ``raise``.
    """
    done = Applied()
    if journal.add_partitions and catalog.columns:
        catalog.add(list(journal.add_partitions))
    removed = False  # old rows of the change are out (deleted, or replaced without them)
    for group in journal.groups:
        done.deleted += sum(
            parallel(lambda p: index.fs.delete_quiet(index.abs(p), recursive=False), group.deletes)
        )
        removed = removed or bool(group.deletes)
        if removed and group.moves:
            hit("filetable.removed")
        moves = list(group.moves)
        # the first move alone (a test may stop the process right after it), then the rest
        for k, chunk in enumerate((moves[:1], moves[1:])):
            for (src, dst), ok in zip(
                chunk, parallel(lambda m: _move(index, *m), chunk), strict=True
            ):
                if ok:
                    done.moved += 1
                else:
                    log.error("%s: cannot move %s to %s: both are gone", index.location, src, dst)
                    done.lost.append(dst)
            if k == 0 and len(moves) > 1:
                hit("filetable.moving")
        for (src, dst), ok in zip(
            group.replaces,
            parallel(lambda m: _replace(index, *m), list(group.replaces)),
            strict=True,
        ):
            if ok:
                done.moved += 1
            else:
                log.error("%s: cannot replace %s by %s: both are gone", index.location, dst, src)
                done.lost.append(dst)
        removed = removed or bool(group.replaces)
    hit("filetable.applied")
    entries, sidecars = _without_lost(journal, set(done.lost))
    parallel(lambda kv: index.put_entry(*kv), list(entries.items()))
    parallel(lambda kv: index.put_sidecar(*kv), list(sidecars.items()))
    if journal.drop_if_empty and catalog.columns:
        empty = [
            d
            for d, files in zip(
                journal.drop_if_empty, _data_files(index, journal.drop_if_empty), strict=True
            )
            if not files
        ]
        done.dropped = [parse_partition_dir(catalog.columns, d) for d in empty]
        if done.dropped:
            catalog.drop(done.dropped)
    parallel(lambda d: index.fs.delete_quiet(d), list(journal.cleanup))
    index.remove_journal(name)
    return done


def _data_files(index: TableIndex, dirs: Sequence[str]) -> list[list[str]]:
    return parallel(
        lambda d: [
            n
            for n, is_dir, _ in index.fs.list_dir(index.abs(d))
            if not is_dir and not n.startswith((".", "_"))
        ],
        list(dirs),
    )


def _without_lost(
    journal: Journal, lost: set[str]
) -> tuple[dict[str, FileEntry | None], dict[str, CompactedFile | None]]:
    """The journal's index records with every lost data file (and its rows) taken out."""
    if not lost:
        return dict(journal.entries), dict(journal.sidecars)
    entries: dict[str, FileEntry | None] = {}
    for fid, e in journal.entries.items():
        if e is not None and e.paths & lost:
            e = FileEntry(
                e.file_id,
                e.generation,
                {p: n for p, n in e.files.items() if p not in lost},
                {p: n for p, n in e.compacted.items() if p not in lost},
                e.source_path,
            )
        entries[fid] = e
    sidecars = {p: (None if p in lost else s) for p, s in journal.sidecars.items()}
    return entries, sidecars


def commit(index: TableIndex, journal: Journal, catalog: Catalog) -> Applied:
    """Write ``journal`` and apply it (the one way a change reaches the table)."""
    return apply(index, journal, index.write_journal(journal), catalog)


def roll_forward(index: TableIndex, catalog: Catalog) -> list[Applied]:
    """Apply every pending journal record of the table, oldest first, then delete scratch
    directories no record names (older than :data:`~ferry.tables.index.
    SCRATCH_TTL_S`). Call under the table's lock before changing the table."""
    out = []
    keep: set[str] = set()
    for name in index.journal_names():
        journal = index.read_journal(name)
        if journal is None:
            continue
        log.warning(
            "%s: finishing journal %s (%s) left by an earlier run", index.location, name, journal.op
        )
        keep |= set(journal.cleanup)
        out.append(apply(index, journal, name, catalog))
    index.clean_scratch(keep)
    return out
