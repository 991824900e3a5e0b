"""load's batch handler: transferred files on A → the dataset's Hive table → ``FileLoaded``.

One Spark job per dataset per batch (:func:`ferry.stages.load.job.load_files`): rows are matched
to the table by name in table order, a mismatch fails before writing (case C12), and the
partitions the batch's rows fall in are rewritten as their other files' rows plus the batch's, so
loading a file again (retry, replay, re-drop) leaves one copy of its rows and other files' rows
untouched (case C13). ``FileLoaded.partition`` is ``{"ferry_file_id": …}``: the column value that
selects the file's rows (a data column since docs/hive-layout.md, no longer a Hive partition).

Reconciliation: the rows of the file found in the table after the write must equal the
manifest's ``rows_out``; otherwise the file is quarantined with ``row_count_mismatch``.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from ferry.core.errors import PermanentError, TransientError
from ferry.core.events import FileLoaded, FileTransferred
from ferry.core.runtime.batching import group_by_dataset
from ferry.core.runtime.stage import BatchResult
from ferry.datasets.reload import Definitions, snapshot
from ferry.datasets.spec import DatasetSpec

log = logging.getLogger(__name__)


@dataclass
class LoadDeps:
    """``datasets``: the service's reloading :class:`~ferry.datasets.reload.Definitions` (a
    fixed mapping in tests)."""

    datasets: Definitions | Mapping[str, DatasetSpec]
    spark: Callable[[], Any]
    reset_spark: Callable[[], None]
    #: (spark, spec, {file_id: incoming dir URI}, sources={file_id: NAS source_path})
    #: → {file_id: rows now in the table}
    load_files: Callable[..., Mapping[str, int]]


def load_batch(events: Sequence[FileTransferred], deps: LoadDeps) -> list[BatchResult]:
    """One result per event, in order (see :data:`ferry.core.runtime.runner.BatchHandler`). The
    definitions are reloaded first if they changed; a file whose dataset's definition is invalid
    waits (:class:`~ferry.core.errors.DatasetNotReady`)."""
    defs = snapshot(deps.datasets)
    specs = defs.specs
    results, by_dataset = group_by_dataset(events, specs, "incoming", defs.wait_reason)
    for name, idx in by_dataset.items():
        spec = specs[name]
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
            want = ev.manifest.rows_out
            if want is not None and got != want:
                results[i] = PermanentError(
                    f"{ev.file_id}: {got} rows in {spec.hive.full_name}, "
                    f"manifest says rows_out={want}",
                    reason="row_count_mismatch",
                )
                continue
            manifest = ev.manifest.advance(
                uris={"table": spec.hive.full_name}, definition_version=defs.version(name)
            )
            results[i] = [
                FileLoaded(
                    manifest, table=spec.hive.full_name, partition={"ferry_file_id": ev.file_id}
                )
            ]
    return [results[i] for i in range(len(events))]
