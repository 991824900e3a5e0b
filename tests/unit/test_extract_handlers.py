"""extract: ``extract_file`` on FakeHdfs: landing, empty files, names HDFS cannot hold, encoding."""

from __future__ import annotations

import unicodedata
from datetime import UTC, datetime
from pathlib import Path
from typing import Any
from urllib.parse import unquote

import pytest
from tests.support.extract_helpers import (
    DATA,
    HEADER,
    LANDING,
    LATIN1,
    ODD,
    candidate,
    deps,
    drop,
    name_of,
)
from tests.support.factories import FS_B
from tests.support.hdfs_fake import FakeHdfs

from ferry.clusters.hdfs.paths import hdfs_name, is_temp_path, temp_path_for
from ferry.core.events import FileExtracted, FileFailed
from ferry.core.identity import derive_file_id, sha256_file
from ferry.datasets.spec import DatasetSpec
from ferry.errors import HdfsUnavailable
from ferry.stages.extract.handlers import ExtractDeps, SourceChanged, extract_file
from ferry.stages.extract.scanner import Candidate

# -- extract_file -----------------------------------------------------------------------------


def test_extract_lands_the_exact_bytes_at_the_landing_path(
    tmp_path: Path, flights: DatasetSpec
) -> None:
    hdfs = FakeHdfs("b")
    cand = candidate(
        tmp_path, flights, "flights_2013-01-01.csv", DATA, mtime_ns=1_700_000_000_123_000_000
    )
    [ev] = extract_file(cand, deps(hdfs))
    sha = sha256_file(cand.path)
    fid = derive_file_id("flights", sha)
    dest = f"{LANDING}/flights/{fid}/flights_2013-01-01.csv"
    assert isinstance(ev, FileExtracted)
    assert hdfs.files == {dest: DATA}
    m = ev.manifest
    assert (m.file_id, m.dataset, m.source_path, m.size_bytes, m.sha256) == (
        fid,
        "flights",
        "flights/flights_2013-01-01.csv",
        len(DATA),
        sha,
    )
    assert dict(m.uris) == {"landing": FS_B + dest}
    assert (m.rows_in, m.rows_out, m.attempt) == (None, None, 1)
    assert m.source_mtime == datetime(2023, 11, 14, 22, 13, 20, 123000, tzinfo=UTC)


def test_odd_nfd_name_lands_under_its_nfc_name(tmp_path: Path, flights: DatasetSpec) -> None:
    hdfs = FakeHdfs("b")
    cand = candidate(tmp_path, flights, unicodedata.normalize("NFD", ODD), DATA)
    [ev] = extract_file(cand, deps(hdfs))
    nfc = unicodedata.normalize("NFC", ODD)
    dest = f"{LANDING}/flights/{ev.file_id}/{nfc}"
    assert list(hdfs.files) == [dest]
    assert ev.manifest.uris["landing"] == FS_B + dest
    assert ev.manifest.source_path == f"flights/{nfc}"


def test_same_bytes_renamed_get_the_same_file_id(tmp_path: Path, flights: DatasetSpec) -> None:
    hdfs = FakeHdfs("b")
    [a] = extract_file(candidate(tmp_path, flights, "flights_a.csv", DATA), deps(hdfs))
    [b] = extract_file(candidate(tmp_path, flights, "flights_b.csv", DATA), deps(hdfs))
    [c] = extract_file(
        candidate(tmp_path, flights, "flights_c.csv", DATA + b"2013,1,1,1\n"), deps(hdfs)
    )
    assert a.file_id == b.file_id != c.file_id
    assert sorted(hdfs.files) == sorted(
        [
            f"{LANDING}/flights/{a.file_id}/flights_a.csv",
            f"{LANDING}/flights/{a.file_id}/flights_b.csv",
            f"{LANDING}/flights/{c.file_id}/flights_c.csv",
        ]
    )


