"""Schema evolution rules: can data written with one schema be read with another?

Implements the resolution rules of the Avro 1.11 specification ("Schema Resolution") on parsed
fastavro schemas: record fields matched by name (or reader alias), a reader field missing from the
writer needs a default, numeric promotion (int→long→float→double), string↔bytes, enum symbols,
fixed sizes, array items, map values, and unions (every writer branch must resolve to the reader).

:func:`check_schemas` is what ``ferry schemas check`` and the unit tests run: the current schemas
must read every released version's data (backward) and every released reader must read the
current schemas' data (forward), and every current record and field must carry a ``doc``.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from ferry.core.wire.avro import CURRENT, SchemaVersion, load_schema_history

_PRIMITIVES = frozenset({"null", "boolean", "int", "long", "float", "double", "bytes", "string"})
_PROMOTIONS = {
    "int": {"long", "float", "double"},
    "long": {"float", "double"},
    "float": {"double"},
    "string": {"bytes"},
    "bytes": {"string"},
}
_NAMED = frozenset({"record", "error", "enum", "fixed"})


def _short(name: str) -> str:
    return name.rsplit(".", 1)[-1]


class _Resolver:
    """Walks a writer and a reader schema together, collecting every incompatibility."""

    def __init__(self) -> None:
        self.writer_names: dict[str, Any] = {}
        self.reader_names: dict[str, Any] = {}
        self._seen: set[tuple[str, str]] = set()

    @staticmethod
    def _register(schema: Any, names: dict[str, Any]) -> None:
        if isinstance(schema, list):
            for branch in schema:
                _Resolver._register(branch, names)
        elif isinstance(schema, dict):
            kind = schema.get("type")
            if kind in _NAMED:
                names.setdefault(schema["name"], schema)
            if kind in ("record", "error"):
                for f in schema["fields"]:
                    _Resolver._register(f["type"], names)
            elif kind == "array":
                _Resolver._register(schema["items"], names)
            elif kind == "map":
                _Resolver._register(schema["values"], names)

    @staticmethod
    def _deref(schema: Any, names: Mapping[str, Any]) -> Any:
        if isinstance(schema, str) and schema not in _PRIMITIVES:
            return names.get(schema, schema)
        if isinstance(schema, dict) and schema.get("type") in _PRIMITIVES:
            return schema["type"]  # a logical type is read as its underlying type
        return schema

    @staticmethod
    def _label(schema: Any) -> str:
        if isinstance(schema, str):
            return schema
        if isinstance(schema, list):
            return "[" + ", ".join(_Resolver._label(b) for b in schema) + "]"
        return str(schema.get("name") or schema.get("type"))

    def check(self, writer: Any, reader: Any, path: str = "") -> list[str]:
        """Problems reading ``writer`` data with ``reader``; empty when compatible."""
        self._register(writer, self.writer_names)
        self._register(reader, self.reader_names)
        out: list[str] = []
        self._check(writer, reader, path, out)
        return out

    def _check(self, writer: Any, reader: Any, path: str, out: list[str]) -> None:
        w = self._deref(writer, self.writer_names)
        r = self._deref(reader, self.reader_names)
        where = path or "<root>"
        if isinstance(w, list):
            for branch in w:
                self._check(branch, r, path, out)
            return
        if isinstance(r, list):
            for branch in r:
                trial: list[str] = []
                self._check(w, branch, path, trial)
                if not trial:
                    return
            out.append(
                f"{where}: writer type {self._label(w)} matches no branch of "
                f"reader union {self._label(r)}"
            )
            return
        wk = w if isinstance(w, str) else w.get("type")
        rk = r if isinstance(r, str) else r.get("type")
        if wk in _PRIMITIVES or rk in _PRIMITIVES:
            if wk != rk and rk not in _PROMOTIONS.get(wk, ()):
                out.append(
                    f"{where}: writer type {self._label(w)} cannot be read as {self._label(r)}"
                )
            return
        if wk != rk and {wk, rk} != {"record", "error"}:
            out.append(f"{where}: writer type {wk} cannot be read as {rk}")
            return
        if (
            wk in _NAMED
            and _short(w["name"]) != _short(r["name"])
            and not any(_short(a) == _short(w["name"]) for a in r.get("aliases", ()))
        ):
            out.append(f"{where}: writer {wk} {w['name']} cannot be read as {r['name']}")
            return
        if wk in ("record", "error"):
            self._check_record(w, r, path, out)
        elif wk == "enum":
            missing = [s for s in w["symbols"] if s not in r["symbols"]]
            if missing and "default" not in r:
                out.append(
                    f"{where}: enum {r['name']} lacks writer symbols {missing} and has no default"
                )
        elif wk == "fixed":
            if w["size"] != r["size"]:
                out.append(
                    f"{where}: fixed {r['name']} size {w['size']} cannot be read as {r['size']}"
                )
        elif wk == "array":
            self._check(w["items"], r["items"], f"{path}[]", out)
        elif wk == "map":
            self._check(w["values"], r["values"], f"{path}{{}}", out)

    def _check_record(self, w: Any, r: Any, path: str, out: list[str]) -> None:
        key = (w["name"], r["name"])
        if key in self._seen:  # recursive types: already being checked higher up
            return
        self._seen.add(key)
        writer_fields = {f["name"]: f for f in w["fields"]}
        for field in r["fields"]:
            src = writer_fields.get(field["name"])
            for alias in field.get("aliases", ()):
                src = src or writer_fields.get(alias)
            field_path = f"{path}.{field['name']}" if path else f"{r['name']}.{field['name']}"
            if src is not None:
                self._check(src["type"], field["type"], field_path, out)
            elif "default" not in field:
                out.append(
                    f"{field_path}: reader field has no default and the writer does not write it"
                )
        self._seen.discard(key)


def resolution_problems(writer: Any, reader: Any) -> list[str]:
    """Why data written with ``writer`` cannot be read with ``reader`` (empty list: it can).

    Both are parsed fastavro schemas (e.g. from :func:`ferry.core.wire.avro.load_schema_dir`).
    """
    return _Resolver().check(writer, reader)


def compatibility_problems(history: list[SchemaVersion]) -> list[str]:
    """Every break between the current version (``history[0]``) and each released one.

    For each type of a released version: the current schema must read its data (backward) and
    it must read the current schema's data (forward); a released type missing from the current
    version is a break too. Each problem names the version, the type, the direction and the field.
    """
    current = history[0].schemas
    problems: list[str] = []
    for released in history[1:]:
        for name, old in sorted(released.schemas.items()):
            new = current.get(name)
            if new is None:
                problems.append(f"{name}: in release {released.version} but removed from {CURRENT}")
                continue
            for p in resolution_problems(old, new):
                problems.append(
                    f"{name}: {CURRENT} cannot read release {released.version} data: {p}"
                )
            for p in resolution_problems(new, old):
                problems.append(
                    f"{name}: release {released.version} cannot read {CURRENT} data: {p}"
                )
    return problems


def doc_problems(schemas_dir: Path) -> list[str]:
    """Records or fields without a non-empty ``doc`` in the current ``ferry.*.avsc`` files."""
    problems: list[str] = []

    def walk(schema: Any, where: str) -> None:
        if isinstance(schema, list):
            for branch in schema:
                walk(branch, where)
        elif isinstance(schema, dict):
            kind = schema.get("type")
            if kind in ("record", "error", "enum", "fixed") and not schema.get("doc"):
                problems.append(f"{where}: {kind} {schema.get('name')} has no doc")
            if kind in ("record", "error"):
                for f in schema.get("fields", []):
                    if not f.get("doc"):
                        problems.append(
                            f"{where}: field {schema.get('name')}.{f.get('name')} has no doc"
                        )
                    walk(f.get("type"), where)
            elif kind == "array":
                walk(schema.get("items"), where)
            elif kind == "map":
                walk(schema.get("values"), where)

    for path in sorted(schemas_dir.glob("ferry.*.avsc")):
        walk(json.loads(path.read_text(encoding="utf-8")), path.name)
    return problems


def check_schemas(schemas_dir: Path) -> list[str]:
    """All problems of a schema directory: loading, docs, and compatibility with every release.

    Returns:
        human-readable problems; empty when the schemas are fit to ship.
    """
    from ferry.errors import ConfigError

    try:
        history = load_schema_history(schemas_dir)
    except ConfigError as exc:
        return [str(exc)]
    return doc_problems(schemas_dir) + compatibility_problems(history)
