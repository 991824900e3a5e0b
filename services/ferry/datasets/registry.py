"""The dataset definitions a service runs, reloaded while it runs; each dataset on its own.

:func:`load_definitions` reads every ``*.yaml``/``*.yml`` file of the datasets directory
independently: a file that is not a valid definition is an *invalid* entry (its error kept, its
dataset name and NAS sub-directory too when the YAML says them), and every valid file is a
dataset the service runs. One bad file therefore never stops the others (issue 33: one YAML with
``type: long`` used to make extract, transform and load crash-loop).

:class:`Definitions` holds the current :class:`DefinitionSet` of a service and reloads it when
the directory changes: :meth:`Definitions.refresh` compares a cheap fingerprint of the directory
(name, size, mtime and inode of each definition file: one ``stat`` each) with the last one and
reads the files again only when it differs. The services call it once per batch (transform,
load) or per scan (extract), and from their idle loop, so a new or changed definition is picked
up at the next batch without a restart.

A definition's *version* is the first 12 hex digits of the SHA-256 of its validated content
(canonical JSON of the model, defaults filled in), so comments and formatting do not make a new
version, and the same definition has the same version in every service. The manifest records the
version that processed a file (``FileManifest.definition_version``).
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
import threading
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

import yaml
from pydantic import ValidationError

from ferry.core.errors import ConfigError
from ferry.datasets.spec import DatasetSpec

log = logging.getLogger(__name__)

#: Extra check of a valid definition (e.g. transform compiling its expressions with Spark):
#: returns the problems found, ``[]`` when none; raising means "could not check now".
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
    try:
        spec = DatasetSpec.model_validate(data)
    except ValidationError as exc:
        return Definition(
            path,
            name,
            problems=tuple(validation_problems(exc)),
            subdir=subdir if isinstance(subdir, str) else None,
            named=named,
        )
    return Definition(path, spec.name, spec, definition_version(spec), subdir=spec.nas.subdir)


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


def snapshot(datasets: Definitions | Mapping[str, DatasetSpec]) -> DefinitionSet:
    """The definitions to use for one batch: ``datasets`` reloaded if it changed
    (:class:`Definitions`), or a fixed mapping of specs as a set."""
    if isinstance(datasets, Definitions):
        datasets.refresh()
        return datasets.current()
    return DefinitionSet.of(datasets)


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
        except Exception as exc:  # noqa: BLE001 - cannot check now (no Spark): run it, check later
            log.info("dataset %r: definition not compiled now (%s); checked later", d.name, exc)
            return d
    if not problems:
        return d
    return replace(d, spec=None, version=None, problems=tuple(problems))


@dataclass
class Changes:
    """What a reload changed, by dataset name."""

    added: list[str] = field(default_factory=list)
    changed: list[str] = field(default_factory=list)
    removed: list[str] = field(default_factory=list)
    invalid: list[str] = field(default_factory=list)  #: newly invalid, or invalid differently
    ready: list[str] = field(default_factory=list)  #: valid now, not valid before

    def __bool__(self) -> bool:
        return bool(self.added or self.changed or self.removed or self.invalid or self.ready)


class Definitions:
    """The current definitions of one service, reloaded by :meth:`refresh` (thread-safe).

    Args:
        directory: the datasets directory (``settings.paths.datasets_dir``).
        service: name used in log lines (``extract``, ``transform``, …).
        compile_spec: extra check of each new valid version (transform: Spark's analyzer).
        status_file: where to write the datasets not run after each reload (``ferry ps``).
        must_exist: raise ConfigError when ``directory`` is missing (a wrong setting).
    """

    def __init__(
        self,
        directory: str | Path,
        service: str,
        compile_spec: Compiler | None = None,
        status_file: Path | None = None,
        must_exist: bool = True,
    ) -> None:
        self.directory = Path(directory)
        if must_exist and not self.directory.is_dir():
            raise ConfigError(f"datasets directory {self.directory} does not exist")
        self.service = service
        self.compile_spec = compile_spec
        #: after each reload: JSON ``{"invalid": {dataset: error}}`` (``ferry ps`` reads it)
        self.status_file = status_file
        self._lock = threading.Lock()
        self._stamp: tuple[Any, ...] | None = None
        #: a compile could not run (no Spark yet): the next refresh reloads even if unchanged
        self._unchecked = False
        self._cache: dict[tuple[str, str], list[str]] = {}
        self._set = DefinitionSet(self.directory)
        self.refresh()

    def current(self) -> DefinitionSet:
        return self._set

    def ready(self, name: str) -> bool:
        """Files of dataset ``name`` need not wait now (:meth:`DefinitionSet.waits`)."""
        return self._set.waits(name) is None

    def ready_changed(self) -> bool:
        """:meth:`refresh`; true when a dataset became valid or was added or changed."""
        c = self.refresh()
        return bool(c.ready or c.added or c.changed)

    def stamp(self) -> tuple[Any, ...]:
        """The directory's fingerprint: (name, size, mtime_ns, inode) of each definition file."""
        out = []
        for p in definition_files(self.directory) if self.directory.is_dir() else []:
            try:
                st = os.stat(p)
            except OSError:
                continue
            out.append((p.name, st.st_size, st.st_mtime_ns, st.st_ino))
        return tuple(out)

    def refresh(self, force: bool = False) -> Changes:
        """Reload when the directory changed (or ``force``); log and return what changed."""
        with self._lock:
            stamp = self.stamp()
            if stamp == self._stamp and not force and not self._unchecked:
                return Changes()
            self._stamp, self._unchecked = stamp, False
            new = load_definitions(self.directory, self._compile, self._cache)
            changes = diff(self._set, new)
            self._set = new
        self._log(new, changes)
        self._write_status(new)
        return changes

    def _write_status(self, new: DefinitionSet) -> None:
        if self.status_file is None:
            return
        body = json.dumps({"invalid": {d.name: d.error for d in new.invalid}})
        try:
            self.status_file.parent.mkdir(parents=True, exist_ok=True)
            tmp = self.status_file.with_name(self.status_file.name + ".tmp")
            tmp.write_text(body, encoding="utf-8")
            tmp.replace(self.status_file)
        except OSError as exc:  # a read-only disk must not stop the service
            log.warning("%s: cannot write %s: %s", self.service, self.status_file, exc)

    def _compile(self, spec: DatasetSpec) -> list[str]:
        assert self.compile_spec is not None
        try:
            problems = self.compile_spec(spec)
        except Exception:
            self._unchecked = True
            raise
        self._cache[(spec.name, definition_version(spec))] = problems
        return problems

    def _log(self, new: DefinitionSet, changes: Changes) -> None:
        for name in changes.invalid:
            d = new.get(name)
            if d is not None:
                log.error(
                    "%s: dataset %r is not run: definition %s is invalid: %s; its files wait "
                    "until it is fixed (ferry datasets check %s)",
                    self.service,
                    name,
                    d.path,
                    d.error,
                    d.path,
                )
        for name in changes.added + changes.changed + changes.ready:
            d = new.get(name)
            if d is not None and d.valid:
                log.info(
                    "%s: dataset %r: definition %s version %s loaded",
                    self.service,
                    name,
                    d.path.name,
                    d.version,
                )
        for name in changes.removed:
            log.warning("%s: dataset %r: definition removed; not run any more", self.service, name)


def diff(old: DefinitionSet, new: DefinitionSet) -> Changes:
    """What changed from ``old`` to ``new`` (see :class:`Changes`)."""
    c = Changes()
    before = {d.name: d for d in old.entries}
    after = {d.name: d for d in new.entries}
    for name, d in after.items():
        o = before.get(name)
        if not d.valid:
            if o is None or o.valid or o.problems != d.problems:
                c.invalid.append(name)
        elif o is None:
            c.added.append(name)
        elif not o.valid:
            c.ready.append(name)
        elif o.version != d.version:
            c.changed.append(name)
    c.removed = [n for n in before if n not in after]
    return c


__all__ = [
    "Changes",
    "Compiler",
    "Definition",
    "DefinitionSet",
    "Definitions",
    "definition_files",
    "definition_version",
    "diff",
    "load_definitions",
    "read_definition",
    "snapshot",
    "validation_problems",
]
