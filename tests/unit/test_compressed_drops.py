"""Compressed drops (issue 29, field case C21): ``*.csv.gz`` and ``*.csv.bz2`` are taken like
plain CSV, hashed and landed as dropped, their head checks made on the decompressed text; a
truncated archive and a file that is not of its codec at all are quarantined ``corrupt_archive``
with nothing landed."""

from __future__ import annotations

import bz2
import gzip
import io
from pathlib import Path

import pytest
from tests.support.extract_helpers import DATA, HEADER, LANDING, candidate, deps
from tests.support.factories import dataset_spec
from tests.support.hdfs_fake import FakeHdfs

from ferry.core.events import FileExtracted, FileFailed
from ferry.core.identity import derive_file_id
from ferry.datasets.compression import CorruptArchive, codec_of, decompress, head
from ferry.datasets.spec import DatasetSpec
from ferry.stages.extract.handlers import extract_file
from ferry.stages.transform.counts import FileCounts

BIG = HEADER + b"".join(b"2013,1,%d,%d\n" % (i % 28 + 1, i) for i in range(50_000))
COMPRESS = {"gzip": gzip.compress, "bzip2": bz2.compress}


def pieces(data: bytes, n: int = 4096) -> list[bytes]:
    return [data[i : i + n] for i in range(0, len(data), n)]


@pytest.mark.parametrize("codec", ["gzip", "bzip2"])
def test_decompress_streams_whole_archives_and_concatenated_members(codec):
    comp = COMPRESS[codec]
    assert b"".join(decompress(pieces(comp(BIG)), codec)) == BIG
    two = comp(BIG[:1000]) + comp(BIG[1000:])  # `cat a.gz b.gz`, pbzip2's streams
    assert b"".join(decompress(pieces(two), codec)) == BIG
    assert max(len(p) for p in decompress([comp(BIG)], codec, max_out=10_000)) == 10_000


