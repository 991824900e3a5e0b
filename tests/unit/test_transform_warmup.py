"""transform's warm-up batch (issue 45: the first batch after a start costs what the second does):
the synthetic file, the real job run on it, nothing left behind."""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Any

import pytest
from tests.support.factories import dataset_spec

from ferry.stages.transform.job import run_batch
from ferry.stages.transform.warmup import (
    WARM_FILE_IDS,
    synthetic_csv,
    warm_dataset,
    warm_transform,
)

SPEC = dataset_spec(
    "tiny",
    {"id": "int", "kind": "string", "y": "int", "m": "int", "d": "int", "amt": "decimal(9,2)"},
    csv={"null_value": "NA", "delimiter": ";"},
    validation={
        "not_null": ["id"],
        "ranges": {"m": {"min": 1, "max": 12}, "d": {"max": 31}},
        "allowed_values": {"kind": ["b", "a"]},
    },
    derived=[
        {
            "name": "day",
            "type": "date",
            "expr": "try_to_date(format_string('%04d-%02d-%02d', y, m, d), 'yyyy-MM-dd')",
        }
    ],
    hive={"database": "ferry", "table": "tiny", "partition_by": ["day"]},
)


def test_synthetic_csv_has_an_allowed_record_and_a_null_one() -> None:
    """The first allowed value, a range's lower bound (else its upper), a type's sample; the
    second record all ``null_value``; the dataset's delimiter."""
    assert synthetic_csv(SPEC) == (b"id;kind;y;m;d;amt\n1;b;1;1;31;1\nNA;NA;NA;NA;NA;NA\n")


def _recording(calls: list[dict[str, Any]], share: bool) -> Any:
    """``run_batch`` with ``share`` (as the service binds it), recording each call, its results
    and the batch directories of shared data files it left in its staging root."""

    def run(*args: Any, **kwargs: Any) -> Any:
        out = run_batch(*args, share=share, **kwargs)
        shared = Path(kwargs["staging_root"].removeprefix("file://")) / args[1].name / "_shared"
        batches = sorted(p.name for p in shared.iterdir()) if shared.exists() else []
        calls.append({"files": args[2], "kwargs": kwargs, "out": out, "shared": batches})
        return out

    return run


@pytest.mark.parametrize("share", [True, False])
@pytest.mark.parametrize("name", ["flights", "weather"])
def test_warm_batch_of_a_demo_dataset_stages_one_row_rejects_one_a_file(
    spark: Any, specs: dict[str, Any], tmp_path: Path, name: str, share: bool
) -> None:
    """The real job on two synthetic files, as the service runs it (shared data files or
    not): per file one valid row staged, one rejected, both counted; with ``share``, the batch's
    rows in one shared batch directory; the scratch directory under ``<staging>/<dataset>/_tmp``
    removed afterwards."""
    calls: list[dict[str, Any]] = []
    staging = f"file://{tmp_path}/staging"
    warm_dataset(spark, specs[name], staging, _recording(calls, share))
    [call] = calls
    got = {
        r.file_id: (r.status, r.counts.rows_in, r.counts.rows_out, r.counts.rows_rejected)
        for r in call["out"].values()
    }
    assert got == dict.fromkeys(WARM_FILE_IDS, ("transformed", 2, 1, 1))
    assert len(call["shared"]) == (1 if share else 0)
    assert call["kwargs"]["staging_root"].startswith(f"{staging}/{name}/_tmp/warm-up-")
    assert list((tmp_path / "staging" / name / "_tmp").iterdir()) == []


def test_warm_up_goes_on_past_a_dataset_whose_batch_fails(
    caplog: pytest.LogCaptureFixture,
) -> None:
    """One session warm, then every dataset in name order; a failing one is logged, the next
    one still warmed."""
    seen: list[str] = []
    sessions: list[str] = []

    def warm(spark: Any, spec: Any, root: str, run: Any) -> float:
        assert (spark, root, run) == ("session", "file:///nowhere", run_batch)
        seen.append(spec.name)
        if spec.name == "a":
            raise RuntimeError("boom")
        return 0.5

    hive = {"database": "ferry", "table": "t", "partition_by": []}
    specs = {n: dataset_spec(n, {"id": "int"}, hive=hive) for n in ("b", "a")}
    with caplog.at_level(logging.WARNING, logger="ferry.stages.transform.warmup"):
        warm_transform(
            lambda: sessions.append("built") or "session",
            lambda: specs,
            "file:///nowhere",
            run_batch,
            warm=warm,
        )
    assert (sessions, seen) == (["built"], ["a", "b"])
    assert [r.getMessage() for r in caplog.records] == ["transform: warm-up batch of a failed"]


@pytest.mark.parametrize(
    ("datasets", "warmed"), [(None, ["a", "b", "c"]), (2, ["a", "b"]), (0, [])]
)
def test_warm_up_batches_only_the_first_datasets_in_name_order(
    datasets: int | None, warmed: list[str], caplog: pytest.LogCaptureFixture
) -> None:
    """``transform.warm_up_datasets``: the session is built either way; synthetic batches for the
    first ``datasets`` definitions by name, and the log says how many of how many."""
    seen: list[str] = []
    sessions: list[str] = []

    def warm(spark: Any, spec: Any, root: str, run: Any) -> float:
        seen.append(spec.name)
        return 0.5

    hive = {"database": "ferry", "table": "t", "partition_by": []}
    specs = {n: dataset_spec(n, {"id": "int"}, hive=hive) for n in ("c", "a", "b")}
    with caplog.at_level(logging.INFO, logger="ferry.stages.transform.warmup"):
        warm_transform(
            lambda: sessions.append("built") or "session",
            lambda: specs,
            "file:///nowhere",
            run_batch,
            warm=warm,
            datasets=datasets,
        )
    assert (sessions, seen) == (["built"], warmed)
    limited = [r.getMessage() for r in caplog.records if "of 3 datasets" in r.getMessage()]
    expected = (
        []
        if datasets is None
        else [
            f"transform: warm-up batches for {datasets} of 3 datasets (transform.warm_up_datasets)"
        ]
    )
    assert limited == expected


def test_the_settings_default_warms_four_datasets_and_refuses_a_negative_count() -> None:
    """The default and its floor (``ferry.settings.stages.TransformSettings``)."""
    from pydantic import ValidationError

    from ferry.settings.stages import TransformSettings

    assert TransformSettings().warm_up_datasets == 4
    with pytest.raises(ValidationError, match="greater than or equal to 0"):
        TransformSettings(warm_up_datasets=-1)
