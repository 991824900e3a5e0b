"""transform's batch handler: landed CSV files → validated Parquet in B staging.

One call handles a batch of ``FileExtracted`` events: per dataset, one Spark job reads every file
(:func:`ferry.stages.transform.job.run_batch`), so no JVM starts per file. Per file the result is a
``FileTransformed`` (rows_in = rows_out + rows_rejected, staging and rejects URIs), or a
quarantine: ``empty_*`` (case C11), ``header_mismatch``, ``unknown_dataset``, or
``input_expired`` at once when the landing copy is gone (a replay after its retention).

A failed Spark job never takes its whole group down with it: the group is bisected within the
same call (see :func:`_run_isolating`), so good files are transformed in this attempt and only a
file whose job fails on it alone gets :class:`SparkJobFailed` (retried alone by the runner, then
quarantined as ``spark_job_failed``). After every failed job the session is reset if its context
died (e.g. the master pair failing over removed the application, case C03) and rebuilt by
``deps.spark()`` for the next job.

A job that fails on a condition of cluster B (staging's quota exceeded, safe mode, no space:
:func:`ferry.clusters.hdfs.errors.condition_in`, case C22) is not bisected: every file of it
gets that :class:`~ferry.errors.ClusterCondition`, which the runner holds until it clears.
"""

from __future__ import annotations

import logging
import math
from collections import deque
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from ferry.clusters.hdfs.errors import condition_in
from ferry.core.events import FileExtracted, FileTransformed
from ferry.core.runtime.batching import group_by_dataset
from ferry.core.runtime.stage import BatchResult
from ferry.datasets.reload import Definitions, snapshot
from ferry.datasets.spec import DatasetSpec
from ferry.errors import (
    ConfigError,
    InputExpired,
    PermanentError,
    SparkJobFailed,
    SparkUnavailable,
    TransientError,
)

log = logging.getLogger(__name__)

#: (spark, spec, {landing uri: file_id}, staging_root, rejects_root, sources={file_id: NAS
#: source_path}) → {file_id: FileResult}
RunBatch = Callable[..., Mapping[str, Any]]


@dataclass
class TransformDeps:
    """``spark()`` returns the live session (rebuilding it if needed); ``run_batch`` is
    :func:`ferry.stages.transform.job.run_batch` (a fake in unit tests). ``datasets``: the
    service's reloading :class:`~ferry.datasets.reload.Definitions` (a fixed mapping in tests).
    """

    datasets: Definitions | Mapping[str, DatasetSpec]
    spark: Callable[[], Any]
    #: stop the session if its context died; ``True`` if it had (:meth:`SparkHolder.reset`)
    reset_spark: Callable[[], bool | None]
    run_batch: RunBatch
    staging_root: str  #: full URI, e.g. hdfs://127.0.0.1:18020/ferry/staging
    rejects_root: str


def transform_batch(events: Sequence[FileExtracted], deps: TransformDeps) -> list[BatchResult]:
    """One result per event, in order (see :data:`ferry.core.runtime.runner.BatchHandler`). The
    definitions are reloaded first if they changed; a file whose dataset's definition is invalid
    waits (:class:`~ferry.errors.DatasetNotReady`)."""
    defs = snapshot(deps.datasets)
    specs = defs.specs
    results, by_dataset = group_by_dataset(events, specs, "landing", defs.wait_reason)
    down: BaseException | None = None  #: set once no Spark session can be built: skip the rest
    for name, idx in by_dataset.items():
        spec = specs[name]
        version = defs.version(name)
        # Several events of one file in a batch (redelivery, or the same bytes re-dropped under
        # another name, so another landing path): read ONE landing copy per file_id, else the
        # job would stage both copies' rows under that file_id; answer each event.
        first: dict[str, FileExtracted] = {}
        for i in idx:
            first.setdefault(events[i].file_id, events[i])
        if down is None:
            out, down = _run_isolating(spec, list(first.values()), deps)
        else:
            out = {fid: _unavailable(ev, down) for fid, ev in first.items()}
        for i in idx:
            res = out[events[i].file_id]
            results[i] = (
                res if isinstance(res, TransientError) else _result(events[i], res, deps, version)
            )
    return [results[i] for i in range(len(events))]


