"""transfer's handler between two FakeHdfs clusters (B → A): parts, stale parts, C01/C02."""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable, Iterable, Iterator
from dataclasses import replace

import pytest
from tests.support.factories import FS_A, FS_B, manifest
from tests.support.hdfs_fake import FakeHdfs

from ferry.clusters.hdfs.paths import is_temp_path
from ferry.core.events import FileTransferred, FileTransformed
from ferry.core.identity import derive_file_id
from ferry.errors import (
    DataNodeUnreachable,
    HdfsPathNotFound,
    HdfsUnavailable,
    InputExpired,
    PermanentError,
)
from ferry.settings.retry import RetrySettings
from ferry.stages.transfer.handlers import (
    StagedAnew,
    TargetVanished,
    TransferDeps,
    transfer_file,
)
from ferry.tables.model import StagedMarker

SHA = "ab" * 32
FID = derive_file_id("flights", SHA)
STAGED = f"/ferry/staging/flights/{FID}"
INCOMING = f"/ferry/incoming/flights/{FID}"
RETRY = RetrySettings(max_attempts=3, initial_backoff_s=0.001, max_backoff_s=0.002)
PARTS = {
    "part-00000-x.snappy.parquet": b"PAR1" + bytes(range(256)) * 40 + b"PAR1",
    "part-00001-x.snappy.parquet": b"PAR1second partPAR1",
}


def event(uris: dict[str, str] | None = None) -> FileTransformed:
    return FileTransformed(
        manifest(
            "flights",
            SHA,
            source_path="flights/flights_1.csv",
            size_bytes=123,
            uris={"landing": f"{FS_B}/l/x.csv", "staging": FS_B + STAGED} if uris is None else uris,
            rows_in=9,
            rows_out=8,
            rows_rejected=1,
        )
    )


def clusters(parts: dict[str, bytes] = PARTS) -> tuple[FakeHdfs, FakeHdfs, TransferDeps]:
    b, a = FakeHdfs("b"), FakeHdfs("a")
    b.mkdirs(STAGED)
    for name, data in parts.items():
        b.upload_stream(f"{STAGED}/{name}", [data])
    b.calls.clear()
    return b, a, TransferDeps(b, a, "/ferry/incoming/", FS_A, RETRY)


def a_files(a: FakeHdfs) -> dict[str, bytes]:
    return dict(a.files)


def test_parts_are_copied_byte_equal_and_the_event_names_incoming() -> None:
    b, a, deps = clusters()
    [ev] = transfer_file(event(), deps)
    assert a_files(a) == {f"{INCOMING}/{n}": data for n, data in PARTS.items()}
    assert isinstance(ev, FileTransferred)
    assert dict(ev.manifest.uris) == {
        "landing": f"{FS_B}/l/x.csv",
        "staging": FS_B + STAGED,
        "incoming": FS_A + INCOMING,
    }
    assert (ev.manifest.file_id, ev.manifest.rows_out, ev.manifest.rows_rejected) == (FID, 8, 1)
    assert {op for op, _ in b.calls} <= {"status", "list", "open"}  # B is only read


def test_hidden_and_underscore_files_are_not_copied() -> None:
    b, a, deps = clusters({**PARTS, "_SUCCESS": b"", ".part-9.crc": b"crc", "_committed_1": b"{}"})
    b.mkdirs(f"{STAGED}/_temporary")
    transfer_file(event(), deps)
    assert sorted(a_files(a)) == sorted(f"{INCOMING}/{n}" for n in PARTS)
    assert f"{INCOMING}/_temporary" not in a.dirs


