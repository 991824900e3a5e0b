"""Files that change after extract took them (issue 33): reported at once, their new bytes flow.

A writer extract could not see (on another NFS host, another user's process when extract lacks
the privilege to look in /proc, one that opened the file before a restart and was paused) may
go on writing after the file was taken. Moving the file under ``.ferry/`` does not stop it: it
writes to the same inode, so its bytes land in the moved copy and would be lost in silence.

So every file extract moves under ``.ferry/archive/`` or ``.ferry/empty/`` stays watched for
``extract.watch_after_s`` seconds: its size and mtime are compared with what was taken, every
``extract.watch_check_s`` seconds at first, then less often as the file ages (every
:data:`CHECK_AGE_FRACTION` of its age since it was taken, at most every :data:`CHECK_MAX_S`),
and every scan once it changed. A writer that resumes minutes after the take is seen within
seconds, one that resumes hours later within an eighth of that: about 70 ``lstat`` per file
over a day's watch instead of 8,640, so a NAS receiving 10,000 files an hour gets about 200 a
second, not 24,000. On a change:

- at once, a :class:`~ferry.core.events.FileFailed` with reason :data:`CHANGED_AFTER_EXTRACT`
  for the version taken (its manifest, its file id), naming both sizes and mtimes: the tracker,
  its ``/metrics`` (``ferry_tracker_failures_total{reason="changed_after_extract"}``) and
  ``ferry quarantine list`` show it;
- once the moved copy is finished again (the dataset's stable window, and no writer seen by
  :mod:`ferry.stages.extract.writers`), its new bytes flow as a new version of the file, under
  the same NAS name and a file id of their own: when the first bytes are still those taken
  (their sha256 matches) and the taken part ended with a line break, only the bytes appended
  (behind the header line, if the dataset has one) — so the table holds every row once; else
  (rewritten, or cut inside a record) the whole new content, next to the rows of the earlier
  version (``ferry unload`` removes those; the report says so).

The watch is kept on the NAS beside the moved files, one JSON record per file under
``.ferry/watch/`` (the manifest taken, Avro-encoded as a ``FileExtracted``), so it survives a
restart of extract. In memory a watched file takes about 1.1 KB (path, extent, encoded event):
memory grows with the files moved within ``extract.watch_after_s`` and no further (a day at
10,000 files an hour: about 260 MB). A change that leaves size and mtime as they were is not seen.
"""

from __future__ import annotations

import base64
import hashlib
import json
import logging
import os
import stat
import threading
import time
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path

from ferry.core.events import FileExtracted, FileFailed, FileManifest, failed
from ferry.core.wire.avro import EventCodec
from ferry.datasets.compression import codec_of
from ferry.datasets.fields import FinishedPolicy
from ferry.datasets.spec import DatasetSpec
from ferry.errors import SerializationError
from ferry.settings.stages import ExtractSettings
from ferry.stages.extract.scanner import Candidate, display_name

log = logging.getLogger(__name__)

#: ``FileFailed.reason`` of a file whose moved copy changed after it was taken.
CHANGED_AFTER_EXTRACT = "changed_after_extract"
#: A watched file is checked again after this fraction of its age since it was taken (at least
#: ``extract.watch_check_s``, at most :data:`CHECK_MAX_S` later).
CHECK_AGE_FRACTION = 0.125
#: The longest time between two checks of a watched file, s.
CHECK_MAX_S = 3600.0


@dataclass(slots=True)
class Watched:
    """A moved file and the extent taken from it: ``size`` bytes whose sha256 is ``sha256``
    (of the file's bytes; a spliced version's differs from the manifest's), at ``mtime_ns``;
    watched from ``taken_s`` until ``until_s`` (epoch s). ``event``: the manifest taken as an
    Avro ``FileExtracted`` (:meth:`ArchiveWatch.manifest` decodes it)."""

    path: Path
    relative: str
    dataset: str
    file_id: str
    event: bytes
    size: int
    mtime_ns: int
    sha256: str
    until_s: float
    taken_s: float = 0.0
    next_mono: float = 0.0
    reported: bool = False
    seen: tuple[int, int] | None = None
    seen_mono: float = 0.0
    polls: int = 0
    pending: tuple[int, int, str] | None = None


def _iso(ns: int) -> str:
    return datetime.fromtimestamp(ns / 1e9, tz=UTC).isoformat(timespec="milliseconds")


def change_report(
    w: Watched, manifest: FileManifest, size: int, mtime_ns: int, nas_dir: Path
) -> FileFailed:
    """The quarantine record of ``w``'s change: ``manifest`` (as taken), both sizes, mtimes."""
    try:
        where = w.path.relative_to(nas_dir).as_posix()
    except ValueError:
        where = str(w.path)
    return failed(
        stage="extract",
        reason=CHANGED_AFTER_EXTRACT,
        error=display_name(
            f"{w.relative}: changed after extract took it: taken as {w.size} bytes (mtime "
            f"{_iso(w.mtime_ns)}), its moved copy {where} is now {size} bytes (mtime "
            f"{_iso(mtime_ns)}); a writer went on writing. Once the copy is finished, its new "
            "bytes flow as a new version of the file (same NAS name, a new file id)"
        ),
        manifest=manifest,
    )