def split_budget(n: int) -> int:
    """Most splits :func:`_run_isolating` makes for a group of ``n`` files: 2·⌈log2 n⌉."""
    return 2 * math.ceil(math.log2(n)) if n > 1 else 0


def _run_isolating(
    spec: DatasetSpec, group: list[FileExtracted], deps: TransformDeps
) -> tuple[dict[str, Any], BaseException | None]:
    """Run one Spark job over ``group``; if it fails, bisect to isolate the file(s) it fails on.

    Groups run breadth-first: a failed group of k > 1 files is split into halves of ⌈k/2⌉ and
    ⌊k/2⌋ files, each run as its own job; a file whose job fails on it alone gets
    :class:`SparkJobFailed` (its NAS path and the first line of the Spark error). Jobs never fail
    partially (a job's outputs are committed only when it succeeds), so rerunning a half is safe.

    Cost: one bad file among n costs ⌈log2 n⌉ failed jobs and as many successful ones, i.e. at
    most 2·⌈log2 n⌉ jobs beyond the first (14 for 128, 16 for 256 files); two bad files at most
    4·⌈log2 n⌉.

    Rule against explosion (cluster-wide failure, where every job fails): a group's files are
    split at most :func:`split_budget` (2·⌈log2 n⌉) times per call, which is exactly enough to
    isolate any two bad files in one call; a failing group met once the budget is spent is not
    split, its files get a plain :class:`TransientError` ("not isolated", naming the error). So
    a call runs at most 1 + 4·⌈log2 n⌉ jobs (33 for 256 files, instead of 2n - 1 = 511 for a
    full bisection); the runner retries the unresolved files (with the isolated ones) in its next
    attempt, which bisects that smaller set again, so more bad files are isolated over attempts.
    Breadth-first order spends the budget on large groups first: when everything fails, few
    single files are reached (so few are blamed with ``spark_job_failed``), none for big groups.
    If ``deps.spark()`` itself fails, or a job failed because the session's context died
    (``deps.reset_spark()`` says so), Spark is unavailable: nothing more is run (this dataset or
    the next ones) and every unresolved file gets :class:`SparkUnavailable` (held by the runner
    as a condition of cluster B, not blamed on a file).

    A :class:`TransientError` raised by the job (a failed rename: HDFS, not the data) is given to
    the files of that group without splitting or resetting the session.

    Returns:
        ({file_id: FileResult, or the TransientError of that file}, the error that made the
        session unavailable, or None)
    """
    name = spec.name
    splits_left = split_budget(len(group))
    out: dict[str, Any] = {}
    queue: deque[list[FileExtracted]] = deque([group])
    while queue:
        part = queue.popleft()
        files = {ev.manifest.uris["landing"]: ev.file_id for ev in part}
        sources = {ev.file_id: ev.manifest.source_path for ev in part}
        try:
            spark = deps.spark()
        except ConfigError:
            raise
        except Exception as exc:  # noqa: BLE001 - no session: no job can run, stop here
            log.warning("transform: no Spark session for %s: %s", name, exc)
            for ev in [e for p in (part, *queue) for e in p]:
                out[ev.file_id] = _unavailable(ev, exc)
            return out, exc
        try:
            got = deps.run_batch(
                spark,
                spec,
                files,
                staging_root=deps.staging_root,
                rejects_root=deps.rejects_root,
                sources=sources,
            )
        except ConfigError:
            raise
        except TransientError as exc:
            for ev in part:
                out[ev.file_id] = exc
            continue
        except Exception as exc:  # noqa: BLE001 - py4j/pyspark errors: this group's job failed
            condition = condition_in(
                exc, cluster="b", what=f"transform of {len(part)} {name} file(s)"
            )
            if condition is not None:  # the cluster's, not a file's: no bisection (C22)
                log.warning("transform: %s", condition)
                for ev in part:
                    out[ev.file_id] = condition
                continue
            line = first_line(exc)
            log.warning("transform: Spark job for %d %s file(s) failed: %s", len(part), name, line)
            if deps.reset_spark():  # the context died under the job: no file is to blame
                for ev in [e for p in (part, *queue) for e in p]:
                    out[ev.file_id] = _unavailable(ev, exc)
                return out, exc
            if len(part) == 1:
                [ev] = part
                out[ev.file_id] = SparkJobFailed(
                    f"{ev.manifest.source_path} ({ev.file_id}): Spark job for this file alone "
                    f"failed: {line}"
                )
            elif splits_left > 0:
                splits_left -= 1
                half = (len(part) + 1) // 2
                queue += (part[:half], part[half:])
            else:
                for ev in part:
                    out[ev.file_id] = TransientError(
                        f"{ev.manifest.source_path} ({ev.file_id}): not isolated: a Spark job "
                        f"over it and {len(part) - 1} other {name} file(s) failed ({line}); "
                        "split budget spent"
                    )
            continue
        for ev in part:
            out[ev.file_id] = got[ev.file_id]
    return out, None


