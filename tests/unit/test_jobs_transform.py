"""Transform job on tiny files: parse, attribution, rejects, counts, commit (C07, C10, C11)."""

from __future__ import annotations

import datetime as dt
from pathlib import Path

import pytest
from pyspark.sql import Row
from pyspark.testing import assertDataFrameEqual
from tests.support.factories import dataset_spec, put

from ferry.clusters.spark_jobs import HadoopFileSystem, path_key
from ferry.stages.transform.counts import FileCounts, batch_counts, file_counts
from ferry.stages.transform.job import run_batch
from ferry.stages.transform.rows import (
    CORRUPT_COLUMN,
    REJECT_REASON_COLUMN,
    SOURCE_COLUMN,
    classify,
    read_csv,
    transform,
)
from ferry.tables.model import StagedMarker

SPEC = dataset_spec(
    "tiny",
    {"id": "int", "kind": "string", "y": "int", "m": "int", "d": "int"},
    csv={"null_value": "NA"},
    validation={
        "not_null": ["id"],
        "ranges": {"m": {"min": 1, "max": 12}},
        "allowed_values": {"kind": ["a", "b"]},
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
HEADER = b"id,kind,y,m,d\n"
D1 = dt.date(2013, 1, 1)


def test_bom_file_loads_with_real_first_column_name(spark, tmp_path):
    """C10: a file starting with EF BB BF: the first value parses, nothing is malformed."""
    p = put(tmp_path / "bom.csv", b"\xef\xbb\xbf" + HEADER + b"1,a,2013,1,1\n2,b,2013,1,2\n")
    valid, rejects = transform(read_csv(spark, [p], SPEC), SPEC)
    assertDataFrameEqual(
        valid.drop(SOURCE_COLUMN),
        [
            Row(id=1, kind="a", y=2013, m=1, d=1, day=D1),
            Row(id=2, kind="b", y=2013, m=1, d=2, day=dt.date(2013, 1, 2)),
        ],
    )
    assert rejects.count() == 0
    # What Spark itself does with a BOM header when it names the columns: no U+FEFF in the name.
    assert spark.read.option("header", "true").csv(p).columns == ["id", "kind", "y", "m", "d"]


def test_bom_without_header_first_value_parses(spark, tmp_path):
    spec = SPEC.model_copy(update={"csv": SPEC.csv.model_copy(update={"header": False})})
    p = put(tmp_path / "bomnh.csv", b"\xef\xbb\xbf7,a,2013,1,1\n")
    valid, _ = transform(read_csv(spark, [p], spec), spec)
    assert [r.id for r in valid.collect()] == [7]


def test_malformed_and_invalid_rows_become_rejects_with_reasons(spark, tmp_path):
    p = put(
        tmp_path / "bad.csv",
        HEADER
        + b"1,a,2013,1,1\n"  # valid
        + b"2,a,2013,1\n"  # too few fields
        + b"3,a,2013,1,1,9\n"  # too many fields
        + b"x,a,2013,1,1\n"  # not an int
        + b"NA,a,2013,1,1\n"  # null id
        + b"5,a,2013,13,1\n"  # month out of range
        + b"6,c,2013,1,1\n"  # kind not allowed
        + b"7,b,2013,2,30\n"  # no such date -> partition value null
        + b"\n"  # blank line: not a record
        + b"8,b,NA,1,1\n",  # partition value null
    )
    c = classify(read_csv(spark, [p], SPEC), SPEC)
    valid, rejects = transform(read_csv(spark, [p], SPEC), SPEC)
    assertDataFrameEqual(valid.drop(SOURCE_COLUMN), [Row(id=1, kind="a", y=2013, m=1, d=1, day=D1)])
    assertDataFrameEqual(
        rejects.select("id", CORRUPT_COLUMN, REJECT_REASON_COLUMN),
        [
            Row(id=2, _corrupt_record="2,a,2013,1", reject_reason="fields:4/5"),
            Row(id=3, _corrupt_record="3,a,2013,1,1,9", reject_reason="fields:6/5"),
            Row(id=None, _corrupt_record="x,a,2013,1,1", reject_reason="type:id=x"),
            Row(id=None, _corrupt_record=None, reject_reason="null:id"),
            Row(id=5, _corrupt_record=None, reject_reason="range:m"),
            Row(id=6, _corrupt_record=None, reject_reason="not_allowed:kind"),
            Row(id=7, _corrupt_record=None, reject_reason="invalid_partition_value:day"),
            Row(id=8, _corrupt_record=None, reject_reason="invalid_partition_value:day"),
        ],
    )
    assert file_counts(c, [p]) == {
        p: FileCounts(
            rows_in=9,
            rows_out=1,
            rows_rejected=8,
            reject_reasons={
                "fields:4/5": 1,
                "fields:6/5": 1,
                "type:id": 1,
                "null:id": 1,
                "range:m": 1,
                "not_allowed:kind": 1,
                "invalid_partition_value:day": 2,
            },
        )
    }
    # The same counts from the split frames: nothing was dropped between them.
    both = valid.unionByName(rejects, allowMissingColumns=True)
    assert file_counts(both, [p])[p].rows_in == 9


ODD_NAMES = [
    "données été.csv",  # non-ASCII letters and a space
    "a%20b 100%.csv",  # percent signs that look like escapes
    "k=v#frag.csv",  # partition-like '=' and a URI fragment '#'
    "x [1] {a,b} *?.csv",  # Hadoop glob characters
    "plus+sign.csv",  # '+' (form-decoding would make it a space)
    "e\u0301-nfd.csv",  # NFD: e + combining acute, kept as given
]


def test_many_files_one_scan_attributes_rows_to_exact_paths(spark, tmp_path):
    """C07: odd names round-trip byte for byte into the attributed source path."""
    paths = [
        put(tmp_path / "land" / name, HEADER + f"{i},a,2013,1,1\n{i},b,2013,1,1\n".encode())
        for i, name in enumerate(ODD_NAMES)
    ]
    df = read_csv(spark, paths, SPEC)
    got = {
        r[SOURCE_COLUMN]: r["n"]
        for r in df.groupBy(SOURCE_COLUMN).count().withColumnRenamed("count", "n").collect()
    }
    assert got == {path_key(p): 2 for p in paths}
    counts = file_counts(classify(df, SPEC), paths)
    assert counts == {p: FileCounts(rows_in=2, rows_out=2, rows_rejected=0) for p in paths}
    # Path strings are compared as given: same bytes as the names written.
    assert {Path(p).name.encode() for p in counts} == {n.encode() for n in ODD_NAMES}


def test_header_only_file_in_batch_counts_zero(spark, tmp_path):
    a = put(tmp_path / "h.csv", HEADER)
    b = put(tmp_path / "n.csv", HEADER + b"1,a,2013,1,1\n")
    counts = file_counts(classify(read_csv(spark, [a, b], SPEC), SPEC), [a, b])
    assert counts == {a: FileCounts(), b: FileCounts(rows_in=1, rows_out=1)}


def test_read_csv_rejects_relative_paths(spark):
    with pytest.raises(ValueError, match="absolute"):
        read_csv(spark, ["land/x.csv"], SPEC)


def test_run_batch_commits_each_file_and_classifies_empty_and_bad_header(spark, tmp_path):
    land = tmp_path / "land"
    files = {
        put(land / "good one.csv", HEADER + b"1,a,2013,1,1\n2,b,2013,1,2\n9,z,2013,1,1\n"): "f1",
        put(
            land / "ümlaut#2.csv",
            b"\xef\xbb\xbf" + HEADER.replace(b"\n", b"\r\n") + b"3,a,2013,1,1\r\n",
        ): "f2",
        put(land / "zero.csv", b""): "f3",
        put(land / "header.csv", HEADER): "f4",
        put(land / "swapped.csv", b"kind,id,y,m,d\na,1,2013,1,1\n"): "f5",
        put(land / "allbad.csv", HEADER + b"NA,a,2013,1,1\n"): "f6",
    }
    staging, rejects = f"file://{tmp_path}/staging", str(tmp_path / "rejects")
    names = {"f1": "tiny/good one.csv", "f2": "tiny/ümlaut#2.csv", "f6": "tiny/allbad.csv"}
    res = run_batch(spark, SPEC, files, staging_root=staging, rejects_root=rejects, sources=names)
    assert {k: (v.status, v.reason) for k, v in res.items()} == {
        "f1": ("transformed", None),
        "f2": ("transformed", None),
        "f3": ("empty", "zero_bytes"),
        "f4": ("empty", "header_only"),
        "f5": ("failed", "header_mismatch"),
        "f6": ("transformed", None),
    }
    assert "column 1 is 'kind'" in (res["f5"].message or "")
    assert res["f1"].counts == FileCounts(3, 2, 1, {"not_allowed:kind": 1})
    assert res["f2"].counts == FileCounts(1, 1, 0)
    assert res["f6"].counts == FileCounts(1, 0, 1, {"null:id": 1})
    assert res["f1"].staged_path == f"{staging}/tiny/f1"
    assert res["f1"].rejects_path == f"{rejects}/tiny/f1"
    assert res["f2"].rejects_path is None
    # Staged in the shape the load moves into the table: the table's data columns with the file
    # id and its NAS name, partitioned by the table's partition column, one file per partition.
    assertDataFrameEqual(
        spark.read.parquet(res["f1"].staged_path),
        [
            Row(
                id=1,
                kind="a",
                y=2013,
                m=1,
                d=1,
                ferry_file_id="f1",
                ferry_source_path=names["f1"],
                day=D1,
            ),
            Row(
                id=2,
                kind="b",
                y=2013,
                m=1,
                d=2,
                ferry_file_id="f1",
                ferry_source_path=names["f1"],
                day=dt.date(2013, 1, 2),
            ),
        ],
    )
    marker = StagedMarker.from_json(
        (tmp_path / "staging" / "tiny" / "f1" / "_ferry.json").read_bytes()
    )
    gen = marker.generation
    assert marker == StagedMarker(
        "f1",
        gen,
        (
            f"day=2013-01-01/ferry-f1-{gen}-00000.parquet",
            f"day=2013-01-02/ferry-f1-{gen}-00001.parquet",
        ),
    )
    f1_files = sorted(
        str(p.relative_to(tmp_path / "staging" / "tiny" / "f1"))
        for p in (tmp_path / "staging" / "tiny" / "f1").rglob("*")
        if p.is_file() and not p.name.startswith(".")
    )
    assert f1_files == ["_ferry.json", *marker.files]
    assertDataFrameEqual(
        spark.read.parquet(res["f1"].rejects_path).select(
            "id", REJECT_REASON_COLUMN, SOURCE_COLUMN
        ),
        [Row(id=9, reject_reason="not_allowed:kind", ferry_source_path=str(land / "good one.csv"))],
    )
    # A file whose rows are all rejected still gets its staging directory, with a marker naming
    # no data file (its load removes its earlier rows); the batch's temp directory is gone (the
    # shared `_tmp` parent, hidden from Spark readers, stays).
    stage_dir = tmp_path / "staging" / "tiny"
    assert sorted(p.name for p in stage_dir.iterdir()) == ["_tmp", "f1", "f2", "f6"]
    assert [p.name for p in (stage_dir / "f6").iterdir() if not p.name.startswith(".")] == [
        "_ferry.json"
    ]
    f6 = StagedMarker.from_json((stage_dir / "f6" / "_ferry.json").read_bytes())
    assert (f6.file_id, f6.files) == ("f6", ())
    assert list((stage_dir / "_tmp").iterdir()) == []

    # Idempotent: running the batch again replaces each file's directory, never nests or doubles;
    # the new output has a new generation, so no name of the two runs is shared.
    res2 = run_batch(spark, SPEC, files, staging_root=staging, rejects_root=rejects)
    assert res2["f1"].counts == res["f1"].counts
    assert spark.read.parquet(res2["f1"].staged_path).count() == 2
    again = StagedMarker.from_json((stage_dir / "f1" / "_ferry.json").read_bytes())
    assert again.generation != gen and not set(again.files) & set(marker.files)
    assert sorted(p.name for p in stage_dir.iterdir()) == ["_tmp", "f1", "f2", "f6"]
    assert sorted(p.name for p in (tmp_path / "rejects" / "tiny").iterdir()) == ["_tmp", "f1", "f6"]


def test_hadoop_fs_read_head(spark, tmp_path):
    p = put(tmp_path / "é #.csv", b"0123456789")
    assert HadoopFileSystem(spark).read_head(p, 4) == b"0123"


def test_classified_plan_holds_each_parse_helper_once(spark, tmp_path):
    """The reason expression reads the field count, the flagged record's fields and the checks
    as columns: the flights plan holds ``from_csv`` once and the field count's quoted-section
    regex (``(?s)…``) twice, as the two projections print it. Inlined, they were 768 and 2,360,
    a 957,000-character plan the driver analysed, optimised and printed for every action."""
    from ferry.datasets.spec import load_datasets
    from ferry.settings import Settings

    flights = load_datasets(Settings().paths.datasets_dir)["flights"]
    header = ",".join(c.name for c in flights.columns).encode() + b"\n"
    p = put(tmp_path / "f.csv", header)
    plan = classify(read_csv(spark, [p], flights), flights)._jdf.queryExecution().optimizedPlan()
    text = plan.toString()
    assert (text.count("from_csv("), text.count("(?s)")) == (1, 2)


def _batch(tmp_path: Path) -> dict[str, str]:
    land = tmp_path / "land"
    return {
        put(land / "clean.csv", HEADER + b"1,a,2013,1,1\n2,b,2013,1,2\n3,a,2013,1,2\n"): "c1",
        put(land / "mixed.csv", HEADER + b"4,a,2013,1,1\n5,z,2013,1,1\n6,a,2013,13,1\n"): "m1",
        put(land / "clean2.csv", HEADER + b"7,b,2013,1,3\n"): "c2",
    }


def _write_batch(spark, tmp_path, files, reread):  # type: ignore[no-untyped-def]
    """``write_batch`` of ``files`` (read and classified) under ``tmp_path``."""
    from ferry.stages.transform.job import write_batch

    return write_batch(
        classify(read_csv(spark, list(files), SPEC), SPEC),
        SPEC,
        files,
        staging_root=f"file://{tmp_path}/staging",
        rejects_root=f"file://{tmp_path}/rejects",
        fs=HadoopFileSystem(spark),
        reread=reread,
    )


@pytest.mark.parametrize("observed", [True, False], ids=["observed", "observation-missing"])
def test_write_batch_reads_again_only_the_files_with_rejects(
    spark, tmp_path, observed, monkeypatch
):
    """One pass for clean records: the staging write observes which files hold rejects and only
    those are read again for their rejects; counts come from what was written. Without the
    observation every file is read again, with the same counts."""
    from ferry.stages.transform import job

    files = _batch(tmp_path)
    reread: list[list[str]] = []

    def classified(paths):
        reread.append(sorted(paths))
        return classify(read_csv(spark, list(paths), SPEC), SPEC)

    if not observed:
        monkeypatch.setattr(job, "_observed_rejects", lambda seen: None)
    res = _write_batch(spark, tmp_path, files, classified)
    mixed = next(p for p, fid in files.items() if fid == "m1")
    assert reread == ([[mixed]] if observed else [sorted(files)])
    assert {fid: r.counts for fid, r in res.items()} == {
        "c1": FileCounts(3, 3, 0),
        "m1": FileCounts(3, 1, 2, {"not_allowed:kind": 1, "range:m": 1}),
        "c2": FileCounts(1, 1, 0),
    }
    assert {fid: r.rejects_path is not None for fid, r in res.items()} == {
        "c1": False,
        "m1": True,
        "c2": False,
    }
    assert sorted(r.id for r in spark.read.parquet(res["m1"].rejects_path).collect()) == [5, 6]


def test_write_batch_without_rejects_reads_nothing_again(spark, tmp_path):
    """A clean batch is parsed once: ``reread`` is never called."""
    files = {k: v for k, v in _batch(tmp_path).items() if v != "m1"}

    def refuse(paths):
        raise AssertionError(f"read again: {paths}")

    res = _write_batch(spark, tmp_path, files, refuse)
    assert {fid: r.counts for fid, r in res.items()} == {
        "c1": FileCounts(3, 3, 0),
        "c2": FileCounts(1, 1, 0),
    }


def test_a_batch_whose_every_row_is_rejected_counts_them_all(spark, tmp_path):
    """No valid row reaches the staging write (a replay after a rule was tightened, case C19):
    adaptive execution drops the observed plan, so every file is read again; the counts are
    exact and the staging directory holds only the marker."""
    land = tmp_path / "land"
    files = {
        put(land / "a.csv", HEADER + b"NA,a,2013,1,1\n5,z,2013,1,1\n"): "a1",
        put(land / "b.csv", HEADER + b"6,a,2013,13,1\n"): "b1",
    }
    res = run_batch(
        spark,
        SPEC,
        files,
        staging_root=f"file://{tmp_path}/staging",
        rejects_root=f"file://{tmp_path}/rejects",
    )
    assert {fid: (r.status, r.counts) for fid, r in res.items()} == {
        "a1": ("transformed", FileCounts(2, 0, 2, {"null:id": 1, "not_allowed:kind": 1})),
        "b1": ("transformed", FileCounts(1, 0, 1, {"range:m": 1})),
    }
    marker = StagedMarker.from_json(
        (tmp_path / "staging" / "tiny" / "a1" / "_ferry.json").read_bytes()
    )
    assert marker.files == ()


def test_batch_counts_add_the_staged_and_the_rejected_rows_of_each_file():
    files = {"/l/a.csv": "a1", "/l/b.csv": "b1", "/l/c.csv": "c1"}
    rejected = {"/l/b.csv": FileCounts(2, 0, 2, {"null:id": 2})}
    assert batch_counts(files, {"a1": 3, "b1": 1}, rejected) == {
        "/l/a.csv": FileCounts(3, 3, 0),
        "/l/b.csv": FileCounts(3, 1, 2, {"null:id": 2}),
        "/l/c.csv": FileCounts(0, 0, 0),
    }
    with pytest.raises(ValueError, match=r"rows staged under \['zz'\]"):
        batch_counts(files, {"zz": 1}, {})
