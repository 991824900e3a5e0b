"""transform's batch handler isolating bad files: a failing Spark job is split in halves until
each bad file fails alone, within a budget of jobs; a lost session is rebuilt (fake ``run_batch``
of test_transform_handler.py, no Spark)."""

from __future__ import annotations

from typing import Any

from tests.support.factories import FS_B, extracted
from tests.unit.test_transform_handler import (
    REJECTS,
    SPARK_ERROR,
    SPARK_LINE,
    STAGING,
    Job,
    ids,
    ok,
)

from ferry.core.events import FileTransformed
from ferry.datasets.registry import definition_version
from ferry.datasets.spec import DatasetSpec
from ferry.errors import SparkJobFailed, SparkUnavailable, TransientError
from ferry.stages.transform.handlers import TransformDeps, split_budget, transform_batch


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
            definition_version=definition_version(specs["flights"]),
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


def test_a_job_whose_sessions_context_died_blames_no_file(specs: dict[str, DatasetSpec]) -> None:
    """The context stopped under a job (the Spark masters lost the application): no bisection,
    no ``spark_job_failed`` for a lone file; every file of this dataset and the next gets
    SparkUnavailable of cluster B (held by the runner as a condition)."""
    f1, f2, w1 = extracted("flights", 1), extracted("flights", 2), extracted("weather", 3)
    job = Job(error=RuntimeError("Cannot call methods on a stopped SparkContext."))
    deps = TransformDeps(
        specs, lambda: "SPARK", lambda: job.reset() or True, job.run_batch, STAGING, REJECTS
    )
    out = transform_batch([f1, w1, f2], deps)
    assert ids(job) == [[f1.file_id, f2.file_id]]
    assert job.resets == 1
    assert [(type(r), r.reason, r.cluster) for r in out] == [
        (SparkUnavailable, "spark_unavailable", "b")
    ] * 3
