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
file the job refused alone (its :class:`PermanentError`) is quarantined with that reason.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from ferry.core.batching import group_by_dataset
from ferry.core.errors import PermanentError, TransientError
from ferry.core.events import FileLoaded, FileTransferred
from ferry.core.stage import BatchResult
from ferry.datasets import DatasetSpec

log = logging.getLogger(__name__)


@dataclass
class LoadDeps:
    datasets: Mapping[str, DatasetSpec]
    spark: Callable[[], Any]
    reset_spark: Callable[[], None]
    #: (spark, spec, {file_id: incoming dir URI}, sources={file_id: NAS source_path})
    #: → {file_id: rows now in the table, or the PermanentError of that file}
    load_files: Callable[..., Mapping[str, int | PermanentError]]


def load_batch(events: Sequence[FileTransferred], deps: LoadDeps) -> list[BatchResult]:
    """One result per event, in order (see :data:`ferry.core.runner.BatchHandler`)."""
    results, by_dataset = group_by_dataset(events, deps.datasets, "incoming")
    for name, idx in by_dataset.items():
        spec = deps.datasets[name]
        files = {events[i].file_id: events[i].manifest.uris["incoming"] for i in idx}
        sources = {events[i].file_id: events[i].manifest.source_path for i in idx}
        try:
            loaded = deps.load_files(deps.spark(), spec, files, sources=sources)
        except (PermanentError, TransientError) as exc:
            for i in idx:
                results[i] = exc
            continue
        except Exception as exc:  # noqa: BLE001 - py4j/pyspark: the job failed; idempotent, retry
            log.warning("load: Spark job for %d %s file(s) failed: %s", len(files), name, exc)
            deps.reset_spark()
            raise TransientError(
                f"Spark load of {len(files)} {name} file(s) failed: {exc}"
            ) from exc
        for i in idx:
            ev = events[i]
            got = loaded.get(ev.file_id, 0)
            if isinstance(got, PermanentError):
                results[i] = got
                continue
            want = ev.manifest.rows_out
            if want is not None and got != want:
                results[i] = PermanentError(
                    f"{ev.file_id}: {got} rows in {spec.hive.full_name}, "
                    f"manifest says rows_out={want}",
                    reason="row_count_mismatch",
                )
                continue
            manifest = ev.manifest.advance(uris={"table": spec.hive.full_name})
            results[i] = [
                FileLoaded(
                    manifest, table=spec.hive.full_name, partition={"ferry_file_id": ev.file_id}
                )
            ]
    return [results[i] for i in range(len(events))]
