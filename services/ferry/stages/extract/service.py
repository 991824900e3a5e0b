"""The extract service: watch the NAS, land finished files on HDFS B, emit ``FileExtracted``.

Thin loop: scan (every ``poll_interval_s``, and at once when the watcher of
:mod:`ferry.stages.extract.watcher` reports a file complete) →
:func:`~ferry.stages.extract.handlers.extract_file` under the retry policy → produce and wait
for the broker's ack → only then archive/delete the NAS file. A crash
anywhere before the ack leaves the NAS file in place, so it is extracted again (same ``file_id``,
idempotent downstream); nothing is lost. A file that still fails after the retry ceiling goes to
``ferry.failed`` and is moved under ``<nas>/.ferry/failed/`` so it is not retried forever.

One file never ends the service: an unexpected error while extracting it (an ``OSError``, a
``UnicodeError``, any exception that is not a :class:`~ferry.core.errors.ConfigError` or
:class:`~ferry.core.errors.StackError`) quarantines that file with reason ``extract_error``
(traceback logged) and the others go on. Only an event the broker never acknowledged after the
retries stops the service, with the NAS file left in place. Moved files never overwrite one
another: ``.ferry/<outcome>/<dataset>/<name>``, or ``<stem>.<file_id[:12]><suffix>`` (else
a UTC timestamp) when that name is taken (:mod:`ferry.clusters.nas`).
"""

from __future__ import annotations

import logging
import os
import shutil
import signal
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ferry.clusters.hdfs.webhdfs import WebHdfs
from ferry.clusters.nas import free_name, outcome_dir
from ferry.core.errors import ConfigError, PermanentError, TransientError
from ferry.core.events import Event, FileFailed, failed, utc_now
from ferry.core.kafka.clients import OutboundRecord, build_admin, build_producer
from ferry.core.kafka.publish import encode_events, publish
from ferry.core.kafka.topics import ensure_topics
from ferry.core.retry import retrying
from ferry.core.runtime.heartbeat import beat, heartbeat_path, remove
from ferry.core.runtime.service import service_main
from ferry.core.runtime.stage import HandlerBug, settle
from ferry.core.wire.avro import EventCodec, default_codec
from ferry.datasets.spec import load_datasets
from ferry.settings import Settings, get_settings
from ferry.stages.extract.handlers import ExtractDeps, SourceChanged, extract_file
from ferry.stages.extract.scanner import Candidate, NasScanner, display_name
from ferry.stages.extract.watcher import NasWatcher, choose_detection

log = logging.getLogger(__name__)