def test_stale_parts_on_a_are_deleted_and_others_left() -> None:
    b, a, deps = clusters()
    a.upload_stream(f"{INCOMING}/part-00007-old.snappy.parquet", [b"old"])
    a.upload_stream(f"{INCOMING}/_SUCCESS", [b""])  # not a data file: not ours to judge
    other = f"/ferry/incoming/flights/{'0' * 32}/part-00000-y.snappy.parquet"
    a.upload_stream(other, [b"another file"])
    transfer_file(event(), deps)
    assert a_files(a) == {
        **{f"{INCOMING}/{n}": d for n, d in PARTS.items()},
        f"{INCOMING}/_SUCCESS": b"",
        other: b"another file",
    }


def test_empty_staging_directory_gives_an_empty_incoming_directory() -> None:
    b, a, deps = clusters({})
    a.upload_stream(f"{INCOMING}/part-00000-old.snappy.parquet", [b"old"])
    every_row_rejected = replace(event().manifest, rows_out=0, rows_rejected=9)
    [ev] = transfer_file(FileTransformed(every_row_rejected), deps)
    assert a_files(a) == {}
    assert INCOMING in a.dirs
    assert ev.manifest.uris["incoming"] == FS_A + INCOMING


def test_second_call_is_idempotent_and_writes_nothing() -> None:
    b, a, deps = clusters()
    [first] = transfer_file(event(), deps)
    a.calls.clear()
    [second] = transfer_file(event(), deps)
    assert a_files(a) == {f"{INCOMING}/{n}": d for n, d in PARTS.items()}
    assert [op for op, _ in a.calls if op in ("create", "rename", "delete")] == []
    assert second.manifest.uris == first.manifest.uris


def test_part_with_other_bytes_on_a_is_replaced() -> None:
    b, a, deps = clusters()
    name = "part-00001-x.snappy.parquet"
    a.upload_stream(f"{INCOMING}/{name}", [b"PAR1other bytesPAR1"])  # same size, other content
    assert len(b"PAR1other bytesPAR1") == len(PARTS[name])
    transfer_file(event(), deps)
    assert a.files[f"{INCOMING}/{name}"] == PARTS[name]


def test_reset_on_a_mid_copy_is_retried_with_no_temp_left() -> None:
    """C01 at unit level: cluster A's DataNode resets the connection after 1000 bytes, twice."""
    b, a, deps = clusters()
    a.fail(
        "create",
        HdfsUnavailable("Connection reset by peer"),
        after_bytes=1000,
        times=2,
        path_contains="part-00000",
    )
    [ev] = transfer_file(event(), deps)
    assert a_files(a) == {f"{INCOMING}/{n}": d for n, d in PARTS.items()}
    creates = [p for op, p in a.calls if op == "create"]
    assert len([p for p in creates if "part-00000" in p]) == 3
    assert all(is_temp_path(p) for p in creates)
    assert not any(is_temp_path(p) for p in a.files)
    assert ev.manifest.uris["incoming"] == FS_A + INCOMING


def test_reset_past_the_retry_ceiling_raises_and_leaves_no_partial_part() -> None:
    b, a, deps = clusters()
    a.fail("create", HdfsUnavailable("Connection reset by peer"), after_bytes=10, times=99)
    with pytest.raises(HdfsUnavailable):
        transfer_file(event(), deps)
    assert a_files(a) == {}
    assert len([op for op, _ in a.calls if op == "create"]) == 3


def test_reset_while_reading_b_is_retried() -> None:
    b, a, deps = clusters()
    b.fail("open", HdfsUnavailable("reset reading B"), after_bytes=100, path_contains="part-00000")
    transfer_file(event(), deps)
    assert a_files(a) == {f"{INCOMING}/{n}": d for n, d in PARTS.items()}


def test_an_unreachable_datanode_is_raised_at_once_for_the_runner_to_hold() -> None:
    b, a, deps = clusters()
    a.fail("create", DataNodeUnreachable("datanode 172.18.0.5:9866 unreachable"), times=99)
    with pytest.raises(DataNodeUnreachable, match="172.18.0.5:9866"):
        transfer_file(event(), deps)
    assert len([op for op, _ in a.calls if op == "create"]) == 1


