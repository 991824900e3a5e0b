"""Checks of the image build (deploy/docker/Dockerfile, its .dockerignore) and of settings a
container must override, that need no Docker engine. Same contract as ``compose_checks.py``:
each ``*_problems`` function returns human-readable problems, empty when all is well.

Sources of the rules: the Dockerfile reference (instructions, ``\\`` continuations, ``ENV``
forms), pyproject.toml (the wheels the image installs) and ``services/ferry/settings/base.py``
(path defaults under the working directory).
"""

from __future__ import annotations

import json
import re
import shlex
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from tests.compose.env_checks import unknown_ferry_keys


def dockerfile_instructions(text: str) -> list[tuple[str, str]]:
    """``(INSTRUCTION, arguments)`` pairs; comments dropped, ``\\`` continuations joined."""
    out: list[tuple[str, str]] = []
    buf = ""
    for raw in text.splitlines():
        line = raw.strip()
        if not buf and (not line or line.startswith("#")):
            continue
        if buf and line.startswith("#"):
            continue
        if line.endswith("\\"):
            buf += line[:-1] + " "
            continue
        buf += line
        if buf.strip():
            word, _, rest = buf.strip().partition(" ")
            out.append((word.upper(), rest.strip()))
        buf = ""
    return out


def _env_pairs(args: str) -> dict[str, str]:
    tokens = shlex.split(args)
    if len(tokens) >= 2 and "=" not in tokens[0]:
        return {tokens[0]: " ".join(tokens[1:])}
    return dict(t.split("=", 1) for t in tokens if "=" in t)


def _pip_install_targets(run: str) -> list[list[str]]:
    """The argument lists of every ``pip install`` in a RUN line (options included)."""
    found = []
    for part in re.split(r"&&|;|\|\|", run):
        words = shlex.split(part)
        for i, w in enumerate(words):
            if (
                w.endswith("pip")
                or w.endswith("pip3")
                or (w == "-m" and i + 1 < len(words) and words[i + 1] == "pip")
            ):
                rest = words[i + 1 :] if w != "-m" else words[i + 2 :]
                if rest[:1] == ["install"]:
                    found.append(rest[1:])
                break
    return found