class ArchiveWatch:
    """The moved files extract watches, persisted under ``<nas_dir>/.ferry/watch/``.

    :meth:`add` runs on extract's worker threads; the rest on its loop.
    """

    def __init__(
        self,
        nas_dir: Path,
        datasets: Mapping[str, DatasetSpec],
        codec: EventCodec,
        *,
        watch_s: float,
        check_s: float,
        chunk_bytes: int = 1 << 20,
    ) -> None:
        self.nas_dir = nas_dir
        self.datasets = datasets
        self.codec = codec
        self.watch_s = watch_s
        self.check_s = check_s
        self.chunk_bytes = chunk_bytes
        self.root = nas_dir / ".ferry" / "watch"
        self.entries: dict[Path, Watched] = {}
        self._lock = threading.Lock()

    def manifest(self, w: Watched) -> FileManifest:
        """The manifest ``w`` was taken as (decoded from its event)."""
        event = self.codec.decode(w.event)
        assert isinstance(event, FileExtracted)
        return event.manifest

    def next_check_s(self, age_s: float) -> float:
        """Seconds to the next check of a file taken ``age_s`` ago: ``watch_check_s`` at first,
        then :data:`CHECK_AGE_FRACTION` of its age, at most :data:`CHECK_MAX_S`."""
        return max(self.check_s, min(age_s * CHECK_AGE_FRACTION, CHECK_MAX_S))

    def _record(self, path: Path) -> Path:
        rel = os.fsencode(path.relative_to(self.nas_dir).as_posix())
        return self.root / f"{hashlib.sha256(rel).hexdigest()[:32]}.json"

    def _save(self, w: Watched) -> None:
        """Write ``w``'s record (temp file, rename); a failure is logged (watched till restart)."""
        body = {
            "path": w.path.relative_to(self.nas_dir).as_posix(),
            "relative": w.relative,
            "size": w.size,
            "mtime_ns": w.mtime_ns,
            "sha256": w.sha256,
            "until_s": w.until_s,
            "taken_s": w.taken_s,
            "event": base64.b64encode(w.event).decode(),
        }
        dest = self._record(w.path)
        tmp = dest.with_name(f".{dest.name}.tmp")
        try:
            self.root.mkdir(parents=True, exist_ok=True)
            tmp.write_text(json.dumps(body, ensure_ascii=True), encoding="ascii")
            os.replace(tmp, dest)
        except OSError as exc:
            log.error("extract: watch record %s not written: %s", dest, exc)

    def _drop(self, w: Watched) -> None:
        self.entries.pop(w.path, None)
        try:
            self._record(w.path).unlink(missing_ok=True)
        except OSError as exc:
            log.warning("extract: watch record of %s not removed: %s", w.path, exc)

    def load(self) -> int:
        """Read the records left by an earlier run (those of this instance's datasets, still
        within their watch, whose file still exists); remove the others. Returns how many."""
        try:
            records = sorted(self.root.glob("*.json"))
        except OSError:
            return 0
        now = time.time()
        for rec in records:
            try:
                body = json.loads(rec.read_text(encoding="ascii"))
                raw = base64.b64decode(body["event"])
                event = self.codec.decode(raw)
                path = self.nas_dir / body["path"]
            except (OSError, ValueError, KeyError, SerializationError) as exc:
                log.warning("extract: unreadable watch record %s removed: %s", rec, exc)
                rec.unlink(missing_ok=True)
                continue
            if not isinstance(event, FileExtracted):
                rec.unlink(missing_ok=True)
                continue
            if event.manifest.dataset not in self.datasets:
                continue  # another instance's dataset
            if body["until_s"] <= now or not path.exists():
                rec.unlink(missing_ok=True)
                continue
            until_s = float(body["until_s"])
            self.entries[path] = Watched(
                path,
                body["relative"],
                event.manifest.dataset,
                event.manifest.file_id,
                raw,
                int(body["size"]),
                int(body["mtime_ns"]),
                body["sha256"],
                until_s,
                float(body.get("taken_s", until_s - self.watch_s)),
            )
        return len(self.entries)

    def add(self, path: Path, cand: Candidate, manifest: FileManifest) -> None:
        """Watch ``path``, where ``cand`` (taken as ``manifest``) was moved."""
        if self.watch_s <= 0:
            return
        now = time.time()
        w = Watched(
            path,
            cand.relative,
            manifest.dataset,
            manifest.file_id,
            self.codec.encode(FileExtracted(manifest)),
            cand.size,
            cand.mtime_ns,
            manifest.sha256,
            now + self.watch_s,
            now,
        )
        with self._lock:
            self.entries[path] = w
            self._save(w)

    def check(self, now_mono: float) -> tuple[list[FileFailed], list[Candidate]]:
        """(reports of files seen changed for the first time, new versions ready to take)."""
        reports: list[FileFailed] = []
        ready: list[Candidate] = []
        with self._lock:
            watched = list(self.entries.values())
        now_s = time.time()
        for w in watched:
            if not w.reported and now_mono < w.next_mono:
                continue
            w.next_mono = now_mono + self.next_check_s(now_s - w.taken_s)
            try:
                st = os.lstat(w.path)
            except FileNotFoundError:
                self._drop(w)  # removed from .ferry/ by someone: nothing left to watch
                continue
            except OSError as exc:
                log.warning("extract: %s cannot be checked: %s", display_name(w.path), exc)
                continue
            now = (st.st_size, st.st_mtime_ns)
            if now == (w.size, w.mtime_ns) or not stat.S_ISREG(st.st_mode):
                if time.time() >= w.until_s:
                    self._drop(w)
                continue
            if not w.reported:
                w.reported = True
                reports.append(change_report(w, self.manifest(w), *now, self.nas_dir))
                log.warning("extract: %s", reports[-1].error)
            cand = self._settled(w, st, now_mono)
            if cand is not None:
                ready.append(cand)
        return reports, ready

    def _settled(self, w: Watched, st: os.stat_result, now_mono: float) -> Candidate | None:
        """The new version of ``w`` once its copy was unchanged over the dataset's stable
        window, else None."""
        spec = self.datasets.get(w.dataset)
        policy = spec.finished if spec is not None else FinishedPolicy()
        now = (st.st_size, st.st_mtime_ns)
        if w.seen != now:
            w.seen, w.seen_mono, w.polls = now, now_mono, 1
            return None
        w.polls += 1
        if w.polls <= policy.stable_polls or (
            now_mono - w.seen_mono < policy.stable_polls * policy.poll_interval_s
        ):
            return None
        if spec is None:
            return None  # its definition is gone: reported, nothing to take it with
        return self._version(w, spec, st)

    def _version(self, w: Watched, spec: DatasetSpec, st: os.stat_result) -> Candidate | None:
        """Read the copy once: is it ``w``'s bytes plus an append at a line break?"""
        prefix, whole = hashlib.sha256(), hashlib.sha256()
        head = 0 if not spec.csv.header else None
        last = b""
        read = 0
        try:
            with open(w.path, "rb") as fh:
                while chunk := fh.read(self.chunk_bytes):
                    if read < w.size:
                        part = chunk[: w.size - read]
                        prefix.update(part)
                        last = part[-1:] or last
                    if head is None and (nl := chunk.find(b"\n")) >= 0:
                        head = read + nl + 1
                    whole.update(chunk)
                    read += len(chunk)
        except OSError as exc:
            log.warning("extract: %s cannot be read: %s", display_name(w.path), exc)
            return None
        if read != st.st_size:
            w.seen = None  # still changing
            return None
        appended = (  # a compressed file's appended bytes are no CSV of their own: taken whole
            w.size > 0
            and codec_of(w.path.name) is None
            and read > w.size
            and prefix.hexdigest() == w.sha256
            and last == b"\n"
            and head is not None
            and head <= w.size
        )
        w.pending = (read, st.st_mtime_ns, whole.hexdigest())
        return Candidate(
            w.path,
            spec,
            w.relative,
            read,
            st.st_mtime_ns,
            source=w.path,
            identity=(st.st_dev, st.st_ino),
            version_of=w.file_id,
            splice=(head or 0, w.size) if appended else None,
        )

    def taken(self, cand: Candidate, manifest: FileManifest | None) -> None:
        """``cand``, the new version, was handled (acknowledged): watch its new extent."""
        w = self.entries.get(cand.path)
        if w is None or w.pending is None:
            return
        size, mtime_ns, sha = w.pending
        what = (
            f"the {size - w.size} bytes written after it was taken flow"
            if cand.splice is not None
            else f"its whole new content ({size} bytes; the rows of the earlier version "
            f"{w.file_id} stay: `ferry unload` removes them) flows"
        )
        log.warning(
            "extract: %s: %s as file %s",
            display_name(w.relative),
            what,
            manifest.file_id if manifest else "?",
        )
        if manifest is not None:
            w.dataset, w.file_id = manifest.dataset, manifest.file_id
            w.event = self.codec.encode(FileExtracted(manifest))
        w.size, w.mtime_ns, w.sha256 = size, mtime_ns, sha
        w.reported, w.seen, w.pending = False, None, None
        w.taken_s = time.time()
        w.until_s = w.taken_s + self.watch_s
        with self._lock:
            self._save(w)

    def unsettled(self, path: Path) -> None:
        """The copy changed again while its new version was read: wait for it anew."""
        w = self.entries.get(path)
        if w is not None:
            w.seen, w.pending = None, None


def archive_watch(
    extract: ExtractSettings,
    nas_dir: Path,
    datasets: Mapping[str, DatasetSpec],
    codec: EventCodec,
) -> ArchiveWatch | None:
    """The watch ``extract.watch_after_s`` asks for, or None (0: moved files not watched)."""
    if extract.watch_after_s <= 0:
        return None
    return ArchiveWatch(
        nas_dir,
        datasets,
        codec,
        watch_s=extract.watch_after_s,
        check_s=extract.watch_check_s,
        chunk_bytes=extract.chunk_bytes,
    )
