"""The nemesis run: a seeded fault schedule applied to the real local stack and the services while
the workload keeps dropping files, then a bounded heal time and the checker (issue 47).

:func:`run` prints the seed first, starts the services (the four stages and the tracker) under a
private prefix with the fault rig (:class:`ferry_kit.testing.chaos.FaultRig`: cluster A's WebHDFS
behind fault proxies) and private dataset definitions (tables ``<table>_<token>``, patterns
``*.csv*``), then for ``minutes`` applies each fault when due and undoes it when its length has
passed (:class:`ferry_kit.nemesis.faults.Injector`), the workload dropping files meanwhile. At the
end every fault still in force is undone (also on an exception or Ctrl-C), the pipeline gets
``heal_s`` seconds to settle every file, and :func:`ferry_kit.nemesis.checker.check` gives the
verdict. A service that exits without a fault explaining it is restarted (as the supervisor would)
and counted. ``python -m ferry_kit.nemesis --help`` (``make nemesis``) is the command line.
"""

from __future__ import annotations

import re
import time
import uuid
from collections import Counter
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from ferry.core.services import STAGES
from ferry_kit.nemesis.checker import Verdict, check
from ferry_kit.nemesis.faults import Injector
from ferry_kit.nemesis.schedule import COMPONENTS, KINDS, Fault, make_schedule
from ferry_kit.nemesis.workload import Workload
from ferry_kit.settings import KitSettings
from ferry_kit.testing.chaos import FaultRig

#: ``retry.min_window_s`` of the services the nemesis runs (docker-compose.yml's, for the same
#: reason: faults of minutes delay files, they do not quarantine them).
MIN_WINDOW_S = 300.0

#: Seconds after its own pause ends within which a stack component's exit is explained by it.
EXPLAINED_AFTER_PAUSE_S = 60.0

#: The services the nemesis runs (and kills): the stages and the tracker.
RUN_SERVICES: tuple[str, ...] = (*STAGES, "tracker")


@dataclass
class Run:
    """What a run did, for the table and the plot (times are ``time.time()``)."""

    seed: int
    schedule: list[Fault]
    start: float = 0.0
    faults_end: float = 0.0
    applied: list[tuple[Fault, float, float | None]] = field(default_factory=list)
    #: faults that could not be applied, with why (e.g. a quota while its NameNode was down)
    skipped: list[tuple[Fault, str]] = field(default_factory=list)
    #: faults never applied: their process was held by an earlier fault to the end
    never_applied: list[Fault] = field(default_factory=list)
    loaded_at: list[float] = field(default_factory=list)
    unexplained_exits: Counter[str] = field(default_factory=Counter)
    explained_exits: Counter[str] = field(default_factory=Counter)  #: exits after their own pause
    next_stack_check: float = 0.0
    verdict: Verdict | None = None


def private_definitions(stack: KitSettings, work: Path, token: str) -> Path:
    """A copy of the stack's dataset definitions with private tables (``<table>_<token>``) whose
    patterns also take compressed files (``flights_*.csv*``). Returns the directory."""
    defs = work / "datasets"
    defs.mkdir(parents=True)
    for src in stack.paths.datasets_dir.glob("*.yaml"):
        text = src.read_text(encoding="utf-8")
        text = re.sub(r"^  table: (\w+)$", rf"  table: \1_{token}", text, flags=re.M)
        text = re.sub(r'^  pattern: "(\w+_\*\.csv)"$', r'  pattern: "\1*"', text, flags=re.M)
        (defs / src.name).write_text(text, encoding="utf-8")
    return defs


