"""The house plan, checked on the code's own imports and definitions (``ast``, nothing executed).

Two packages (docs/architecture.md, "Layout"): the product ``ferry`` (``services/ferry``: what an
edge node runs) and the kit ``ferry_kit`` (``services/kit/ferry_kit``: the local stack, ``ferry
up``, the demo, the test rigs). The kit imports the product; the product never imports the kit.

Inside the product data walks one way, floor by floor (a module imports only its own area and the
areas of the floors below it)::

    errors (the one exception tree), core.identity (a file's content hash and file_id),
    core.failpoints (tests' crash points)
    core.dismissal (the operator's FileDismissed event), settings
    core.events
    core.wire, core.timeline, core.services, core.retry
    core.kafka
    core.runtime
    datasets, nas (where extract moves NAS files, which gc removes)
    clusters, lineage
    tables (Ferry's Hive tables: the per-file layout, DDL, the per-table ZooKeeper locks)
    stages/<stage> (never another stage), tracker, gc (not each other; gc reads tables' markers)
    ops (also above transform and load: the datasets check uses their code)
    cli

Also checked: no import cycle between the product's modules (lazy imports inside functions count
like top-level ones); no re-export shim (a module's ``__all__`` names only what it defines, and no
``import x as x``); a package's ``__init__.py`` holds no imports unless it defines what it
exports (``ferry.settings``); one list of the services (:data:`ferry.core.services.SERVICES`:
no other module writes the stage names out as a tuple or list); a line budget that warns
(:data:`REVIEW_BUDGET`) and a ceiling that fails (:data:`REDESIGN_CEILING`).
"""

from __future__ import annotations

import ast
import warnings
from collections.abc import Iterable
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
PRODUCT = ROOT / "services" / "ferry"
KIT = ROOT / "services" / "kit" / "ferry_kit"

#: Every core area, for the floors that may use all of core.
CORE = {
    "core.failpoints",
    "core.identity",
    "core.events",
    "core.dismissal",
    "core.wire",
    "core.timeline",
    "core.services",
    "core.retry",
    "core.kafka",
    "core.runtime",
}
BASE = CORE | {"errors", "settings"}

#: Area of a module → the areas it may import (besides itself). ``cli`` may import anything of
#: the product; an area not listed here is refused.
ALLOWED: dict[str, set[str]] = {
    "": set(),  # ferry/__init__.py
    "errors": set(),
    "core.dismissal": {"errors"},
    "core.identity": set(),
    "core.failpoints": set(),
    "core.events": {"errors", "core.dismissal", "core.identity"},
    "settings": {"errors"},
    "core.wire": {"errors", "core.dismissal", "core.events", "settings"},
    "core.timeline": {"errors", "core.dismissal", "core.events"},
    "core.services": {"errors", "core.events"},
    "core.retry": {"errors", "settings"},
    "core.kafka": {
        "errors",
        "core.events",
        "core.dismissal",
        "core.wire",
        "core.retry",
        "core.services",
        "settings",
    },
    "core.runtime": BASE - {"core.timeline"},
    "datasets": {"errors", "settings"},
    "nas": set(),
    "clusters": BASE | {"datasets"},
    "tables": BASE | {"datasets", "clusters"},
    "lineage": BASE | {"datasets"},
    "ops": BASE | {"datasets", "nas", "clusters", "tables"},  # nas: the bulk release's moves
    "tracker": BASE | {"datasets", "lineage"},
    # tables: the staged markers and batch markers gc reads to keep a shared batch in use
    "gc": BASE | {"datasets", "clusters", "nas", "tables"},
}
STAGES = ("extract", "transform", "transfer", "load")
for _stage in STAGES:
    ALLOWED[f"stages.{_stage}"] = BASE | {"datasets", "clusters", "tables", "nas", "lineage"}
#: ``ferry datasets check`` (:mod:`ferry.ops.datasets_check`) compiles definitions with
#: transform's code and compares tables with load's: ops sits above those two stages.
ALLOWED["ops"] |= {"stages.transform", "stages.load"}

#: Top-level modules of the command line: they sit on top and may import anything of the product.
CLI_MODULES = {"__main__", "cli"}

#: Packages whose ``__init__.py`` defines what it exports (and so may import).
DEFINING_PACKAGES = {"ferry.settings", "ferry_kit.profiles"}

#: Lines past which a file is named in a warning: a prompt for the reviewer to ask whether it
#: holds one thing, never a reason to split it (house style: split by meaning, not to meet a
#: count). A wall here with a list of exemptions made files crowd just under it and one class be
#: split in two to fit (issue 46).
REVIEW_BUDGET = 400
#: Lines at which a file fails: the house style's redesign signal (a 1,000-line module).
REDESIGN_CEILING = 1000