def test_missing_staging_uri_is_bad_manifest() -> None:
    b, a, deps = clusters()
    with pytest.raises(PermanentError) as info:
        transfer_file(event({"landing": f"{FS_B}/l/x.csv"}), deps)
    assert info.value.reason == "bad_manifest"
    assert (a.calls, a.files) == ([], {})


def test_missing_staging_directory_is_input_expired() -> None:
    b, a, deps = clusters()
    b.delete(STAGED, recursive=True)
    with pytest.raises(InputExpired) as info:
        transfer_file(event(), deps)
    assert isinstance(info.value, PermanentError) and info.value.reason == "input_expired"
    assert a.files == {}


# -- the per-file layout's staged tree (partition directories, marker) -------------------------

GEN, GEN2 = "0123456789abcdef", "fedcba9876543210"
#: partition directories as Spark's partitionBy (and Hive) escape them: '/', '=' and '%'
#: escaped, a space kept, NULL as Hive's default partition name (C07: names round-trip)
TREE = {
    f"note=a%2Fb/ferry-{FID}-{GEN}-00000.parquet": b"PAR1 slash PAR1",
    f"note=e f/ferry-{FID}-{GEN}-00001.parquet": b"PAR1 space PAR1",
    f"note=g%3Dh%25/ferry-{FID}-{GEN}-00002.parquet": b"PAR1 eq and percent PAR1",
    f"note=__HIVE_DEFAULT_PARTITION__/ferry-{FID}-{GEN}-00003.parquet": b"PAR1 null PAR1",
}


def tree(
    files: dict[str, bytes], gen: str = GEN, fid: str = FID
) -> tuple[FakeHdfs, FakeHdfs, TransferDeps]:
    b, a = FakeHdfs("b"), FakeHdfs("a")
    b.mkdirs(STAGED)
    for rel, data in files.items():
        b.mkdirs(f"{STAGED}/{rel.rsplit('/', 1)[0]}")
        b.upload_stream(f"{STAGED}/{rel}", [data])
    b.upload_stream(f"{STAGED}/_ferry.json", [StagedMarker(fid, gen, tuple(files)).to_json()])
    b.calls.clear()
    return b, a, TransferDeps(b, a, "/ferry/incoming/", FS_A, RETRY, threads=1)


def test_a_staged_tree_is_copied_with_its_partition_directories_and_marker_last() -> None:
    b, a, deps = tree(TREE)
    [ev] = transfer_file(event(), deps)
    marker = StagedMarker(FID, GEN, tuple(TREE)).to_json()
    assert a_files(a) == {
        **{f"{INCOMING}/{rel}": data for rel, data in TREE.items()},
        f"{INCOMING}/_ferry.json": marker,
    }
    creates = [p for op, p in a.calls if op == "create"]
    assert len(creates) == 5 and "_ferry.json" in creates[-1]  # the marker last
    assert ev.manifest.uris["incoming"] == FS_A + INCOMING
    assert {op for op, _ in b.calls} <= {"status", "list", "open"}  # B is only read
    # A's NameNode calls (issue 45): the directory's status, then per file the temporary file's
    # create, read-back and rename; the marker's status first. No mkdirs (CREATE makes the
    # parents), no delete of a directory that is not there, no status of a target in a directory
    # found absent, no sweep of a temporary file that was renamed (before: 32 calls, mkdirs 5,
    # delete 1, status 11).
    assert Counter(op for op, _ in a.calls) == {"status": 2, "create": 5, "open": 5, "rename": 5}


