"""Finished-file detection on the NAS drop directory (case C09).

A file is taken only once it is complete: under the ``stable`` policy its size and mtime were
unchanged over ``stable_polls`` consecutive scans at least ``poll_interval_s`` apart; under the
``marker`` policy a sibling ``<name><marker_suffix>`` exists (the upstream writes it last).
Hidden names (starting with ``.``) and in-flight temp names are never candidates, so a
write-then-rename upstream is seen only at its final name.

The scanner is pure bookkeeping over ``os.stat`` results; it keeps its observations in memory,
so after a restart a file needs ``stable_polls`` new scans before it is taken again.
"""

from __future__ import annotations

import fnmatch
import os
import unicodedata
from dataclasses import dataclass
from pathlib import Path

from ferry.datasets import DatasetSpec


@dataclass(frozen=True)
class Candidate:
    """A finished NAS file: absolute path, its dataset, its path relative to the NAS root (NFC)."""

    path: Path
    dataset: DatasetSpec
    relative: str
    size: int
    mtime_ns: int
    marker: Path | None = None


@dataclass
class _Seen:
    size: int
    mtime_ns: int
    first_mono: float
    polls: int


class NasScanner:
    """Scans ``nas_dir/<dataset subdir>`` for files matching each dataset's pattern."""

    def __init__(self, nas_dir: Path, datasets: dict[str, DatasetSpec]) -> None:
        self.nas_dir = nas_dir
        self.datasets = datasets
        self._seen: dict[Path, _Seen] = {}
        #: files already handled and left in place (``after_extract: keep``): (size, mtime_ns)
        self._done: dict[Path, tuple[int, int]] = {}

    def scan(self, now_mono: float) -> list[Candidate]:
        """One scan at monotonic time ``now_mono`` (s). Returns files finished by their policy,
        in name order per dataset."""
        out: list[Candidate] = []
        present: set[Path] = set()
        for spec in self.datasets.values():
            root = self.nas_dir / spec.nas.subdir
            try:
                names = sorted(os.listdir(root))
            except FileNotFoundError:
                continue
            policy = spec.finished
            pattern = unicodedata.normalize("NFC", spec.nas.pattern)
            for name in names:
                nfc = unicodedata.normalize("NFC", name)
                if name.startswith(".") or not fnmatch.fnmatchcase(nfc, pattern):
                    continue
                if policy.policy == "marker" and name.endswith(policy.marker_suffix):
                    continue
                path = root / name
                try:
                    st = path.stat()
                except FileNotFoundError:
                    continue  # renamed or removed between listdir and stat
                if not path.is_file():
                    continue
                present.add(path)
                if self._done.get(path) == (st.st_size, st.st_mtime_ns):
                    continue  # handled and kept; taken again only once it changes
                self._done.pop(path, None)
                relative = unicodedata.normalize("NFC", f"{spec.nas.subdir}/{name}")
                if policy.policy == "marker":
                    marker = root / f"{name}{policy.marker_suffix}"
                    if marker.exists():
                        out.append(
                            Candidate(path, spec, relative, st.st_size, st.st_mtime_ns, marker)
                        )
                    continue
                seen = self._seen.get(path)
                if seen is None or (seen.size, seen.mtime_ns) != (st.st_size, st.st_mtime_ns):
                    self._seen[path] = _Seen(st.st_size, st.st_mtime_ns, now_mono, 1)
                    continue
                seen.polls += 1
                waited = now_mono - seen.first_mono
                if (
                    seen.polls > policy.stable_polls
                    and waited >= policy.stable_polls * policy.poll_interval_s
                ):
                    out.append(Candidate(path, spec, relative, st.st_size, st.st_mtime_ns))
        for gone in set(self._seen) - present:
            del self._seen[gone]
        for gone in set(self._done) - present:
            del self._done[gone]
        return out

    def forget(self, path: Path) -> None:
        """Drop what is known of ``path`` (after it was extracted and moved away)."""
        self._seen.pop(path, None)
        self._done.pop(path, None)

    def done(self, cand: Candidate) -> None:
        """Remember that ``cand`` was handled but stays in the drop directory (``keep``): it is
        not returned again while its size and mtime are unchanged (until a restart)."""
        self._seen.pop(cand.path, None)
        self._done[cand.path] = (cand.size, cand.mtime_ns)