def area(module: str) -> str:
    """``ferry.stages.load.job`` → ``stages.load``; ``ferry.core.kafka.admin`` → ``core.kafka``;
    ``ferry.core.retry`` → ``core.retry``; ``ferry.settings.kafka`` → ``settings``;
    ``ferry.__main__`` → ``cli``."""
    parts = module.split(".")[1:]
    if not parts or parts in (["core"], ["stages"]):
        return ""  # ferry/__init__.py and the bare packages hold nothing
    if parts[0] in ("stages", "core") and len(parts) > 1:
        return f"{parts[0]}.{parts[1]}"
    if parts[0] in CLI_MODULES:
        return "cli"
    return parts[0]


def module_name(path: Path, root: Path) -> str:
    rel = path.relative_to(root.parent).with_suffix("")
    parts = list(rel.parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def imports(path: Path) -> list[str]:
    """Every module the file imports (absolute imports; Ferry uses no relative ones), lazy imports
    included; ``from a import b`` counts ``a``."""
    found = []
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            found.append(node.module)
        elif isinstance(node, ast.Import):
            found += [a.name for a in node.names]
    return found


def ours(targets: Iterable[str], package: str) -> list[str]:
    return [t for t in targets if t == package or t.startswith(f"{package}.")]


def violations(modules: dict[str, list[str]]) -> list[str]:
    """``"<module> imports <target>"`` for every import of the product that breaks
    :data:`ALLOWED` or reaches the kit."""
    out = []
    for module, targets in sorted(modules.items()):
        mine = area(module)
        for target in targets:
            if ours([target], "ferry_kit"):
                out.append(f"{module} imports {target}")
                continue
            if not ours([target], "ferry") or mine == "cli" or area(target) == mine:
                continue
            if area(target) not in ALLOWED.get(mine, set()):
                out.append(f"{module} imports {target}")
    return out


def cycles(modules: dict[str, list[str]]) -> list[list[str]]:
    """The import cycles among ``modules`` (strongly connected components of more than one
    module, each sorted; Tarjan's algorithm). An import of ``a.b`` where ``a.b`` is a package
    counts as an edge to ``a.b``."""
    graph = {
        m: sorted({t for t in targets if t in modules and t != m}) for m, targets in modules.items()
    }
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on: set[str] = set()
    found: list[list[str]] = []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        on.add(v)
        for w in graph[v]:
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            comp = []
            while True:
                w = stack.pop()
                on.discard(w)
                comp.append(w)
                if w == v:
                    break
            if len(comp) > 1:
                found.append(sorted(comp))

    for v in sorted(graph):
        if v not in index:
            visit(v)
    return sorted(found)


def reexports(path: Path) -> list[str]:
    """Names a module passes on without defining them: ``__all__`` entries it does not define,
    ``import x as x`` / ``from a import x as x``, and any import in a package ``__init__.py``
    (outside :data:`DEFINING_PACKAGES`)."""
    tree = ast.parse(path.read_text(), str(path))
    defined: set[str] = set()
    out = []
    for node in tree.body:
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            defined.add(node.name)
        elif isinstance(node, (ast.Assign, ast.AnnAssign)):
            for t in node.targets if isinstance(node, ast.Assign) else [node.target]:
                defined |= {n.id for n in ast.walk(t) if isinstance(n, ast.Name)}
    for node in ast.walk(tree):
        if isinstance(node, (ast.Import, ast.ImportFrom)):
            out += [f"{a.name} as {a.asname}" for a in node.names if a.asname == a.name]
    for node in tree.body:
        if isinstance(node, ast.Assign) and any(
            isinstance(t, ast.Name) and t.id == "__all__" for t in node.targets
        ):
            names = [
                e.value for e in getattr(node.value, "elts", []) if isinstance(e, ast.Constant)
            ]
            out += [f"__all__ names {n}" for n in names if n not in defined]
    return out


def service_lists(path: Path) -> list[int]:
    """Lines where a tuple, list or set literal holds three or more of the stage names."""
    tree = ast.parse(path.read_text(), str(path))
    return [
        node.lineno
        for node in ast.walk(tree)
        if isinstance(node, (ast.Tuple, ast.List, ast.Set))
        and sum(isinstance(e, ast.Constant) and e.value in STAGES for e in node.elts) >= 3
    ]


SOURCES = sorted(PRODUCT.rglob("*.py"))
KIT_SOURCES = sorted(p for p in KIT.rglob("*.py") if "build" not in p.relative_to(KIT).parts)
MODULES = {module_name(p, PRODUCT): imports(p) for p in SOURCES}


def test_the_package_has_every_area():
    names = {area(m) for m in MODULES}
    assert set(ALLOWED) | {"cli"} <= names | {""}
    assert names - set(ALLOWED) == {"cli"}


def test_data_walks_one_way_and_never_into_the_kit():
    assert violations(MODULES) == []


def test_the_kit_imports_the_product_and_is_a_package_of_its_own():
    kit = {module_name(p, KIT): imports(p) for p in KIT_SOURCES}
    assert any(ours(t, "ferry") for t in kit.values())
    assert not (PRODUCT / "stack").exists() and not (PRODUCT / "testing").exists()


def test_no_import_cycle():
    assert cycles(MODULES) == []


@pytest.mark.parametrize("path", SOURCES + KIT_SOURCES, ids=lambda p: str(p.relative_to(ROOT)))
def test_no_reexport_shim(path):
    name = module_name(path, PRODUCT if PRODUCT in path.parents else KIT)
    problems = reexports(path)
    if path.name == "__init__.py" and name not in DEFINING_PACKAGES:
        problems += [f"imports {t}" for t in imports(path) if t != "__future__"]
    assert problems == []


def test_one_list_of_the_services():
    found = {
        str(p.relative_to(ROOT)): lines
        for p in SOURCES + KIT_SOURCES
        if p != PRODUCT / "core" / "services.py" and (lines := service_lists(p))
    }
    assert found == {}


@pytest.mark.parametrize(
    ("module", "target", "broken"),
    [
        ("ferry.stages.load.service", "ferry.stages.transform.service", True),
        ("ferry.stages.load.job", "ferry.stages.load.handlers", False),
        ("ferry.core.runtime.runner", "ferry.stages.extract.handlers", True),
        ("ferry.core.events", "ferry.settings", True),
        ("ferry.core.kafka.admin", "ferry.core.runtime.runner", True),
        ("ferry.core.runtime.runner", "ferry.core.kafka.clients", False),
        ("ferry.clusters.spark", "ferry.ops.replay", True),
        ("ferry.clusters.spark", "ferry.datasets", False),
        ("ferry.ops.status", "ferry.tracker.app", True),
        ("ferry.tracker.app", "ferry.ops.replay", True),
        ("ferry.tracker.app", "ferry.core.kafka.admin", False),
        ("ferry.cli", "ferry.stages.load.service", False),
        ("ferry.cli", "ferry_kit.demo", True),
        ("ferry.ops.status", "ferry_kit.pipeline", True),
        ("ferry.gc.service", "ferry.nas", False),
        ("ferry.gc.service", "ferry.stages.extract.service", True),
        ("ferry.gc.service", "ferry.ops.quarantine", True),
    ],
)
def test_the_check_catches_what_it_should(module, target, broken):
    assert violations({module: [target]}) == ([f"{module} imports {target}"] if broken else [])


def test_the_cycle_and_shim_checks_catch_what_they_should(tmp_path):
    assert cycles({"ferry.a": ["ferry.b"], "ferry.b": ["ferry.a"], "ferry.c": ["ferry.a"]}) == [
        ["ferry.a", "ferry.b"]
    ]
    shim = tmp_path / "shim.py"
    shim.write_text("from a import b as b\nfrom c import d\n__all__ = ['d', 'e']\ne = 1\n")
    assert reexports(shim) == ["b as b", "__all__ names d"]
    listed = tmp_path / "listed.py"
    listed.write_text("X = ('extract', 'transform', 'load')\nY = ('extract', 'tracker')\n")
    assert service_lists(listed) == [1]


#: Every Python file the repository holds besides the packages: tests and benchmarks.
OTHER_SOURCES = sorted([*(ROOT / "tests").rglob("*.py"), *(ROOT / "bench").rglob("*.py")])


def over(paths: Iterable[Path], lines: int, root: Path = ROOT) -> dict[str, int]:
    """``path from root → line count`` of each file of ``paths`` longer than ``lines``."""
    return {
        str(p.relative_to(root)): n for p in paths if (n := len(p.read_text().splitlines())) > lines
    }


def test_modules_stay_readable_in_one_sitting():
    """No file of the packages, the tests or the benchmarks reaches REDESIGN_CEILING lines;
    those over REVIEW_BUDGET are named in a warning (pytest's warnings summary)."""
    files = SOURCES + KIT_SOURCES + OTHER_SOURCES
    assert over(files, REDESIGN_CEILING - 1) == {}
    long = over(files, REVIEW_BUDGET)
    if long:
        listed = ", ".join(f"{path} {n}" for path, n in sorted(long.items(), key=lambda x: -x[1]))
        warnings.warn(f"over the review budget of {REVIEW_BUDGET} lines: {listed}", stacklevel=1)


def test_the_budget_warns_and_the_ceiling_fails(tmp_path):
    small, big = tmp_path / "small.py", tmp_path / "big.py"
    small.write_text("x = 1\n" * 3)
    big.write_text("x = 1\n" * 5)
    assert over([small, big], 4, tmp_path) == {"big.py": 5}
