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
