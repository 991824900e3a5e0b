"""Validate OpenLineage events against the spec's JSON schemas: the core ``OpenLineage.json``
(``RunEvent``) and, facet by facet, the schema each facet's ``_schemaURL`` names (the core schema
checks a facet only as a ``BaseFacet``).

The schema files are not shipped by the OpenLineage Python client (``openlineage-python`` 1.54.0
holds the generated model and the schema URLs, no JSON), nor by its Java client on Maven Central.
They are vendored, unmodified, under ``tests/vendor/openlineage-spec`` (its README names the
repository, commits and licence), laid out as their ``$id`` URLs below
``https://openlineage.io/spec/``: one file for each schema URL the client names
(:func:`client_schema_urls`), so the events are checked against the very versions the client
writes into ``_schemaURL``. Ferry's own facet schemas (``ferry/lineage/schemas``) are always added.
"""

from __future__ import annotations

import importlib
import inspect
import json
import os
import pkgutil
import re
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any

from jsonschema import Draft202012Validator
from referencing import Registry, Resource

import ferry.lineage

#: The client release whose spec the events are validated against (pyproject pins it).
CLIENT_VERSION = "1.54.0"

#: Ferry's own facet schemas (package data).
FERRY_SCHEMAS = Path(ferry.lineage.__file__).parent / "schemas"

#: A schema URL in the client's generated sources.
SCHEMA_URL = re.compile(r"https://openlineage\.io/spec/[\w./-]+?\.json")


def spec_dir(root: Path) -> Path:
    """Where the spec's schema files are: ``OPENLINEAGE_SPEC_DIR`` if set, else the vendored copy
    ``<root>/tests/vendor/openlineage-spec`` (``root``: the checkout)."""
    env = os.environ.get("OPENLINEAGE_SPEC_DIR")
    return Path(env) if env else root / "tests" / "vendor" / "openlineage-spec"


def client_schema_urls() -> set[str]:
    """Every schema URL (``https://openlineage.io/spec/…json``, fragment dropped) the installed
    OpenLineage Python client's generated model names: the core ``RunEvent`` schema and each
    facet's ``_schemaURL``."""
    import openlineage.client.generated as generated

    urls: set[str] = set()
    for mod in pkgutil.iter_modules(generated.__path__):
        module = importlib.import_module(f"{generated.__name__}.{mod.name}")
        urls |= set(SCHEMA_URL.findall(inspect.getsource(module)))
    return urls


def schemas(*dirs: Path) -> dict[str, dict[str, Any]]:
    """Every ``*.json`` schema under ``dirs`` that has an ``$id``, by that ``$id``."""
    out: dict[str, dict[str, Any]] = {}
    for d in dirs:
        for path in sorted(d.rglob("*.json")):
            doc = json.loads(path.read_text(encoding="utf-8"))
            if isinstance(doc, dict) and "$id" in doc:
                out[doc["$id"]] = doc
    return out


def schema_ids(*dirs: Path) -> set[str]:
    """The ``$id`` of every schema under ``dirs``."""
    return set(schemas(*dirs))


def registry(*dirs: Path) -> Registry:
    """Every ``*.json`` schema under ``dirs``, by its ``$id``."""
    return Registry().with_resources(
        (uri, Resource.from_contents(doc)) for uri, doc in schemas(*dirs).items()
    )


def facets(event: Mapping[str, Any]) -> Iterator[tuple[str, Mapping[str, Any]]]:
    """(where, facet) for every facet of a run event: run, job, and each dataset's facets,
    input facets and output facets."""
    yield from ((f"run.{k}", v) for k, v in ((event.get("run") or {}).get("facets") or {}).items())
    yield from ((f"job.{k}", v) for k, v in ((event.get("job") or {}).get("facets") or {}).items())
    for side in ("inputs", "outputs"):
        for i, ds in enumerate(event.get(side) or []):
            for group in ("facets", "inputFacets", "outputFacets"):
                for k, v in (ds.get(group) or {}).items():
                    yield f"{side}[{i}].{group}.{k}", v


def errors(event: Mapping[str, Any], reg: Registry) -> list[str]:
    """Every schema violation of ``event`` (a run event as JSON data), ``[]`` when valid.

    Raises:
        referencing.exceptions.Unresolvable: a ``_schemaURL`` or ``schemaURL`` whose schema
            ``reg`` does not hold (e.g. the spec files are of another release).
    """
    out = []
    checks = [("event", event.get("schemaURL", ""), event)]
    checks += [(where, f.get("_schemaURL", ""), f) for where, f in facets(event)]
    for where, url, data in checks:
        validator = Draft202012Validator({"$ref": url}, registry=reg)
        out += [
            f"{where}: {e.message} at {list(e.absolute_path)}" for e in validator.iter_errors(data)
        ]
    return out


__all__ = [
    "CLIENT_VERSION",
    "FERRY_SCHEMAS",
    "client_schema_urls",
    "errors",
    "facets",
    "registry",
    "schema_ids",
    "schemas",
    "spec_dir",
]
