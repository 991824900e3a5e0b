"""The long soak's tables (bench/soak_long.py): reliability, process growth, zone usage against
its retention's bound. Returns whether every target was met."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from rich.console import Console
from rich.table import Table
from soak_probe import Growth, Sample

from ferry.gc.plan import class_label
from ferry.gc.remover import human_bytes
from ferry.settings.retention import RetentionSettings

#: Largest growth allowed from the first to the last quarter after warm-up, percent.
MAX_GROWTH = 10.0

_UNITS = {"rss": "MiB", "threads": "", "fds": ""}


def _fmt(measure: str, value: float) -> str:
    return f"{value / 2**20:.0f}" if measure == "rss" else f"{value:.0f}"


def report(
    *,
    files: list[Any],
    outcomes: Any,
    hive: dict[str, int],
    plan: list[Any],
    growth: list[Growth],
    thread_changes: dict[str, list[tuple[str, float, float]]],
    bounds: dict[str, list[tuple[Sample, int | None]]],
    retention: RetentionSettings,
    removed: dict[str, float],
    settled_s: float,
    deadline: bool,
    codes: dict[str, int | None],
    restarts: dict[str, int],
    pngs: list[Path],
    out_dir: Path,
) -> bool:
    """Print the tables and where the plots are; True when every target is met.

    ``thread_changes``: role → the thread names whose count changed most (name, first quarter's
    mean, last quarter's), for the roles whose threads changed by more than the target."""
    console = Console(width=160)
    by_ds = sorted({f.dataset for f in files})
    loaded = {f.file_id for f in files if f.file_id in outcomes.loaded}
    quarantined = [f for f in files if f.file_id in outcomes.failed]

    def rejected(f: Any) -> int:
        """Rows of ``f`` validation rejected (kept in the rejects zone, not in Hive)."""
        ev = outcomes.loaded.get(f.file_id)
        return (ev.manifest.rows_rejected or 0) if ev is not None else 0

    # a file's rows are in Hive or among its rejects: a rejected row is not a lost one
    expected = {f.file_id: f.rows - rejected(f) for f in files}
    lost = [f for f in files if hive.get(f.file_id, 0) < expected[f.file_id]]
    duplicated = [f for f in files if hive.get(f.file_id, 0) > expected[f.file_id]]
    t = Table(title=f"Soak: {len(files)} files, {settled_s / 60:.1f} min to settle")
    t.add_column("measure")
    t.add_column("value", justify="right")
    for ds in by_ds:
        mine = [f for f in files if f.dataset == ds]
        rows = sum(hive.get(f.file_id, 0) for f in mine)
        t.add_row(
            f"{ds}: files in / loaded", f"{len(mine)} / {sum(f.file_id in loaded for f in mine)}"
        )
        t.add_row(
            f"{ds}: rows in Hive / expected (rows − rejected)",
            f"{rows} / {sum(expected[f.file_id] for f in mine)} "
            f"({sum(f.rows for f in mine)} − {sum(rejected(f) for f in mine)})",
        )
    t.add_row("lost (fewer rows in Hive than the file has, less rejects)", str(len(lost)))
    t.add_row("duplicated (more rows in Hive than that)", str(len(duplicated)))
    t.add_row(
        "quarantined",
        ", ".join(
            f"{f.relative} {[x.reason for x in outcomes.failed[f.file_id]]}"
            for f in quarantined[:5]
        )
        or "0",
    )
    t.add_row("no outcome by the deadline", str(len(files) - len(loaded) - len(quarantined)))
    for f in plan:
        when = "-" if f.started is None else f"{(f.at_s / 60):.1f} min"
        t.add_row(f"fault {f.label} at {when}", f.detail or "not run")
    t.add_row("services that exited and were started again (not by a fault)", str(restarts or 0))
    t.add_row("service exit codes at the end", str(codes))
    console.print(t)

    g = Table(title=f"Processes: first → last quarter after warm-up (target ≤ {MAX_GROWTH:.0f} %)")
    for col in ("process", "RSS MiB", "%", "threads", "%", "fds", "%", "ok"):
        g.add_column(col, justify="left" if col == "process" else "right")
    grown = False
    roles = sorted({x.role for x in growth})
    for role in roles:
        restarted = any(x.restarted for x in growth if x.role == role)
        cells: list[str] = [f"{role} (restarted)" if restarted else role]
        ok = True
        for measure in ("rss", "threads", "fds"):
            x = next(y for y in growth if y.role == role and y.measure == measure)
            cells += [f"{_fmt(measure, x.first)} → {_fmt(measure, x.last)}", f"{x.percent:+.1f}"]
            ok &= x.percent <= MAX_GROWTH
        grown |= not ok
        g.add_row(*cells, "yes" if ok else "NO")
    console.print(g)
    if any(thread_changes.values()):
        n = Table(title="Threads by name (digits dropped) behind a change of the thread count")
        for col in ("process", "thread name", "first quarter", "last quarter"):
            n.add_column(col, justify="right" if "quarter" in col else "left")
        for role, changes in sorted(thread_changes.items()):
            for name, before, after in changes:
                n.add_row(role, name, f"{before:.1f}", f"{after:.1f}")
        console.print(n)

    z = Table(
        title="Zones: usage against the retention's bound (files in flight + files whose "
        "outcome is younger than the retention + 2 sweeps + 60 s)"
    )
    for col in (
        "zone",
        "retention",
        "max files",
        "fullest: files / bound",
        "max MiB",
        "at end",
        "dead-batch files",
        "gc removed",
        "ok",
    ):
        z.add_column(col, justify="left" if col == "zone" else "right")
    over = False
    for zone, series in bounds.items():
        keep = retention.of(zone)
        worst: tuple[int, int, tuple[bool, float]] | None = None  # over its bound, else fullest
        for s, bound in series:
            if zone not in s.zones or bound is None:
                continue
            used = s.zones[zone][1] - s.orphans.get(zone, 0)
            key = (used > bound, used / bound if bound else float(used > 0))
            if worst is None or key > worst[2]:
                worst = (used, bound, key)
        most = max((s.zones[zone][1] for s, _b in series if zone in s.zones), default=0)
        size = max((s.zones[zone][0] for s, _b in series if zone in s.zones), default=0)
        last = next((s.zones[zone] for s, _b in reversed(series) if zone in s.zones), (0, 0))
        tmp = max((s.orphans.get(zone, 0) for s, _b in series), default=0)
        ok = worst is None or worst[0] <= worst[1]
        over |= not ok
        z.add_row(
            zone,
            "keep" if keep is None else class_label(keep),
            str(most),
            "-" if worst is None else f"{worst[0]} {'≤' if ok else '>'} {worst[1]}",
            f"{size / 2**20:.1f}",
            f"{last[1]} files, {human_bytes(last[0])}",
            str(tmp),
            f"{removed.get(zone, 0):.0f}",
            "yes" if ok else "NO",
        )
    console.print(z)
    for p in pngs:
        console.print(f"plot: {p}")
    console.print(f"samples: {out_dir / 'samples.csv'}")
    reliable = not (lost or duplicated or quarantined or deadline)
    return reliable and not grown and not over
