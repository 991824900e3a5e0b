"""The nemesis's checker: after the faults stop and a bounded heal time, is every file in Hive
exactly once with exactly its rows, and does the tracker agree?

Per dropped file (:class:`ferry_kit.nemesis.workload.Dropped`), from the sources a user has:

* Hive (through HiveServer2, :func:`ferry.clusters.hiveserver2.rows_by_file`, by
  ``ferry_file_id``): ``lost`` — a good file with no rows; ``duplicated`` — more rows than the
  file has; ``wrong rows`` — some rows, but fewer; a bad file (a cut gzip) with rows in Hive is
  ``wrong rows`` too;
* the ``loaded``/``failed`` topics (:class:`ferry_kit.pipeline.Outcomes`): ``wrongly
  quarantined`` — a good file whose last outcome is a FileFailed; ``bad not quarantined`` — a bad
  file with no FileFailed;
* the tracker (``GET /files/<id>`` on its web port): ``tracker disagrees`` — its state is not
  ``loaded`` for a file in Hive, or not ``failed`` for a quarantined one.

Strangers' records (not Ferry's events) the nemesis produced to a stage's topic:
``strangers not set aside`` — one with no FileFailed naming its topic, partition and offset.
``services' exits no fault explains`` — a Ferry service that exited with no fault of the schedule
explaining it. A stack component restarted with no fault holding it is reported apart (the
local stand-in for a cluster's server: a Spark master whose ZooKeeper session expired exits by
design, after its own pause or on a loaded machine), not held against the run.

Replayed files are among the files; :attr:`Verdict.replayed_exact` counts those with their rows
exactly once. :meth:`Verdict.ok` is true when every count above is zero.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

import requests
from rich.table import Table

from ferry.clusters.hiveserver2 import rows_by_file
from ferry.datasets.spec import load_datasets
from ferry_kit.nemesis.schedule import SERVICES
from ferry_kit.nemesis.workload import Dropped
from ferry_kit.pipeline import Outcomes
from ferry_kit.settings import KitSettings

#: Seconds a tracker request may take (the tracker answers from memory).
TRACKER_TIMEOUT_S = 10.0


@dataclass
class Verdict:
    """What the checker found; every list holds file ids."""

    files: int = 0
    rows_expected: int = 0
    rows_in_hive: int = 0
    lost: list[str] = field(default_factory=list)
    duplicated: list[str] = field(default_factory=list)
    wrong_rows: list[str] = field(default_factory=list)
    wrongly_quarantined: list[str] = field(default_factory=list)
    bad_not_quarantined: list[str] = field(default_factory=list)
    tracker_disagrees: list[str] = field(default_factory=list)
    tracker_states: dict[str, str] = field(default_factory=dict)  #: of the files it disagrees on
    strangers: int = 0  #: strangers' records produced and acknowledged
    strangers_not_set_aside: list[str] = field(default_factory=list)  #: ``topic[p]@offset``
    unexplained_exits: Counter[str] = field(default_factory=Counter)  #: by process
    replayed: int = 0
    replayed_exact: int = 0
    failed_then_loaded: int = 0
    heal_s: float | None = None  #: last fault undone → last file loaded (None: none loaded after)
    faults: Counter[str] = field(default_factory=Counter)  #: applied faults by kind
    skipped: int = 0
    how: Counter[str] = field(default_factory=Counter)  #: files by how they were dropped

    @property
    def ok(self) -> bool:
        return not (
            self.lost
            or self.duplicated
            or self.wrong_rows
            or self.wrongly_quarantined
            or self.bad_not_quarantined
            or self.tracker_disagrees
            or self.strangers_not_set_aside
            or self.services_exits
        )

    @property
    def services_exits(self) -> dict[str, int]:
        """Unexplained exits of Ferry's services (the issue's "no service restarted more than
        the schedule explains"); a stack component's (the local stand-in for a cluster's
        server, e.g. a Spark master whose ZooKeeper session expired on a loaded machine) is
        reported in the table, not held against the run."""
        return {n: c for n, c in self.unexplained_exits.items() if n in SERVICES}

    def table(self, title: str) -> Table:
        """The run's table: faults by kind, files, rows, and each count that must be zero."""
        t = Table(title=title)
        t.add_column("what")
        t.add_column("value", justify="right")
        for kind, n in sorted(self.faults.items()):
            t.add_row(f"faults: {kind}", str(n))
        t.add_row("faults in all (skipped)", f"{sum(self.faults.values())} ({self.skipped})")
        t.add_row("files dropped", f"{self.files} ({_fmt(self.how)})")
        t.add_row("rows expected / in Hive", f"{self.rows_expected} / {self.rows_in_hive}")
        t.add_row("replayed (exactly once after)", f"{self.replayed} ({self.replayed_exact})")
        t.add_row("lost", str(len(self.lost)))
        t.add_row("duplicated", str(len(self.duplicated)))
        t.add_row("wrong rows", str(len(self.wrong_rows)))
        t.add_row("wrongly quarantined", str(len(self.wrongly_quarantined)))
        t.add_row("bad data not quarantined", str(len(self.bad_not_quarantined)))
        t.add_row("tracker disagrees", str(len(self.tracker_disagrees)))
        t.add_row(
            "strangers' records (not set aside)",
            f"{self.strangers} ({len(self.strangers_not_set_aside)})",
        )
        others = {n: c for n, c in self.unexplained_exits.items() if n not in SERVICES}
        t.add_row("services' exits no fault explains", _fmt(Counter(self.services_exits)) or "0")
        t.add_row("stack components restarted, no fault", _fmt(Counter(others)) or "0")
        t.add_row("failed, then loaded (retried)", str(self.failed_then_loaded))
        heal = "n/a" if self.heal_s is None else f"{self.heal_s:.1f}"
        t.add_row("last fault → last file loaded, s", heal)
        return t