@pytest.mark.parametrize(
    ("data", "reason"),
    [
        (b"", "empty_zero_bytes"),
        (b"  \n\r\n\t\n", "empty_blank"),
        (b"\xef\xbb\xbf\n", "empty_blank"),
        (HEADER, "empty_header_only"),
        (HEADER.replace(b"\n", b"\r\n") + b"\r\n\r\n", "empty_header_only"),
    ],
)
def test_empty_files_fail_with_reason_and_land_nothing(
    tmp_path: Path, flights: DatasetSpec, data: bytes, reason: str
) -> None:
    hdfs = FakeHdfs("b")
    cand = candidate(tmp_path, flights, "flights_e.csv", data)
    [ev] = extract_file(cand, deps(hdfs))
    assert isinstance(ev, FileFailed)
    assert (ev.stage, ev.reason, ev.attempt) == ("extract", reason, 1)
    assert ev.manifest is not None
    assert (ev.manifest.size_bytes, ev.manifest.source_path, dict(ev.manifest.uris)) == (
        len(data),
        "flights/flights_e.csv",
        {},
    )
    assert ev.manifest.file_id == derive_file_id("flights", sha256_file(cand.path))
    assert (hdfs.files, hdfs.calls) == ({}, [])


def test_one_data_row_is_not_empty(tmp_path: Path, flights: DatasetSpec) -> None:
    hdfs = FakeHdfs("b")
    [ev] = extract_file(
        candidate(tmp_path, flights, "flights_1.csv", HEADER + b"2013,1,1,1"), deps(hdfs)
    )
    assert isinstance(ev, FileExtracted)


def test_upload_failing_mid_stream_leaves_nothing(tmp_path: Path, flights: DatasetSpec) -> None:
    """C02: the DataNode fails after the temp file was created and 10 bytes written."""
    hdfs = FakeHdfs("b")
    hdfs.fail("create", HdfsUnavailable("no DataNode can take the block"), after_bytes=10)
    cand = candidate(tmp_path, flights, "flights_1.csv", DATA)
    with pytest.raises(HdfsUnavailable, match="no DataNode"):
        extract_file(cand, deps(hdfs))
    assert hdfs.files == {}
    created = [p for op, p in hdfs.calls if op == "create"]
    deleted = [p for op, p in hdfs.calls if op == "delete"]
    assert len(created) == 1 and is_temp_path(created[0])
    assert deleted == created  # only what this attempt created is removed
    # the next attempt lands the file normally
    [ev] = extract_file(cand, deps(hdfs))
    assert hdfs.files == {f"{LANDING}/flights/{ev.file_id}/flights_1.csv": DATA}


def test_upload_refused_at_create_deletes_nothing(tmp_path: Path, flights: DatasetSpec) -> None:
    hdfs = FakeHdfs("b")
    hdfs.fail("create", HdfsUnavailable("connection reset"))
    with pytest.raises(HdfsUnavailable):
        extract_file(candidate(tmp_path, flights, "flights_1.csv", DATA), deps(hdfs))
    assert hdfs.files == {}
    assert [op for op, _ in hdfs.calls if op in ("create", "delete")] == ["create"]


def test_file_grown_since_the_scan_is_not_landed(tmp_path: Path, flights: DatasetSpec) -> None:
    """C09: the upstream resumed writing after the scanner judged the file finished."""
    hdfs = FakeHdfs("b")
    cand = candidate(tmp_path, flights, "flights_1.csv", DATA)
    with cand.path.open("ab") as fh:
        fh.write(b"2013,1,1,999\n")
    with pytest.raises(SourceChanged, match="flights/flights_1.csv"):
        extract_file(cand, deps(hdfs))
    assert (hdfs.files, hdfs.calls) == ({}, [])


# -- file names HDFS cannot hold (bad_file_name, name_too_long) ------------------------------


