"""Moving a transform batch's shared data files into the table (issue 45, case C23).

A batch of files transformed together writes ONE data file per partition holding all their rows
(:func:`ferry.tables.staging.write_shared`); transfer copies each once to
``<incoming>/<dataset>/_shared/<generation>/``. A load then takes, per shared file:

- every file with rows in it is being loaded now (the usual case: the batch stays together
  through the stages): the shared file is moved into its partition as it is, as a compacted
  file (``compact-<generation>-<n>.parquet``) whose sidecar names the files and their rows: one
  rename and one sidecar for the partition, however many files share it;
- some of its files are not (they failed, or they are in another load batch): it is rewritten
  with only the rows of the files being loaded (one Spark job for all such files,
  :func:`ferry.tables.merge.merge_groups`), and stays in incoming for the others.

Replay and removal stay per file: the index records each file's rows in the compacted file, so
``ferry unload`` or a new transform output of one file rewrites it without that file's rows
(:func:`ferry.tables.replace.plan`). A batch directory whose every file is loaded with this
generation is deleted by the load's journal; one with files still to come is left for them (and
for gc, by the incoming retention).
"""

from __future__ import annotations

import threading
from collections import OrderedDict
from collections.abc import Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING

from ferry.stages.load.staged import Staged
from ferry.tables.index import IO_THREADS, TableIndex
from ferry.tables.merge import Merged, merge_groups
from ferry.tables.model import CompactedFile
from ferry.tables.paths import compacted_file_name, join, new_generation, parent
from ferry.tables.replace import Shared

if TYPE_CHECKING:
    from pyspark.sql import SparkSession
    from pyspark.sql.types import StructType


@dataclass(frozen=True)
class SharedPlan:
    """What :func:`plan_shared` decided: the :class:`~ferry.tables.replace.Shared` moves and
    ``compacted`` ``{file_id: {path relative to the table: rows}}`` for each file's entry."""

    shared: Shared
    compacted: dict[str, dict[str, int]]
    rewritten: int  #: shared files rewritten without rows of files not loaded now


def plan_shared(
    spark: SparkSession,
    index: TableIndex,
    schema: StructType,
    staged: Mapping[str, Staged],
    *,
    generation_of: Mapping[str, str | None] | None = None,
) -> SharedPlan:
    """Plan the shared files of the files being loaded (``staged``: ``{file_id: Staged}`` of
    those with a marker naming shared files, their batch markers and footers read). ``schema``:
    the table's data columns (for a rewrite); ``generation_of``: ``{file_id: generation of its
    index entry}`` for the other members of their batches, to know when a batch is complete.
    Call under the table's lock.

    Raises:
        RuntimeError: a rewritten shared file holds other rows than its batch marker says.
        pyspark errors: the rewrite failed (nothing changed).
    """
    gen = new_generation()
    moves: list[tuple[str, str]] = []
    sidecars: dict[str, CompactedFile] = {}
    compacted: dict[str, dict[str, int]] = {fid: {} for fid in staged}
    batches = {s.batch_dir: s for s in staged.values() if s.batch is not None}
    rewrite: dict[int, list[str]] = {}
    keep: dict[int, tuple[str, dict[str, int]]] = {}
    drops: dict[str, set[str]] = {}  #: per batch directory, the rows left out of its rewrites
    group_of: dict[int, str] = {}
    cleanup: list[str] = []
    k = 0
    for batch_dir, s in sorted(batches.items()):
        assert s.batch is not None
        # the files loading THIS batch's output: a file staged again since (a redelivered or
        # replayed transform: another generation) takes its rows from its new output, and its
        # rows here are left out like those of a file not in the load
        here = {
            f for f, t in staged.items() if t.marker and t.marker.generation == s.batch.generation
        }
        for rel, held in sorted(s.batch.members.items()):
            mine = {f: n for f, n in held.items() if f in here}
            if not mine:
                continue
            new = join(parent(rel), compacted_file_name(gen, k)).lstrip("/")
            if set(held) <= here:
                moves.append((join(batch_dir, rel), new))
                sidecars[new] = CompactedFile(new, dict(held))
                for f, n in held.items():
                    compacted[f][new] = n
            else:
                rewrite[k] = [join(batch_dir, rel)]
                keep[k] = (new, mine)
                group_of[k] = batch_dir
                drops.setdefault(batch_dir, set()).update(set(held) - here)
            k += 1
        done = {
            f
            for f in s.batch.file_ids() - here
            if (generation_of or {}).get(f) == s.batch.generation
        }
        if s.batch.file_ids() <= here | done:
            cleanup.append(batch_dir)
    if rewrite:
        scratch = index.new_scratch()
        cleanup.append(scratch)
        merged: dict[int, Merged] = {}
        for j, (batch_dir, drop) in enumerate(sorted(drops.items())):  # a job per batch
            merged |= merge_groups(
                spark,
                schema,
                {g: paths for g, paths in rewrite.items() if group_of[g] == batch_dir},
                f"{scratch}/batch-{j}",
                drop_ids=drop,
                description="ferry load: shared",
            )
        for g, (new, mine) in keep.items():
            out = merged.get(g)
            if out is None or out.rows != sum(mine.values()):
                raise RuntimeError(
                    f"{rewrite[g][0]} rewritten with the rows of {sorted(mine)} holds "
                    f"{out.rows if out else 0} rows, its batch marker says {sum(mine.values())}"
                )
            moves.append((out.path, new))
            sidecars[new] = CompactedFile(new, dict(mine))
            for f, n in mine.items():
                compacted[f][new] = n
    return SharedPlan(Shared(tuple(moves), sidecars, tuple(cleanup)), compacted, len(rewrite))