def run(
    stack: KitSettings,
    seed: int,
    minutes: float,
    work: Path,
    *,
    heal_s: float = 300.0,
    interval_s: float = 3.0,
    say: Callable[[str], None] = print,
    components: Sequence[str] = COMPONENTS,
) -> Run:
    """One nemesis run (see the module docstring); ``run.verdict`` holds the checker's verdict.
    ``components``: the stack processes the schedule may fault (default every one).

    Raises:
        AssertionError, FerryError: the rig could not start (see FaultRig).
    """
    spared = sorted(set(COMPONENTS) - set(components))
    again = f"SEED={seed}" + (f" SPARE='{' '.join(spared)}'" if spared else "")
    say(f"nemesis seed {seed} ({minutes:g} min of faults; repeat with make nemesis {again})")
    schedule = make_schedule(seed, minutes * 60, components=components)
    result = Run(seed, schedule)
    for f in schedule:
        say(f"  {f.describe()}")
    token = uuid.uuid4().hex[:8]
    defs = private_definitions(stack, work, token)
    # As the compose deployment runs its stages (docker-compose.yml): a transient failure is
    # retried for 5 minutes before its file is quarantined, longer than any fault of the
    # schedule (90 s at most) and its recovery; a stage that still quarantines a good file
    # outlasted that (the default, 0, quarantines after retry.max_attempts: the hour's run).
    extra = {
        "paths.datasets_dir": defs,
        "kafka.session_timeout_ms": 10_000,
        "retry.min_window_s": MIN_WINDOW_S,
    }
    rig = FaultRig(stack, work, seed=seed, extra=extra, services=RUN_SERVICES)
    say(f"services ready {rig.ready_s:.0f}s after start; logs in {rig.group.log_dir}")
    injector = Injector(stack, rig, say=say)
    loaded = rig.outcomes.loaded
    workload = Workload(rig, seed, interval_s=interval_s, say=say, loaded=lambda: list(loaded))
    todo = list(schedule)
    try:  # the services are stopped whatever happens below (an error, Ctrl-C)
        try:
            workload.prepare(int(minutes * 60 / interval_s) + 10)
            result.start = start = time.time()
            workload.start()
            while (now := time.time() - start) < minutes * 60:
                for f in [f for f in todo if f.at_s <= now]:
                    if injector.may_start(f):  # an undo running late may hold it still
                        todo.remove(f)
                        injector.apply(f)
                injector.tick()
                _revive(rig, injector, result)
                rig.outcomes.poll(0.5)
                if workload.error is not None:
                    raise workload.error
            workload.stop()
            say(f"nemesis: faults over after {time.time() - start:.0f}s; undoing what is in force")
        finally:
            workload.stop()
            left = injector.undo_all()
            result.faults_end = time.time()
            if left:
                say(f"nemesis: NOT UNDONE: {[(a.fault.kind, a.fault.target) for a in left]}")
        if todo:
            say(f"nemesis: {len(todo)} fault(s) never applied (their process was held to the end)")
        ids = [d.file_id for d in workload.dropped]
        heal_end = time.monotonic() + heal_s

        def healed() -> bool:  # every file settled, every stranger's record set aside
            return rig.outcomes.settled(ids) and set(injector.strangers) <= rig.outcomes.set_aside

        while not healed() and time.monotonic() < heal_end:
            _revive(rig, injector, result)
            rig.outcomes.poll(1.0)
        if not healed():
            say(f"nemesis: not healed within {heal_s:.0f}s: {rig.outcomes.unsettled(ids)}")
        result.verdict = _verdict(rig, workload, injector, result)
    finally:
        codes = rig.close()
        say(f"service exit codes {codes}; logs in {rig.group.log_dir}")
    result.applied = [(a.fault, a.applied_at, a.undone_at) for a in injector.done]
    result.skipped = list(injector.skipped)
    result.never_applied = list(todo)
    result.loaded_at = sorted(
        s["loaded"] / 1000
        for fid, s in rig.outcomes.stamps.items()
        if "loaded" in s and fid in set(ids)
    )
    return result