#: ``FileFailed.reason`` of a file whose extraction raised an unexpected error (a bug or an
#: unforeseen file-system state); the traceback is in extract's log.
EXTRACT_ERROR = "extract_error"


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
        #: set by the watcher (a file completed) or stop(): the loop scans without waiting
        self._wake = threading.Event()
        self.detection = "poll"
        self._stats_lock = threading.Lock()  # handle() runs on several worker threads
        self._move_lock = threading.Lock()
        # While run() runs: touched after every scan and every file handled (`ferry ps` health,
        # core/heartbeat.py).
        self._alive: Path | None = None

    def stop(self) -> None:
        self._stop.set()
        self._wake.set()

    def wake(self) -> None:
        """Scan now (called from the watcher's thread when a file is complete)."""
        self._wake.set()

    def _start_watcher(self) -> NasWatcher | None:
        """The inotify watcher per ``settings.extract.detection``, or None (polling alone).

        Raises:
            ConfigError: ``detection: inotify`` and the OS refused the watches.
        """
        setting = self.settings.extract.detection
        if choose_detection(setting, self.settings.paths.nas_dir) != "inotify":
            log.info("extract: polling the NAS every %ss", self.settings.extract.poll_interval_s)
            return None
        watcher = NasWatcher(self.scanner, self.wake, self.settings.extract.close_settle_s)
        try:
            watcher.start()
        except ConfigError:
            if setting == "inotify":
                raise
            log.warning("extract: inotify unavailable; polling the NAS instead", exc_info=True)
            return None
        self.detection = "inotify"
        return watcher

    def run_once(self) -> int:
        """One scan; land its finished files, ``settings.extract.workers`` at a time.

        Returns how many files were handled (extracted or quarantined). Re-raises the first
        error that escaped :meth:`handle` (an event the broker never acknowledged) after the
        other files of the scan are done; their NAS files stay in place when unacknowledged.
        """
        self.stats.scans += 1
        cands = self.scanner.scan(time.monotonic())
        cands += self.scanner.take_refusals()  # recorded and moved away, never read (C15)
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
        if self._alive is not None:
            beat(self._alive)
        return True

    def handle(self, cand: Candidate) -> None:
        """Extract one file, emit its event, then archive it per
        ``settings.extract.after_extract``.

        A file that fails is quarantined (``FileFailed`` + moved to ``.ferry/failed/``): a
        :class:`PermanentError`, a :class:`TransientError` past the retry ceiling, or any
        unexpected exception (reason ``extract_error``).

        Raises:
            TransientError: the broker did not acknowledge the event after the retries (the NAS
                file stays in place and is extracted again later).
            ConfigError, StackError: the process cannot go on.
        """
        where = display_name(cand.relative)
        try:
            events: list[Event] = list(
                retrying(self.settings.retry, self._stop)(extract_file, cand, self.deps)
            )
            records = self._records(cand, events)
            outcome = "archive"
        except (FileNotFoundError, SourceChanged) as exc:
            log.info("extract: %s not taken: %s", where, exc)
            self.scanner.forget(cand.path)
            return
        except Exception as exc:  # noqa: BLE001 - the one quarantine policy decides (settle)
            verdict = settle(exc, bug_reason=EXTRACT_ERROR)  # raises ConfigError, StackError
            if isinstance(verdict, HandlerBug):
                log.exception("extract: %s failed unexpectedly; quarantined", where)
                events = [self._failed(cand, verdict, 1)]
            else:
                if self._stop.is_set():
                    return
                log.warning("extract: %s failed: %s", where, exc)
                events = [self._failed(cand, verdict, self.settings.retry.max_attempts)]
            records = self._records(cand, events)
            outcome = "failed"
        publish(self.producer, records, self.settings)
        with self._stats_lock:
            for ev in events:
                if isinstance(ev, FileFailed):
                    self.stats.failed += 1
                    self.stats.by_reason[ev.reason] = self.stats.by_reason.get(ev.reason, 0) + 1
                    outcome = "empty" if ev.reason.startswith("empty_") else "failed"
                else:
                    self.stats.extracted += 1
        self._after(cand, outcome, next((ev.file_id for ev in events if ev.file_id), None))

    @staticmethod
    def _failed(cand: Candidate, exc: PermanentError | TransientError, attempt: int) -> FileFailed:
        return failed(
            stage="extract",
            reason=exc.reason,
            error=display_name(f"{cand.relative}: {exc}"),
            attempt=attempt,
            raw_key=os.fsencode(cand.relative),
        )

    def _records(self, cand: Candidate, events: list[Event]) -> list[OutboundRecord]:
        """``events`` encoded; one without a file_id is keyed by the NAS path (displayable)."""
        return encode_events(events, self.settings, self.codec, display_name(cand.relative))

    def _after(self, cand: Candidate, outcome: str, file_id: str | None) -> None:
        """Move the NAS file (and its marker) out of the drop directory, or delete/keep it.

        Never overwrites under ``.ferry/`` (see :func:`free_name`). A move or delete that fails
        (permissions, a vanished share) is logged and the file is remembered as handled, so it
        is not extracted again while unchanged (until a restart)."""
        policy = self.settings.extract.after_extract
        if policy == "keep" and outcome == "archive":
            self.scanner.done(cand)  # else the next scans would extract it again and again
            return
        self.scanner.forget(cand.path)
        dest_dir = outcome_dir(self.settings.paths.nas_dir, outcome, cand.dataset.name)
        tag = file_id[:12] if file_id else utc_now().strftime("%Y%m%dT%H%M%S%fZ")
        try:
            with self._move_lock:  # choosing a free name and taking it is one step
                moved: Path | None = None
                for path in (cand.path, cand.marker):
                    if path is None or not os.path.lexists(path):  # a link itself (C15)
                        continue
                    if policy == "delete" and outcome == "archive":
                        path.unlink()
                        continue
                    dest_dir.mkdir(parents=True, exist_ok=True)
                    name = path.name
                    if moved is not None and name.startswith(cand.path.name):
                        name = moved.name + name[len(cand.path.name) :]  # marker follows its file
                    dest = free_name(dest_dir, name, tag)
                    shutil.move(str(path), dest)
                    moved = moved or dest
        except OSError as exc:
            log.error(
                "extract: %s could not be moved to %s (%s); left in place, not taken again "
                "while unchanged",
                display_name(cand.relative),
                display_name(dest_dir),
                display_name(str(exc)),
            )
            self.scanner.done(cand)

    def run(self) -> ExtractStats:
        """Scan every ``settings.extract.poll_interval_s``, and at once when the watcher reports
        a complete file (``settings.extract.detection``), until stopped (SIGTERM/SIGINT).

        Raises:
            ConfigError: ``detection: inotify`` and the OS refused the watches.
        """
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
        self._alive = alive = heartbeat_path(self.settings, "extract")
        watcher = self._start_watcher()
        try:
            while not self._stop.is_set():
                self._wake.clear()  # a file completed while scanning wakes the next wait
                self.run_once()
                wait = self.settings.extract.poll_interval_s
                now = time.monotonic()
                if (due := self.scanner.next_due(now)) is not None:  # a mark still settling
                    wait = min(wait, due - now + 0.01)
                beat(alive)
                self._wake.wait(wait)
        finally:
            remove(alive)
            self._alive = None
            if watcher is not None:
                watcher.stop()
            for s, h in previous.items():
                signal.signal(s, h)
            self.producer.flush(self.settings.kafka.request_timeout_s)
        return self.stats