class LoadedFiles:
    """The generation each file was loaded with by this process, newest ``capacity`` files
    (a bounded LRU: the service stays flat). Thread-safe.

    A load of part of a transform batch deletes the batch's incoming directory once every
    member is loaded with the batch's generation (:func:`plan_shared`); it used to read the
    index entry of every other member for that (issue 45: six NameNode calls a file of the year
    on A, where a transform batch of 167 files reached load in rounds of 32). What this process
    loaded itself is known without a read; the rest is read (:func:`other_generations`). A file
    replayed or removed since keeps its remembered generation: its rows no longer need this
    batch directory either way."""

    def __init__(self, capacity: int = 65536) -> None:
        self.capacity = capacity
        self._gen: OrderedDict[tuple[str, str], str] = OrderedDict()
        self._lock = threading.Lock()

    def note(self, table: str, generations: Mapping[str, str]) -> None:
        """Remember ``{file_id: generation}`` as loaded into ``table`` now."""
        with self._lock:
            for fid, gen in generations.items():
                self._gen[(table, fid)] = gen
                self._gen.move_to_end((table, fid))
            while len(self._gen) > self.capacity:
                self._gen.popitem(last=False)

    def get(self, table: str, file_id: str) -> str | None:
        """The generation ``file_id`` was loaded with, ``None`` when not remembered."""
        with self._lock:
            return self._gen.get((table, file_id))


def other_generations(
    index: TableIndex,
    sharing: Mapping[str, Staged],
    loaded: LoadedFiles | None,
    table: str,
) -> dict[str, str | None]:
    """``{file_id: generation of its index entry}`` of the members of the batches in
    ``sharing`` that are not being loaded now into ``table`` (what :func:`plan_shared` takes as
    ``generation_of``). Per batch: members ``loaded`` remembers with the batch's generation are
    not read; the rest are read :data:`~ferry.tables.index.IO_THREADS`
    at a time, and the reading stops at the first member not loaded with the batch's
    generation (the batch is not complete: the members not read are left out, which says the
    same). A file read as loaded with another generation counts as not loaded, as before."""
    out: dict[str, str | None] = {}
    batches = {s.batch_dir: s.batch for s in sharing.values() if s.batch is not None}
    for _, batch in sorted(batches.items()):
        assert batch is not None
        todo = []
        for fid in sorted(batch.file_ids() - set(sharing)):
            gen = loaded.get(table, fid) if loaded is not None else None
            if gen == batch.generation:
                out[fid] = gen
            else:
                todo.append(fid)
        for k in range(0, len(todo), IO_THREADS):
            got = index.entries(todo[k : k + IO_THREADS])
            out |= {f: (e.generation if e else None) for f, e in got.items()}
            if any(out[f] != batch.generation for f in got):
                break
    return out
