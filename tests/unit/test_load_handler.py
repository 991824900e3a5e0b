"""load's batch handler with a fake ``load_files`` (no Spark, no Hive)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import pytest
from tests.support.factories import transferred

from ferry.core.events import FileLoaded, FileManifest, FileTransferred
from ferry.datasets.spec import DatasetSpec
from ferry.errors import HdfsUnavailable, PermanentError, SparkUnavailable, TransientError
from ferry.stages.load.handlers import LoadDeps, load_batch


class Job:
    def __init__(
        self, rows: Mapping[str, int] | None = None, error: BaseException | None = None
    ) -> None:
        self.rows = dict(rows or {})
        self.error = error
        self.calls: list[tuple[Any, str, dict[str, str]]] = []
        self.sources: list[dict[str, str]] = []
        self.resets = 0

    def load_files(
        self, spark: Any, spec: DatasetSpec, files: Mapping[str, str], sources: Mapping[str, str]
    ) -> dict[str, int]:
        self.calls.append((spark, spec.name, dict(files)))
        self.sources.append(dict(sources))
        if self.error is not None:
            raise self.error
        return {fid: self.rows[fid] for fid in files if fid in self.rows}

    def reset(self) -> None:
        self.resets += 1

    def deps(self, specs: dict[str, DatasetSpec]) -> LoadDeps:
        return LoadDeps(specs, lambda: "SPARK", self.reset, self.load_files)


def test_loaded_event_has_table_partition_and_manifest(specs: dict[str, DatasetSpec]) -> None:
    a, b = transferred("flights", 1, 5), transferred("flights", 2, 0)
    job = Job({a.file_id: 5, b.file_id: 0})
    [[la], [lb]] = load_batch([a, b], job.deps(specs))
    assert job.calls == [
        (
            "SPARK",
            "flights",
            {a.file_id: a.manifest.uris["incoming"], b.file_id: b.manifest.uris["incoming"]},
        )
    ]
    # Each row of a file is to carry its exact NAS name (the manifest's, not the HDFS-safe one).
    assert job.sources == [{a.file_id: a.manifest.source_path, b.file_id: b.manifest.source_path}]
    assert isinstance(la, FileLoaded)
    assert (la.table, dict(la.partition)) == ("ferry.flights", {"ferry_file_id": a.file_id})
    assert dict(la.manifest.uris) == {
        "incoming": a.manifest.uris["incoming"],
        "table": "ferry.flights",
    }
    assert (la.manifest.file_id, la.manifest.rows_out, la.manifest.trace_id) == (
        a.file_id,
        5,
        a.manifest.trace_id,
    )
    assert (lb.table, dict(lb.partition), lb.manifest.rows_out) == (
        "ferry.flights",
        {"ferry_file_id": b.file_id},
        0,
    )
    assert job.resets == 0


def test_row_count_mismatch_quarantines_only_that_file(specs: dict[str, DatasetSpec]) -> None:
    a, b = transferred("flights", 1, 5), transferred("flights", 2, 7)
    [ra, rb] = load_batch([a, b], Job({a.file_id: 10, b.file_id: 7}).deps(specs))
    assert isinstance(ra, PermanentError)
    assert (ra.reason, str(ra)) == (
        "row_count_mismatch",
        f"{a.file_id}: 10 rows in ferry.flights, manifest says rows_out=5",
    )
    assert [type(e) for e in rb] == [FileLoaded]


def test_file_missing_from_the_table_is_a_mismatch(specs: dict[str, DatasetSpec]) -> None:
    a = transferred("flights", 1, 3)
    [ra] = load_batch([a], Job({}).deps(specs))
    assert isinstance(ra, PermanentError) and ra.reason == "row_count_mismatch"
    assert "0 rows in ferry.flights" in str(ra)


def test_permanent_error_applies_to_each_file_of_that_dataset_only(
    specs: dict[str, DatasetSpec],
) -> None:
    f1, w1, f2 = transferred("flights", 1), transferred("weather", 2), transferred("flights", 3)
    mismatch = PermanentError(
        "column 'dep_delay' is string, table has int", reason="schema_mismatch"
    )

    class Partial(Job):
        def load_files(
            self, spark: Any, spec: DatasetSpec, files: Mapping[str, str], sources: Any
        ) -> dict[str, int]:
            self.calls.append((spark, spec.name, dict(files)))
            if spec.name == "flights":
                raise mismatch
            return {fid: 5 for fid in files}

    job = Partial()
    rf1, rw1, rf2 = load_batch([f1, w1, f2], job.deps(specs))
    assert rf1 is mismatch and rf2 is mismatch
    assert [type(e) for e in rw1] == [FileLoaded]
    assert [(c[1], sorted(c[2])) for c in job.calls] == [
        ("flights", sorted([f1.file_id, f2.file_id])),
        ("weather", [w1.file_id]),
    ]
    assert job.resets == 0


def test_transient_error_from_load_files_is_a_per_file_result(
    specs: dict[str, DatasetSpec],
) -> None:
    a = transferred("flights", 1)
    busy = TransientError("metastore busy")
    job = Job(error=busy)
    assert load_batch([a], job.deps(specs)) == [busy]
    assert job.resets == 0


def test_other_exception_is_transient_for_the_batch_and_resets_spark(
    specs: dict[str, DatasetSpec],
) -> None:
    a, b = transferred("flights", 1), transferred("flights", 2)
    job = Job(error=RuntimeError("Py4JJavaError: executor lost"))
    with pytest.raises(
        TransientError, match="Spark load of 2 flights file\\(s\\) failed: Py4JJavaError"
    ):
        load_batch([a, b], job.deps(specs))
    assert (len(job.calls), job.resets) == (1, 1)


def test_unknown_dataset_and_missing_incoming(specs: dict[str, DatasetSpec]) -> None:
    a, b = transferred("flights", 1), transferred("trains", 2)
    c = FileTransferred(
        FileManifest.from_dict({**transferred("flights", 3).manifest.to_dict(), "uris": {}})
    )
    job = Job({a.file_id: 5})
    ra, rb, rc = load_batch([a, b, c], job.deps(specs))
    assert [type(e) for e in ra] == [FileLoaded]
    assert isinstance(rb, PermanentError) and rb.reason == "unknown_dataset"
    assert isinstance(rc, PermanentError) and rc.reason == "bad_manifest"
    assert [c[2] for c in job.calls] == [{a.file_id: a.manifest.uris["incoming"]}]


def test_duplicate_events_of_one_file_load_it_once(specs: dict[str, DatasetSpec]) -> None:
    a = transferred("flights", 1, 5)
    job = Job({a.file_id: 5})
    out = load_batch([a, a], job.deps(specs))
    assert [c[2] for c in job.calls] == [{a.file_id: a.manifest.uris["incoming"]}]
    assert [[e.partition["ferry_file_id"] for e in r] for r in out] == [[a.file_id], [a.file_id]]


def test_a_file_the_job_refused_alone_gets_its_own_reason(specs: dict[str, DatasetSpec]) -> None:
    """The job answers one file with its PermanentError (e.g. a data file of another type, C12):
    that file is quarantined with that reason, the others of the batch are loaded."""
    a, b = transferred("flights", 1, 5), transferred("flights", 2, 3)
    refused = PermanentError("column 'dep_delay' has type string", reason="schema_mismatch")
    job = Job({a.file_id: refused, b.file_id: 3})  # type: ignore[dict-item]
    ra, rb = load_batch([a, b], job.deps(specs))
    assert ra is refused
    assert [type(e) for e in rb] == [FileLoaded]


def test_a_job_whose_sessions_context_died_gives_every_file_spark_unavailable(
    specs: dict[str, DatasetSpec],
) -> None:
    """Issue 47's hour: the Spark masters' outage stopped load's SparkContext under a job and 31
    good files were quarantined as ``transient`` ("Cannot call methods on a stopped
    SparkContext"). A context that died says nothing about the files: SparkUnavailable of
    cluster A (held as a condition), the session dropped for a new one, no input checked."""
    a, b = transferred("flights", 1, 5), transferred("flights", 2, 7)
    job = Job(error=RuntimeError("Cannot call methods on a stopped SparkContext."))
    asked: list[str] = []
    deps = LoadDeps(
        specs,
        lambda: "SPARK",
        lambda: job.reset() or True,  # the context had died
        job.load_files,
        missing_input=lambda uri, rows: asked.append(uri),  # type: ignore[func-returns-value]
    )
    out = load_batch([a, b], deps)
    assert [type(r) for r in out] == [SparkUnavailable, SparkUnavailable]
    assert [(r.reason, r.cluster) for r in out] == [("spark_unavailable", "a")] * 2
    assert "stopped SparkContext" in str(out[0])
    assert (job.resets, asked) == (1, [])


def test_a_job_that_met_cluster_a_out_of_reach_holds_every_file_and_asks_no_input(
    specs: dict[str, DatasetSpec],
) -> None:
    """Issue 47's second hour (seed 693378033, 2026-12-07): a replayed file that was loaded had
    its index record read while A's DataNode was killed; the job failed on
    ``BlockMissingException``, its incoming copy was gone (consumed by its first load), and it was
    quarantined ``input_expired`` though its rows were in the table. An outage of cluster A says
    nothing about the files: HdfsUnavailable of cluster A for each (held as a condition), no
    input asked, one job only."""
    a, b = transferred("weather", 1, 24), transferred("weather", 2, 24)
    job = Job(
        error=RuntimeError(
            "An error occurred while calling o621.readAllBytes.\n: "
            "org.apache.hadoop.hdfs.BlockMissingException: Could not obtain block: "
            "BP-1:blk_1073742603_1779 file=/warehouse/ferry.db/weather/_ferry/files/ff/x.json"
        )
    )
    asked: list[str] = []
    deps = LoadDeps(
        specs,
        lambda: "SPARK",
        lambda: False,  # the context is alive
        job.load_files,
        # the incoming copies are gone (consumed by the files' first load)
        missing_input=lambda uri, rows: asked.append(uri) or "no such directory",  # type: ignore[func-returns-value]
    )
    out = load_batch([a, b], deps)
    assert [type(r) for r in out] == [HdfsUnavailable, HdfsUnavailable]
    assert [(r.reason, r.cluster) for r in out] == [("hdfs_unavailable", "a")] * 2
    assert str(out[0]) == (
        "load of 2 weather file(s): cluster 'a' out of reach (BlockMissingException): "
        "RuntimeError: An error occurred while calling o621.readAllBytes."
    )
    assert (len(job.calls), asked) == (1, [])


def test_no_session_gives_every_file_spark_unavailable_and_runs_no_job(
    specs: dict[str, DatasetSpec],
) -> None:
    a = transferred("flights", 1, 5)
    job = Job({a.file_id: 5})

    def spark() -> str:
        raise RuntimeError("All masters are unresponsive! Giving up.")

    out = load_batch([a], LoadDeps(specs, spark, job.reset, job.load_files))
    assert [type(r) for r in out] == [SparkUnavailable]
    assert str(out[0]) == "load: no Spark session: All masters are unresponsive! Giving up."
    assert (out[0].cluster, job.calls) == ("a", [])
