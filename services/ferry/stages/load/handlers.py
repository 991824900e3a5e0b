"""load's batch handler: transferred files on A → the dataset's Hive table → ``FileLoaded``.

One call per dataset per batch (:func:`ferry.stages.load.job.load_files`): each file's staged
data files are checked against the table by name (a mismatch fails that file before anything is
written, case C12) and moved into the table's partitions after every data file of its
``file_id`` already there was removed, so loading a file again (retry, replay, re-drop, a new
output after a definition change) leaves exactly its new rows, and other files' rows untouched
(cases C13, C19; docs/hive-layout.md). ``FileLoaded.partition`` is ``{"ferry_file_id": …}``: the
column value that selects the file's rows (a data column, not a Hive partition).

Reconciliation: the rows of the data files the load moved in (their Parquet footers) must equal
the manifest's ``rows_out``; otherwise the file is quarantined with ``row_count_mismatch``. A
file the job refused alone (its :class:`PermanentError`) is quarantined with that reason. A file
whose incoming copy is gone and whose rows are not in the table either (a replay or a release
after the copy's retention) is quarantined at once as ``input_expired``, and the rest of its batch
is loaded without it. A job that fails on a condition of cluster A (the warehouse's quota
exceeded, safe mode, no space: :func:`ferry.clusters.hdfs.errors.condition_in`, case C22) gives
its files that :class:`~ferry.errors.ClusterCondition`, which the runner holds until it
clears. No session (the masters, the worker), or a job whose session's context died under it
(``deps.reset_spark()`` says so), gives every file :class:`~ferry.errors.SparkUnavailable` of
cluster A, and a job that failed because cluster A was out of reach (a block no live DataNode
holds, a NameNode refusing: :func:`ferry.clusters.hdfs.errors.outage_in`) gives every file
:class:`~ferry.errors.HdfsUnavailable` of cluster A, before any file is judged; the runner
holds both the same way (:func:`ferry.errors.outage_condition`).
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from ferry.clusters.hdfs.errors import condition_in, outage_in
from ferry.core.events import FileLoaded, FileTransferred
from ferry.core.runtime.batching import group_by_dataset
from ferry.core.runtime.stage import BatchResult
from ferry.datasets.reload import Definitions, snapshot
from ferry.datasets.spec import DatasetSpec
from ferry.errors import (
    ConfigError,
    InputExpired,
    PermanentError,
    SparkUnavailable,
    TransientError,
)

log = logging.getLogger(__name__)


@dataclass
class LoadDeps:
    """``datasets``: the service's reloading :class:`~ferry.datasets.reload.Definitions` (a
    fixed mapping in tests)."""

    datasets: Definitions | Mapping[str, DatasetSpec]
    spark: Callable[[], Any]
    #: stop the session if its context died; ``True`` if it had (:meth:`SparkHolder.reset`)
    reset_spark: Callable[[], bool | None]
    #: (spark, spec, {file_id: incoming dir URI}, sources={file_id: NAS source_path})
    #: → {file_id: rows now in the table, or the PermanentError of that file}
    load_files: Callable[..., Mapping[str, int | PermanentError]]
    #: (incoming dir URI, rows_out) → why that input cannot be read (gone, no data file), or
    #: None; asked only after a failed job or a count that does not reconcile
    missing_input: Callable[[str, int | None], str | None] = lambda uri, rows: None


def load_batch(events: Sequence[FileTransferred], deps: LoadDeps) -> list[BatchResult]:
    """One result per event, in order (see :data:`ferry.core.runtime.runner.BatchHandler`). The
    definitions are reloaded first if they changed; a file whose dataset's definition is invalid
    waits (:class:`~ferry.errors.DatasetNotReady`)."""
    defs = snapshot(deps.datasets)
    specs = defs.specs
    results, by_dataset = group_by_dataset(events, specs, "incoming", defs.wait_reason)
    for name, idx in by_dataset.items():
        _load_group(specs[name], events, idx, deps, results, defs.version(name))
    return [results[i] for i in range(len(events))]


def _load_group(
    spec: DatasetSpec,
    events: Sequence[FileTransferred],
    idx: list[int],
    deps: LoadDeps,
    results: dict[int, BatchResult],
    version: str | None = None,
    alone: bool = False,
) -> None:
    """Load the events ``idx`` of one dataset with one job; put each one's result in ``results``
    (``version``: the definition version the manifests record; ``alone``: these are the files
    a failed job found without input, tried once more by themselves).

    A failed job, a file with nothing staged nor loaded, or a file whose rows do not reconcile,
    first asks ``deps.missing_input`` which inputs are gone (a replay or release after the
    incoming copy's retention): those get :class:`~ferry.errors.InputExpired` at once; after a
    failed job, the others are loaded again without them (one more job) and the files without
    input once more by themselves (a file the batch before loaded, redelivered, is answered by
    the table), :class:`~ferry.errors.InputExpired` if that job fails too.
    """
    files = {events[i].file_id: events[i].manifest.uris["incoming"] for i in idx}
    sources = {events[i].file_id: events[i].manifest.source_path for i in idx}
    # the start of a job: with FileLoaded's "in N s (batch of M)" it dates each batch in the log
    # (tests/yarn kills a ResourceManager once a job has started)
    log.info("load: Spark job for %d %s file(s) starting", len(files), spec.name)
    try:
        spark = deps.spark()
    except ConfigError:
        raise
    except (PermanentError, TransientError) as exc:
        for i in idx:
            results[i] = exc
        return
    except Exception as exc:  # noqa: BLE001 - py4j/pyspark: no session (the masters, the worker)
        log.warning("load: no Spark session for %d %s file(s): %s", len(files), spec.name, exc)
        for i in idx:
            results[i] = SparkUnavailable(f"load: no Spark session: {exc}", cluster="a")
        return
    try:
        loaded = deps.load_files(spark, spec, files, sources=sources)
    except (PermanentError, TransientError) as exc:
        for i in idx:
            results[i] = exc
        return
    except Exception as exc:  # noqa: BLE001 - py4j/pyspark: the job failed; idempotent, retry
        condition = condition_in(exc, cluster="a", what=f"load of {len(files)} {spec.name} file(s)")
        if condition is not None:  # the cluster's, not the files': held (C22)
            log.warning("load: %s", condition)
            for i in idx:
                results[i] = condition
            return
        log.warning("load: Spark job for %d %s file(s) failed: %s", len(files), spec.name, exc)
        if deps.reset_spark():  # the context died under the job (issue 47's hour: 31 files)
            for i in idx:
                results[i] = SparkUnavailable(
                    f"Spark load of {len(files)} {spec.name} file(s): the session's context "
                    f"stopped: {exc}",
                    cluster="a",
                )
            return
        outage = outage_in(exc, cluster="a", what=f"load of {len(files)} {spec.name} file(s)")
        if outage is not None:
            # cluster A out of reach (a DataNode down under a read): nothing is known of the
            # files, not even whether their input is gone (issue 47's second hour: a replayed
            # loaded file, its index record unreadable, was quarantined input_expired): held
            for i in idx:
                results[i] = outage
            return
        gone = _expired(events, idx, deps)
        if gone:
            rest = [i for i in idx if i not in gone]
            if rest:
                _load_group(spec, events, rest, deps, results, version)
            if alone:
                results |= gone
            else:
                # their input vanished after the job planned to read it: expired, or consumed by
                # the load of the batch before (a redelivery, whose rows the table answers
                # without Spark): one more job over them alone tells (nemesis seed 235)
                _load_group(spec, events, list(gone), deps, results, version, alone=True)
            return
        raise TransientError(
            f"Spark load of {len(files)} {spec.name} file(s) failed: {exc}"
        ) from exc
    for i in idx:
        ev = events[i]
        got = loaded.get(ev.file_id, 0)
        if isinstance(got, PermanentError):
            # nothing staged and nothing in the table: its input expired, or was lost
            gone = _expired(events, [i], deps) if got.reason == "hdfs_not_found" else {}
            results[i] = gone.get(i) or got
            continue
        want = ev.manifest.rows_out
        if want is not None and got != want:
            results[i] = _expired(events, [i], deps).get(i) or PermanentError(
                f"{ev.file_id}: {got} rows in {spec.hive.full_name}, manifest says rows_out={want}",
                reason="row_count_mismatch",
            )
            continue
        manifest = ev.manifest.advance(
            uris={"table": spec.hive.full_name}, definition_version=version
        )
        results[i] = [
            FileLoaded(manifest, table=spec.hive.full_name, partition={"ferry_file_id": ev.file_id})
        ]


def _expired(
    events: Sequence[FileTransferred], idx: list[int], deps: LoadDeps
) -> dict[int, BatchResult]:
    """{event index: InputExpired} for the events of ``idx`` whose incoming copy is gone."""
    out: dict[int, BatchResult] = {}
    for i in idx:
        m = events[i].manifest
        why = deps.missing_input(m.uris["incoming"], m.rows_out)
        if why is not None:
            out[i] = InputExpired(
                "incoming",
                m.uris["incoming"],
                file_id=m.file_id,
                source_path=m.source_path,
                dataset=m.dataset,
                why=why,
            )
    return out
