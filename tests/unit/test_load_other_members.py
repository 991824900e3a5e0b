"""A load of part of a transform batch asks the index about the batch's other members only as far
as it must (issue 45: in the year, every load round of 32 files read the entries of the other
135 members of a 167-file transform batch, six NameNode calls a file): members this process
loaded itself are remembered, and the reading stops at the first member not loaded yet."""

from __future__ import annotations

from collections.abc import Iterable

from ferry.stages.load.shared import LoadedFiles, other_generations
from ferry.stages.load.staged import Staged
from ferry.tables.index import IO_THREADS
from ferry.tables.model import BatchMarker, FileEntry, StagedMarker

GEN = "g1"
INCOMING = "hdfs://a/ferry/incoming/flights"


class Index:
    """The index's ``entries`` over a dict, recording each file id asked for."""

    def __init__(self, generations: dict[str, str]) -> None:
        self.generations = generations
        self.asked: list[str] = []

    def entries(self, file_ids: Iterable[str]) -> dict[str, FileEntry | None]:
        ids = list(file_ids)
        self.asked += ids
        return {
            f: FileEntry(f, self.generations[f]) if f in self.generations else None for f in ids
        }


def _batch(members: list[str]) -> BatchMarker:
    return BatchMarker(GEN, {"day=2013-01-01/part-0.parquet": dict.fromkeys(members, 1)})


def _sharing(loading: list[str], batch: BatchMarker) -> dict[str, Staged]:
    rel = "day=2013-01-01/part-0.parquet"
    return {
        f: Staged(f, f"{INCOMING}/{f}", StagedMarker(f, GEN, (), {rel: 1}), batch=batch)
        for f in loading
    }


def test_members_loaded_by_this_process_are_not_read() -> None:
    members = [f"f{i:03d}" for i in range(40)]
    batch = _batch(members)
    loaded = LoadedFiles()
    loaded.note("db.t", dict.fromkeys(members[:32], GEN))
    index = Index(dict.fromkeys(members[:32], GEN))
    got = other_generations(index, _sharing(members[32:], batch), loaded, "db.t")  # type: ignore[arg-type]
    assert index.asked == []
    assert got == dict.fromkeys(members[:32], GEN)


def test_reading_stops_at_the_first_member_not_loaded_with_the_batch() -> None:
    members = [f"f{i:03d}" for i in range(40)]
    batch = _batch(members)
    # the first load round: nothing of the other 32 is loaded yet
    index = Index({})
    got = other_generations(index, _sharing(members[:8], batch), LoadedFiles(), "db.t")  # type: ignore[arg-type]
    assert index.asked == sorted(members[8:])[:IO_THREADS]
    assert got == dict.fromkeys(sorted(members[8:])[:IO_THREADS])
    # another process loaded all but one (with the batch's generation, one with an older one)
    gens = dict.fromkeys(members[8:39], GEN) | {"f010": "g0"}
    index = Index(gens)
    got = other_generations(index, _sharing(members[:8], batch), None, "db.t")  # type: ignore[arg-type]
    assert index.asked == sorted(members[8:])[:IO_THREADS]  # f010 is in the first chunk
    assert got["f010"] == "g0"


def test_a_complete_batch_reads_every_member_it_does_not_remember() -> None:
    members = [f"f{i:03d}" for i in range(20)]
    batch = _batch(members)
    loaded = LoadedFiles()
    loaded.note("db.t", dict.fromkeys(members[:10], GEN))
    loaded.note("db.other", dict.fromkeys(members[10:15], GEN))  # another table's: not these
    index = Index(dict.fromkeys(members[:15], GEN))
    got = other_generations(index, _sharing(members[15:], batch), loaded, "db.t")  # type: ignore[arg-type]
    assert index.asked == members[10:15]
    assert got == dict.fromkeys(members[:15], GEN)


def test_the_memory_keeps_the_newest_files_only() -> None:
    loaded = LoadedFiles(capacity=3)
    loaded.note("t", {"a": "g1", "b": "g1", "c": "g1"})
    assert loaded.get("t", "a") == "g1"  # read: still the oldest noted
    loaded.note("t", {"d": "g2", "a": "g3"})
    assert [loaded.get("t", f) for f in "abcd"] == ["g3", None, "g1", "g2"]
