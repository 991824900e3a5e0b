"""The per-file layout's pure parts: names and Hive escaping, records, compaction's choice, fail
points (no JVM)."""

from __future__ import annotations

import pytest

from ferry.core import failpoints
from ferry.tables.compaction import choose
from ferry.tables.journal import _without_lost
from ferry.tables.model import (
    CompactedFile,
    FileEntry,
    Group,
    IndexFormatError,
    Journal,
    StagedMarker,
)
from ferry.tables.paths import (
    DEFAULT_PARTITION_NAME,
    compacted_file_name,
    data_file_name,
    entry_path,
    escape_path_name,
    is_compacted,
    owner_of,
    parse_partition_dir,
    partition_dir,
    partition_spec_sql,
    stamp,
    stamp_age_s,
    unescape_path_name,
)

GEN = "0123456789abcdef"


@pytest.mark.parametrize(
    ("value", "escaped"),
    [
        ("2013-01-01", "2013-01-01"),
        ("a/b", "a%2Fb"),
        ("c%d", "c%25d"),
        ("e f", "e f"),  # a space is not escaped (Hive, Spark: only on Windows)
        ("g=h", "g%3Dh"),
        ("2013-01-01 05:00:00", "2013-01-01 05%3A00%3A00"),
        ("it's\\x", "it%27s%5Cx"),
        ("été#1", "été%231"),
        ("line\nbreak", "line%0Abreak"),
    ],
)
def test_partition_values_are_escaped_as_hive_and_spark_do(value, escaped):
    """The escapes seen on Spark's own ``partitionBy`` output and ``SHOW PARTITIONS``
    (test_hive_layout.py writes them for real)."""
    assert escape_path_name(value) == escaped
    assert unescape_path_name(escaped) == value


def test_partition_directories_round_trip_and_name_the_default_partition():
    cols = ["d", "note"]
    rel = partition_dir(cols, ["2013-01-01", "a/b"])
    assert rel == "d=2013-01-01/note=a%2Fb"
    assert parse_partition_dir(cols, rel) == ("2013-01-01", "a/b")
    assert partition_dir(["note"], [None]) == f"note={DEFAULT_PARTITION_NAME}"
    assert partition_dir(["note"], [""]) == f"note={DEFAULT_PARTITION_NAME}"
    assert parse_partition_dir(["note"], f"note={DEFAULT_PARTITION_NAME}") == (None,)
    assert partition_dir([], []) == "" and parse_partition_dir([], "") == ()
    with pytest.raises(ValueError, match="not a directory of column 'd'"):
        parse_partition_dir(["d"], "x=1")
    with pytest.raises(ValueError, match="is not a partition directory"):
        parse_partition_dir(["d", "e"], "d=1")


def test_partition_specs_quote_values_as_spark_sql_literals():
    assert partition_spec_sql(["d", "note"], ["2013-01-01", "it's\\x"]) == (
        "PARTITION (`d`='2013-01-01', `note`='it\\'s\\\\x')"
    )
    assert partition_spec_sql(["note"], [None]) == "PARTITION (`note`=NULL)"


def test_data_file_names_carry_the_file_id_and_generation():
    fid = "my-file.v1-2"
    name = data_file_name(fid, GEN, 7)
    assert name == f"ferry-{fid}-{GEN}-00007.parquet"
    assert owner_of(name) == fid  # a file id with '-' in it is still found
    assert owner_of("part-00000-x.c000.snappy.parquet") is None
    assert is_compacted(compacted_file_name(GEN, 3)) and not is_compacted(name)
    assert entry_path("0a1b2c") == "_ferry/files/0a/0a1b2c.json"


def test_stamps_sort_by_time_and_tell_their_age():
    a = stamp()
    assert len(a.split("-")[0]) == 13 and stamp_age_s(a) < 5
    assert stamp_age_s("not-a-stamp") == 0.0
    assert stamp_age_s("0000000000000-abcdef12") > 1e9


