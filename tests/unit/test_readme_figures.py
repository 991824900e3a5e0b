"""The README's quickstart quotes no measured time without the date and the commit it was
measured at (issue 46: it quoted the 2026-12-01 run of `make demo`, 523 s, after the code had
changed what a run takes)."""

from __future__ import annotations

import re

from tests.support.paths import REPO_ROOT

_FIGURE = re.compile(r"\b\d[\d,]*(?:\.\d+)? (?:s|min)\b")
_DATE = re.compile(r"\b20\d\d-\d\d-\d\d\b")
_COMMIT = re.compile(r"\b(?=[0-9a-f]*[a-f])(?=[0-9a-f]*\d)[0-9a-f]{7,40}\b")


def undated_figures(markdown: str) -> list[str]:
    """The figures of each prose paragraph (code blocks and tables aside) whose paragraph does
    not name both a date (YYYY-MM-DD) and a commit."""
    bad = []
    for para in re.split(r"\n\s*\n", re.sub(r"```.*?```", "", markdown, flags=re.DOTALL)):
        if para.lstrip().startswith("|"):
            continue
        if not (_DATE.search(para) and _COMMIT.search(para)):
            bad += _FIGURE.findall(para)
    return bad


def test_the_finder_wants_a_date_and_a_commit() -> None:
    assert undated_figures("took 523 s (2026-12-01)\n\nthe year 217 s") == ["523 s", "217 s"]
    assert undated_figures("from a fresh clone of 2f7f35d, 2026-12-05: the year 147.8 s") == []


def test_the_quickstart_quotes_no_undated_figure() -> None:
    readme = (REPO_ROOT / "README.md").read_text(encoding="utf-8")
    quickstart = readme.split("## Quickstart", 1)[1].split("\n## ", 1)[0]
    assert undated_figures(quickstart) == []
