"""The extract service: watch the NAS, land finished files on HDFS B, emit ``FileExtracted``.

Thin loop: scan (every ``poll_interval_s``, and at once when the watcher of
:mod:`ferry.stages.extract.watcher` reports a file complete) →
:func:`~ferry.stages.extract.handlers.extract_file` under the retry policy → produce and wait
for the broker's ack → only then archive/delete the NAS file. A crash
anywhere before the ack leaves the NAS file in place, so it is extracted again (same ``file_id``,
idempotent downstream); nothing is lost. A file that still fails after the retry ceiling goes to
``ferry.failed`` and is moved under ``<nas>/.ferry/failed/`` so it is not retried forever.

One file never ends the service: an unexpected error while extracting it (an ``OSError``, a
``UnicodeError``, any exception that is not a :class:`~ferry.errors.ConfigError`) quarantines
that file with reason ``extract_error`` (traceback logged) and the others go on. Only an event
the broker never acknowledged after the retries stops the service, with the NAS file left in
place. Moved files never overwrite one another (:mod:`ferry.stages.extract.moves`). A file a
condition of cluster B refuses (a quota, safe mode: case C22) stays on the NAS and is tried
again later (:mod:`ferry.stages.extract.holds`).

Issue 33: a file some process still writes is held back (:mod:`ferry.stages.extract.writers`),
and a moved file written after it was taken is reported and its new bytes taken as a new version
(:mod:`ferry.stages.extract.afterwards`), each scan.
"""

from __future__ import annotations

import logging
import signal
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from ferry.clusters.hdfs.webhdfs import WebHdfs
from ferry.core.events import Event, FileFailed, FileManifest
from ferry.core.kafka.clients import OutboundRecord, build_admin, build_producer
from ferry.core.kafka.publish import encode_events, publish
from ferry.core.kafka.topics import ensure_topics
from ferry.core.retry import retrying
from ferry.core.runtime.conditions import conditions_path
from ferry.core.runtime.heartbeat import (
    beat,
    datasets_status_path,
    heartbeat_path,
    remove,
    sweep_dead,
)
from ferry.core.runtime.service import service_main
from ferry.core.runtime.stage import HandlerBug, settle
from ferry.core.wire.avro import EventCodec, default_codec
from ferry.datasets.reload import Definitions
from ferry.errors import DatasetNotReady, PermanentError, TransientError
from ferry.lineage.events import now_iso
from ferry.lineage.observer import LineageObserver, lineage_observer
from ferry.settings import Settings, get_settings
from ferry.stages.extract.afterwards import ArchiveWatch, archive_watch
from ferry.stages.extract.datasets import apply_definitions, prepare_dirs, require_nas_root
from ferry.stages.extract.handlers import ExtractDeps, SourceChanged, extract_file, nas_failed
from ferry.stages.extract.holds import NasHolds
from ferry.stages.extract.moves import after_extract
from ferry.stages.extract.scanner import Candidate, NasScanner, display_name
from ferry.stages.extract.watcher import start_watcher
from ferry.stages.extract.writers import WriterCheck, writer_check

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
    #: moved files seen changed after they were taken (issue 33)
    changed: int = 0


