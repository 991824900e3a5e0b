"""The house plan, checked on the code's own imports (``ast``, no import executed).

Data walks one way (docs/architecture.md, "Layout")::

    core  <  datasets  <  clusters  <  stages/<stage>  ;  ops, tracker, stack sit beside the stages

- ``ferry.core`` imports nothing of Ferry but ``ferry.core``;
- ``ferry.datasets`` only core; ``ferry.clusters`` only core and datasets;
- a stage imports core, datasets, clusters and itself — never another stage;
- ops and tracker import no stage and not each other (what both need lives in core);
- the stack imports only core and clusters (HiveServer2's health check is a JDBC query).

Lazy imports inside functions count the same as top-level ones.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

from ferry.core.config import REPO_ROOT

PACKAGE = REPO_ROOT / "services" / "ferry"

#: Area of a module (its first package under ``ferry``, or ``stages.<stage>``) → the areas it may
#: import. Areas not listed (cli, demo, pipeline, testing, …) sit on top and may import anything.
ALLOWED: dict[str, set[str]] = {
    "core": {"core"},
    "datasets": {"core", "datasets"},
    "clusters": {"core", "datasets", "clusters"},
    "ops": {"core", "datasets", "clusters", "ops"},
    "tracker": {"core", "datasets", "tracker"},
    "stack": {"core", "clusters", "stack"},
}
STAGES = ("extract", "transform", "transfer", "load")
for _stage in STAGES:
    ALLOWED[f"stages.{_stage}"] = {"core", "datasets", "clusters", f"stages.{_stage}"}

#: Files (path from the repository root) allowed over :data:`MAX_LINES` lines, with the reason.
LONG_MODULES: dict[str, str] = {}
MAX_LINES = 400


def area(module: str) -> str:
    """``ferry.stages.load.job`` → ``stages.load``; ``ferry.core.events`` → ``core``."""
    parts = module.split(".")[1:]
    if not parts:
        return ""
    if parts[0] == "stages" and len(parts) > 1:
        return f"stages.{parts[1]}"
    return parts[0]


def module_name(path: Path) -> str:
    rel = path.relative_to(PACKAGE.parent).with_suffix("")
    parts = list(rel.parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def ferry_imports(path: Path) -> list[str]:
    """Every ``ferry.*`` module the file imports (absolute imports; Ferry uses no relative)."""
    found = []
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            names = [node.module]
        elif isinstance(node, ast.Import):
            names = [a.name for a in node.names]
        else:
            continue
        found += [n for n in names if n == "ferry" or n.startswith("ferry.")]
    return found


def violations(modules: dict[str, list[str]]) -> list[str]:
    """``"<module> imports <target>"`` for every import that breaks :data:`ALLOWED`."""
    out = []
    for module, targets in sorted(modules.items()):
        allowed = ALLOWED.get(area(module))
        if allowed is None:
            continue
        for target in targets:
            if area(target) not in allowed and target != "ferry":
                out.append(f"{module} imports {target}")
    return out


SOURCES = sorted(PACKAGE.rglob("*.py"))


def test_the_package_has_every_area():
    names = {area(module_name(p)) for p in SOURCES}
    assert {"core", "datasets", "clusters", "ops", "tracker", "stack"} | {
        f"stages.{s}" for s in STAGES
    } <= names


def test_data_walks_one_way():
    modules = {module_name(p): ferry_imports(p) for p in SOURCES}
    assert violations(modules) == []


@pytest.mark.parametrize(
    ("module", "target", "broken"),
    [
        ("ferry.stages.load.service", "ferry.stages.transform.service", True),
        ("ferry.stages.load.job", "ferry.stages.load.handlers", False),
        ("ferry.core.runner", "ferry.stages.extract.handlers", True),
        ("ferry.clusters.spark", "ferry.ops.replay", True),
        ("ferry.clusters.spark", "ferry.datasets", False),
        ("ferry.ops.status", "ferry.tracker.app", True),
        ("ferry.tracker.app", "ferry.ops.kafkaops", True),
        ("ferry.tracker.app", "ferry.core.kafkaops", False),
        ("ferry.cli", "ferry.stages.load.service", False),
    ],
)
def test_the_check_catches_what_it_should(module, target, broken):
    assert violations({module: [target]}) == ([f"{module} imports {target}"] if broken else [])


#: Every Python file the repository holds besides the package: tests and benchmarks.
OTHER_SOURCES = sorted([*(REPO_ROOT / "tests").rglob("*.py"), *(REPO_ROOT / "bench").rglob("*.py")])


def test_modules_stay_readable_in_one_sitting():
    """No file of the package, the tests or the benchmarks is over MAX_LINES lines unless
    LONG_MODULES says why."""
    long = {
        str(p.relative_to(REPO_ROOT)): n
        for p in SOURCES + OTHER_SOURCES
        if (n := len(p.read_text().splitlines())) > MAX_LINES
        and str(p.relative_to(REPO_ROOT)) not in LONG_MODULES
    }
    assert long == {}
