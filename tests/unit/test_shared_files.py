"""Files transformed in one batch share one data file per partition (issue 45, case C23): the
transform writes them, the load moves them in whole or rewrites them for the files it loads, and
replay stays per file. Real local Spark with a Derby metastore; staging stands in for incoming
(transfer copies the same tree, tests/integration/test_transfer_tree.py)."""

from __future__ import annotations

import datetime as dt
from pathlib import Path

import pytest
from pyspark.sql import Row
from pyspark.testing import assertDataFrameEqual
from tests.support.factories import dataset_spec, put

from ferry.clusters.spark_jobs import HadoopFileSystem
from ferry.datasets.spec import DatasetSpec
from ferry.stages.load.job import load_files
from ferry.stages.load.shared import LoadedFiles
from ferry.stages.transform.job import run_batch
from ferry.tables.hive import table_location
from ferry.tables.index import TableIndex
from ferry.tables.model import BatchMarker, CompactedFile, StagedMarker

HEADER = b"id,kind,y,m,d\n"
D1, D2, D3 = dt.date(2013, 1, 1), dt.date(2013, 1, 2), dt.date(2013, 1, 3)
CSV = {
    "f1": HEADER + b"1,a,2013,1,1\n2,a,2013,1,2\n",
    "f2": HEADER + b"3,b,2013,1,1\n4,b,2013,1,2\n",
    "f3": HEADER + b"5,c,2013,1,3\n",
}


def spec_of(database: str) -> DatasetSpec:
    return dataset_spec(
        "tiny",
        {"id": "int", "kind": "string", "y": "int", "m": "int", "d": "int"},
        derived=[
            {
                "name": "day",
                "type": "date",
                "expr": "try_to_date(format_string('%04d-%02d-%02d', y, m, d), 'yyyy-MM-dd')",
            }
        ],
        hive={"database": database, "table": "tiny", "partition_by": ["day"]},
    )


def transform(spark, tmp_path: Path, spec: DatasetSpec, fids: list[str]) -> dict[str, str]:
    """Transform the files ``fids`` of :data:`CSV` in one batch (sharing); ``{fid: staged}``."""
    files = {put(tmp_path / "land" / f"{fid}.csv", CSV[fid]): fid for fid in fids}
    res = run_batch(
        spark,
        spec,
        files,
        staging_root=f"file://{tmp_path}/staging",
        rejects_root=f"file://{tmp_path}/rejects",
        share=True,
    )
    assert {f: r.status for f, r in res.items()} == dict.fromkeys(fids, "transformed")
    return {f: str(r.staged_path) for f, r in res.items()}


def row(i: int, kind: str, fid: str, day: dt.date) -> Row:
    return Row(
        id=i, kind=kind, y=2013, m=1, d=day.day, ferry_file_id=fid, ferry_source_path=None, day=day
    )


ALL = [
    row(1, "a", "f1", D1),
    row(2, "a", "f1", D2),
    row(3, "b", "f2", D1),
    row(4, "b", "f2", D2),
    row(5, "c", "f3", D3),
]


def table_rows(spark, spec: DatasetSpec) -> list[Row]:
    spark.catalog.refreshTable(spec.hive.full_name)
    return spark.table(spec.hive.full_name).collect()


def data_files(root: Path) -> list[str]:
    return sorted(
        str(p.relative_to(root))
        for p in root.rglob("*.parquet")
        if not any(part.startswith(("_", ".")) for part in p.relative_to(root).parts)
    )


def test_a_batch_shares_one_file_per_partition_and_replay_stays_per_file(
    spark, unique_db, tmp_path
):
    spec = spec_of(unique_db)
    staged = transform(spark, tmp_path, spec, ["f1", "f2", "f3"])
    root = tmp_path / "staging" / "tiny"
    markers = {f: StagedMarker.from_json((root / f / "_ferry.json").read_bytes()) for f in staged}
    [gen] = {m.generation for m in markers.values()}
    batch_dir = root / "_shared" / gen
    batch = BatchMarker.from_json((batch_dir / "_ferry.json").read_bytes())
    by_day = {rel.split("/")[0]: held for rel, held in batch.members.items()}
    assert by_day == {
        "day=2013-01-01": {"f1": 1, "f2": 1},
        "day=2013-01-02": {"f1": 1, "f2": 1},
        "day=2013-01-03": {"f3": 1},
    }
    # three data files for the batch, not one per file and partition; each file's directory
    # holds only its marker, naming its rows in them
    assert sorted(data_files(batch_dir)) == sorted(batch.members)
    for fid, m in markers.items():
        assert m.files == ()
        assert m.shared == {rel: h[fid] for rel, h in batch.members.items() if fid in h}
        assert [p.name for p in (root / fid).iterdir() if not p.name.startswith(".")] == [
            "_ferry.json"
        ]

    assert load_files(spark, spec, staged) == {"f1": 2, "f2": 2, "f3": 1}
    assertDataFrameEqual(table_rows(spark, spec), ALL)
    location = table_location(spark, spec.hive.full_name)
    table_dir = Path(location.removeprefix("file:"))
    moved = data_files(table_dir)
    assert [p.split("/")[0] for p in moved] == [
        "day=2013-01-01",
        "day=2013-01-02",
        "day=2013-01-03",
    ]
    assert all(p.split("/")[1].startswith("compact-") for p in moved)
    index = TableIndex(HadoopFileSystem(spark), location)
    assert index.sidecars(moved) == {
        moved[0]: CompactedFile(moved[0], {"f1": 1, "f2": 1}),
        moved[1]: CompactedFile(moved[1], {"f1": 1, "f2": 1}),
        moved[2]: CompactedFile(moved[2], {"f3": 1}),
    }
    e1 = index.entry("f1")
    assert e1 is not None and (e1.generation, e1.files, e1.compacted) == (
        gen,
        {},
        {moved[0]: 1, moved[1]: 1},
    )
    assert not batch_dir.exists()  # every member loaded: the batch directory is gone
    assert load_files(spark, spec, staged) == {"f1": 2, "f2": 2, "f3": 1}  # a redelivery

    # f1 transformed again alone (a replay): its own files; the shared ones rewritten without it
    again = transform(spark, tmp_path, spec, ["f1"])
    assert StagedMarker.from_json((root / "f1" / "_ferry.json").read_bytes()).shared == {}
    assert load_files(spark, spec, again) == {"f1": 2}
    assertDataFrameEqual(table_rows(spark, spec), ALL)
    e2 = index.entry("f2")
    assert e2 is not None and sum(e2.compacted.values()) == 2 and e2.files == {}
    assert {p for p in data_files(table_dir) if "/ferry-f1-" in p} == set(
        index.entry("f1").files  # type: ignore[union-attr]
    )