class ExtractService:
    """Built by :func:`build`; :meth:`run` until SIGTERM or :meth:`stop`."""

    def __init__(
        self,
        settings: Settings,
        scanner: NasScanner,
        deps: ExtractDeps,
        producer: Any,
        codec: EventCodec,
        lineage: LineageObserver | None = None,
        writers: WriterCheck | None = None,
        afterwards: ArchiveWatch | None = None,
        definitions: Definitions | None = None,
    ) -> None:
        self.settings = settings
        self.lineage = lineage
        self.definitions = definitions
        self._applied = False  #: the definitions were given to the scanner once
        self.scanner = scanner
        #: holds back files a process still writes (issue 33); None: the stable window alone
        self.writers = writers
        #: moved files watched for writes after they were taken (issue 33); None: not watched
        self.afterwards = afterwards
        #: NAS path → manifest of a file being extracted, once hashed (``deps.on_hashed``)
        self._hashed: dict[Path, FileManifest] = {}
        self.deps = replace(deps, on_hashed=self._remember_hashed)
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
        self.holds = NasHolds(settings.retry)  #: NAS files held by a cluster condition (C22)

    def stop(self) -> None:
        self._stop.set()
        self._wake.set()

    def wake(self) -> None:
        """Scan now (called from the watcher's thread when a file is complete)."""
        self._wake.set()

    def run_once(self) -> int:
        """One scan; land its finished files, ``settings.extract.workers`` at a time: those of
        the drop directories and the new versions of moved files (whose changes are reported
        first), less those a writer still holds.

        Returns how many files were handled (extracted or quarantined). Re-raises the first
        error that escaped :meth:`handle` (an event the broker never acknowledged) after the
        other files of the scan are done; their NAS files stay in place when unacknowledged.
        """
        self.stats.scans += 1
        self.reload()
        now = time.monotonic()
        cands = self.scanner.scan(now)
        if self.afterwards is not None:
            reports, versions = self.afterwards.check(now)
            if reports:  # at once, before the new bytes are finished
                publish(
                    self.producer, encode_events(reports, self.settings, self.codec), self.settings
                )
                with self._stats_lock:
                    self.stats.changed += len(reports)
            cands += versions
        if self.writers is not None:
            cands, held = self.writers.split(cands, self.scanner.is_marked)
            for cand in held:  # judged again from scratch once its writer is done
                self._unsettled(cand)
        cands = (
            self.holds.due(cands, now) + self.scanner.take_refusals()
        )  # recorded and moved away, never read (C15)
        if not cands:
            return 0
        with ThreadPoolExecutor(
            max_workers=self.settings.extract.workers, thread_name_prefix="ferry-extract"
        ) as pool:
            futures = [pool.submit(self._handle_unless_stopped, c) for c in cands]
        for fut in futures:
            fut.result()
        return sum(1 for fut in futures if fut.result())

    def reload(self) -> None:
        """Pick up new, changed and removed dataset definitions (a cheap ``stat`` of the
        datasets directory when nothing changed): the scanner then takes the files of every
        valid dataset; files of an invalid one stay on the NAS until it is fixed."""
        if self.definitions is None:
            return
        if not self.definitions.refresh() and self._applied:
            return
        self._applied = True
        apply_definitions(self.settings, self.scanner, self.definitions.current())
        if self.afterwards is not None:  # new versions of files of every valid dataset
            self.afterwards.datasets = self.scanner.datasets

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
            ConfigError: the process cannot go on.
        """
        where = display_name(cand.relative)
        started = now_iso()
        try:
            events: list[Event] = list(
                retrying(self.settings.retry, self._stop, conditions="raise")(
                    extract_file, cand, self.deps
                )
            )
            records = self._records(cand, events)
            outcome = "archive"
        except (FileNotFoundError, SourceChanged) as exc:
            log.info("extract: %s not taken: %s", where, exc)
            self.holds.release(cand)
            self._unsettled(cand)
            return
        except Exception as exc:  # noqa: BLE001 - the one quarantine policy decides (settle)
            verdict = settle(exc, bug_reason=EXTRACT_ERROR)  # raises a ConfigError
            if isinstance(verdict, DatasetNotReady):  # the file waits on the NAS for its dataset
                log.info("extract: %s waits: %s", where, verdict)
                self.holds.release(cand)
                self._unsettled(cand)
                return
            held = self.holds.hold(cand, verdict)
            if held is None:  # a condition of the cluster, not of the file: it stays (C22)
                return
            if isinstance(verdict, HandlerBug):
                log.exception("extract: %s failed unexpectedly; quarantined", where)
                events = [self._failed(cand, verdict, 1)]
            else:
                if self._stop.is_set():
                    return
                log.warning("extract: %s failed: %s", where, exc)
                events = [self._failed(cand, verdict, held or self.settings.retry.max_attempts)]
            records = self._records(cand, events)
            outcome = "failed"
        finally:
            self._hashed.pop(cand.path, None)
        publish(self.producer, records, self.settings)
        self.holds.release(cand)
        if self.lineage is not None:  # OpenLineage runs of the file (never blocks, never raises)
            self.lineage.extracted(cand.dataset.name, cand.relative, started, events)
        with self._stats_lock:
            for ev in events:
                if isinstance(ev, FileFailed):
                    self.stats.failed += 1
                    self.stats.by_reason[ev.reason] = self.stats.by_reason.get(ev.reason, 0) + 1
                    outcome = "empty" if ev.reason.startswith("empty_") else "failed"
                else:
                    self.stats.extracted += 1
        manifest = next((m for ev in events if (m := getattr(ev, "manifest", None))), None)
        if cand.version_of is not None and self.afterwards is not None:
            self.afterwards.taken(cand, manifest)  # a new version: its copy stays where it is
            return
        moved = after_extract(
            self.settings,
            self.scanner,
            cand,
            outcome,
            manifest.file_id if manifest else None,
            self._move_lock,
        )
        if moved is not None and manifest is not None and self.afterwards is not None:
            self.afterwards.add(moved, cand, manifest)

    def _unsettled(self, cand: Candidate) -> None:
        """``cand`` was not taken (still written, changed, gone): judged anew later."""
        if cand.version_of is not None and self.afterwards is not None:
            self.afterwards.unsettled(cand.path)
        else:
            self.scanner.forget(cand.path)

    def _remember_hashed(self, cand: Candidate, manifest: FileManifest) -> None:
        self._hashed[cand.path] = manifest

    def _failed(self, cand: Candidate, exc: PermanentError | TransientError, n: int) -> FileFailed:
        """:func:`nas_failed` of ``cand`` after ``n`` attempts, with its manifest if hashed."""
        error = display_name(f"{cand.relative}: {exc}")
        return nas_failed(cand, exc.reason, error, n, self._hashed.get(cand.path))

    def _records(self, cand: Candidate, events: list[Event]) -> list[OutboundRecord]:
        """``events`` encoded; one without a file_id is keyed by the NAS path (displayable)."""
        return encode_events(events, self.settings, self.codec, display_name(cand.relative))

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
        self.holds.board.path = conditions_path(self.settings, "extract")
        if self.afterwards is not None:
            n = self.afterwards.load()
            log.info("extract: %d moved file(s) watched for writes after they were taken", n)
        watcher = start_watcher(self.settings, self.scanner, self.wake, self.writers)
        self.detection = "poll" if watcher is None else "inotify"
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
            remove(conditions_path(self.settings, "extract"))
            self._alive = None
            if watcher is not None:
                watcher.stop()
            for s, h in previous.items():
                signal.signal(s, h)
            self.producer.flush(self.settings.kafka.request_timeout_s)
            if self.lineage is not None:
                self.lineage.close()
        return self.stats


def build(settings: Settings | None = None) -> ExtractService:
    """Wire the extract service: datasets, topic plan, producer, HDFS B port.

    Every valid dataset definition runs (:class:`~ferry.datasets.reload.Definitions`,
    reloaded before each scan); an invalid one is logged and its files wait on the NAS.

    Raises:
        ConfigError: the NAS root (``paths.nas_dir``) or the datasets directory does not exist,
            or bad settings.
    """
    settings = settings or get_settings()
    require_nas_root(settings)
    sweep_dead(datasets_status_path(settings, "extract").parent)  # files of killed processes
    definitions = Definitions(
        settings.paths.datasets_dir,
        "extract",
        status_file=datasets_status_path(settings, "extract"),
    )
    datasets = prepare_dirs(settings, definitions.current().specs)
    if not definitions.current().entries:
        log.warning("extract: no dataset definitions in %s yet", settings.paths.datasets_dir)
    ensure_topics(build_admin(settings.kafka), settings.kafka, retry=settings.retry)
    b = settings.cluster("b")
    deps = ExtractDeps(
        WebHdfs.for_cluster("b", settings),
        settings.paths.landing_path,
        b.fs_url,
        settings.extract.chunk_bytes,
        refuse_hardlinks=settings.extract.refuse_hardlinks,
        version_of=lambda name: definitions.current().version(name),
    )
    scanner = NasScanner(
        Path(settings.paths.nas_dir),
        datasets,
        follow_symlinks=settings.extract.follow_symlinks,
        refuse_hardlinks=settings.extract.refuse_hardlinks,
    )
    codec = default_codec(settings.paths.schemas_dir)
    return ExtractService(
        settings,
        scanner,
        deps,
        build_producer(settings.kafka, "ferry-extract"),
        codec,
        lineage_observer(settings, "extract"),
        writers=writer_check(settings.extract),
        afterwards=archive_watch(settings.extract, settings.paths.nas_dir, datasets, codec),
        definitions=definitions,
    )


#: ``ferry run extract`` (:func:`ferry.core.services.run`).
main = service_main(build)