def test_another_generation_on_a_is_replaced_whole_and_the_same_one_is_left_alone() -> None:
    old = {f"note=x/ferry-{FID}-{GEN2}-00000.parquet": b"PAR1 old PAR1"}
    b, a, deps = tree(old, gen=GEN2)
    transfer_file(event(), deps)
    b2, _, _ = tree(TREE)
    deps = TransferDeps(b2, a, "/ferry/incoming/", FS_A, RETRY, threads=2)
    transfer_file(event(), deps)  # a new transform output of the same file
    assert sorted(a_files(a)) == sorted(
        [f"{INCOMING}/{rel}" for rel in TREE] + [f"{INCOMING}/_ferry.json"]
    )
    a.calls.clear()
    transfer_file(event(), deps)  # redelivered: everything is already right
    assert [op for op, _ in a.calls if op in ("create", "rename", "delete")] == []


def test_an_empty_output_leaves_only_its_marker_on_a() -> None:
    b, a, deps = tree(TREE)
    transfer_file(event(), deps)
    b2, _, _ = tree({}, gen=GEN2)
    transfer_file(event(), TransferDeps(b2, a, "/ferry/incoming/", FS_A, RETRY))
    assert a_files(a) == {f"{INCOMING}/_ferry.json": StagedMarker(FID, GEN2, ()).to_json()}


def test_a_marker_naming_another_file_is_bad_manifest() -> None:
    b, a, deps = tree(TREE, fid="0" * 32)
    with pytest.raises(PermanentError) as info:
        transfer_file(event(), deps)
    assert info.value.reason == "bad_manifest" and "0" * 32 in str(info.value)
    assert a.files == {}


# -- a transform batch's shared data files (issue 45, case C23) -------------------------------

FID2 = derive_file_id("flights", "cd" * 32)
SHARED_B = f"/ferry/staging/flights/_shared/{GEN}"
SHARED_A = f"/ferry/incoming/flights/_shared/{GEN}"
SHARED = {
    "day=2013-01-01/part-00000-x.c000.snappy.parquet": b"PAR1 day one PAR1",
    "day=2013-01-02/part-00001-x.c000.snappy.parquet": b"PAR1 day two PAR1",
}


def shared_batch(threads: int) -> tuple[FakeHdfs, FakeHdfs, TransferDeps, dict[str, bytes]]:
    """Two files of one batch on B, each with one row in each of the batch's two shared files."""
    from ferry.tables.model import BatchMarker

    b, a = FakeHdfs("b"), FakeHdfs("a")
    for rel, data in SHARED.items():
        b.mkdirs(f"{SHARED_B}/{rel.rsplit('/', 1)[0]}")
        b.upload_stream(f"{SHARED_B}/{rel}", [data])
    batch = BatchMarker(GEN, {rel: {FID: 1, FID2: 1} for rel in SHARED}).to_json()
    b.upload_stream(f"{SHARED_B}/_ferry.json", [batch])
    markers = {}
    for fid in (FID, FID2):
        staged = f"/ferry/staging/flights/{fid}"
        b.mkdirs(staged)
        markers[fid] = StagedMarker(fid, GEN, (), dict.fromkeys(SHARED, 1)).to_json()
        b.upload_stream(f"{staged}/_ferry.json", [markers[fid]])
    b.calls.clear()
    expected = {
        **{f"{SHARED_A}/{rel}": data for rel, data in SHARED.items()},
        f"{SHARED_A}/_ferry.json": batch,
        **{f"/ferry/incoming/flights/{f}/_ferry.json": m for f, m in markers.items()},
    }
    return b, a, TransferDeps(b, a, "/ferry/incoming/", FS_A, RETRY, threads=threads), expected


def created(hdfs: FakeHdfs) -> list[str]:
    """The files created on ``hdfs``, in order, by their final names (each is written under a
    hidden temporary name beside it, then renamed)."""
    out = []
    for op, path in hdfs.calls:
        if op == "create":
            d, name = path.rsplit("/", 1)
            if is_temp_path(path):
                name = name[1 : name.index(".ferry-tmp-")]
            out.append(f"{d}/{name}")
    return out


