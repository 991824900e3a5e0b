"""``ferry status``'s line for an ACTIVE ResourceManager names the applications it runs (issue
48: each Spark session of transform and load is one YARN application)."""

from __future__ import annotations

from ferry_kit.stack.yarn import apps_line


def test_apps_line_names_each_running_application_with_its_queue() -> None:
    apps = [
        {"id": "application_1765000000000_0002", "name": "ferry-load", "queue": "ferry"},
        {"id": "application_1765000000000_0001", "name": "ferry-transform", "queue": "default"},
    ]
    assert apps_line(apps) == (
        "application_1765000000000_0001 ferry-transform (queue default), "
        "application_1765000000000_0002 ferry-load (queue ferry)"
    )


def test_apps_line_says_none_when_nothing_runs() -> None:
    assert apps_line([]) == "none"
