"""copy_between and upload_stream on FakeHdfs: verify-before-rename, idempotency, C02 clean-up,
retry policy (transient retried with bounded full-jitter backoff, permanent not retried)."""

from __future__ import annotations

import hashlib
from collections.abc import Callable, Iterable

import pytest
from tests.support.hdfs_fake import FakeHdfs

from ferry.clusters.hdfs.paths import TEMP_MARKER, is_temp_path
from ferry.errors import (
    ChecksumMismatch,
    DataNodeUnreachable,
    HdfsPathExists,
    HdfsPathNotFound,
    HdfsRequestRejected,
    HdfsUnavailable,
)
from ferry.settings.retry import RetrySettings
from ferry.stages.transfer.copy import copy_between

RETRY = RetrySettings(max_attempts=4, initial_backoff_s=0.5, max_backoff_s=1.5)
DATA = bytes(range(256)) * 4096  # 1 MiB
SHA = hashlib.sha256(DATA).hexdigest()


@pytest.fixture
def clusters() -> tuple[FakeHdfs, FakeHdfs]:
    b, a = FakeHdfs("b"), FakeHdfs("a")
    b.mkdirs("/staging")
    b.files["/staging/f.parquet"] = DATA
    a.mkdirs("/incoming")
    a.files["/incoming/neighbour"] = b"keep me"
    return b, a


class _Sleeps(list[float]):
    def __call__(self, seconds: float) -> None:
        self.append(seconds)


def _copy(b: FakeHdfs, a: FakeHdfs, sleeps: _Sleeps | None = None, **kw: object) -> tuple[int, str]:
    return copy_between(
        b,
        "/staging/f.parquet",
        a,
        "/incoming/f.parquet",
        retry=RETRY,
        chunk_size=100_000,
        sleep=sleeps if sleeps is not None else _Sleeps(),
        **kw,
    )


def _temps(port: FakeHdfs) -> list[str]:
    return [p for p in port.files if is_temp_path(p)]


def test_copy_streams_verifies_and_renames(clusters: tuple[FakeHdfs, FakeHdfs]) -> None:
    b, a = clusters
    assert _copy(b, a) == (len(DATA), SHA)
    assert a.files == {"/incoming/neighbour": b"keep me", "/incoming/f.parquet": DATA}
    ops = [op for op, _ in a.calls]
    # stat target, stat (pre-check) ..., create temp, stat + read temp (verify), rename
    assert ops.count("create") == 1 and ops.count("rename") == 1 and ops.count("delete") == 0
    created = next(p for op, p in a.calls if op == "create")
    assert created.startswith("/incoming/.f.parquet" + TEMP_MARKER)
    assert ops.index("open") < ops.index("rename")  # read back before the rename


def test_copy_is_idempotent(clusters: tuple[FakeHdfs, FakeHdfs]) -> None:
    b, a = clusters
    _copy(b, a)
    a.calls.clear()
    assert _copy(b, a) == (len(DATA), SHA)
    assert [op for op, _ in a.calls if op in ("create", "rename", "delete")] == []
    assert _copy(b, a, expected_sha256=SHA) == (len(DATA), SHA)
    assert a.files["/incoming/f.parquet"] == DATA


def test_copy_refuses_other_bytes_at_target(clusters: tuple[FakeHdfs, FakeHdfs]) -> None:
    b, a = clusters
    a.files["/incoming/f.parquet"] = b"something else"
    with pytest.raises(HdfsPathExists, match="other content"):
        _copy(b, a)
    assert a.files["/incoming/f.parquet"] == b"something else"
    assert _copy(b, a, overwrite=True) == (len(DATA), SHA)
    assert a.files["/incoming/f.parquet"] == DATA
    assert _temps(a) == []


def test_c01_transient_failures_are_retried_with_bounded_backoff(
    clusters: tuple[FakeHdfs, FakeHdfs],
) -> None:
    b, a = clusters
    reset = HdfsUnavailable("connection reset (injected)")
    a.fail("create", reset, after_bytes=300_000)  # mid-write on A's DataNode
    b.fail("open", reset, after_bytes=500_000)  # mid-read on B's DataNode
    a.fail("rename", reset)  # on "complete"
    sleeps = _Sleeps()
    assert _copy(b, a, sleeps) == (len(DATA), SHA)
    assert len(sleeps) == 3  # three failed attempts, the fourth succeeded
    for n, s in enumerate(sleeps, start=1):  # full jitter under the exponential ceiling
        assert 0 <= s <= min(RETRY.max_backoff_s, RETRY.initial_backoff_s * 2 ** (n - 1))
    assert a.files == {"/incoming/neighbour": b"keep me", "/incoming/f.parquet": DATA}
    deleted = [p for op, p in a.calls if op == "delete"]
    assert len(deleted) == 3 and all(is_temp_path(p) for p in deleted)


