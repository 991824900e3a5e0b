"""Transform: big quote-free files are read line-split (parallel tasks) and give exactly the
records, counts and staged rows of the defined multiLine read (ferry.stages.transform.splits)."""

from __future__ import annotations

from pathlib import Path

import pytest
from pyspark.testing import assertDataFrameEqual
from tests.unit.test_jobs_transform import HEADER, SPEC, put

from ferry.clusters.spark_jobs import HadoopFileSystem
from ferry.stages.transform import splits
from ferry.stages.transform.job import run_batch
from ferry.stages.transform.splits import parallel_paths, read_batch

#: 60 records: valid ones, and rejects of three kinds (month 13, kind c, id NA).
ROWS = (
    b"".join(
        b"%d,%s,2013,%d,%d\n"
        % (i, b"c" if i % 7 == 0 else b"a", 13 if i % 11 == 0 else 1, 1 + i % 28)
        for i in range(1, 60)
    )
    + b"NA,b,2013,2,2\n"
)
SPEC_LINES = SPEC.model_copy(update={"csv": SPEC.csv.model_copy(update={"multiline": False})})


@pytest.fixture
def tiny_splits(spark, monkeypatch: pytest.MonkeyPatch):
    """Files over 20 bytes count as big; Spark splits files every 256 bytes."""
    monkeypatch.setattr(splits, "SPLIT_BYTES", 20)
    before = spark.conf.get("spark.sql.files.maxPartitionBytes")
    spark.conf.set("spark.sql.files.maxPartitionBytes", "256")
    yield
    spark.conf.set("spark.sql.files.maxPartitionBytes", before)


def test_only_big_quote_free_files_without_a_bom_are_line_split(spark, tmp_path: Path, tiny_splits):
    plain = put(tmp_path / "plain.csv", HEADER + ROWS)
    quoted = put(tmp_path / "quoted.csv", HEADER + b'1,"a",2013,1,1\n' + ROWS)
    bom = put(tmp_path / "bom.csv", b"\xef\xbb\xbf" + HEADER + ROWS)
    short = put(tmp_path / "short.csv", HEADER)  # its head does not fill the 16 bytes
    fs = HadoopFileSystem(spark)
    heads = {p: fs.read_head(p, 16) for p in (plain, quoted, bom, short)}
    assert parallel_paths(spark, SPEC, heads, fs, 16) == {plain}
    assert parallel_paths(spark, SPEC_LINES, heads, fs, 16) == set()  # already line-split
    assert read_batch(spark, [plain], SPEC, {plain}).rdd.getNumPartitions() >= 3
    assert read_batch(spark, [plain], SPEC, set()).rdd.getNumPartitions() == 1


def test_a_line_split_file_gives_the_multiline_reads_counts_and_rows(
    spark, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
):
    path = put(tmp_path / "big.csv", HEADER + ROWS)
    fid = "f" * 64
    kw = {"staging_root": str(tmp_path / "s1"), "rejects_root": str(tmp_path / "r1")}
    [whole] = run_batch(spark, SPEC, {path: fid}, **kw).values()  # one multiLine task
    monkeypatch.setattr(splits, "SPLIT_BYTES", 20)
    spark.conf.set("spark.sql.files.maxPartitionBytes", "256")
    try:
        kw2 = {"staging_root": str(tmp_path / "s2"), "rejects_root": str(tmp_path / "r2")}
        [lines] = run_batch(spark, SPEC, {path: fid}, **kw2).values()
    finally:
        spark.conf.unset("spark.sql.files.maxPartitionBytes")
    assert (whole.status, lines.status) == ("transformed", "transformed")
    assert lines.counts == whole.counts
    assert (whole.counts.rows_in, whole.counts.rows_rejected) == (60, 14)
    assertDataFrameEqual(
        spark.read.parquet(lines.staged_path), spark.read.parquet(whole.staged_path)
    )
    assertDataFrameEqual(
        spark.read.parquet(lines.rejects_path), spark.read.parquet(whole.rejects_path)
    )
