"""A replay or release whose input copy is gone (its zone's retention passed) is quarantined at
once as ``input_expired``, naming the zone, the path and the way back (re-drop from the NAS
archive): transform (landing gone), transfer (staging gone), load (incoming gone). Before, the
same replays failed as ``hdfs_not_found``, a retried Spark error, or even a FileTransferred of an
empty directory."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import pytest
from tests.support.factories import FS_A, FS_B, dataset_spec, extracted, manifest, put, transferred
from tests.support.hdfs_fake import FakeHdfs
from tests.unit.test_transform_handler import Job as TransformJob

from ferry.core.events import FileLoaded, FileTransformed
from ferry.core.identity import derive_file_id
from ferry.core.runtime.stage import settle
from ferry.datasets.spec import DatasetSpec
from ferry.errors import InputExpired, PermanentError
from ferry.settings.retry import RetrySettings
from ferry.stages.load.handlers import LoadDeps, load_batch
from ferry.stages.transfer.handlers import TransferDeps, transfer_file
from ferry.stages.transform.handlers import transform_batch
from ferry.stages.transform.job import FileResult, run_batch

SPEC = dataset_spec("tiny", {"id": "int"}, hive={"database": "ferry", "table": "tiny"})


def test_input_expired_is_permanent_and_says_how_to_recover() -> None:
    exc = InputExpired(
        "landing",
        f"{FS_B}/ferry/landing/flights/f1/x 1.csv",
        file_id="f1",
        source_path="flights/x 1.csv",
        dataset="flights",
    )
    assert settle(exc) is exc and isinstance(exc, PermanentError)
    assert exc.reason == "input_expired"
    assert str(exc) == (
        f"input_expired: the landing copy {FS_B}/ferry/landing/flights/f1/x 1.csv of "
        "flights/x 1.csv (f1) is gone: removed by retention.landing (or by hand). To carry the "
        "file again, drop it on the NAS anew: from .ferry/archive/flights/x 1.csv while the "
        "archive keeps it (retention.archive), else from its source"
    )


def test_transform_job_reports_a_landing_copy_that_is_gone(spark, tmp_path) -> None:  # type: ignore[no-untyped-def]
    good = put(tmp_path / "land" / "good.csv", b"id\n1\n2\n")
    gone = str(tmp_path / "land" / "gone.csv")
    res = run_batch(
        spark,
        SPEC,
        {good: "f1", gone: "f2"},
        staging_root=str(tmp_path / "staging"),
        rejects_root=str(tmp_path / "rejects"),
    )
    assert (res["f1"].status, res["f1"].counts.rows_out) == ("transformed", 2)
    assert (res["f2"].status, res["f2"].reason, res["f2"].message) == (
        "failed",
        "input_expired",
        f"{gone}: no such file",
    )


def test_transform_quarantines_it_as_input_expired(specs: dict[str, DatasetSpec]) -> None:
    a = extracted("flights", 1)
    job = TransformJob({a.file_id: FileResult(a.file_id, "x", "failed", reason="input_expired")})
    [res] = transform_batch([a], job.deps(specs))
    assert isinstance(res, InputExpired)
    assert (res.reason, res.zone, res.uri) == (
        "input_expired",
        "landing",
        a.manifest.uris["landing"],
    )
    assert "from .ferry/archive/flights/flights_1.csv" in str(res)


SHA = "ab" * 32
FID = derive_file_id("flights", SHA)
STAGED = f"/ferry/staging/flights/{FID}"


def _transformed(rows_out: int) -> FileTransformed:
    return FileTransformed(
        manifest(
            "flights",
            SHA,
            source_path="flights/flights_1.csv",
            uris={"staging": FS_B + STAGED},
            rows_in=rows_out,
            rows_out=rows_out,
            rows_rejected=0,
        )
    )


def _transfer_deps(b: FakeHdfs, a: FakeHdfs) -> TransferDeps:
    retry = RetrySettings(max_attempts=2, initial_backoff_s=0.001, max_backoff_s=0.002)
    return TransferDeps(b, a, "/ferry/incoming", FS_A, retry)


def test_transfer_of_a_staged_copy_that_is_gone_is_input_expired() -> None:
    b, a = FakeHdfs("b"), FakeHdfs("a")
    with pytest.raises(InputExpired, match="the staging copy .* is gone .no such directory."):
        transfer_file(_transformed(8), _transfer_deps(b, a))
    assert a.files == {} and a.dirs == {"/"}  # nothing made on A


def test_transfer_of_an_emptied_staged_directory_is_input_expired_unless_zero_rows() -> None:
    b, a = FakeHdfs("b"), FakeHdfs("a")
    b.mkdirs(STAGED)  # the parts removed, the directory left (a temporary file kept it)
    with pytest.raises(InputExpired, match=r"no data file, 8 row\(s\) expected"):
        transfer_file(_transformed(8), _transfer_deps(b, a))
    [ev] = transfer_file(_transformed(0), _transfer_deps(b, a))  # all rows rejected: right
    assert ev.manifest.uris["incoming"] == f"{FS_A}/ferry/incoming/flights/{FID}"


class _LoadJob:
    """A load job whose Spark read fails while any of ``gone`` is in its batch (as
    ``spark.read.parquet`` does on a missing directory) and loads the rest."""

    def __init__(self, gone: set[str], rows: Mapping[str, int]) -> None:
        self.gone, self.rows = gone, rows
        self.calls: list[list[str]] = []

    def load_files(self, spark: Any, spec: DatasetSpec, files: Mapping[str, str], **_: Any) -> Any:
        self.calls.append(sorted(files))
        if self.gone & set(files):
            raise RuntimeError("[PATH_NOT_FOUND] Path does not exist")
        return {f: self.rows[f] for f in files}


def test_load_quarantines_the_file_whose_incoming_copy_is_gone_and_loads_the_rest(
    specs: dict[str, DatasetSpec],
) -> None:
    ok, gone = transferred("flights", 1, 5), transferred("flights", 2, 4)
    job = _LoadJob({gone.file_id}, {ok.file_id: 5})
    asked: list[str] = []

    def missing(uri: str, rows: int | None) -> str | None:
        asked.append(uri)
        return "no such directory" if gone.file_id in uri else None

    deps = LoadDeps(specs, lambda: "SPARK", lambda: None, job.load_files, missing_input=missing)
    [[loaded], expired] = load_batch([ok, gone], deps)
    assert isinstance(loaded, FileLoaded) and loaded.file_id == ok.file_id
    assert isinstance(expired, InputExpired)
    assert (expired.zone, expired.uri) == ("incoming", gone.manifest.uris["incoming"])
    assert "(no such directory)" in str(expired)
    # the files without input are tried once more by themselves before they are quarantined
    assert job.calls == [sorted([ok.file_id, gone.file_id]), [ok.file_id], [gone.file_id]]
    assert asked == [
        ok.manifest.uris["incoming"],
        gone.manifest.uris["incoming"],
        gone.manifest.uris["incoming"],
    ]


def test_a_file_whose_directory_the_batch_before_consumed_is_loaded_not_quarantined(
    specs: dict[str, DatasetSpec],
) -> None:
    """Nemesis seed 235: a redelivered file's incoming directory vanished after the job planned
    to read it (the batch before loaded it and consumed the directory) and the job failed; the
    file is tried alone, answered by the table, and loaded, not quarantined."""
    ok, again = transferred("flights", 1, 5), transferred("flights", 2, 4)
    calls: list[list[str]] = []

    def load_files(spark, spec, files, **_):  # type: ignore[no-untyped-def]
        calls.append(sorted(files))
        if len(files) > 1:
            raise RuntimeError("[PATH_NOT_FOUND] Path does not exist")
        return {f: {ok.file_id: 5, again.file_id: 4}[f] for f in files}

    def missing(uri: str, rows: int | None) -> str | None:
        return "no such directory" if again.file_id in uri else None

    deps = LoadDeps(specs, lambda: "SPARK", lambda: None, load_files, missing_input=missing)
    [[first], [second]] = load_batch([ok, again], deps)
    assert (first.file_id, second.file_id) == (ok.file_id, again.file_id)
    assert isinstance(second, FileLoaded)
    assert calls == [sorted([ok.file_id, again.file_id]), [ok.file_id], [again.file_id]]


def test_load_of_an_emptied_incoming_directory_is_input_expired_not_a_count_mismatch(
    specs: dict[str, DatasetSpec],
) -> None:
    ev = transferred("flights", 1, 5)
    job = _LoadJob(set(), {ev.file_id: 0})  # the directory is there, its parts are not

    def missing(uri: str, rows: int | None) -> str | None:
        return f"no data file, {rows} row(s) expected"

    deps = LoadDeps(specs, lambda: "SPARK", lambda: None, job.load_files, missing_input=missing)
    [res] = load_batch([ev], deps)
    assert isinstance(res, InputExpired)
    assert "(no data file, 5 row(s) expected)" in str(res)


def test_load_of_a_file_with_nothing_staged_nor_loaded_is_input_expired_when_its_copy_is_gone(
    specs: dict[str, DatasetSpec],
) -> None:
    """The per-file load answers a file whose incoming directory is gone and whose rows are not
    in the table with its own ``hdfs_not_found`` (the rest of the batch loads): input_expired
    when the incoming copy is gone, that error as it is otherwise."""
    ok, gone, lost = (transferred("flights", i, 5) for i in (1, 2, 3))
    nothing = PermanentError("nothing is staged", reason="hdfs_not_found")
    job = _LoadJob(set(), {ok.file_id: 5, gone.file_id: nothing, lost.file_id: nothing})  # type: ignore[dict-item]

    def missing(uri: str, rows: int | None) -> str | None:
        return "no such directory" if gone.file_id in uri else None

    deps = LoadDeps(specs, lambda: "SPARK", lambda: None, job.load_files, missing_input=missing)
    [loaded], expired, refused = load_batch([ok, gone, lost], deps)
    assert isinstance(loaded, FileLoaded) and loaded.file_id == ok.file_id
    assert isinstance(expired, InputExpired)
    assert (expired.zone, expired.uri) == ("incoming", gone.manifest.uris["incoming"])
    assert refused is nothing
    assert job.calls == [sorted([ok.file_id, gone.file_id, lost.file_id])]
