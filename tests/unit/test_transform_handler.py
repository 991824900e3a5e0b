"""transform's batch handler with a fake ``run_batch`` (no Spark, no JVM)."""

from __future__ import annotations

from typing import Any

import pytest
from tests.factories import FS_B, extracted

from ferry.core.errors import PermanentError, SparkJobFailed, SparkUnavailable, TransientError
from ferry.core.events import FileExtracted, FileManifest, FileTransformed
from ferry.datasets import DatasetSpec
from ferry.stages.transform.handlers import TransformDeps, first_line, split_budget, transform_batch
from ferry.stages.transform.job import FileCounts, FileResult

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
        self.resets = 0

    def run_batch(
        self,
        spark: Any,
        spec: DatasetSpec,
        files: dict[str, str],
        *,
        staging_root: str,
        rejects_root: str,
    ) -> dict[str, FileResult]:
        self.calls.append((spark, spec.name, dict(files), staging_root, rejects_root))
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


def test_one_bad_file_among_eight_is_isolated_by_bisection(
    specs: dict[str, DatasetSpec],
) -> None:
    evs = [extracted("flights", n) for n in range(1, 9)]
    bad = evs[5]
    job = Job(
        {e.file_id: ok(e, 10 + n) for n, e in enumerate(evs)},
        error=RuntimeError(SPARK_ERROR),
        bad={bad.file_id},
    )
    out = transform_batch(evs, job.deps(specs))
    f = [e.file_id for e in evs]
    # breadth-first: 8 ✗ → 4 ✓, 4 ✗ → 2 ✓, 2 ✗ → 1 ✓, 1 ✗ : 1 + 2·log2(8) = 7 jobs
    assert ids(job) == [f, f[:4], f[4:], f[4:6], f[6:], [f[4]], [f[5]]]
    assert job.resets == 4  # one per failed job
    assert all(call[0] == "SPARK" for call in job.calls)
    for n, (ev, res) in enumerate(zip(evs, out, strict=True)):
        if ev is bad:
            assert type(res) is SparkJobFailed and res.reason == "spark_job_failed"
            assert str(res) == (
                f"flights/flights_6.csv ({bad.file_id}): Spark job for this file alone failed: "
                + SPARK_LINE
            )
            continue
        [t] = res
        assert isinstance(t, FileTransformed)
        assert t.manifest == ev.manifest.advance(
            uris={"staging": f"{FS_B}/ferry/staging/flights/{ev.file_id}"},
            rows_in=10 + n,
            rows_out=10 + n,
            rows_rejected=0,
            updated_at=t.manifest.updated_at,
        )


def down_to_pairs(f: list[str]) -> list[list[str]]:
    """The groups a failing batch of 8 is split into down to pairs, in the order its jobs run:
    8; 4, 4; 2, 2, 2, 2."""
    return [f, f[:4], f[4:], f[:2], f[2:4], f[4:6], f[6:]]


def test_two_bad_files_in_both_halves_are_both_isolated(specs: dict[str, DatasetSpec]) -> None:
    evs = [extracted("flights", n) for n in range(1, 9)]
    f = [e.file_id for e in evs]
    job = Job({e.file_id: ok(e, 1) for e in evs}, error=RuntimeError("boom"), bad={f[0], f[7]})
    out = transform_batch(evs, job.deps(specs))
    assert ids(job) == [
        *down_to_pairs(f),
        [f[0]],
        [f[1]],
        [f[6]],
        [f[7]],
    ]
    assert job.resets == 7
    assert [type(r).__name__ for r in out] == ["SparkJobFailed"] + ["list"] * 6 + ["SparkJobFailed"]


def test_all_failing_group_of_eight_stops_splitting_after_the_budget(
    specs: dict[str, DatasetSpec],
) -> None:
    evs = [extracted("flights", n) for n in range(1, 9)]
    f = [e.file_id for e in evs]
    job = Job(error=RuntimeError("Connection refused"))
    out = transform_batch(evs, job.deps(specs))
    assert split_budget(8) == 6
    # 6 splits (8; 4, 4; 2, 2, 2), the 7th failing group [7, 8] is not split: 1 + 2·6 = 13 jobs
    assert ids(job) == [
        *down_to_pairs(f),
        *[[x] for x in f[:6]],
    ]
    assert job.resets == 13
    assert [type(r) for r in out] == [SparkJobFailed] * 6 + [TransientError] * 2
    assert str(out[6]) == (
        f"flights/flights_7.csv ({f[6]}): not isolated: a Spark job over it and 1 other flights "
        "file(s) failed (Connection refused); split budget spent"
    )
    assert out[6].reason == "transient"


def test_all_failing_batch_of_256_runs_33_jobs_and_blames_no_file(
    specs: dict[str, DatasetSpec],
) -> None:
    evs = [extracted("flights", n) for n in range(256)]
    job = Job(error=RuntimeError("Connection refused"))
    out = transform_batch(evs, job.deps(specs))
    assert len(job.calls) == 1 + 2 * split_budget(256) == 33  # not 2·256 - 1 = 511
    assert sorted(len(c) for c in ids(job)) == [8] * 2 + [16] * 16 + [32] * 8 + [64] * 4 + [
        128
    ] * 2 + [256]
    assert {type(r) for r in out} == {TransientError}


def test_session_that_cannot_be_rebuilt_stops_all_jobs(specs: dict[str, DatasetSpec]) -> None:
    """Master failover gone wrong: the job fails, the context is gone and no new session can be
    built: no more jobs, for this dataset or the next; every file gets SparkUnavailable."""
    f1, f2, w1 = extracted("flights", 1), extracted("flights", 2), extracted("weather", 3)
    job = Job(error=RuntimeError("Master removed our application: FAILED"))
    sessions: list[str] = []

    def spark() -> str:
        sessions.append("get")
        if job.resets:
            raise RuntimeError("Connection refused: spark-master:7077\nmore")
        return "SPARK"

    deps = TransformDeps(specs, spark, job.reset, job.run_batch, STAGING, REJECTS)
    out = transform_batch([f1, w1, f2], deps)
    assert ids(job) == [[f1.file_id, f2.file_id]]
    assert (len(sessions), job.resets) == (2, 1)
    assert [type(r) for r in out] == [SparkUnavailable] * 3
    assert out[0].reason == "spark_unavailable"
    assert str(out[1]) == (
        f"weather/weather_3.csv ({w1.file_id}): no Spark session: "
        "Connection refused: spark-master:7077"
    )


def test_session_rebuilt_after_failover_runs_the_halves(specs: dict[str, DatasetSpec]) -> None:
    """The job failed because the application was removed; the halves run on a new session."""
    a, b = extracted("flights", 1), extracted("flights", 2)
    job = Job({a.file_id: ok(a, 1), b.file_id: ok(b, 2)})
    sessions = iter(["OLD", "NEW", "NEW"])

    def run_batch(spark: Any, spec: DatasetSpec, files: dict[str, str], **kw: str) -> Any:
        if spark == "OLD":
            job.calls.append((spark, spec.name, dict(files), "", ""))
            raise RuntimeError("SparkContext was shut down")
        return job.run_batch(spark, spec, files, **kw)

    deps = TransformDeps(specs, lambda: next(sessions), job.reset, run_batch, STAGING, REJECTS)
    ra, rb = transform_batch([a, b], deps)
    assert [c[0] for c in job.calls] == ["OLD", "NEW", "NEW"]
    assert job.resets == 1
    assert [[e.manifest.rows_out for e in r] for r in (ra, rb)] == [[1], [2]]


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