def shared_event(fid: str) -> FileTransformed:
    ev = event({"staging": f"{FS_B}/ferry/staging/flights/{fid}"})
    return FileTransformed(replace(ev.manifest, file_id=fid))


@pytest.mark.parametrize("threads", [1, 4])
def test_shared_files_of_a_batch_are_copied_once_before_each_marker(threads: int) -> None:
    b, a, deps, expected = shared_batch(threads)
    transfer_file(shared_event(FID), deps)
    first = created(a)
    # the batch directory is not on A yet: asked once, then no shared target is asked for
    # before its copy (issue 45: one call a batch, not one a partition)
    assert [p for op, p in a.calls if op == "status" and "_shared" in p] == [SHARED_A]
    # the shared files, then the batch marker, then the file's own marker
    assert sorted(first[:2]) == sorted(f"{SHARED_A}/{rel}" for rel in SHARED)
    assert [p.rsplit("/", 2)[-2:] for p in first[2:]] == [
        [GEN, "_ferry.json"],
        [FID, "_ferry.json"],
    ]
    a.calls.clear()
    b.calls.clear()
    [ev] = transfer_file(shared_event(FID2), deps)
    assert a_files(a) == expected
    # the second file of the batch copies only its marker: B's shared files are not read again,
    # and A is asked once whether the batch is there
    assert created(a) == [f"/ferry/incoming/flights/{FID2}/_ferry.json"]
    assert [p for op, p in b.calls if op == "open" and "_shared" in p] == []
    assert [p for op, p in a.calls if op == "status" and "_shared" in p] == [
        f"{SHARED_A}/_ferry.json"
    ]
    assert ev.manifest.uris["incoming"] == f"{FS_A}/ferry/incoming/flights/{FID2}"


def test_a_restarted_transfer_finds_the_shared_files_there_by_checksum() -> None:
    b, a, deps, expected = shared_batch(1)
    transfer_file(shared_event(FID), deps)
    restarted = TransferDeps(b, a, "/ferry/incoming/", FS_A, RETRY, threads=1)
    a.calls.clear()
    transfer_file(shared_event(FID2), restarted)
    assert a_files(a) == expected
    assert created(a) == [f"/ferry/incoming/flights/{FID2}/_ferry.json"]


def test_a_shared_file_gone_from_b_is_input_expired() -> None:
    b, a, deps, _ = shared_batch(1)
    b.delete(f"{SHARED_B}/{next(iter(SHARED))}")
    with pytest.raises(InputExpired):
        transfer_file(shared_event(FID), deps)
    assert not any(p.endswith(f"{FID}/_ferry.json") for p in a.files)


def test_a_batch_directory_removed_on_a_is_copied_again_for_the_next_file() -> None:
    """The load deleted the batch directory (every file of the batch loaded, then ``ferry
    unload`` removed one, say): a replay of transfer copies the batch again, though this process
    copied it before."""
    b, a, deps, expected = shared_batch(1)
    transfer_file(shared_event(FID), deps)
    for path in [p for p in a.files if p.startswith(SHARED_A)]:
        a.delete(path)
    a.calls.clear()
    transfer_file(shared_event(FID2), deps)
    assert a_files(a) == expected
    assert sorted(created(a)) == sorted(
        [*(f"{SHARED_A}/{rel}" for rel in SHARED), f"{SHARED_A}/_ferry.json"]
        + [f"/ferry/incoming/flights/{FID2}/_ferry.json"]
    )


