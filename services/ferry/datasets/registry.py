"""The dataset definitions of a directory, each file read on its own.

:func:`load_definitions` reads every ``*.yaml``/``*.yml`` file of the datasets directory
independently: a file that is not a valid definition is an *invalid* entry (its error kept, its
dataset name and NAS sub-directory too when the YAML says them), and every valid file is a
dataset the service runs. One bad file therefore never stops the others (issue 33: one YAML with
``type: long`` used to make extract, transform and load crash-loop).

:class:`ferry.datasets.reload.Definitions` holds a service's current :class:`DefinitionSet` and
reloads it when the directory changes, so a new or changed definition is picked up at the next
batch without a restart.

A definition's *version* is the first 12 hex digits of the SHA-256 of its validated content
(canonical JSON of the model, defaults filled in), so comments and formatting do not make a new
version, and the same definition has the same version in every service. The manifest records the
version that processed a file (``FileManifest.definition_version``).
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, replace
from pathlib import Path

import yaml
from pydantic import ValidationError

from ferry.datasets.spec import DatasetSpec

#: Extra check of a valid definition (e.g. transform compiling its expressions with Spark):
#: returns the problems found, ``[]`` when none; raising means "could not check now" (the
#: definition is run unchecked; the caller logs why and checks it again later).
Compiler = Callable[[DatasetSpec], list[str]]


def definition_version(spec: DatasetSpec) -> str:
    """12 hex digits of the SHA-256 of the definition's canonical JSON (defaults included)."""
    text = json.dumps(spec.model_dump(mode="json"), sort_keys=True, separators=(",", ":"))
    return hashlib.sha256(text.encode("utf-8")).hexdigest()[:12]


def validation_problems(exc: ValidationError) -> list[str]:
    """One line per pydantic error: ``<field path>: <message>`` (``columns.3.type: unsupported
    type 'long'; use one of …``), or the bare message of a whole-model rule."""
    out = []
    for err in exc.errors():
        where = ".".join(str(p) for p in err["loc"])
        msg = str(err["msg"]).removeprefix("Value error, ")
        out.append(f"{where}: {msg}" if where else msg)
    return out


@dataclass(frozen=True)
class Definition:
    """One definition file: valid (``spec`` and ``version`` set) or not (``problems`` set).

    ``name`` and ``subdir`` of an invalid file come from its YAML when it says them (else the
    file's stem and ``None``): enough to tell which dataset waits and where its files lie.
    """

    path: Path
    name: str
    spec: DatasetSpec | None = None
    version: str | None = None
    problems: tuple[str, ...] = ()
    subdir: str | None = None
    #: False when the name is only the file's stem (the YAML could not say it)
    named: bool = True
    #: ``database.table`` as the YAML says it (also for an invalid definition), or None
    table: str | None = None

    @property
    def valid(self) -> bool:
        return self.spec is not None and not self.problems

    @property
    def error(self) -> str:
        """The problems in one line each, prefixed by the file (``""`` when valid)."""
        return "; ".join(self.problems)


def read_definition(path: Path) -> Definition:
    """Read and validate one file; never raises (an unreadable file is an invalid entry)."""
    try:
        data = yaml.safe_load(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, yaml.YAMLError) as exc:
        return Definition(path, path.stem, problems=(f"cannot read: {_why(exc)}",), named=False)
    if not isinstance(data, dict):
        problem = f"must be a mapping, not {type(data).__name__}"
        return Definition(path, path.stem, problems=(problem,), named=False)
    named = isinstance(data.get("name"), str)
    name = data["name"] if named else path.stem
    nas = data.get("nas")
    subdir = nas.get("subdir") if isinstance(nas, dict) else None
    hive = data.get("hive")
    table = (
        f"{hive.get('database')}.{hive.get('table')}"
        if isinstance(hive, dict) and hive.get("database") and hive.get("table")
        else None
    )
    try:
        spec = DatasetSpec.model_validate(data)
    except ValidationError as exc:
        return Definition(
            path,
            name,
            problems=tuple(validation_problems(exc)),
            subdir=subdir if isinstance(subdir, str) else None,
            named=named,
            table=table,
        )
    return Definition(
        path,
        spec.name,
        spec,
        definition_version(spec),
        subdir=spec.nas.subdir,
        table=spec.hive.full_name,
    )


