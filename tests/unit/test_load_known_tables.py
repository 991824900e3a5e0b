"""A load service checks a table once per definition version, and again whenever the metastore's
entry of it changed (issue 45: about 30 metastore calls a batch, for a batch of one file too)."""

from __future__ import annotations

import datetime as dt
from pathlib import Path
from typing import Any

import pytest
from pyspark.testing import assertDataFrameEqual
from tests.support.factories import dataset_spec
from tests.unit.test_jobs_load import row, stage_files, table_rows, tiny_spec

from ferry.datasets.spec import DatasetSpec
from ferry.stages.load import job
from ferry.stages.load.job import KnownTables, load_files
from ferry.tables.hive import table_fingerprint

D1 = dt.date(2013, 1, 1)


@pytest.fixture
def ensured(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """The tables :func:`ferry.stages.load.job.ensure_table` was called for, in order."""
    calls: list[str] = []
    real = job.ensure_table

    def spy(spark, spec):  # type: ignore[no-untyped-def]
        calls.append(spec.hive.full_name)
        return real(spark, spec)

    monkeypatch.setattr(job, "ensure_table", spy)
    return calls


def _loaded_once(spark: Any, database: str, tmp_path: Path) -> tuple[DatasetSpec, KnownTables]:
    """The tiny table made by a first load of file ``a`` (one row), and what that load knew."""
    spec = tiny_spec(database)
    known = KnownTables()
    a = stage_files(spark, tmp_path, spec, {"a": [(1, "a", D1)]})
    assert load_files(spark, spec, a, known=known) == {"a": 1}
    return spec, known


def test_a_table_checked_once_is_not_checked_again_while_it_is_unchanged(
    spark, unique_db, tmp_path, ensured
):
    spec, known = _loaded_once(spark, unique_db, tmp_path)
    b = stage_files(spark, tmp_path, spec, {"b": [(2, "b", D1)]})
    assert load_files(spark, spec, b, known=known) == {"b": 1}
    assert ensured == [spec.hive.full_name]
    assertDataFrameEqual(table_rows(spark, spec), [row(1, "a", "a", D1), row(2, "b", "b", D1)])


def test_a_table_dropped_behind_the_service_is_made_again(spark, unique_db, tmp_path, ensured):
    spec, known = _loaded_once(spark, unique_db, tmp_path)
    spark.sql(f"DROP TABLE {spec.hive.full_name}")
    assert table_fingerprint(spark, spec.hive.full_name) is None
    assert table_fingerprint(spark, "ferry_no_such_db.tiny") is None
    b = stage_files(spark, tmp_path, spec, {"b": [(2, "b", D1)]})
    assert load_files(spark, spec, b, known=known) == {"b": 1}
    assert ensured == [spec.hive.full_name, spec.hive.full_name]
    assertDataFrameEqual(table_rows(spark, spec), [row(2, "b", "b", D1)])


def test_a_new_definition_version_is_checked_and_grows_the_table(
    spark, unique_db, tmp_path, ensured
):
    """A column added by the definition is added to the table at its first load."""
    spec, known = _loaded_once(spark, unique_db, tmp_path)
    wider = dataset_spec(
        "tiny",
        {"id": "int", "kind": "string", "note": "string", "day": "date"},
        hive={"database": unique_db, "table": "tiny", "partition_by": ["day"]},
    )
    before = table_fingerprint(spark, spec.hive.full_name)
    load_files(spark, wider, stage_files(spark, tmp_path, spec, {"b": [(2, "b", D1)]}), known=known)
    assert ensured == [spec.hive.full_name, spec.hive.full_name]
    after = table_fingerprint(spark, spec.hive.full_name)
    assert before is not None and after is not None and '"note"' in after and '"note"' not in before
