"""transform's batch handler with a fake ``run_batch`` (no Spark, no JVM)."""

from __future__ import annotations

from typing import Any

import pytest
from tests.support.factories import FS_B, extracted

from ferry.core.events import FileExtracted, FileManifest, FileTransformed
from ferry.datasets.spec import DatasetSpec
from ferry.errors import PermanentError, SparkJobFailed, TransientError
from ferry.stages.transform.counts import FileCounts
from ferry.stages.transform.handlers import TransformDeps, first_line, transform_batch
from ferry.stages.transform.job import FileResult

STAGING = f"{FS_B}/ferry/staging"
REJECTS = f"{FS_B}/ferry/rejects"


def ok(ev: FileExtracted, rows_out: int, rejected: int = 0) -> FileResult:
    fid, ds = ev.file_id, ev.manifest.dataset
    return FileResult(
        file_id=fid,
        source_path=ev.manifest.uris["landing"],
        status="transformed",
        counts=FileCounts(
            rows_out + rejected, rows_out, rejected, {"range": rejected} if rejected else {}
        ),
        staged_path=f"/ferry/staging/{ds}/{fid}",
        rejects_path=f"/ferry/rejects/{ds}/{fid}" if rejected else None,
    )


class Job:
    """Fake run_batch: records each call and answers from ``answers`` (file_id → FileResult).

    With ``error``, a call raises it when its group holds a file of ``bad`` (any call if ``bad``
    is None), like Spark's CSV reader failing the whole job on one malformed file."""

    def __init__(
        self,
        answers: dict[str, FileResult] | None = None,
        error: BaseException | None = None,
        bad: set[str] | None = None,
    ) -> None:
        self.answers = answers or {}
        self.error = error
        self.bad = bad
        self.calls: list[tuple[Any, str, dict[str, str], str, str]] = []
        self.sources: list[dict[str, str]] = []
        self.resets = 0

    def run_batch(
        self,
        spark: Any,
        spec: DatasetSpec,
        files: dict[str, str],
        *,
        staging_root: str,
        rejects_root: str,
        sources: dict[str, str],
    ) -> dict[str, FileResult]:
        self.calls.append((spark, spec.name, dict(files), staging_root, rejects_root))
        self.sources.append(dict(sources))
        if self.error is not None and (self.bad is None or self.bad & set(files.values())):
            raise self.error
        return {fid: self.answers[fid] for fid in files.values()}

    def reset(self) -> None:
        self.resets += 1

    def deps(self, specs: dict[str, DatasetSpec]) -> TransformDeps:
        return TransformDeps(specs, lambda: "SPARK", self.reset, self.run_batch, STAGING, REJECTS)


def test_transformed_manifest_has_uris_and_row_counts(specs: dict[str, DatasetSpec]) -> None:
    a, b = extracted("flights", 1), extracted("flights", 2)
    job = Job({a.file_id: ok(a, 10), b.file_id: ok(b, 7, rejected=3)})
    [ra, rb] = transform_batch([a, b], job.deps(specs))
    assert job.calls == [
        (
            "SPARK",
            "flights",
            {a.manifest.uris["landing"]: a.file_id, b.manifest.uris["landing"]: b.file_id},
            STAGING,
            REJECTS,
        )
    ]
    # Each file's rows are to carry its exact NAS name (the manifest's, not the landing path).
    assert job.sources == [{a.file_id: a.manifest.source_path, b.file_id: b.manifest.source_path}]
    [ta] = ra
    [tb] = rb
    assert isinstance(ta, FileTransformed) and isinstance(tb, FileTransformed)
    assert dict(ta.manifest.uris) == {
        "landing": a.manifest.uris["landing"],
        "staging": f"{FS_B}/ferry/staging/flights/{a.file_id}",
    }
    assert (ta.manifest.rows_in, ta.manifest.rows_out, ta.manifest.rows_rejected) == (10, 10, 0)
    assert dict(tb.manifest.uris) == {
        "landing": b.manifest.uris["landing"],
        "staging": f"{FS_B}/ferry/staging/flights/{b.file_id}",
        "rejects": f"{FS_B}/ferry/rejects/flights/{b.file_id}",
    }
    assert (tb.manifest.rows_in, tb.manifest.rows_out, tb.manifest.rows_rejected) == (10, 7, 3)
    # everything else of the manifest is carried over
    assert (
        tb.manifest.file_id,
        tb.manifest.sha256,
        tb.manifest.trace_id,
        tb.manifest.size_bytes,
    ) == (
        b.file_id,
        b.manifest.sha256,
        b.manifest.trace_id,
        102,
    )
    assert job.resets == 0