class RestagedWhileCopied(FakeHdfs):
    """Cluster B where transform writes the file's staged tree anew (generation GEN2) just as
    the copy of GEN's first data file starts: a redelivered FileTransformed re-transformed it."""

    def __init__(self) -> None:
        super().__init__("b")
        self.armed = self.restaged = False

    def open_stream(
        self, path: str, chunk_size: int = 65536, *, offset: int = 0
    ) -> Iterator[bytes]:
        if self.armed and not self.restaged and f"-{GEN}-" in path:
            self.restaged = True
            self.delete(STAGED, recursive=True)
            new = {f"note=x/ferry-{FID}-{GEN2}-00000.parquet": b"PAR1 new PAR1"}
            self.mkdirs(f"{STAGED}/note=x")
            for rel, data in new.items():
                self.upload_stream(f"{STAGED}/{rel}", [data])
            marker = StagedMarker(FID, GEN2, tuple(new)).to_json()
            self.upload_stream(f"{STAGED}/_ferry.json", [marker])
        return super().open_stream(path, chunk_size, offset=offset)


def test_a_tree_staged_anew_while_it_is_copied_is_retried_not_expired() -> None:
    """Compose nemesis seed 4711: transform's offset was not committed before a partition of
    the broker, its second replica transformed the file again (a new generation) while transfer
    copied the first: the vanished data file is not an expired input but a newer one to copy."""
    b, a = RestagedWhileCopied(), FakeHdfs("a")
    b.mkdirs(STAGED)
    for rel, data in TREE.items():
        b.mkdirs(f"{STAGED}/{rel.rsplit('/', 1)[0]}")
        b.upload_stream(f"{STAGED}/{rel}", [data])
    b.upload_stream(f"{STAGED}/_ferry.json", [StagedMarker(FID, GEN, tuple(TREE)).to_json()])
    b.armed = True
    deps = TransferDeps(b, a, "/ferry/incoming/", FS_A, RETRY, threads=1)
    with pytest.raises(StagedAnew, match=f"generation {GEN} -> {GEN2}") as info:
        transfer_file(event(), deps)
    assert info.value.reason == "staged_anew" and not isinstance(info.value, PermanentError)
    [ev] = transfer_file(event(), deps)  # the runner's next attempt: the new generation
    assert a_files(a) == {
        f"{INCOMING}/note=x/ferry-{FID}-{GEN2}-00000.parquet": b"PAR1 new PAR1",
        f"{INCOMING}/_ferry.json": StagedMarker(
            FID, GEN2, (f"note=x/ferry-{FID}-{GEN2}-00000.parquet",)
        ).to_json(),
    }
    assert ev.manifest.uris["incoming"] == FS_A + INCOMING


class CopiedTwiceAtOnce(FakeHdfs):
    """Cluster A where another copy of the same file, started at the same moment, finds a stale
    incoming directory and deletes it (starting clean) just as this copy's first data file is
    being written (compose nemesis seed 4711: a transfer batch held two FileTransformed of one
    file and copied both at once)."""

    def __init__(self) -> None:
        super().__init__("a")
        self.armed = self.struck = False

    def _create(self, path: str, chunks: Iterable[bytes], on_started: Callable[[], None]) -> None:
        if self.armed and not self.struck and ".parquet" in path:
            self.struck = True
            self.delete(INCOMING, recursive=True)
            raise HdfsPathNotFound(f"File does not exist: {path} (deleted while written)")
        super()._create(path, chunks, on_started)


def test_a_target_deleted_on_a_while_it_is_written_is_retried_not_quarantined() -> None:
    b, _, _ = tree(TREE)
    a = CopiedTwiceAtOnce()
    a.armed = True
    deps = TransferDeps(b, a, "/ferry/incoming/", FS_A, RETRY, threads=1)
    with pytest.raises(TargetVanished, match="deleted on A while it was written") as info:
        transfer_file(event(), deps)
    assert info.value.reason == "target_vanished" and not isinstance(info.value, PermanentError)
    [ev] = transfer_file(event(), deps)  # the runner's next attempt copies it whole
    assert a_files(a) == {
        **{f"{INCOMING}/{rel}": data for rel, data in TREE.items()},
        f"{INCOMING}/_ferry.json": StagedMarker(FID, GEN, tuple(TREE)).to_json(),
    }
    assert ev.manifest.uris["incoming"] == FS_A + INCOMING
