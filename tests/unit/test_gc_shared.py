"""gc's listing of transform batches' shared directories past their zone's retention (issue 45):
``<root>/<dataset>/_shared/<generation>`` older than the cut-off is listed, a newer one is not."""

from __future__ import annotations

from tests.support.hdfs_fake import FakeHdfs

from ferry.gc.hdfs_copies import orphan_batches


def test_shared_batch_directories_older_than_the_cut_off_are_listed() -> None:
    port = FakeHdfs("a")
    for gen, mtime_ms in (("0123456789abcdef", 1_000), ("fedcba9876543210", 5_000)):
        d = f"/ferry/incoming/flights/_shared/{gen}"
        port.mkdirs(f"{d}/day=2013-01-01")
        port.set_mtime(d, mtime_ms)
    port.mkdirs("/ferry/incoming/flights/_tmp/x")
    port.set_mtime("/ferry/incoming/flights/_tmp/x", 1_000)
    old = orphan_batches(port, "/ferry/incoming", "flights", 3_000, "_shared")
    assert [e.path for e in old] == ["/ferry/incoming/flights/_shared/0123456789abcdef"]
    assert orphan_batches(port, "/ferry/incoming", "weather", 3_000, "_shared") == []


def test_the_loads_missing_input_knows_a_file_whose_rows_are_in_shared_files() -> None:
    """A file of a batch has only its marker in its incoming directory: its rows are in the
    batch's shared files; it is missing only once they are gone (issue 45)."""
    from ferry.stages.load.service import missing_input
    from ferry.tables.model import BatchMarker, StagedMarker

    port = FakeHdfs("a")
    gen, fid = "0123456789abcdef", "f" * 32
    rel = "day=2013-01-01/part-00000.parquet"
    port.mkdirs(f"/ferry/incoming/flights/{fid}")
    marker = StagedMarker(fid, gen, (), {rel: 3}).to_json()
    port.upload_stream(f"/ferry/incoming/flights/{fid}/_ferry.json", [marker])
    uri = f"hdfs://127.0.0.1:18020/ferry/incoming/flights/{fid}"
    assert missing_input(port, uri, 3) == (
        f"its shared files are gone (/ferry/incoming/flights/_shared/{gen}), 3 row(s) expected"
    )
    port.mkdirs(f"/ferry/incoming/flights/_shared/{gen}")
    batch = BatchMarker(gen, {rel: {fid: 3}}).to_json()
    port.upload_stream(f"/ferry/incoming/flights/_shared/{gen}/_ferry.json", [batch])
    assert missing_input(port, uri, 3) is None
    port.mkdirs("/ferry/incoming/flights/other")
    assert missing_input(port, "hdfs://x:1/ferry/incoming/flights/other", 2) == (
        "no data file, 2 row(s) expected"
    )


def test_a_shared_batch_is_in_use_while_a_file_of_it_has_its_directory_there() -> None:
    """gc keeps an old shared batch while a file of it still has its own directory in the zone
    naming that generation (its transfer or load may still need it); a file staged again under
    another generation does not hold it."""
    from ferry.gc.hdfs_copies import shared_in_use
    from ferry.tables.model import BatchMarker, StagedMarker

    port = FakeHdfs("b")
    gen, f1, f2 = "0123456789abcdef", "1" * 32, "2" * 32
    batch = f"/ferry/staging/flights/_shared/{gen}"
    port.mkdirs(batch)
    port.upload_stream(
        f"{batch}/_ferry.json", [BatchMarker(gen, {"d=1/p.parquet": {f1: 1, f2: 1}}).to_json()]
    )
    assert not shared_in_use(port, "/ferry/staging", "flights", batch)  # no file's directory
    port.mkdirs(f"/ferry/staging/flights/{f1}")
    other = StagedMarker(f1, "fedcba9876543210", ("d=1/x.parquet",)).to_json()
    port.upload_stream(f"/ferry/staging/flights/{f1}/_ferry.json", [other])
    assert not shared_in_use(port, "/ferry/staging", "flights", batch)  # staged again since
    port.mkdirs(f"/ferry/staging/flights/{f2}")
    mine = StagedMarker(f2, gen, (), {"d=1/p.parquet": 1}).to_json()
    port.upload_stream(f"/ferry/staging/flights/{f2}/_ferry.json", [mine])
    assert shared_in_use(port, "/ferry/staging", "flights", batch)
