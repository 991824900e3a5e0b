"""``python -m ferry_kit.nemesis``: a seeded nemesis run on the local stack (``make nemesis``).

Prints the seed first, the schedule, each fault as it is applied, then the checker's table.
Exit status 0 when nothing was lost, duplicated, wrongly quarantined or disagreed on, every
stranger's record was set aside and no process exited unexplained; 1 otherwise;
``--dry-run`` prints the schedule only.
"""

from __future__ import annotations

import tempfile
from pathlib import Path

import typer
from rich.console import Console

from ferry_kit.nemesis.schedule import (
    COMPONENTS,
    Fault,
    fresh_seed,
    make_schedule,
    max_in_force,
)

app = typer.Typer(add_completion=False)
_PLOT_OPTION = typer.Option(None, "--plot", help="Write the timeline plot (PNG) here.")


@app.command()
def main(
    seed: int | None = typer.Option(None, "--seed", help="Schedule seed (default: a fresh one)."),
    minutes: float = typer.Option(3.0, "--minutes", min=0.5, help="Minutes of faults."),
    heal_s: float = typer.Option(300.0, "--heal", help="Seconds given to heal after the faults."),
    interval_s: float = typer.Option(3.0, "--interval", help="Seconds between two drops."),
    plot: Path | None = _PLOT_OPTION,
    dry_run: bool = typer.Option(False, "--dry-run", help="Print the schedule only."),
    spare: list[str] = typer.Option(  # noqa: B008 - typer's way
        [], "--spare", help="A stack component the schedule leaves alone (repeat the option)."
    ),
) -> None:
    """Faults at random while files keep arriving, then the exactly-once checker (issue 47)."""
    console = Console()
    seed = fresh_seed() if seed is None else seed
    unknown = sorted(set(spare) - set(COMPONENTS))
    if unknown:
        raise typer.BadParameter(f"not stack components: {unknown}; known: {list(COMPONENTS)}")
    # a combined target (both masters) goes too when it holds a spared component
    components = [c for c in COMPONENTS if not Fault(0, "kill", c, 1).processes & set(spare)]
    print_seed = f"nemesis seed {seed}" + (f", sparing {sorted(spare)}" if spare else "")
    if dry_run:
        schedule = make_schedule(seed, minutes * 60, components=components)
        console.print(
            f"{print_seed}: {len(schedule)} faults, at most {max_in_force(schedule)} at once"
        )
        for f in schedule:
            console.print(f"  {f.describe()}")
        return
    from ferry_kit.nemesis.runner import plot as draw
    from ferry_kit.nemesis.runner import run
    from ferry_kit.settings import get_kit_settings

    stack = get_kit_settings()
    work = Path(tempfile.mkdtemp(prefix="ferry-nemesis-"))
    result = run(
        stack,
        seed,
        minutes,
        work,
        heal_s=heal_s,
        interval_s=interval_s,
        say=console.print,
        components=components,
    )
    v = result.verdict
    assert v is not None
    console.print(v.table(f"nemesis seed {seed}, {minutes:g} min"))
    if result.explained_exits:
        console.print(f"exits after the process's own pause: {dict(result.explained_exits)}")
    for name in (
        "lost",
        "duplicated",
        "wrong_rows",
        "wrongly_quarantined",
        "bad_not_quarantined",
        "tracker_disagrees",
        "strangers_not_set_aside",
    ):
        if ids := getattr(v, name):
            console.print(f"{name}: {ids}")
    if v.tracker_states:
        console.print(f"tracker states: {v.tracker_states}")
    if plot is not None:
        draw(result, plot)
        console.print(f"timeline plot: {plot}")
    console.print(f"nemesis seed {seed}: {'OK' if v.ok else 'FAILED'}; work dir {work}")
    raise typer.Exit(0 if v.ok else 1)


if __name__ == "__main__":
    app()