def dockerfile_problems(text: str, project: Mapping[str, Any]) -> list[str]:
    """The one runtime image: FROM debian:bookworm-slim, Debian's Java 17 runtime and Python 3,
    Python packages only from the wheelhouse built and resolved from pyproject.toml
    (``--no-index``: Ferry's and its kit's wheels and their dependencies; no source checkout
    copied or installed), the Maven jars of ``make install``, the dataset definitions, a non-root
    user, ``ENTRYPOINT ["ferry"]``."""
    from packaging.specifiers import SpecifierSet

    ins = dockerfile_instructions(text)
    problems = []
    froms = [a for i, a in ins if i == "FROM"]
    if not froms or froms[0].split()[0] != "debian:bookworm-slim":
        problems.append(f"base image must be debian:bookworm-slim, found {froms[:1]}")
    requires = project.get("project", {}).get("requires-python")
    if requires and "3.11" not in SpecifierSet(requires):
        problems.append(f"pyproject requires-python {requires!r} excludes the image's Python 3.11")
    runs = [a for i, a in ins if i == "RUN"]
    java = re.compile(r"apt-get install[^;&|]*\sopenjdk-17-jre-headless(\s|;|&|$)")
    if not any(java.search(r) for r in runs):
        problems.append(
            "no `apt-get install ... openjdk-17-jre-headless` (servers and drivers need Java 17)"
        )
    installs = [t for r in runs for t in _pip_install_targets(r)]
    if not any(a.startswith("/tmp/wheels/") for args in installs for a in args):
        problems.append("no `pip install` of the wheelhouse resolved from pyproject.toml")
    for args in installs:
        targets = [a for a in args if not a.startswith("-")]
        opts = [a.split("=")[0] for a in args if a.startswith("-")]
        if "--no-index" not in opts:
            problems.append(
                f"pip install {args}: without --no-index (only pyproject.toml's wheels)"
            )
        bad = [o for o in opts if o in ("-r", "--requirement", "-c", "--constraint")]
        named = [t for t in targets if not (t.startswith("/tmp/wheels") or t == ".")]
        if bad or named:
            problems.append(
                f"pip install uses {bad + named}: dependencies must be exactly pyproject.toml's"
            )
    copies = " ".join(a for i, a in ins if i in ("COPY", "ADD"))
    for needed in ("var/compose-context/wheels", "var/compose-context/jars", "datasets"):
        if not re.search(rf"(^|\s|/){re.escape(needed)}(\s|/|$)", copies):
            problems.append(f"image does not COPY {needed}")
    # Ferry from its wheel (in the wheelhouse), never from the checkout.
    for source in ("services", "pyproject.toml", "schemas"):
        if re.search(rf"(^|\s|\./){re.escape(source)}(\s|/|$)", copies):
            problems.append(f"image COPYs {source}: install Ferry from its wheel, not the checkout")
    for args in installs:
        if "-e" in args or "--editable" in args or "." in args:
            problems.append(f"pip install {args}: install Ferry from its wheel, not the checkout")
    env: dict[str, str] = {}
    for i, a in ins:
        if i == "ENV":
            env.update(_env_pairs(a))
    for key in ("FERRY_VAR_DIR", "FERRY_PATHS__DATASETS_DIR"):
        if key not in env:
            problems.append(f"ENV {key} not set (its default is under the working directory)")
    problems += [f"ENV {k} is not a Ferry setting" for k in unknown_ferry_keys(env)]
    users = [a.split(":")[0] for i, a in ins if i == "USER"]
    if not users or users[-1] in ("root", "0"):
        problems.append(f"the image must end as a non-root USER, found {users[-1:] or 'none'}")
    entry = [a for i, a in ins if i == "ENTRYPOINT"]
    try:
        ok = bool(entry) and json.loads(entry[-1]) == ["ferry"]
    except json.JSONDecodeError:
        ok = False
    if not ok:
        problems.append(f'ENTRYPOINT must be ["ferry"] (exec form), found {entry[-1:]}')
    return problems


def dockerignore_problems(text: str) -> list[str]:
    """The build context excludes the venv and local state (GBs of pyspark and jars)."""
    lines = [
        ln.strip() for ln in text.splitlines() if ln.strip() and not ln.strip().startswith("#")
    ]
    if "*" in lines:
        allowed = {ln[1:].rstrip("/") for ln in lines if ln.startswith("!")}
        leaks = allowed & {".venv", "var", ".git", "*"}
        return [f"re-includes {sorted(leaks)}"] if leaks else []
    missing = [
        p for p in (".venv", "var", ".git") if p not in {ln.rstrip("/").lstrip("/") for ln in lines}
    ]
    return [f"does not exclude {missing}"] if missing else []


def dockerfile_env(text: str) -> dict[str, str]:
    """Variables the image sets with ENV (a container starts with these, then compose's)."""
    env: dict[str, str] = {}
    for i, a in dockerfile_instructions(text):
        if i == "ENV":
            env.update(_env_pairs(a))
    return env


def checkout_path_problems(settings: Any, repo_root: Path) -> list[str]:
    """Path settings still at a default under the checkout (defaults are under the working
    directory): inside the image that is not the project, and not writable. The Avro schemas
    shipped in the package (``ferry.settings.base.PACKAGE_SCHEMAS``) are package data, not a
    checkout path."""
    from ferry.settings.base import PACKAGE_SCHEMAS

    problems: list[str] = []

    def walk(value: Any, where: str) -> None:
        if isinstance(value, dict):
            for k, v in value.items():
                walk(v, f"{where}.{k}" if where else str(k))
        elif (
            isinstance(value, Path) and value.is_relative_to(repo_root) and value != PACKAGE_SCHEMAS
        ):
            problems.append(
                f"{where} = {value} (a source-checkout default; set it for the container)"
            )

    walk(settings.model_dump(), "")
    return problems