def _unavailable(ev: FileExtracted, exc: BaseException) -> SparkUnavailable:
    return SparkUnavailable(
        f"{ev.manifest.source_path} ({ev.file_id}): no Spark session: {first_line(exc)}",
        cluster="b",
    )


def first_line(exc: BaseException) -> str:
    """The informative first line of a Spark error: a ``Py4JJavaError`` reads
    "An error occurred while calling o58.csv.\n: org.apache.spark.SparkException: Job aborted
    ..."; the Java exception's line is the one worth reporting (cut at 500 characters)."""
    for raw in str(exc).splitlines():
        line = raw.strip().lstrip(":").strip()
        if line and not line.startswith("An error occurred while calling"):
            return line[:500]
    return type(exc).__name__


def _result(
    ev: FileExtracted, res: Any, deps: TransformDeps, version: str | None = None
) -> BatchResult:
    if res.status == "empty":
        return PermanentError(
            f"{ev.manifest.source_path}: no data rows ({res.reason})", reason=f"empty_{res.reason}"
        )
    if res.status == "failed" and res.reason == InputExpired.reason:
        m = ev.manifest
        return InputExpired(
            "landing",
            m.uris["landing"],
            file_id=m.file_id,
            source_path=m.source_path,
            dataset=m.dataset,
        )
    if res.status == "failed":
        return PermanentError(res.message or res.reason, reason=res.reason or "transform_failed")
    c = res.counts
    if c.rows_in != c.rows_out + c.rows_rejected:
        return PermanentError(
            f"{ev.file_id}: rows_in {c.rows_in} != rows_out {c.rows_out} + "
            f"rows_rejected {c.rows_rejected}",
            reason="count_mismatch",
        )
    uris = {"staging": _uri(deps.staging_root, res.staged_path)}
    if res.rejects_path:
        uris["rejects"] = _uri(deps.rejects_root, res.rejects_path)
    return [
        FileTransformed(
            ev.manifest.advance(
                uris=uris,
                rows_in=c.rows_in,
                rows_out=c.rows_out,
                rows_rejected=c.rows_rejected,
                reject_reasons=dict(c.reject_reasons),
                definition_version=version,
            )
        )
    ]


def _uri(root: str, path: str) -> str:
    """``path`` as a full URI (the job returns paths under ``root``'s scheme and authority)."""
    if "://" in path:
        return path
    scheme_authority = root.split("/", 3)[:3]
    return "/".join(scheme_authority) + path
