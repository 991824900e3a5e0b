"""The nemesis's workload: files that keep arriving for the whole run, and replays now and then.

Files are distinct slices of both demo datasets (:func:`ferry_kit.testing.slices.dataset_slices`:
flights, 60 rows; weather, 24 rows), each with its exact row count and ``file_id``. Every
``gzip_every``-th file is dropped gzipped (``.csv.gz``: the datasets' patterns take
``<name>_*.csv*`` in the run's private definitions); every ``in_place_every``-th is written in
place at a slow rate (extract must wait until it is complete, case C09) instead of by rename; and
every ``bad_every``-th is a gzip cut in the middle, the one kind of file whose data is really bad
(its only right outcome is quarantine). ``replay_every`` drops apart, one loaded file is replayed
(``ferry replay <stage> --file <id>``, a random consuming stage): its rows must still be in Hive
exactly once.
"""

from __future__ import annotations

import gzip
import hashlib
import math
import random
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field

from ferry.core.identity import derive_file_id
from ferry.core.services import CONSUMING_STAGES
from ferry_kit.pipeline import drop_file, run_cli
from ferry_kit.testing.chaos import FaultRig
from ferry_kit.testing.slices import SliceFile

#: Rows per slice: flights' and weather's (a day of weather at one airport is 24 rows).
ROWS = {"flights": 60, "weather": 24}
#: The draw of a drop's dataset (two flights to one weather) and each dataset's share of it.
DRAW = ("flights", "flights", "weather")
SHARE = {d: DRAW.count(d) / len(DRAW) for d in ROWS}


@dataclass(frozen=True)
class Dropped:
    """One file the workload put on the NAS: its id, dataset, rows (None: bad data, must be
    quarantined), how (``rename``/``in-place``/``gzip``/``bad``) and when (``time.time()``)."""

    file_id: str
    dataset: str
    rows: int | None
    how: str
    at: float
    relative: str


@dataclass
class Workload:
    """Drops files on ``rig``'s NAS every ``interval_s`` seconds (a thread) until :meth:`stop`."""

    rig: FaultRig
    seed: int
    interval_s: float = 3.0
    gzip_every: int = 7
    in_place_every: int = 5
    bad_every: int = 41
    replay_every: int = 10
    say: Callable[[str], None] = print
    dropped: list[Dropped] = field(default_factory=list)
    replayed: list[tuple[str, str, float]] = field(default_factory=list)  #: (file id, stage, at)
    replay_errors: int = 0
    loaded: Callable[[], list[str]] = lambda: []

    def __post_init__(self) -> None:
        self._rnd = random.Random(self.seed ^ 0x5EED)
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="nemesis-workload", daemon=True)
        self._pool: dict[str, list[SliceFile]] = {}
        self._first = {"flights": 0, "weather": 0}
        self._replaying = threading.Event()
        self.error: BaseException | None = None

    def prepare(self, files: int) -> None:
        """Cut enough slices of each dataset for ``files`` drops (before the clock starts): its
        share of the drops (:data:`SHARE`) and a fifth more, plus 10; more are cut while the run
        goes if the draw asks for them (the weather data holds about 1,080 slices of 24 rows:
        enough for about 3,000 drops, 2.5 hours)."""
        for dataset in ROWS:
            need = math.ceil(files * SHARE[dataset] * 1.2) + 10
            self._pool[dataset] = self.rig.slices(need, rows=ROWS[dataset], dataset=dataset)
            self._first[dataset] = need

    def start(self) -> None:
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        if self._thread.ident is not None:  # started
            self._thread.join(timeout=120)

    def _slice(self, dataset: str) -> SliceFile:
        pool = self._pool.setdefault(dataset, [])
        if not pool:
            pool += self.rig.slices(
                50, rows=ROWS[dataset], first=self._first[dataset], dataset=dataset
            )
            self._first[dataset] += 50
        return pool.pop(0)

    def _run(self) -> None:
        try:
            n = 0
            next_at = time.monotonic()
            while not self._stop.is_set():
                n += 1
                self.drop_one(n)
                if n % self.replay_every == 0 and not self._replaying.is_set():
                    # its own thread: a replay waits on the broker, which may be down now
                    self._replaying.set()
                    threading.Thread(target=self.replay_one, daemon=True).start()
                next_at += self.interval_s
                self._stop.wait(max(0.0, next_at - time.monotonic()))
        except BaseException as exc:  # noqa: BLE001 - kept for the runner to raise
            self.error = exc

    def drop_one(self, n: int) -> Dropped:
        """Drop the ``n``-th file (1-based; its kind by the ``*_every`` counts)."""
        dataset = self._rnd.choice(DRAW)
        s = self._slice(dataset)
        dest = self.rig.nas_dir / s.relative
        how = "rename"
        rows: int | None = s.rows
        fid = s.file_id
        if n % self.bad_every == 0 or n % self.gzip_every == 0:
            data = gzip.compress(s.src.read_bytes(), mtime=0)
            how = "gzip"
            if n % self.bad_every == 0:
                data, how, rows = data[: len(data) // 2], "bad", None
            src = s.src.with_name(s.src.name + ".gz")
            src.write_bytes(data)
            dest = dest.with_name(dest.name + ".gz")
            fid = derive_file_id(dataset, hashlib.sha256(data).hexdigest())
            drop_file(src, dest)
        elif n % self.in_place_every == 0:
            how = "in-place"
            drop_file(s.src, dest, mode="slow", rate_bytes_s=4000)
        else:
            drop_file(s.src, dest)
        d = Dropped(fid, dataset, rows, how, time.time(), str(dest.relative_to(self.rig.nas_dir)))
        self.dropped.append(d)
        return d

    def replay_one(self) -> None:
        """``ferry replay <stage> --file <id>`` of a random loaded file (none loaded yet: skip)."""
        try:
            self._replay()
        finally:
            self._replaying.clear()

    def _replay(self) -> None:
        good = {d.file_id for d in self.dropped if d.rows is not None}
        loaded = [f for f in self.loaded() if f in good]
        if not loaded:
            return
        fid = self._rnd.choice(sorted(loaded))
        stage = self._rnd.choice(CONSUMING_STAGES)
        try:
            out = run_cli(self.rig.group.env, "replay", stage, "--file", fid, timeout=120)
        except Exception as exc:  # noqa: BLE001 - a replay refused during a fault is counted
            self.replay_errors += 1
            self.say(f"workload: replay {stage} {fid[:8]}: {exc}")
            return
        if out.returncode == 0:
            self.replayed.append((fid, stage, time.time()))
            self.say(f"workload: replayed {stage} {fid[:8]}")
        else:
            self.replay_errors += 1
            self.say(
                f"workload: replay {stage} {fid[:8]} exit {out.returncode}: {out.stdout[-200:]}"
            )


def expected(dropped: list[Dropped]) -> dict[str, Dropped]:
    """{file id: the drop} (a file id dropped twice would be one file: none is, by design)."""
    return {d.file_id: d for d in dropped}


__all__ = ["ROWS", "Dropped", "Workload", "expected"]
