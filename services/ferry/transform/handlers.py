"""transform's batch handler: landed CSV files → validated Parquet in B staging.

One call handles a batch of ``FileExtracted`` events: per dataset, one Spark job reads every file
(:func:`ferry.jobs.transform.run_batch`), so no JVM starts per file. Per file the result is a
``FileTransformed`` (rows_in = rows_out + rows_rejected, staging and rejects URIs), or a
quarantine: ``empty_*`` (case C11), ``header_mismatch``, ``unknown_dataset``. A Spark failure
(e.g. the master pair failing over, case C03) is a :class:`TransientError` for the whole batch;
the runner retries it and the session is rebuilt.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from ferry.core.batching import group_by_dataset
from ferry.core.errors import PermanentError, TransientError
from ferry.core.events import FileExtracted, FileTransformed
from ferry.core.runner import BatchResult
from ferry.datasets import DatasetSpec

log = logging.getLogger(__name__)

#: (spark, spec, {landing uri: file_id}, staging_root, rejects_root) → {file_id: FileResult}
RunBatch = Callable[..., Mapping[str, Any]]


@dataclass
class TransformDeps:
    """``spark()`` returns the live session (rebuilding it if needed); ``run_batch`` is
    :func:`ferry.jobs.transform.run_batch` (a fake in unit tests)."""

    datasets: Mapping[str, DatasetSpec]
    spark: Callable[[], Any]
    reset_spark: Callable[[], None]
    run_batch: RunBatch
    staging_root: str  #: full URI, e.g. hdfs://127.0.0.1:18020/ferry/staging
    rejects_root: str


def transform_batch(events: Sequence[FileExtracted], deps: TransformDeps) -> list[BatchResult]:
    """One result per event, in order (see :data:`ferry.core.runner.BatchHandler`)."""
    results, by_dataset = group_by_dataset(events, deps.datasets, "landing")
    for name, idx in by_dataset.items():
        spec = deps.datasets[name]
        # Several events of one file in a batch (redelivery, or the same bytes re-dropped under
        # another name, so another landing path): read ONE landing copy per file_id, else the
        # job would stage both copies' rows under that file_id; answer each event.
        first: dict[str, str] = {}
        for i in idx:
            first.setdefault(events[i].file_id, events[i].manifest.uris["landing"])
        files = {uri: fid for fid, uri in first.items()}
        try:
            out = deps.run_batch(
                deps.spark(),
                spec,
                files,
                staging_root=deps.staging_root,
                rejects_root=deps.rejects_root,
            )
        except TransientError:
            raise
        except Exception as exc:  # noqa: BLE001 - py4j/pyspark errors: the job failed; retry the batch
            log.warning("transform: Spark job for %d %s file(s) failed: %s", len(files), name, exc)
            deps.reset_spark()
            raise TransientError(
                f"Spark job for {len(files)} {name} file(s) failed: {exc}"
            ) from exc
        for i in idx:
            results[i] = _result(events[i], out[events[i].file_id], deps)
    return [results[i] for i in range(len(events))]


def _result(ev: FileExtracted, res: Any, deps: TransformDeps) -> BatchResult:
    if res.status == "empty":
        return PermanentError(
            f"{ev.manifest.source_path}: no data rows ({res.reason})", reason=f"empty_{res.reason}"
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
                uris=uris, rows_in=c.rows_in, rows_out=c.rows_out, rows_rejected=c.rows_rejected
            )
        )
    ]


def _uri(root: str, path: str) -> str:
    """``path`` as a full URI (the job returns paths under ``root``'s scheme and authority)."""
    if "://" in path:
        return path
    scheme_authority = root.split("/", 3)[:3]
    return "/".join(scheme_authority) + path