def _fmt(c: Counter[str]) -> str:
    return ", ".join(f"{k} {v}" for k, v in sorted(c.items()))


def hive_rows(settings: KitSettings, dropped: Iterable[Dropped]) -> dict[str, int]:
    """{file id: rows in its dataset's table} (ids without rows absent)."""
    specs = load_datasets(settings.paths.datasets_dir)
    by_ds: dict[str, list[str]] = {}
    for d in dropped:
        by_ds.setdefault(d.dataset, []).append(d.file_id)
    out: dict[str, int] = {}
    for ds, ids in sorted(by_ds.items()):
        out |= rows_by_file(settings, specs[ds].hive.full_name, ids)
    return out


def tracker_state(settings: KitSettings, file_id: str) -> str:
    """The tracker's state of ``file_id`` (``loaded``, ``failed``, …; ``unknown`` on a 404;
    ``recovering`` on a 503: a tracker restarted late in the schedule is still reading its
    changelogs, which the verdict waits out like any lag of the tracker, seed 686632).

    Raises:
        requests.RequestException: the tracker did not answer within TRACKER_TIMEOUT_S.
    """
    url = f"http://127.0.0.1:{settings.tracker.web_port}/files/{file_id}"
    r = requests.get(url, timeout=TRACKER_TIMEOUT_S)
    if r.status_code == 404:
        return "unknown"
    if r.status_code == 503:
        return "recovering"
    r.raise_for_status()
    body: dict[str, Any] = r.json()
    return str(body.get("state"))


def check(
    settings: KitSettings,
    dropped: list[Dropped],
    outcomes: Outcomes,
    replayed: Iterable[str],
    last_fault_at: float | None,
    strangers: Iterable[tuple[str, int, int]] = (),
) -> Verdict:
    """Check every file of ``dropped`` (see the module docstring). ``settings``: the services'
    (their dataset definitions and tracker port); ``last_fault_at``: ``time.time()`` when the
    last fault was undone; ``strangers``: (topic, partition, offset) of the strangers' records
    produced."""
    v = Verdict(files=len(dropped))
    for topic, partition, offset in strangers:
        v.strangers += 1
        if (topic, partition, offset) not in outcomes.set_aside:
            v.strangers_not_set_aside.append(f"{topic}[{partition}]@{offset}")
    v.how.update(d.how for d in dropped)
    in_hive = hive_rows(settings, dropped)
    replayed_ids = set(replayed)
    for d in dropped:
        n = in_hive.get(d.file_id, 0)
        v.rows_in_hive += n
        loaded = d.file_id in outcomes.loaded
        failed = d.file_id in outcomes.failed
        if d.rows is None:  # really bad data: quarantined, nothing in Hive
            if n:
                v.wrong_rows.append(d.file_id)
            if not failed:
                v.bad_not_quarantined.append(d.file_id)
            want = "failed"
        else:
            v.rows_expected += d.rows
            if n == 0:
                v.lost.append(d.file_id)
            elif n > d.rows:
                v.duplicated.append(d.file_id)
            elif n < d.rows:
                v.wrong_rows.append(d.file_id)
            if failed and not loaded:
                v.wrongly_quarantined.append(d.file_id)
            v.failed_then_loaded += failed and loaded
            if d.file_id in replayed_ids:
                v.replayed += 1
                v.replayed_exact += n == d.rows
            want = "loaded"
        state = tracker_state(settings, d.file_id)
        if state != want:
            v.tracker_disagrees.append(d.file_id)
            v.tracker_states[d.file_id] = f"{state}, want {want}"
    if last_fault_at is not None:
        stamps = [s["loaded"] / 1000 for s in outcomes.stamps.values() if "loaded" in s]
        after = [s for s in stamps if s >= last_fault_at]
        v.heal_s = max(after) - last_fault_at if after else None
    return v