def one_file(specs: dict[str, DatasetSpec], status: str, **fields: Any) -> Any:
    """transform_batch over ``flights_1.csv`` alone, the job answering
    ``FileResult(<its file_id>, "x", status, **fields)``: that file's result."""
    a = extracted("flights", 1)
    res = FileResult(a.file_id, "x", status, **fields)  # type: ignore[arg-type]
    [out] = transform_batch([a], Job({a.file_id: res}).deps(specs))
    return out


def test_full_uri_from_the_job_is_kept(specs: dict[str, DatasetSpec]) -> None:
    staged = f"hdfs://other:1/s/{extracted('flights', 1).file_id}"
    [t] = one_file(specs, "transformed", counts=FileCounts(1, 1, 0), staged_path=staged)
    assert t.manifest.uris["staging"] == staged


@pytest.mark.parametrize("kind", ["zero_bytes", "blank", "header_only"])
def test_empty_file_is_a_permanent_error_empty_kind(
    specs: dict[str, DatasetSpec], kind: str
) -> None:
    a, b = extracted("flights", 1), extracted("flights", 2)
    empty = FileResult(a.file_id, "x", "empty", reason=kind)
    [ra, rb] = transform_batch([a, b], Job({a.file_id: empty, b.file_id: ok(b, 4)}).deps(specs))
    assert isinstance(ra, PermanentError)
    assert ra.reason == f"empty_{kind}"
    assert str(ra) == f"flights/flights_1.csv: no data rows ({kind})"
    assert [type(e) for e in rb] == [FileTransformed]


def test_header_mismatch_is_a_permanent_error(specs: dict[str, DatasetSpec]) -> None:
    ra = one_file(
        specs,
        "failed",
        reason="header_mismatch",
        message="x: header column 1 is 'yr', definition 'flights' expects 'year'",
    )
    assert isinstance(ra, PermanentError)
    assert (ra.reason, str(ra)) == (
        "header_mismatch",
        "x: header column 1 is 'yr', definition 'flights' expects 'year'",
    )


def test_counts_that_do_not_add_up_are_refused(specs: dict[str, DatasetSpec]) -> None:
    ra = one_file(specs, "transformed", counts=FileCounts(10, 8, 1), staged_path="/s")
    assert isinstance(ra, PermanentError) and ra.reason == "count_mismatch"


def test_unknown_dataset_and_missing_landing_do_not_reach_the_job(
    specs: dict[str, DatasetSpec],
) -> None:
    a, b = extracted("flights", 1), extracted("trains", 2)
    c = FileExtracted(
        FileManifest.from_dict({**extracted("flights", 3).manifest.to_dict(), "uris": {}})
    )
    job = Job({a.file_id: ok(a, 1)})
    [ra, rb, rc] = transform_batch([a, b, c], job.deps(specs))
    assert [type(e) for e in ra] == [FileTransformed]
    assert isinstance(rb, PermanentError) and rb.reason == "unknown_dataset"
    assert "'trains'" in str(rb)
    assert isinstance(rc, PermanentError) and rc.reason == "bad_manifest"
    assert [call[2] for call in job.calls] == [{a.manifest.uris["landing"]: a.file_id}]


def test_one_job_per_dataset(specs: dict[str, DatasetSpec]) -> None:
    f1, w1, f2 = extracted("flights", 1), extracted("weather", 2), extracted("flights", 3)
    job = Job({e.file_id: ok(e, 1) for e in (f1, w1, f2)})
    out = transform_batch([f1, w1, f2], job.deps(specs))
    assert [r[0].file_id for r in out] == [f1.file_id, w1.file_id, f2.file_id]
    assert [(c[1], list(c[2].values())) for c in job.calls] == [
        ("flights", [f1.file_id, f2.file_id]),
        ("weather", [w1.file_id]),
    ]