@pytest.mark.parametrize("codec", ["gzip", "bzip2"])
def test_a_truncated_or_foreign_archive_is_corrupt_with_its_offset(codec):
    data = COMPRESS[codec](BIG)
    with pytest.raises(CorruptArchive, match=rf"^not a complete {codec} archive at compressed "):
        b"".join(decompress(pieces(data[: len(data) // 2]), codec))
    with pytest.raises(CorruptArchive) as info:
        b"".join(decompress([b"year,month\n2013,1\n"], codec))
    assert info.value.offset == 0
    with pytest.raises(CorruptArchive, match="no compressed data"):
        b"".join(decompress([], codec))


def test_head_stops_at_its_size_and_reads_at_most_its_cap():
    several_blocks = BIG * 8  # 5.3 MB: bzip2 compresses 900 kB blocks
    raw = io.BytesIO(bz2.compress(several_blocks))
    assert head(raw.read, "bzip2", 100, raw_cap=1 << 22) == BIG[:100]
    assert raw.tell() < len(raw.getvalue()) // 2  # a block or two, not the whole archive
    raw = io.BytesIO(gzip.compress(BIG))
    assert head(raw.read, "gzip", 10**9, raw_cap=1 << 22) == BIG


def test_codec_by_the_last_suffix():
    assert [codec_of(n) for n in ("a.csv.gz", "a.CSV.BZ2", "a.csv", "a.gz.csv", ".gz")] == [
        "gzip",
        "bzip2",
        None,
        None,
        None,
    ]


@pytest.mark.parametrize(("suffix", "codec"), [(".gz", "gzip"), (".bz2", "bzip2")])
def test_extract_lands_the_archive_as_dropped(tmp_path: Path, flights: DatasetSpec, suffix, codec):
    import hashlib

    hdfs = FakeHdfs("b")
    archive = COMPRESS[codec](DATA)
    cand = candidate(tmp_path, flights, f"flights_1.csv{suffix}", archive)
    [ev] = extract_file(cand, deps(hdfs))
    assert isinstance(ev, FileExtracted)
    sha = hashlib.sha256(archive).hexdigest()
    fid = derive_file_id("flights", sha)
    assert hdfs.files == {f"{LANDING}/flights/{fid}/flights_1.csv{suffix}": archive}
    assert (ev.manifest.sha256, ev.manifest.size_bytes) == (sha, len(archive))


@pytest.mark.parametrize(
    ("name", "data", "reason", "error"),
    [
        (
            "flights_cut.csv.gz",
            gzip.compress(BIG, mtime=0)[:5000],
            "corrupt_archive",
            "flights/flights_cut.csv.gz: not a complete gzip archive at compressed byte 5000: "
            "the archive ends before its end; not landed",
        ),
        (
            "flights_plain.csv.gz",
            DATA,
            "corrupt_archive",
            "flights/flights_plain.csv.gz: not a complete gzip archive at compressed byte 0: "
            "Error -3 while decompressing data: incorrect header check; not landed",
        ),
        (
            "flights_cut.csv.bz2",
            bz2.compress(BIG)[:-10],
            "corrupt_archive",
            None,
        ),
        ("flights_header.csv.gz", gzip.compress(HEADER, mtime=0), "empty_header_only", None),
        ("flights_zero.csv.gz", b"", "empty_zero_bytes", None),
        (
            "flights_latin1.csv.bz2",
            bz2.compress(HEADER + b"2013,1,1,caf\xe9\n"),
            "not_utf8",
            "flights/flights_latin1.csv.bz2: not valid UTF-8 at decompressed byte offset 36 "
            "(byte 0xe9: invalid continuation byte); not landed",
        ),
    ],
)
def test_extract_refuses_what_does_not_decompress_and_reads_the_decompressed_head(
    tmp_path: Path, flights: DatasetSpec, name, data, reason, error
):
    hdfs = FakeHdfs("b")
    [ev] = extract_file(candidate(tmp_path, flights, name, data), deps(hdfs))
    assert isinstance(ev, FileFailed)
    assert (ev.reason, hdfs.files) == (reason, {})
    if error is not None:
        assert ev.error == error


# -- transform reads them through Hadoop's codecs ------------------------------------------------

TINY = dataset_spec(
    "tiny",
    {"id": "int", "kind": "string", "y": "int", "m": "int", "d": "int"},
    validation={"not_null": ["id"], "allowed_values": {"kind": ["a", "b"]}},
    derived=[
        {
            "name": "day",
            "type": "date",
            "expr": "try_to_date(format_string('%04d-%02d-%02d', y, m, d), 'yyyy-MM-dd')",
        }
    ],
    hive={"database": "ferry", "table": "tiny", "partition_by": ["day"]},
)
TINY_HEADER = b"id,kind,y,m,d\n"
TINY_ROWS = b"1,a,2013,1,1\n2,b,2013,1,2\n9,z,2013,1,1\nx,a,2013,1,1\n"


def test_transform_counts_and_rejects_compressed_files_as_the_plain_one(spark, tmp_path: Path):
    from ferry.stages.transform.job import run_batch

    land = tmp_path / "land"
    land.mkdir()
    body = TINY_HEADER + TINY_ROWS
    files = {}
    for fid, (name, data) in {
        "fplain": ("t.csv", body),
        "fgz": ("t.csv.gz", gzip.compress(body)),
        "fbz2": ("t.csv.bz2", bz2.compress(body)),
        "fhdr": ("h.csv.gz", gzip.compress(TINY_HEADER)),
        "fbad": ("w.csv.gz", gzip.compress(b"id,kind,m,y,d\n1,a,1,2013,1\n")),
    }.items():
        (land / name).write_bytes(data)
        files[str(land / name)] = fid
    staging, rejects = f"file://{tmp_path}/staging", str(tmp_path / "rejects")
    res = run_batch(spark, TINY, files, staging_root=staging, rejects_root=rejects)
    got = {k: (v.status, v.reason, v.counts) for k, v in res.items()}
    same = ("transformed", None, FileCounts(4, 2, 2, {"not_allowed:kind": 1, "type:id": 1}))
    assert got["fplain"] == same
    assert (got["fgz"], got["fbz2"]) == (same, same)
    assert got["fhdr"][:2] == ("empty", "header_only")
    assert got["fbad"][:2] == ("failed", "header_mismatch")