def test_records_round_trip_as_json():
    marker = StagedMarker("f", GEN, ("d=1/a.parquet",))
    assert StagedMarker.from_json(marker.to_json()) == marker
    entry = FileEntry("f", GEN, {"d=1/a.parquet": 3}, {"d=1/compact-x.parquet": 2}, "f/été.csv")
    assert FileEntry.from_json(entry.to_json()) == entry and entry.rows == 5
    side = CompactedFile("d=1/compact-x.parquet", {"f": 2, "g": 4})
    assert CompactedFile.from_json(side.to_json()) == side and side.rows == 6
    journal = Journal(
        "load",
        groups=(Group(("d=1/old.parquet",), (("hdfs://nn/in/f/d=1/a.parquet", "d=1/a.parquet"),)),),
        add_partitions=(("1",), (None,)),
        entries={"f": entry, "gone": None},
        sidecars={side.path: side, "d=1/old-compact.parquet": None},
        drop_if_empty=("d=0",),
        cleanup=("hdfs://nn/in/f",),
    )
    assert Journal.from_json(journal.to_json()) == journal


def test_a_record_that_is_not_json_or_newer_is_refused_with_its_path():
    with pytest.raises(IndexFormatError, match="x.json: not JSON"):
        FileEntry.from_json(b"{not json", "x.json")
    with pytest.raises(IndexFormatError, match="format <= 2"):
        StagedMarker.from_json(b'{"format": 3, "file_id": "f", "generation": "g", "files": []}')


def test_only_a_marker_naming_shared_files_is_written_in_the_newer_format():
    """An earlier Ferry reads format 1 and refuses 2: a marker naming shared files (which it
    would take for a file whose rows were all rejected) is written as 2, the others as 1."""
    import json

    own = json.loads(StagedMarker("f", "g", ("d=1/x.parquet",)).to_json())
    shared = json.loads(StagedMarker("f", "g", (), {"d=1/p.parquet": 3}).to_json())
    assert (own["format"], "shared" in own) == (1, False)
    assert (shared["format"], shared["shared"]) == (2, {"d=1/p.parquet": 3})


def test_compaction_merges_nothing_until_a_partition_holds_more_than_max_files():
    assert choose({f"f{i}": 10 for i in range(4)}, max_files=4, target_bytes=100) == []


def test_compaction_merges_the_smallest_files_down_to_half_the_limit():
    files = {f"f{i}": 10 + i for i in range(9)} | {"big": 1000}
    bins = choose(files, max_files=8, target_bytes=100)
    merged = [n for b in bins for n, _ in b]
    assert len(files) - len(merged) + len(bins) <= 8
    assert "big" not in merged  # at the target size already
    assert merged == [f"f{i}" for i in range(len(merged))]  # the smallest first
    assert all(sum(s for _, s in b) <= 100 for b in bins)
    assert [len(b) for b in bins] == [7]  # 10 + … + 16 = 91 bytes; 4 files are left


def test_compaction_packs_bins_up_to_the_target_size():
    """240 bytes in files of 40 cannot go below 3 files of at most 100: the partition stays
    over a limit of 2 (its bytes need 3 files)."""
    bins = choose({f"f{i}": 40 for i in range(6)}, max_files=2, target_bytes=100)
    assert [[n for n, _ in b] for b in bins] == [["f0", "f1"], ["f2", "f3"], ["f4", "f5"]]
    assert choose({"a": 100, "b": 120, "c": 200}, max_files=2, target_bytes=100) == []


def test_a_lost_move_leaves_its_file_out_of_the_index_records():
    e = FileEntry("f", GEN, {"d=1/a.parquet": 3, "d=1/b.parquet": 2}, {})
    journal = Journal("load", entries={"f": e, "g": None})
    entries, _ = _without_lost(journal, {"d=1/b.parquet"})
    assert entries == {"f": FileEntry("f", GEN, {"d=1/a.parquet": 3}, {}), "g": None}


def test_fail_points_are_named_and_off_by_default(monkeypatch):
    monkeypatch.delenv(failpoints.ENV, raising=False)
    failpoints.hit("filetable.removed")  # nothing armed: nothing happens
    monkeypatch.setenv(failpoints.ENV, "filetable.removed=raise")
    with pytest.raises(failpoints.FailpointHit, match="filetable.removed"):
        failpoints.hit("filetable.removed")
    failpoints.hit("filetable.moving")  # armed points only
    with pytest.raises(KeyError):
        failpoints.hit("no.such.point")
    with pytest.raises(ValueError, match="must be point=action"):
        failpoints.armed({failpoints.ENV: "filetable.removd=raise"})
    with pytest.raises(ValueError, match="must be point=action"):
        failpoints.armed({failpoints.ENV: "filetable.removed=explode"})