def test_spark_failure_of_two_files_isolates_each_and_resets_per_failed_job(
    specs: dict[str, DatasetSpec],
) -> None:
    a, b = extracted("flights", 1), extracted("flights", 2)
    job = Job(error=RuntimeError("Py4JJavaError: master lost"))
    ra, rb = transform_batch([a, b], job.deps(specs))
    assert [list(c[2].values()) for c in job.calls] == [
        [a.file_id, b.file_id],
        [a.file_id],
        [b.file_id],
    ]
    assert job.resets == 3  # once per failed job
    for r, ev in ((ra, a), (rb, b)):
        assert type(r) is SparkJobFailed and r.reason == "spark_job_failed"
        assert str(r) == (
            f"{ev.manifest.source_path} ({ev.file_id}): Spark job for this file alone failed: "
            "Py4JJavaError: master lost"
        )


def test_transient_error_from_the_job_is_its_files_result_without_reset_or_split(
    specs: dict[str, DatasetSpec],
) -> None:
    a, b, c = extracted("flights", 1), extracted("flights", 2), extracted("weather", 3)
    err = TransientError("rename failed")
    job = Job({c.file_id: ok(c, 2)}, error=err, bad={a.file_id})
    ra, rb, rc = transform_batch([a, b, c], job.deps(specs))
    assert ra is err and rb is err
    assert [type(e) for e in rc] == [FileTransformed]  # the other dataset is not held back
    assert [list(call[2].values()) for call in job.calls] == [[a.file_id, b.file_id], [c.file_id]]
    assert job.resets == 0


SPARK_ERROR = (
    "An error occurred while calling o58.csv.\n"
    ": org.apache.spark.SparkException: Job aborted due to stage failure: Task 0 in stage 3.0 "
    "failed 4 times, most recent failure: java.lang.ArrayIndexOutOfBoundsException: 20481\n"
    "\tat org.apache.spark.sql.catalyst.csv.UnivocityParser.parse(UnivocityParser.scala:1)"
)
SPARK_LINE = (
    "org.apache.spark.SparkException: Job aborted due to stage failure: Task 0 in stage 3.0 "
    "failed 4 times, most recent failure: java.lang.ArrayIndexOutOfBoundsException: 20481"
)


def ids(job: Job) -> list[list[str]]:
    return [list(call[2].values()) for call in job.calls]


def test_bad_file_redelivered_in_the_batch_gets_the_error_on_each_event(
    specs: dict[str, DatasetSpec],
) -> None:
    a, b = extracted("flights", 1), extracted("flights", 2)
    job = Job({b.file_id: ok(b, 3)}, error=RuntimeError("boom"), bad={a.file_id})
    ra, rb, ra2 = transform_batch([a, b, a], job.deps(specs))
    assert ids(job) == [[a.file_id, b.file_id], [a.file_id], [b.file_id]]
    assert type(ra) is SparkJobFailed and ra2 is ra
    assert [type(e) for e in rb] == [FileTransformed]


def test_first_line_of_an_error() -> None:
    assert first_line(RuntimeError(SPARK_ERROR)) == SPARK_LINE
    assert first_line(RuntimeError("x" * 600)) == "x" * 500
    assert first_line(RuntimeError("")) == "RuntimeError"


def test_redelivered_event_of_one_file_is_transformed_once(specs: dict[str, DatasetSpec]) -> None:
    a = extracted("flights", 1)
    job = Job({a.file_id: ok(a, 5)})
    out = transform_batch([a, a], job.deps(specs))
    assert [call[2] for call in job.calls] == [{a.manifest.uris["landing"]: a.file_id}]
    assert [[e.manifest.rows_out for e in r] for r in out] == [[5], [5]]


def test_same_bytes_under_two_names_read_one_copy(specs: dict[str, DatasetSpec]) -> None:
    """Same content re-dropped under another name: same file_id, another landing path. Reading
    both would stage both copies' rows under one file_id (twice the rows in Hive)."""
    a = extracted("flights", 1, name="flights_a.csv")
    b = extracted("flights", 1, name="flights_b.csv")
    assert a.file_id == b.file_id and a.manifest.uris != b.manifest.uris
    job = Job({a.file_id: ok(a, 5)})
    out = transform_batch([a, b], job.deps(specs))
    assert [call[2] for call in job.calls] == [{a.manifest.uris["landing"]: a.file_id}]
    assert [[(e.file_id, e.manifest.rows_out) for e in r] for r in out] == [
        [(a.file_id, 5)],
        [(a.file_id, 5)],
    ]