@pytest.mark.parametrize("remember", [False, True], ids=["index", "remembered"])
def test_files_of_a_batch_loaded_apart_take_only_their_rows(spark, unique_db, tmp_path, remember):
    """The second load finds the batch complete by the index, or (``remember``) by what the
    same service loaded itself (``LoadedFiles``: f1 and f3 are not read again)."""
    loaded = LoadedFiles() if remember else None
    spec = spec_of(unique_db)
    staged = transform(spark, tmp_path, spec, ["f1", "f2", "f3"])
    gen = StagedMarker.from_json(
        (tmp_path / "staging" / "tiny" / "f1" / "_ferry.json").read_bytes()
    ).generation
    batch_dir = tmp_path / "staging" / "tiny" / "_shared" / gen
    first = {f: staged[f] for f in ("f1", "f3")}
    assert load_files(spark, spec, first, loaded=loaded) == {"f1": 2, "f3": 1}
    assertDataFrameEqual(table_rows(spark, spec), [r for r in ALL if r.ferry_file_id != "f2"])
    assert batch_dir.exists()  # f2's rows are still to come from it
    if loaded is not None:
        assert [loaded.get(spec.hive.full_name, f) for f in ("f1", "f2", "f3")] == [gen, None, gen]
    assert load_files(spark, spec, {"f2": staged["f2"]}, loaded=loaded) == {"f2": 2}
    assertDataFrameEqual(table_rows(spark, spec), ALL)
    assert not batch_dir.exists()  # every member is loaded with this generation now


def test_a_reader_sees_the_other_files_of_a_shared_file_while_one_is_replaced(
    spark, unique_db, tmp_path, monkeypatch
):
    """The load replacing f1 stops after f1's old rows are out of the shared files and before
    its new files are in: the shared files were rewritten without f1 and replaced in one rename
    each, so a reader sees every row of f2 and f3 and none of f1 (never twice); the redelivered
    batch finishes the change with exact rows."""
    from ferry.core import failpoints

    spec = spec_of(unique_db)
    load_files(spark, spec, transform(spark, tmp_path, spec, ["f1", "f2", "f3"]))
    again = transform(spark, tmp_path, spec, ["f1"])
    monkeypatch.setenv(failpoints.ENV, "filetable.removed=raise")
    with pytest.raises(failpoints.FailpointHit):
        load_files(spark, spec, again)
    assertDataFrameEqual(table_rows(spark, spec), [r for r in ALL if r.ferry_file_id != "f1"])
    monkeypatch.delenv(failpoints.ENV)
    assert load_files(spark, spec, again) == {"f1": 2}
    assertDataFrameEqual(table_rows(spark, spec), ALL)


def test_a_file_staged_again_in_another_batch_is_loaded_once_from_its_new_output(
    spark, unique_db, tmp_path
):
    """f1 and f2 transformed together, then f1 again with f3 (a redelivered or replayed
    transform: another batch, another generation) before any load; one load takes f1 (new
    batch) and f2 (old batch): f1's rows come from its new output only, never twice, and the
    old batch's shared files are rewritten with f2's rows alone."""
    spec = spec_of(unique_db)
    first = transform(spark, tmp_path, spec, ["f1", "f2"])
    second = transform(spark, tmp_path, spec, ["f1", "f3"])
    assert load_files(spark, spec, {"f1": second["f1"], "f2": first["f2"]}) == {"f1": 2, "f2": 2}
    assertDataFrameEqual(table_rows(spark, spec), [r for r in ALL if r.ferry_file_id != "f3"])
    assert load_files(spark, spec, {"f3": second["f3"]}) == {"f3": 1}
    assertDataFrameEqual(table_rows(spark, spec), ALL)