def build(settings: Settings | None = None) -> ExtractService:
    """Wire the extract service: datasets, topic plan, producer, HDFS B port.

    Creates each dataset's NAS sub-directory when missing. One that cannot be created (a plain
    file has that name, permissions) is logged as an error and that dataset is skipped by the
    scanner (warned once), while the others run: the NAS share is written by users, so a stray
    file there must not stop every dataset. Removing the file and restarting (or creating the
    directory) brings the dataset back.

    Raises:
        ConfigError: bad dataset definitions or settings.
    """
    settings = settings or get_settings()
    datasets = load_datasets(settings.paths.datasets_dir)
    if not datasets:
        raise ConfigError(f"no dataset definitions in {settings.paths.datasets_dir}")
    for spec in datasets.values():
        subdir = settings.paths.nas_dir / spec.nas.subdir
        try:
            subdir.mkdir(parents=True, exist_ok=True)
        except OSError as exc:  # FileExistsError/NotADirectoryError: a plain file has the name
            log.error(
                "extract: dataset %r skipped: its NAS sub-directory %s cannot be created "
                "(%s: %s); if a plain file has that name, move it away and restart",
                spec.name,
                subdir,
                type(exc).__name__,
                exc.strerror or exc,
            )
    ensure_topics(build_admin(settings.kafka), settings.kafka)
    b = settings.cluster("b")
    deps = ExtractDeps(
        WebHdfs.for_cluster("b", settings),
        settings.paths.landing_path,
        b.fs_url,
        settings.extract.chunk_bytes,
        refuse_hardlinks=settings.extract.refuse_hardlinks,
    )
    return ExtractService(
        settings,
        NasScanner(
            Path(settings.paths.nas_dir),
            datasets,
            follow_symlinks=settings.extract.follow_symlinks,
            refuse_hardlinks=settings.extract.refuse_hardlinks,
        ),
        deps,
        build_producer(settings.kafka, "ferry-extract"),
        default_codec(settings.paths.schemas_dir),
    )


#: ``ferry run extract`` (:func:`ferry.core.services.run`).
main = service_main(build)
