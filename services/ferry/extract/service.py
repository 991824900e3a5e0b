"""The extract service: poll the NAS, land finished files on HDFS B, emit ``FileExtracted``.

Thin loop (house style rule 1): scan → :func:`~ferry.extract.handlers.extract_file` under the retry
policy → produce and wait for the broker's ack → only then archive/delete the NAS file. A crash
anywhere before the ack leaves the NAS file in place, so it is extracted again (same ``file_id``,
idempotent downstream); nothing is lost. A file that still fails after the retry ceiling goes to
``ferry.failed`` and is moved under ``<nas>/.ferry/failed/`` so it is not retried forever.
"""

from __future__ import annotations

import logging
import shutil
import signal
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ferry.core.avro import EventCodec, default_codec
from ferry.core.config import Settings, get_settings
from ferry.core.errors import ConfigError, PermanentError, TransientError
from ferry.core.events import Event, FileFailed, event_key, utc_now
from ferry.core.hdfs import WebHdfs
from ferry.core.kafka import (
    OutboundRecord,
    build_admin,
    build_producer,
    delivery_timeout_s,
    produce_and_wait,
)
from ferry.core.runner import retrying
from ferry.core.topics import ensure_topics
from ferry.datasets import load_datasets
from ferry.extract.handlers import ExtractDeps, SourceChanged, extract_file
from ferry.extract.scanner import Candidate, NasScanner

log = logging.getLogger(__name__)


@dataclass
class ExtractStats:
    extracted: int = 0
    failed: int = 0
    scans: int = 0
    by_reason: dict[str, int] = field(default_factory=dict)


class ExtractService:
    """Built by :func:`build`; :meth:`run` until SIGTERM or :meth:`stop`."""

    def __init__(
        self,
        settings: Settings,
        scanner: NasScanner,
        deps: ExtractDeps,
        producer: Any,
        codec: EventCodec,
    ) -> None:
        self.settings = settings
        self.scanner = scanner
        self.deps = deps
        self.producer = producer
        self.codec = codec
        self.stats = ExtractStats()
        self._stop = threading.Event()
        self._stats_lock = threading.Lock()  # handle() runs on several worker threads

    def stop(self) -> None:
        self._stop.set()

    def run_once(self) -> int:
        """One scan; land its finished files, ``settings.extract.workers`` at a time.

        Returns how many files were handled (extracted or quarantined). Re-raises the first
        error that escaped :meth:`handle` (an event the broker never acknowledged) after the
        other files of the scan are done; their NAS files stay in place when unacknowledged.
        """
        self.stats.scans += 1
        cands = self.scanner.scan(time.monotonic())
        if not cands:
            return 0
        with ThreadPoolExecutor(
            max_workers=self.settings.extract.workers, thread_name_prefix="ferry-extract"
        ) as pool:
            futures = [pool.submit(self._handle_unless_stopped, c) for c in cands]
        for fut in futures:
            fut.result()
        return sum(1 for fut in futures if fut.result())

    def _handle_unless_stopped(self, cand: Candidate) -> bool:
        if self._stop.is_set():
            return False
        self.handle(cand)
        return True

    def handle(self, cand: Candidate) -> None:
        """Extract one file, emit its event, then archive it per
        ``settings.extract.after_extract``."""
        try:
            events: list[Event] = list(
                retrying(self.settings.retry, self._stop)(extract_file, cand, self.deps)
            )
            outcome = "archive"
        except (FileNotFoundError, SourceChanged) as exc:
            log.info("extract: %s not taken: %s", cand.relative, exc)
            self.scanner.forget(cand.path)
            return
        except (TransientError, PermanentError) as exc:
            if self._stop.is_set():
                return
            log.warning("extract: %s failed: %s", cand.relative, exc)
            events = [
                FileFailed(
                    stage="extract",
                    reason=exc.reason,
                    error=f"{cand.relative}: {exc}",
                    attempt=self.settings.retry.max_attempts,
                    failed_at=utc_now(),
                )
            ]
            outcome = "failed"
        records = [
            OutboundRecord(
                self.settings.kafka.topic(ev.TOPIC),
                event_key(ev, cand.relative).encode(),
                self.codec.encode(ev),
            )
            for ev in events
        ]
        timeout = delivery_timeout_s(self.settings.kafka) + 1
        retrying(self.settings.retry)(produce_and_wait, self.producer, records, timeout)
        with self._stats_lock:
            for ev in events:
                if isinstance(ev, FileFailed):
                    self.stats.failed += 1
                    self.stats.by_reason[ev.reason] = self.stats.by_reason.get(ev.reason, 0) + 1
                    if ev.reason.startswith("empty_"):
                        outcome = "empty"
                else:
                    self.stats.extracted += 1
        self._after(cand, outcome)

    def _after(self, cand: Candidate, outcome: str) -> None:
        """Move the NAS file (and its marker) out of the drop directory, or delete/keep it."""
        policy = self.settings.extract.after_extract
        if policy == "keep" and outcome == "archive":
            self.scanner.done(cand)  # else the next scans would extract it again and again
            return
        self.scanner.forget(cand.path)
        for path in (cand.path, cand.marker):
            if path is None or not path.exists():
                continue
            if policy == "delete" and outcome == "archive":
                path.unlink()
                continue
            dest = self.settings.paths.nas_dir / ".ferry" / outcome / cand.dataset.name / path.name
            dest.parent.mkdir(parents=True, exist_ok=True)
            shutil.move(str(path), dest)

    def run(self) -> ExtractStats:
        """Poll every ``settings.extract.poll_interval_s`` until stopped (SIGTERM/SIGINT)."""
        previous = {}
        if threading.current_thread() is threading.main_thread():
            previous = {
                s: signal.signal(s, lambda *_: self.stop()) for s in (signal.SIGTERM, signal.SIGINT)
            }
        log.info(
            "extract: watching %s for %s",
            self.settings.paths.nas_dir,
            sorted(self.scanner.datasets),
        )
        try:
            while not self._stop.is_set():
                self.run_once()
                self._stop.wait(self.settings.extract.poll_interval_s)
        finally:
            for s, h in previous.items():
                signal.signal(s, h)
            self.producer.flush(self.settings.kafka.request_timeout_s)
        return self.stats


def build(settings: Settings | None = None) -> ExtractService:
    """Wire the extract service: datasets, topic plan, producer, HDFS B port.

    Raises:
        ConfigError: bad dataset definitions or settings.
    """
    settings = settings or get_settings()
    datasets = load_datasets(settings.paths.datasets_dir)
    if not datasets:
        raise ConfigError(f"no dataset definitions in {settings.paths.datasets_dir}")
    for spec in datasets.values():
        (settings.paths.nas_dir / spec.nas.subdir).mkdir(parents=True, exist_ok=True)
    ensure_topics(build_admin(settings.kafka), settings.kafka)
    b = settings.cluster("b")
    deps = ExtractDeps(
        WebHdfs.for_cluster("b", settings),
        settings.paths.landing_path,
        b.fs_url,
        settings.extract.chunk_bytes,
    )
    return ExtractService(
        settings,
        NasScanner(Path(settings.paths.nas_dir), datasets),
        deps,
        build_producer(settings.kafka, "ferry-extract"),
        default_codec(settings.paths.schemas_dir),
    )


def main() -> None:
    """``python -m ferry.extract`` / ``ferry run extract``."""
    logging.basicConfig(
        level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s"
    )
    build().run()