def test_non_utf8_name_is_refused_before_any_read_or_hdfs_call(
    tmp_path: Path, flights: DatasetSpec
) -> None:
    hdfs = FakeHdfs("b")
    assert LATIN1 == "flights_caf\udce9.csv"
    [ev] = extract_file(candidate(tmp_path, flights, LATIN1, DATA), deps(hdfs))
    assert isinstance(ev, FileFailed)
    assert (ev.stage, ev.reason, ev.attempt, ev.manifest, ev.raw_key) == (
        "extract",
        "bad_file_name",
        1,
        None,
        b"flights/flights_caf\xe9.csv",
    )
    assert ev.error == (
        "flights/flights_caf\\xe9.csv: file name is not valid UTF-8 "
        "(bytes b'flights_caf\\xe9.csv'); not landed"
    )
    assert (hdfs.files, hdfs.calls) == ({}, [])


@pytest.mark.parametrize(
    ("name", "on_hdfs"),
    [
        ("orders_2024-05-01T12:30.csv", "orders_2024-05-01T12%3A30.csv"),
        ("flights_12:00 100%.csv", "flights_12%3A00 100%25.csv"),
        ("flights_100% été #1.csv", "flights_100% été #1.csv"),  # HDFS holds it: unchanged
    ],
)
def test_a_name_hdfs_refuses_lands_percent_encoded_and_the_manifest_keeps_it_exactly(
    tmp_path: Path, flights: DatasetSpec, name: str, on_hdfs: str
) -> None:
    hdfs = FakeHdfs("b")
    [ev] = extract_file(candidate(tmp_path, flights, name, DATA), deps(hdfs))
    assert isinstance(ev, FileExtracted)
    dest = f"{LANDING}/flights/{ev.file_id}/{on_hdfs}"
    assert hdfs.files == {dest: DATA}
    assert dict(ev.manifest.uris) == {"landing": FS_B + dest}
    assert ev.manifest.source_path == f"flights/{name}"
    if on_hdfs != name:
        assert unquote(on_hdfs) == name  # reversible


def test_hdfs_name_maps_only_what_the_namenode_refuses() -> None:
    assert [hdfs_name(n) for n in ("a:b", "a%b", "a%3Ab", "a%:b", "::")] == [
        "a%3Ab",
        "a%b",
        "a%3Ab",
        "a%25%3Ab",
        "%3A%3A",
    ]


def test_temp_name_overhead_comes_from_temp_path_for() -> None:
    temp = temp_path_for("/d/" + "n" * 10).rsplit("/", 1)[1]
    assert len(temp.encode()) - 10 == 44  # "." + name + ".ferry-tmp-" + 32 hex


@pytest.mark.parametrize("nbytes", [212, 255, 256, 400])
def test_name_whose_temp_name_is_over_255_bytes_is_refused(
    tmp_path: Path, flights: DatasetSpec, nbytes: int
) -> None:
    hdfs = FakeHdfs("b")
    name = name_of(nbytes)
    if nbytes > 255:  # more than the local file system holds: only the handler is exercised
        path = tmp_path / "flights" / "short.csv"
        drop(tmp_path, "short.csv", DATA)
        cand = Candidate(path.with_name(name), flights, f"flights/{name}", len(DATA), 0)
    else:
        cand = candidate(tmp_path, flights, name, DATA)
    [ev] = extract_file(cand, deps(hdfs))
    assert isinstance(ev, FileFailed)
    assert (ev.reason, ev.manifest, ev.raw_key) == (
        "name_too_long",
        None,
        f"flights/{name}".encode(),
    )
    assert ev.error == (
        f"flights/{name}: file name is {nbytes} bytes of UTF-8; with the upload's temp name "
        f"(44 bytes more) it is {nbytes + 44}, over HDFS's 255-byte limit on a path component; "
        "not landed"
    )
    assert (hdfs.files, hdfs.calls) == ({}, [])


def test_longest_name_whose_temp_name_fits_lands(tmp_path: Path, flights: DatasetSpec) -> None:
    hdfs = FakeHdfs("b")
    name = name_of(211)  # 211 + 44 = 255 bytes: fits exactly
    [ev] = extract_file(candidate(tmp_path, flights, name, DATA), deps(hdfs))
    assert isinstance(ev, FileExtracted)
    assert list(hdfs.files) == [f"{LANDING}/flights/{ev.file_id}/{name}"]


