"""Each package declares what it imports: every third-party module the product (``ferry``) or the
kit (``ferry_kit``) imports, lazy imports included, comes from a distribution its own
``pyproject.toml`` names (its dependencies or one of its extras). A package that only arrives as
another's dependency (the kit's ``typer`` through ``ferry``, the product's ``pydantic`` through
``pydantic-settings``) would vanish, or change, with that other package's next release.

Read with ``ast`` (nothing imported); import names are mapped to distributions with
:func:`importlib.metadata.packages_distributions` of the environment the tests run in.
"""

from __future__ import annotations

import ast
import re
import sys
import tomllib
from importlib.metadata import packages_distributions
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]

#: package → (its source directory, its pyproject.toml)
PACKAGES = {
    "ferry": (ROOT / "services" / "ferry", ROOT / "pyproject.toml"),
    "ferry_kit": (
        ROOT / "services" / "kit" / "ferry_kit",
        ROOT / "services" / "kit" / "pyproject.toml",
    ),
}


def _normal(name: str) -> str:
    """A distribution name as PEP 503 compares them."""
    return re.sub(r"[-_.]+", "-", name).lower()


def declared(pyproject: Path) -> set[str]:
    """The distributions ``pyproject`` depends on, its optional extras included (normalized)."""
    project = tomllib.loads(pyproject.read_text())["project"]
    reqs = [*project.get("dependencies", [])]
    for extra in project.get("optional-dependencies", {}).values():
        reqs += extra
    return {_normal(re.split(r"[\s\[<>=!~;]", r, maxsplit=1)[0]) for r in reqs}


def top_imports(source: Path) -> set[str]:
    """Top-level names of every absolute import under ``source`` (lazy ones included)."""
    found: set[str] = set()
    for path in source.rglob("*.py"):
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            if isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
                found.add(node.module.split(".")[0])
            elif isinstance(node, ast.Import):
                found |= {a.name.split(".")[0] for a in node.names}
    return found


def undeclared(package: str, imported: set[str], allowed: set[str]) -> list[str]:
    """``"<module> (from <distribution>)"`` for each imported third-party module whose
    distribution ``allowed`` does not name. The package itself and the standard library are
    not third party; a module no installed distribution provides (an extra not installed, such as
    ``kerberos``) is taken to come from the distribution of its own name."""
    dists = packages_distributions()
    out = []
    for module in sorted(imported - {package, "__future__"} - set(sys.stdlib_module_names)):
        names = {_normal(d) for d in dists.get(module, [])} or {_normal(module)}
        if not names & allowed:
            out.append(f"{module} (from {', '.join(sorted(names))})")
    return out


@pytest.mark.parametrize("package", sorted(PACKAGES))
def test_every_third_party_import_is_declared(package):
    source, pyproject = PACKAGES[package]
    assert undeclared(package, top_imports(source), declared(pyproject)) == []


def test_the_check_catches_an_undeclared_import(tmp_path):
    (tmp_path / "pyproject.toml").write_text(
        '[project]\nname = "x"\ndependencies = ["PyYAML>=6"]\n'
        '[project.optional-dependencies]\ndev = ["pytest>=8"]\n'
    )
    (tmp_path / "x").mkdir()
    (tmp_path / "x" / "m.py").write_text(
        "import os\nimport yaml\nimport x.y\n\ndef f():\n    import pytest\n    import jsonschema\n"
        "    import not_installed_anywhere\n"
    )
    allowed = declared(tmp_path / "pyproject.toml")
    assert allowed == {"pyyaml", "pytest"}
    imported = top_imports(tmp_path / "x")
    assert imported == {"os", "yaml", "x", "pytest", "jsonschema", "not_installed_anywhere"}
    assert undeclared("x", imported, allowed) == [
        "jsonschema (from jsonschema)",
        "not_installed_anywhere (from not-installed-anywhere)",
    ]
