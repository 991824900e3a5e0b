"""The index of a per-file table, on the table's own filesystem under ``<location>/_ferry/``:

``files/<id[:2]>/<id>.json``      one :class:`~ferry.tables.model.FileEntry` per file
``compacted/<h[:2]>/<h>.json``    one :class:`~ferry.tables.model.CompactedFile` per
                                  compacted data file (``h``: a hash of its path)
``journal/<stamp>.json``          changes written but not yet finished (see :mod:`.journal`)
``scratch/<stamp>/``              Spark outputs waiting to be moved into partitions

Everything is found by name, never by listing the table: a load reads the entries of its own
files, a compaction the sidecars of the files it merges. Reads run on a few driver threads
(each is a NameNode and DataNode round trip). Every change goes through a journal, written
under the table's lock (:mod:`ferry.tables.locks`).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from concurrent.futures import ThreadPoolExecutor
from typing import TypeVar

from ferry.clusters.spark_jobs import HadoopFileSystem
from ferry.tables.model import CompactedFile, FileEntry, Journal
from ferry.tables.paths import (
    entry_path,
    join,
    journal_dir,
    scratch_dir,
    sidecar_path,
    stamp,
    stamp_age_s,
)

T = TypeVar("T")
R = TypeVar("R")

#: Driver threads for the index's and the journal's HDFS calls (round trips, not CPU).
IO_THREADS = 8
#: A scratch directory no journal names is deleted once it is this old, s: a load or a
#: compaction still writing it is younger (their Spark jobs take minutes, not an hour).
SCRATCH_TTL_S = 3600.0


def parallel(fn: Callable[[T], R], items: Sequence[T]) -> list[R]:
    """``[fn(x) for x in items]`` on up to :data:`IO_THREADS` threads, in order."""
    if len(items) <= 1:
        return [fn(x) for x in items]
    with ThreadPoolExecutor(min(IO_THREADS, len(items)), "ferry-index") as pool:
        return list(pool.map(fn, items))


class TableIndex:
    """The index of the table at ``location`` (its directory URI), over ``fs``."""

    def __init__(self, fs: HadoopFileSystem, location: str) -> None:
        self.fs = fs
        self.location = location.rstrip("/")

    def abs(self, rel: str) -> str:
        """The URI of a path relative to the table."""
        return join(self.location, rel)

    # -- entries and sidecars -------------------------------------------------------------------

    def entry(self, file_id: str) -> FileEntry | None:
        """The file's entry, ``None`` when the table holds no record of it."""
        path = self.abs(entry_path(file_id))
        data = self.fs.read_bytes(path)
        return None if data is None else FileEntry.from_json(data, path)

    def entries(self, file_ids: Iterable[str]) -> dict[str, FileEntry | None]:
        """:meth:`entry` of each file id (threads)."""
        ids = list(dict.fromkeys(file_ids))
        return dict(zip(ids, parallel(self.entry, ids), strict=True))

    def sidecar(self, data_path: str) -> CompactedFile | None:
        """The sidecar of compacted data file ``data_path`` (relative), ``None`` if none."""
        path = self.abs(sidecar_path(data_path))
        data = self.fs.read_bytes(path)
        return None if data is None else CompactedFile.from_json(data, path)

    def sidecars(self, data_paths: Iterable[str]) -> dict[str, CompactedFile | None]:
        """:meth:`sidecar` of each path (threads)."""
        paths = list(dict.fromkeys(data_paths))
        return dict(zip(paths, parallel(self.sidecar, paths), strict=True))

    def put_entry(self, file_id: str, entry: FileEntry | None) -> None:
        """Write (``None``: remove) a file's entry. Call only while applying a journal."""
        path = self.abs(entry_path(file_id))
        if entry is None:
            self.fs.delete_quiet(path, recursive=False)
        else:
            self.fs.write_bytes(path, entry.to_json())

    def put_sidecar(self, data_path: str, sidecar: CompactedFile | None) -> None:
        """Write (``None``: remove) a compacted file's sidecar. Call only while applying."""
        path = self.abs(sidecar_path(data_path))
        if sidecar is None:
            self.fs.delete_quiet(path, recursive=False)
        else:
            self.fs.write_bytes(path, sidecar.to_json())

    # -- journal records ----------------------------------------------------------------------

    def journal_names(self) -> list[str]:
        """Names of the journal records waiting to be applied, oldest first."""
        return [
            n
            for n, is_dir, _ in self.fs.list_dir(self.abs(journal_dir()))
            if not is_dir and n.endswith(".json") and not n.startswith(".")
        ]

    def read_journal(self, name: str) -> Journal | None:
        """The journal record ``name``; ``None`` when it is gone (applied meanwhile)."""
        path = self.abs(f"{journal_dir()}/{name}")
        data = self.fs.read_bytes(path)
        return None if data is None else Journal.from_json(data, path)

    def write_journal(self, journal: Journal) -> str:
        """Write a journal record: to a hidden name, then renamed (a record is whole or absent).
        Returns its name."""
        name = f"{stamp()}.json"
        tmp = self.abs(f"{journal_dir()}/.{name}.tmp")
        self.fs.write_bytes(tmp, journal.to_json())
        self.fs.move(tmp, self.abs(f"{journal_dir()}/{name}"))
        return name

    def remove_journal(self, name: str) -> None:
        self.fs.delete_quiet(self.abs(f"{journal_dir()}/{name}"), recursive=False)

    # -- scratch --------------------------------------------------------------------------------

    def new_scratch(self) -> str:
        """A fresh scratch directory URI (not created) for a Spark output under the table."""
        return self.abs(f"{scratch_dir()}/{stamp()}")

    def clean_scratch(self, keep: Iterable[str], ttl_s: float = SCRATCH_TTL_S) -> list[str]:
        """Delete scratch directories older than ``ttl_s`` whose URI is not in ``keep`` (those
        a pending journal names), and unfinished journal temp files; returns what was deleted."""
        kept = {k.rstrip("/") for k in keep}
        gone = []
        root = self.abs(scratch_dir())
        for name, _, _ in self.fs.list_dir(root):
            path = f"{root}/{name}"
            if path not in kept and stamp_age_s(name) > ttl_s:
                self.fs.delete_quiet(path)
                gone.append(path)
        jroot = self.abs(journal_dir())
        for name, _, _ in self.fs.list_dir(jroot):
            if name.startswith(".") and stamp_age_s(name.lstrip(".")) > ttl_s:
                self.fs.delete_quiet(f"{jroot}/{name}")
                gone.append(f"{jroot}/{name}")
        return gone
