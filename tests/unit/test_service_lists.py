"""Every list of Ferry's services in help text and prose is the registry's
(:data:`ferry.core.services.SERVICES`): ``ferry --help``, ``ferry up --help``, ``ferry run
--help``, ``make help``, the demo's last lines, the README and docs/ (issue 46: they said "five
services" and left gc out after gc became the sixth).

A *claim* is a count ("six services") or a list of every service but at most one ("extract,
transform, transfer, load, tracker"): a count must be the registry's, and such a list must name
every service. Shorter lists (the stages, "extract, transform and load" that read definitions)
name a subset on purpose.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from typer.testing import CliRunner

from ferry.cli import app
from ferry.core.services import SERVICES

ROOT = Path(__file__).resolve().parents[2]
NAMES = [s.name for s in SERVICES]
_WORDS = [
    "one",
    "two",
    "three",
    "four",
    "five",
    "six",
    "seven",
    "eight",
    "nine",
    "ten",
    "eleven",
    "twelve",
]
_COUNT = re.compile(
    rf"\b({'|'.join(_WORDS)}|\d+) (?:ferry |supervised |pipeline )?services\b", re.IGNORECASE
)
_NAME = "|".join(NAMES)
_RUN = re.compile(rf"\b(?:{_NAME})(?:(?:,| \||/|,? and)\s+(?:{_NAME})\b){{{len(NAMES) - 2},}}")


def wrong_claims(text: str) -> list[str]:
    """The claims of ``text`` that name another set of services than the registry."""
    bad = []
    for m in _COUNT.finditer(text):
        n = m.group(1).lower()
        count = int(n) if n.isdigit() else _WORDS.index(n) + 1
        if count != len(NAMES):
            bad.append(m.group(0))
    for m in _RUN.finditer(text):
        if set(re.findall(_NAME, m.group(0))) != set(NAMES):
            bad.append(m.group(0))
    return bad


def test_the_claim_finder_finds_a_wrong_count_and_a_short_list() -> None:
    assert wrong_claims("the five services and extract, transform, transfer, load, tracker") == [
        "five services",
        "extract, transform, transfer, load, tracker",
    ]
    everyone = ", ".join(NAMES)
    assert wrong_claims(f"the {_WORDS[len(NAMES) - 1]} services ({everyone})") == []
    assert wrong_claims("the stages extract | transform | transfer | load") == []
    assert wrong_claims("transfer, load, tracker, gc") == []


def _help(*args: str) -> str:
    result = CliRunner().invoke(app, [*args, "--help"])
    assert result.exit_code == 0, result.output
    return " ".join(result.output.replace("│", " ").split())  # rich wraps and boxes: words only


@pytest.mark.parametrize("args", [(), ("up",), ("run",)], ids=["ferry", "up", "run"])
def test_help_names_the_registry_services(args: tuple[str, ...]) -> None:
    assert wrong_claims(_help(*args)) == []


def test_ferry_run_help_lists_every_service() -> None:
    assert " | ".join(NAMES) in _help("run")


def test_make_help_lines_name_the_registry_services() -> None:
    lines = [
        line.split("## ", 1)[1]
        for line in (ROOT / "Makefile").read_text().splitlines()
        if re.match(r"^[a-zA-Z0-9_-]+:.*?## ", line)
    ]
    assert [c for line in lines for c in wrong_claims(line)] == []


def test_the_demo_last_lines_name_every_service(capsys: pytest.CaptureFixture[str]) -> None:
    from ferry.settings import Settings
    from ferry_kit import demo

    demo._print_running(Settings())
    text = " ".join(capsys.readouterr().out.split())
    assert wrong_claims(text) == []
    assert ", ".join(NAMES) in text


@pytest.mark.parametrize(
    "path",
    [
        "README.md",
        *sorted(str(p.relative_to(ROOT)) for p in (ROOT / "docs").rglob("*.md")),
        *sorted(str(p.relative_to(ROOT)) for p in (ROOT / "services").rglob("*.py")),
    ],
)
def test_prose_names_the_registry_services(path: str) -> None:
    text = " ".join((ROOT / path).read_text(encoding="utf-8").split())
    assert wrong_claims(text) == []
