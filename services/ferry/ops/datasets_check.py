"""``ferry datasets check``: a definition is checked before any service runs it.

Three checks per definition file, each problem one line naming the dataset and the field:

1. YAML and rules (:func:`ferry.datasets.registry.load_definitions`: the model's validation, and
   two files claiming one dataset name or the same NAS files);
2. every derived expression and validation rule compiled by Spark's analyzer against the parse
   schema (:func:`ferry.stages.transform.compile.definition_problems`), when a Spark session is
   given;
3. the existing Hive table compared with the definition
   (:func:`ferry.stages.load.job.table_evolution`: columns the definition adds are fine, load adds
   them; a column removed or retyped, or other partition columns, are refused), when the
   session reaches the metastore.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ferry.datasets.registry import Definition, load_definitions, read_definition
from ferry.datasets.spec import DatasetSpec


@dataclass
class Checked:
    """One definition file's outcome: ``problems`` refuse it; ``notes`` are information."""

    path: Path
    name: str
    version: str | None
    problems: list[str] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        return not self.problems


def definitions_of(paths: Iterable[Path]) -> list[Definition]:
    """The definitions named by ``paths``: every definition file of a directory, or the file
    itself (judged beside the other files of its directory, so a name or NAS clash shows)."""
    out: list[Definition] = []
    for path in paths:
        if path.is_dir():
            out += load_definitions(path).entries
            continue
        beside = [e for e in load_definitions(path.parent).entries if e.path == path]
        out += beside or [read_definition(path)]
    return out


def hive_comparison(spark: Any, spec: DatasetSpec) -> tuple[list[str], list[str]]:
    """(problems, notes) of the definition against its existing Hive table."""
    from ferry.stages.load.job import table_evolution

    name = spec.hive.full_name
    if not spark.catalog.tableExists(name):
        return [], [f"table {name} does not exist yet (created at the first load)"]
    parts = [c.name for c in spark.catalog.listColumns(name) if c.isPartition]
    additions, problems = table_evolution(spark.table(name).schema, parts, spec)
    notes = [f"table {name}: matches"] if not additions and not problems else []
    if additions:
        cols = ", ".join(f"{n} {t}" for n, t in additions)
        notes.append(f"table {name}: the next load adds column(s) {cols}")
    return [f"table {name}: {p}" for p in problems], notes


def check(paths: Iterable[Path], spark: Any = None, compare_hive: bool = False) -> list[Checked]:
    """Check every definition of ``paths`` (see the module docstring); ``spark``: a session
    for the analyzer (``None``: skipped), ``compare_hive``: it reaches the metastore."""
    from ferry.stages.transform.compile import definition_problems

    out = []
    for d in definitions_of(paths):
        c = Checked(d.path, d.name, d.version, list(d.problems))
        if d.spec is not None and not c.problems and spark is not None:
            c.problems += definition_problems(spark, d.spec)
            if compare_hive and not c.problems:
                problems, notes = hive_comparison(spark, d.spec)
                c.problems += problems
                c.notes += notes
        out.append(c)
    return out


__all__ = ["Checked", "check", "definitions_of", "hive_comparison"]
