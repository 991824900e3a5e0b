"""Validate OpenLineage events against the spec's JSON schemas: the core ``OpenLineage.json``
(``RunEvent``) and, facet by facet, the schema each facet's ``_schemaURL`` names (the core schema
checks a facet only as a ``BaseFacet``).

The schema files are not shipped by the OpenLineage Python client (``openlineage-python`` 1.54.0
holds the generated model and the schema URLs, no JSON). They are the ``spec/`` directory of the
OpenLineage repository at the client's release tag (``spec/OpenLineage.json`` and
``spec/facets/*.json``, ``$id`` ``https://openlineage.io/spec/2-0-2/OpenLineage.json`` and
``https://openlineage.io/spec/facets/<version>/<Name>.json``), looked up in
:func:`spec_dir`. Ferry's own facet schemas (``ferry/lineage/schemas``) are always added.
"""

from __future__ import annotations

import json
import os
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


def spec_dir(root: Path) -> Path:
    """Where the spec's schema files are: ``OPENLINEAGE_SPEC_DIR``, else
    ``<root>/../shared/openlineage-spec/<CLIENT_VERSION>`` (shared/ beside the checkout)."""
    env = os.environ.get("OPENLINEAGE_SPEC_DIR")
    return Path(env) if env else root.parent / "shared" / "openlineage-spec" / CLIENT_VERSION


def registry(*dirs: Path) -> Registry:
    """Every ``*.json`` schema under ``dirs``, by its ``$id``."""
    resources = []
    for d in dirs:
        for path in sorted(d.rglob("*.json")):
            doc = json.loads(path.read_text(encoding="utf-8"))
            if isinstance(doc, dict) and "$id" in doc:
                resources.append((doc["$id"], Resource.from_contents(doc)))
    return Registry().with_resources(resources)


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


__all__ = ["CLIENT_VERSION", "FERRY_SCHEMAS", "errors", "facets", "registry", "spec_dir"]
