"""A footer that cannot be read: the file gone, the cluster out of reach (transient: found by the
nemesis, seed 693378033), or not Parquet (permanent), told apart by the Java exception's text."""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any

import pytest

from ferry.errors import HdfsUnavailable, PermanentError
from ferry.tables.footers import read_footer, read_footers_or_errors

PATH = "hdfs://a/warehouse/t/_ferry/scratch/x/part-00002.c000.snappy.parquet"


@pytest.fixture(autouse=True)
def _classes(monkeypatch: pytest.MonkeyPatch) -> None:
    """The JVM classes the reader uses, each looked up by name (``java_class``), faked."""

    def java_class(spark: Any, fqn: str) -> Any:
        return spark.classes[fqn]

    monkeypatch.setattr("ferry.tables.footers.java_class", java_class)


def _spark(java_error: str) -> Any:
    def open_(_input: object, _options: object) -> None:
        raise RuntimeError(
            f"An error occurred while calling z:...ParquetFileReader.open.\n{java_error}"
        )

    builder = SimpleNamespace(build=lambda: "options")
    classes = {
        "org.apache.hadoop.fs.Path": lambda p: p,
        "org.apache.parquet.hadoop.util.HadoopInputFile": SimpleNamespace(
            fromPath=lambda p, _conf: p
        ),
        "org.apache.parquet.hadoop.ParquetFileReader": SimpleNamespace(open=open_),
        "org.apache.parquet.HadoopReadOptions": SimpleNamespace(builder=lambda _conf: builder),
    }
    return SimpleNamespace(classes=classes, _jsc=SimpleNamespace(hadoopConfiguration=lambda: None))


def test_a_block_no_datanode_holds_is_transient_and_retried_whole() -> None:
    java = (
        "org.apache.hadoop.hdfs.BlockMissingException: Could not obtain block: "
        "BP-1:blk_1073741900_1076 file=/warehouse/t/_ferry/scratch/x/part-00002.parquet"
    )
    with pytest.raises(HdfsUnavailable, match="BlockMissingException") as err:
        read_footer(_spark(java), PATH)
    assert err.value.reason == "hdfs_unavailable"
    with pytest.raises(HdfsUnavailable):
        read_footers_or_errors(_spark(java), [PATH])


def test_a_refused_datanode_is_transient() -> None:
    java = "java.net.ConnectException: Connection refused\n\tat sun.nio.ch.Net.pollConnect"
    with pytest.raises(HdfsUnavailable, match="ConnectException"):
        read_footer(_spark(java), PATH)


def test_a_file_that_is_not_parquet_is_a_schema_mismatch_and_a_missing_one_not_found() -> None:
    java = (
        "java.lang.RuntimeException: hdfs://a/x.parquet is not a Parquet file. Expected magic "
        "number at tail, but found [1, 2, 3, 4]"
    )
    got = read_footers_or_errors(_spark(java), [PATH])
    assert isinstance(got[PATH], PermanentError) and got[PATH].reason == "schema_mismatch"
    gone = "java.io.FileNotFoundException: File does not exist: /x.parquet"
    with pytest.raises(PermanentError) as err:
        read_footer(_spark(gone), PATH)
    assert err.value.reason == "hdfs_not_found"