def test_name_length_is_counted_in_utf8_bytes_not_letters(
    tmp_path: Path, flights: DatasetSpec
) -> None:
    hdfs = FakeHdfs("b")
    name = name_of(212, "é")  # 108 letters, 212 bytes
    assert len(name) < 212 == len(name.encode())
    [ev] = extract_file(candidate(tmp_path, flights, name, DATA), deps(hdfs))
    assert isinstance(ev, FileFailed) and ev.reason == "name_too_long"
    assert hdfs.calls == []


# -- encoding check on the hash pass (not_utf8) ----------------------------------------------


@pytest.mark.parametrize("chunk", [1, 2, 3, 7, 1 << 20])
@pytest.mark.parametrize(
    ("tail", "offset", "why"),
    [
        (b"2013,1,1,caf\xe9\n", 12, "byte 0xe9: invalid continuation byte"),
        (b"2013,1,1,\xff\n", 9, "byte 0xff: invalid start byte"),
        (b"2013,1,1,\xc3", 9, "byte 0xc3: unexpected end of data"),  # cut off at the end
        (b"2013,1,1,\xed\xa0\x80\n", 9, "byte 0xed: invalid continuation byte"),  # surrogate
    ],
)
def test_invalid_utf8_fails_with_the_byte_offset_and_lands_nothing(
    tmp_path: Path, flights: DatasetSpec, chunk: int, tail: bytes, offset: int, why: str
) -> None:
    hdfs = FakeHdfs("b")
    data = DATA + tail
    cand = candidate(tmp_path, flights, "flights_1.csv", data)
    [ev] = extract_file(cand, ExtractDeps(hdfs, LANDING, FS_B, chunk_bytes=chunk))
    assert isinstance(ev, FileFailed)
    assert (ev.stage, ev.reason, ev.attempt) == ("extract", "not_utf8", 1)
    assert ev.error == (
        f"flights/flights_1.csv: not valid UTF-8 at byte offset {len(DATA) + offset} ({why}); "
        "not landed"
    )
    assert ev.manifest is not None
    sha = sha256_file(cand.path)  # the whole file's hash, though the check stopped early
    assert (ev.manifest.sha256, ev.manifest.size_bytes) == (sha, len(data))
    assert ev.manifest.file_id == derive_file_id("flights", sha)
    assert (hdfs.files, hdfs.calls) == ({}, [])


@pytest.mark.parametrize("chunk", [1, 2, 3, 7])
def test_valid_utf8_split_across_chunks_and_a_bom_land(
    tmp_path: Path, flights: DatasetSpec, chunk: int
) -> None:
    """C10: a BOM is valid; multi-byte letters cut by any chunk boundary are valid."""
    hdfs = FakeHdfs("b")
    data = b"\xef\xbb\xbf" + DATA + "2013,1,1,données 日本 😀\n".encode()
    cand = candidate(tmp_path, flights, "flights_1.csv", data)
    [ev] = extract_file(cand, ExtractDeps(hdfs, LANDING, FS_B, chunk_bytes=chunk))
    assert isinstance(ev, FileExtracted)
    assert list(hdfs.files.values()) == [data]


def test_the_hash_and_encoding_check_read_the_file_once(
    tmp_path: Path, flights: DatasetSpec, monkeypatch: pytest.MonkeyPatch
) -> None:
    import ferry.stages.extract.handlers as handlers

    reads: list[int] = []
    real = handlers._chunks

    def counting(path: Path, size: int) -> Any:
        reads.append(size)
        return real(path, size)

    monkeypatch.setattr(handlers, "_chunks", counting)
    hdfs = FakeHdfs("b")
    extract_file(candidate(tmp_path, flights, "flights_1.csv", DATA + b"\xff\n"), deps(hdfs))
    assert reads == [7]  # one pass; not_utf8 stops before the upload's pass