def test_retries_stop_at_max_attempts_and_reraise(clusters: tuple[FakeHdfs, FakeHdfs]) -> None:
    b, a = clusters
    a.fail("create", HdfsUnavailable("reset #n"), after_bytes=10, times=99)
    sleeps = _Sleeps()
    with pytest.raises(HdfsUnavailable, match="reset #n"):
        _copy(b, a, sleeps)
    assert [op for op, _ in a.calls].count("create") == RETRY.max_attempts
    assert len(sleeps) == RETRY.max_attempts - 1
    assert _temps(a) == [] and "/incoming/f.parquet" not in a.files


def test_c06_permanent_error_is_not_retried(clusters: tuple[FakeHdfs, FakeHdfs]) -> None:
    b, a = clusters
    a.fail("create", DataNodeUnreachable("datanode unreachable at 10.0.0.9:9864"))
    sleeps = _Sleeps()
    with pytest.raises(DataNodeUnreachable, match="10.0.0.9:9864"):
        _copy(b, a, sleeps)
    assert sleeps == []


def test_c02_failure_after_create_removes_only_own_temp(
    clusters: tuple[FakeHdfs, FakeHdfs],
) -> None:
    _, a = clusters
    a.files["/incoming/.x.ferry-tmp-otherattempt"] = b"another attempt's temp"
    a.fail(
        "create",
        HdfsUnavailable("could only be written to 0 of the 1 minReplication nodes"),
        after_bytes=5,
    )
    with pytest.raises(HdfsUnavailable, match="minReplication"):
        a.upload_stream("/incoming/x", iter([b"abc", b"defgh", b"ij"]))
    assert a.files == {
        "/incoming/neighbour": b"keep me",
        "/incoming/.x.ferry-tmp-otherattempt": b"another attempt's temp",
    }
    assert "/incoming" in a.dirs
    [(op, path)] = [c for c in a.calls if c[0] == "delete"]
    assert (
        path.startswith("/incoming/.x" + TEMP_MARKER)
        and path != "/incoming/.x.ferry-tmp-otherattempt"
    )


@pytest.mark.parametrize(
    ("delete_faults", "deletes", "temp_left"),
    [(2, 3, False), (3, 3, True)],
    ids=["third-try-removes-it", "orphan-after-three-tries"],
)
def test_temp_cleanup_is_tried_three_times_on_transient_errors(
    delete_faults: int, deletes: int, temp_left: bool
) -> None:
    a = FakeHdfs("a")
    a.fail("create", HdfsUnavailable("reset mid-write"), after_bytes=5)
    a.fail("delete", HdfsUnavailable("NameNode cut off"), times=delete_faults)
    with pytest.raises(HdfsUnavailable, match="reset mid-write"):
        a.upload_stream("/d/x", iter([b"abc", b"defgh"]))
    deleted = [path for op, path in a.calls if op == "delete"]
    assert len(deleted) == deletes
    assert len(set(deleted)) == 1 and is_temp_path(deleted[0])
    assert sorted(a.files) == ([deleted[0]] if temp_left else [])


def test_temp_cleanup_is_not_retried_on_a_permanent_error() -> None:
    a = FakeHdfs("a")
    a.fail("create", HdfsUnavailable("reset mid-write"), after_bytes=5)
    a.fail("delete", HdfsRequestRejected("permission denied"), times=3)
    with pytest.raises(HdfsUnavailable, match="reset mid-write"):
        a.upload_stream("/d/x", iter([b"abc", b"defgh"]))
    deleted = [path for op, path in a.calls if op == "delete"]
    assert len(deleted) == 1 and is_temp_path(deleted[0])
    assert sorted(a.files) == deleted


def test_source_error_propagates_unchanged_and_cleans_up() -> None:
    a = FakeHdfs("a")

    def chunks() -> Iterable[bytes]:
        yield b"part"
        raise OSError("NAS read failed: /nas/x")

    with pytest.raises(OSError, match="NAS read failed"):
        a.upload_stream("/d/x", chunks())
    assert a.files == {}


class _Corrupting(FakeHdfs):
    """A cluster whose stored bytes differ from the bytes sent (bit flip on write)."""

    def _create(self, path: str, chunks: Iterable[bytes], on_started: Callable[[], None]) -> None:
        super()._create(path, chunks, on_started)
        data = bytearray(self.files[path])
        data[0] ^= 0xFF
        self.files[path] = bytes(data)


def test_checksum_mismatch_blocks_the_rename() -> None:
    b, a = FakeHdfs("b"), _Corrupting("a")
    b.files["/s/f"] = DATA
    with pytest.raises(ChecksumMismatch, match="reads back"):
        copy_between(b, "/s/f", a, "/t/f", retry=RETRY, sleep=_Sleeps())
    assert [op for op, _ in a.calls].count("create") == RETRY.max_attempts
    assert [p for p in a.files if not is_temp_path(p)] == [] and _temps(a) == []