def _why(exc: BaseException) -> str:
    """One line: a YAML error's problem and position (``expected ',' or ']', but got '<stream
    end>' at line 3, column 1``), else the exception's first line."""
    mark = getattr(exc, "problem_mark", None)
    problem = getattr(exc, "problem", None)
    if problem and mark is not None:
        return f"YAML: {problem} at line {mark.line + 1}, column {mark.column + 1}"
    text = str(exc).strip()
    return text.splitlines()[0] if text else type(exc).__name__


def definition_files(directory: Path) -> list[Path]:
    """The definition files of ``directory`` (``*.yaml``, ``*.yml``; hidden names skipped),
    sorted by name."""
    found = [*directory.glob("*.yaml"), *directory.glob("*.yml")]
    return sorted(p for p in found if not p.name.startswith("."))


@dataclass(frozen=True)
class DefinitionSet:
    """Every definition file of a directory at one moment."""

    directory: Path
    entries: tuple[Definition, ...] = ()

    @classmethod
    def of(cls, specs: Mapping[str, DatasetSpec]) -> DefinitionSet:
        """A set of the given valid definitions (fixed; tests and one-off tools)."""
        entries = tuple(
            Definition(Path(f"{n}.yaml"), n, s, definition_version(s)) for n, s in specs.items()
        )
        return cls(Path("."), entries)

    @property
    def specs(self) -> dict[str, DatasetSpec]:
        """The valid datasets by name: what a service runs."""
        return {d.name: d.spec for d in self.entries if d.valid and d.spec is not None}

    @property
    def invalid(self) -> list[Definition]:
        return [d for d in self.entries if not d.valid]

    def get(self, name: str) -> Definition | None:
        """The entry of dataset ``name`` (valid or not), or ``None``."""
        return next((d for d in self.entries if d.name == name), None)

    def version(self, name: str) -> str | None:
        d = self.get(name)
        return d.version if d is not None and d.valid else None

    def waits(self, name: str) -> Definition | None:
        """The invalid entry a file of dataset ``name`` waits for, or ``None`` when it need
        not wait: the dataset is valid, or unknown while every definition file could be read
        (an unreadable file may be that dataset's, so then every unknown dataset waits too)."""
        d = self.get(name)
        if d is not None:
            return None if d.valid else d
        return next((e for e in self.invalid if not e.named), None)

    def wait_reason(self, name: str) -> str | None:
        """Why a file of dataset ``name`` waits (see :meth:`waits`), or ``None``."""
        d = self.waits(name)
        if d is None:
            return None
        return f"dataset {name!r} waits for a valid definition ({d.path.name}: {d.error})"


def load_definitions(
    directory: str | Path, compile_spec: Compiler | None = None, cache: Mapping | None = None
) -> DefinitionSet:
    """Read every definition file of ``directory`` (see the module docstring).

    Two files defining the same dataset name, or the same NAS sub-directory and pattern: the
    second (by file name) is invalid, naming the first. ``compile_spec`` runs on each valid
    definition (``cache``: ``{(name, version): problems}`` of earlier runs, reused). A missing
    directory gives an empty set (the caller says whether that is an error).
    """
    directory = Path(directory)
    if not directory.is_dir():
        return DefinitionSet(directory)
    entries: list[Definition] = []
    for path in definition_files(directory):
        d = read_definition(path)
        if d.valid and d.spec is not None:
            clash = _clash(d.spec, entries)
            if clash is not None:
                d = replace(d, spec=None, version=None, problems=(clash,))
            elif compile_spec is not None:
                d = _compiled(d, compile_spec, cache or {})
        entries.append(d)
    return DefinitionSet(directory, tuple(entries))


def _clash(spec: DatasetSpec, before: Iterable[Definition]) -> str | None:
    for other in before:
        if other.name == spec.name:
            return f"dataset {spec.name!r} is also defined by {other.path.name}"
        o = other.spec
        if o is not None and (o.nas.subdir, o.nas.pattern) == (spec.nas.subdir, spec.nas.pattern):
            return f"claims the same NAS files as dataset {o.name!r} ({other.path.name})"
    return None


def _compiled(d: Definition, compile_spec: Compiler, cache: Mapping) -> Definition:
    assert d.spec is not None and d.version is not None
    key = (d.name, d.version)
    if key in cache:
        problems = cache[key]
    else:
        try:
            problems = compile_spec(d.spec)
        except Exception:  # noqa: BLE001 - cannot check now (no Spark): run it, check later
            return d
    if not problems:
        return d
    return replace(d, spec=None, version=None, problems=tuple(problems))


__all__ = [
    "Compiler",
    "Definition",
    "DefinitionSet",
    "definition_files",
    "definition_version",
    "load_definitions",
    "read_definition",
    "validation_problems",
]
