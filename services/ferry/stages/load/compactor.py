"""The load service's compactor: one background thread that compacts the partitions a load
batch moved files into (:mod:`ferry.tables.compaction`), so the batches go on.

A committed batch hands its table and partition directories to :meth:`Compactor.submit`; the
thread takes one table at a time with every partition submitted for it since, lists those
partitions (a NameNode call each) and merges the ones over ``load.compact_max_files``. The merge
(a Spark job on the service's session) runs without the table's lock; only its commit takes it,
so loads of this table wait at most for a commit and loads of other tables never. A failed
compaction is logged; its partitions are looked at again when a batch next touches them.
"""

from __future__ import annotations

import contextlib
import logging
import threading
import time
from collections import deque
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from ferry.clusters.spark_jobs import HadoopFileSystem
from ferry.datasets.spec import DatasetSpec
from ferry.tables.compaction import CompactReport, compact
from ferry.tables.hive import catalog
from ferry.tables.index import TableIndex

if TYPE_CHECKING:
    from ferry.tables.locks import TableLocks

log = logging.getLogger(__name__)


class Compactor:
    """Background compaction of the tables a load service writes.

    Args:
        spark: returns the service's SparkSession.
        locks: the table locks (``None``: no lock, one writer per table by construction).
        max_files: ``load.compact_max_files``.
        target_bytes: ``load.target_file_mb`` in bytes.
    """

    def __init__(
        self,
        spark: Callable[[], Any],
        locks: TableLocks | None,
        *,
        max_files: int,
        target_bytes: int,
    ) -> None:
        self.spark, self.locks = spark, locks
        self.max_files, self.target_bytes = max_files, target_bytes
        self._pending: dict[str, tuple[DatasetSpec, str, set[str]]] = {}
        self._cond = threading.Condition()
        self._busy = False
        self._stop = False
        #: The latest compactions (table, report), newest last.
        self.reports: deque[tuple[str, CompactReport]] = deque(maxlen=100)
        self._thread = threading.Thread(target=self._run, name="ferry-compactor", daemon=True)
        self._thread.start()

    def submit(self, spec: DatasetSpec, location: str, partitions: tuple[str, ...]) -> None:
        """Look at these partition directories of ``spec``'s table (a ``load_files`` hook)."""
        with self._cond:
            _, _, parts = self._pending.setdefault(spec.hive.full_name, (spec, location, set()))
            parts.update(partitions)
            self._cond.notify_all()

    def drain(self, timeout_s: float) -> bool:
        """Wait until nothing is pending or running; False when ``timeout_s`` passed first."""
        deadline = time.monotonic() + timeout_s
        with self._cond:
            while self._pending or self._busy:
                left = deadline - time.monotonic()
                if left <= 0:
                    return False
                self._cond.wait(left)
        return True

    def close(self) -> None:
        """Stop the thread after the compaction it is running (pending work is dropped)."""
        with self._cond:
            self._stop = True
            self._cond.notify_all()
        self._thread.join(600)

    def _run(self) -> None:
        while True:
            with self._cond:
                while not self._pending and not self._stop:
                    self._cond.wait()
                if self._stop:
                    return
                table, (spec, location, parts) = next(iter(self._pending.items()))
                del self._pending[table]
                self._busy = True
            try:
                self._compact(spec, location, sorted(parts))
            except Exception:  # noqa: BLE001 - a background job: log it, the next batch retries
                log.exception("compaction of %s failed; retried when a batch touches it", table)
            finally:
                with self._cond:
                    self._busy = False
                    self._cond.notify_all()

    def _compact(self, spec: DatasetSpec, location: str, partitions: list[str]) -> None:
        from pyspark.sql.types import StructType

        spark = self.spark()
        table = spec.hive.full_name
        pcols = tuple(spec.hive.partition_by)
        index = TableIndex(HadoopFileSystem(spark), location)
        schema = StructType([f for f in spark.table(table).schema.fields if f.name not in pcols])
        locks = self.locks
        t0 = time.monotonic()
        report = compact(
            spark,
            index,
            catalog(spark, table, pcols),
            schema,
            partitions,
            max_files=self.max_files,
            target_bytes=self.target_bytes,
            lock=(lambda: locks.hold(table)) if locks is not None else contextlib.nullcontext,
        )
        if report.before or report.skipped:
            log.info(
                "compacted %s in %.1fs: %s partition(s), files %s → %s, %d rows%s",
                table,
                time.monotonic() - t0,
                len(report.before),
                sum(report.before.values()),
                sum(report.after.values()),
                report.rows,
                f" (skipped: {report.skipped})" if report.skipped else "",
            )
        self.reports.append((table, report))
