"""Definitions reloaded while a service runs (:class:`Definitions`).

:meth:`Definitions.refresh` compares a cheap fingerprint of the datasets directory (name, size,
mtime and inode of each definition file: one ``stat`` each) with the last one and reads the files
again (:func:`ferry.datasets.registry.load_definitions`) only when it differs, then logs and
returns what changed (:class:`Changes`). Extract calls it before every scan, transform and load
before every batch (:func:`snapshot`) and from their idle loop, so a new or changed definition
is picked up at the next batch without a restart.
"""

from __future__ import annotations

import json
import logging
import os
import threading
from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from ferry.datasets.registry import (
    Compiler,
    DefinitionSet,
    definition_files,
    definition_version,
    load_definitions,
)
from ferry.datasets.spec import DatasetSpec
from ferry.errors import ConfigError

log = logging.getLogger(__name__)


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
        #: (name, version) whose failed compile was logged: said once, not at every reload
        self._said_unchecked: set[tuple[str, str]] = set()
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
            compile_spec = self._compile if self.compile_spec is not None else None
            new = _keep_unchanged(
                self._set, load_definitions(self.directory, compile_spec, self._cache)
            )
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
        """``compile_spec(spec)``, its result cached; when it raises (no Spark session yet), the
        next refresh tries again, and the first failure of each version is logged with why."""
        assert self.compile_spec is not None
        key = (spec.name, definition_version(spec))
        try:
            problems = self.compile_spec(spec)
        except Exception as exc:
            self._unchecked = True
            if key not in self._said_unchecked:
                self._said_unchecked.add(key)
                log.info(
                    "%s: dataset %r: definition version %s not compiled yet (%s: %s); it runs, "
                    "and is compiled at a later reload",
                    self.service,
                    spec.name,
                    key[1],
                    type(exc).__name__,
                    exc,
                )
            raise
        self._cache[key] = problems
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


def _keep_unchanged(old: DefinitionSet, new: DefinitionSet) -> DefinitionSet:
    """``new`` with the spec objects of ``old`` where a dataset's version did not change, so
    what a stage built per spec object (transform's expressions, thousands of py4j calls) is
    not built again when another definition changed."""
    before = {d.name: d for d in old.entries if d.valid}
    entries = []
    for d in new.entries:
        o = before.get(d.name)
        if d.valid and o is not None and o.version == d.version and o.path == d.path:
            d = replace(d, spec=o.spec)
        entries.append(d)
    return replace(new, entries=tuple(entries))


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


def snapshot(datasets: Definitions | Mapping[str, DatasetSpec]) -> DefinitionSet:
    """The definitions to use for one batch: ``datasets`` reloaded if it changed
    (:class:`Definitions`), or a fixed mapping of specs as a set."""
    if isinstance(datasets, Definitions):
        datasets.refresh()
        return datasets.current()
    return DefinitionSet.of(datasets)


__all__ = ["Changes", "Definitions", "diff", "snapshot"]