def _verdict(rig: FaultRig, workload: Workload, injector: Injector, result: Run) -> Verdict:
    """The checker's verdict; the tracker may lag its topics a little after the heal (and a
    stage its strangers' records), so a verdict whose only findings are the tracker's or
    strangers' records not set aside is taken again (for at most 60 s)."""
    last = max((a.undone_at or 0.0 for a in injector.done), default=None)
    replayed = [fid for fid, _, _ in workload.replayed]
    end = time.monotonic() + 60
    while True:
        v = check(
            rig.settings, workload.dropped, rig.outcomes, replayed, last or None, injector.strangers
        )
        trackers_only = (v.tracker_disagrees or v.strangers_not_set_aside) and not (
            v.lost or v.duplicated or v.wrong_rows or v.wrongly_quarantined
        )
        if not trackers_only or time.monotonic() > end:
            break
        rig.outcomes.poll(5.0)
    v.faults.update(a.fault.kind for a in injector.done)
    v.skipped = len(injector.skipped)
    v.unexplained_exits = +result.unexplained_exits
    return v


def _revive(rig: FaultRig, injector: Injector, result: Run) -> None:
    """Restart a service or a stack component that exited while no fault of the injector holds
    it (what a supervisor does in production), counting it as unexplained unless its own pause
    ended within :data:`EXPLAINED_AFTER_PAUSE_S` (a Spark master paused past its ZooKeeper
    session exits when it resumes, by design)."""
    held = {n for a in injector.pending if a.fault.kind == "kill" for n in a.fault.processes}
    for name, proc in list(rig.group.procs.items()):
        if name not in held and (code := proc.poll()) is not None:
            result.unexplained_exits[name] += 1
            injector.say(f"nemesis: service {name} exited ({code}) with no fault holding it")
            rig.group.start(name)
    if time.monotonic() >= result.next_stack_check:  # a pid file and /proc read per component
        result.next_stack_check = time.monotonic() + 5.0
        now = time.time()
        paused = {
            n
            for a in injector.done
            if a.fault.kind == "stop" and now - (a.undone_at or now) <= EXPLAINED_AFTER_PAUSE_S
            for n in a.fault.processes
        }
        for name in injector.revive_components():
            if name in paused:
                result.explained_exits[name] += 1
            else:
                result.unexplained_exits[name] += 1


def plot(result: Run, path: Path) -> None:
    """Faults (a bar per fault from applied to undone, a row per target, a colour per kind) over
    files loaded per minute, into ``path``."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    from matplotlib.patches import Patch

    fig, (top, bottom) = plt.subplots(
        2, 1, figsize=(10, 8), sharex=True, gridspec_kw={"height_ratios": [3, 1]}
    )
    targets = sorted({f.target for f, _, _ in result.applied})
    colours = {k: f"C{i}" for i, k in enumerate(KINDS)}  # matplotlib's ten cycle colours
    for f, on, off in result.applied:
        top.barh(
            targets.index(f.target),
            ((off or on) - on) / 60,
            left=(on - result.start) / 60,
            height=0.7,
            color=colours[f.kind],
        )
    top.set_yticks(range(len(targets)), targets, fontsize=7)
    handles = [Patch(color=c, label=k) for k, c in colours.items()]
    top.legend(handles=handles, fontsize=7, loc="upper right")
    top.set_title(f"nemesis seed {result.seed}: faults (bars) and files loaded per minute")
    minutes = [int((t - result.start) // 60) for t in result.loaded_at if t >= result.start]
    counts = Counter(minutes)
    xs = range(max(counts, default=0) + 1)
    bottom.bar([x + 0.5 for x in xs], [counts.get(x, 0) for x in xs], width=0.9)
    bottom.axvline((result.faults_end - result.start) / 60, color="k", ls="--", lw=1)
    bottom.set_ylabel("files loaded / min")
    bottom.set_xlabel("minutes since the first drop (dashed: last fault undone)")
    fig.tight_layout()
    fig.savefig(path, dpi=90)
    plt.close(fig)