def test_expected_sha256_mismatch_is_caught_before_rename(
    clusters: tuple[FakeHdfs, FakeHdfs],
) -> None:
    b, a = clusters
    with pytest.raises(ChecksumMismatch, match="expected 00"):
        _copy(b, a, expected_sha256="00" * 32)
    assert "/incoming/f.parquet" not in a.files and _temps(a) == []


def test_rename_race_with_same_bytes_succeeds_once(clusters: tuple[FakeHdfs, FakeHdfs]) -> None:
    _, a = clusters

    class _Racer(FakeHdfs):
        def rename(self, src: str, dst: str, *, overwrite: bool = False) -> None:
            self.files.setdefault(dst, DATA)  # another instance finished first
            super().rename(src, dst, overwrite=overwrite)

    racer = _Racer("a")
    written = racer.upload_stream("/d/f", iter([DATA]))
    assert (written.created, written.size, written.sha256) == (False, len(DATA), SHA)
    assert racer.files == {"/d/f": DATA}


def test_missing_source_is_permanent(clusters: tuple[FakeHdfs, FakeHdfs]) -> None:
    b, a = clusters
    sleeps = _Sleeps()
    with pytest.raises(HdfsPathNotFound):
        copy_between(b, "/staging/nope", a, "/incoming/nope", retry=RETRY, sleep=sleeps)
    assert sleeps == []


def test_temp_left_by_failed_cleanup_is_swept(clusters: tuple[FakeHdfs, FakeHdfs]) -> None:
    b, a = clusters
    a.fail("create", HdfsUnavailable("reset mid-write"), after_bytes=1000)
    a.fail("delete", HdfsUnavailable("NameNode cut off"), times=3)  # all of _discard's tries
    assert _copy(b, a) == (len(DATA), SHA)
    assert _temps(a) == []
    assert a.files["/incoming/f.parquet"] == DATA


def test_source_that_grows_is_a_checksum_mismatch() -> None:
    b, a = FakeHdfs("b"), FakeHdfs("a")
    b.files["/s/f"] = DATA

    real_open = b.open_stream

    def growing(path: str, chunk_size: int = 1 << 20, *, offset: int = 0):  # type: ignore[no-untyped-def]
        yield from real_open(path, chunk_size, offset=offset)
        yield b"appended meanwhile"

    b.open_stream = growing  # type: ignore[method-assign]
    with pytest.raises(ChecksumMismatch, match="more than its"):
        copy_between(b, "/s/f", a, "/t/f", retry=RETRY, sleep=_Sleeps())
    assert a.files == {}


def test_own_temp_file_not_found_after_create_is_retried(
    clusters: tuple[FakeHdfs, FakeHdfs], monkeypatch: pytest.MonkeyPatch
) -> None:
    """tests/ha scenario 2: after a failover, a resumed old active NameNode answered "not found"
    for the temporary file the new active had just created. That is a failed attempt (retried
    from the start), not a missing path (which would quarantine the file)."""
    b, a = clusters
    real_open = a.open_stream
    misses: list[str] = []

    def stale_once(path: str, *args, **kwargs):  # type: ignore[no-untyped-def]
        # the read-back of the temporary file is the first call naming it after its create
        if is_temp_path(path) and not misses:
            misses.append(path)
            raise HdfsPathNotFound(f"File does not exist: {path}")
        return real_open(path, *args, **kwargs)

    monkeypatch.setattr(a, "open_stream", stale_once)
    sleeps = _Sleeps()
    assert _copy(b, a, sleeps, expected_sha256=SHA) == (len(DATA), SHA)
    assert a.files["/incoming/f.parquet"] == DATA
    assert len(misses) == 1 and len(sleeps) == 1  # one stale answer, one retry
    assert _temps(a) == []


def test_a_target_known_absent_is_not_asked_for_until_a_retry(
    clusters: tuple[FakeHdfs, FakeHdfs],
) -> None:
    """Issue 45: a copy into a directory the caller found absent skips the target's status on
    its first attempt; an attempt after a failure asks it again (its rename may have landed)."""
    b, a = clusters
    assert _copy(b, a, target_absent=True) == (len(DATA), SHA)
    assert [p for op, p in a.calls if op == "status"] == []  # nor a sweep of the renamed temp
    a.files.pop("/incoming/f.parquet")
    a.calls.clear()
    a.fail("rename", HdfsUnavailable("connection reset (injected)"))
    assert _copy(b, a, target_absent=True) == (len(DATA), SHA)
    statuses = [p for op, p in a.calls if op == "status"]
    assert statuses[0] == "/incoming/f.parquet"  # the second attempt's question
    assert a.files == {"/incoming/neighbour": b"keep me", "/incoming/f.parquet": DATA}
