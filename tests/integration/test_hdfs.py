"""WebHdfs and copy_between against the real HDFS clusters of the local stack.

Each test works under its own root (``unique.hdfs_root``) on both clusters and removes it at the
end. Faults come from :class:`ferry_kit.testing.faultproxy.FaultProxy` put in front of cluster A's
NameNode HTTP port (``webhdfs_url_override``) and DataNode HTTP port (``datanode_address_map``).
"""

from __future__ import annotations

import hashlib
import logging
import time
import unicodedata
from collections.abc import Iterator

import pytest

from ferry.clusters.hdfs.paths import is_temp_path
from ferry.clusters.hdfs.webhdfs import WebHdfs
from ferry.errors import (
    DataNodeUnreachable,
    HdfsPathExists,
    HdfsRequestRejected,
    HdfsTimeout,
)
from ferry.settings import Settings
from ferry.settings.hdfs import HdfsClusterSettings
from ferry.settings.retry import RetrySettings
from ferry.stages.transfer.copy import copy_between
from ferry_kit.testing.faultproxy import FaultProxy
from ferry_kit.testing.ports import free_port

pytestmark = [pytest.mark.integration, pytest.mark.stack("hdfs")]

log = logging.getLogger(__name__)

C07_NAMES = [
    "données été.csv",
    "with space.csv",
    "100%.csv",
    "%41 not A.csv",
    "a=b c=d.csv",
    "#hash#.csv",
    "plus+sign.csv",
    "semi;colon.csv",
    "question?.csv",
    "日本語 ファイル.csv",
]

#: Retry policy for fault tests: same shape as production, shorter waits.
FAST_RETRY = RetrySettings(
    max_attempts=10,
    initial_backoff_s=0.1,
    max_backoff_s=1.0,
    connect_timeout_s=2.0,
    read_timeout_s=10.0,
)


def _payload(n: int, seed: int = 0) -> bytes:
    """``n`` pseudo-random bytes, reproducible, generated without holding a PRNG stream."""
    out = bytearray()
    block = hashlib.sha256(str(seed).encode()).digest()
    while len(out) < n:
        block = hashlib.sha256(block).digest()
        out += block * 64  # 2 KiB per hash: fast enough, not compressible away
    return bytes(out[:n])


def _chunks(data: bytes, size: int = 1 << 20) -> Iterator[bytes]:
    for i in range(0, len(data), size):
        yield data[i : i + size]


def _port(
    settings: Settings, name: str, *, retry: RetrySettings | None = None, **cluster_update: object
) -> WebHdfs:
    cluster: HdfsClusterSettings = settings.cluster(name)
    if cluster_update:
        cluster = cluster.model_copy(update=cluster_update)
    return WebHdfs(cluster, retry or settings.retry, name=name)


@pytest.fixture
def ports(stack: Settings, unique) -> Iterator[tuple[WebHdfs, WebHdfs, str]]:  # type: ignore[no-untyped-def]
    """(cluster B port, cluster A port, this test's root); the root is removed on both after."""
    b, a = _port(stack, "b"), _port(stack, "a")
    root = unique.hdfs_root
    yield b, a, root
    for port in (a, b):
        try:
            port.delete(root, recursive=True)
        finally:
            port.close()


@pytest.mark.parametrize("cluster", ["b", "a"])
def test_write_read_rename_list(stack: Settings, ports, cluster: str) -> None:  # type: ignore[no-untyped-def]
    b, a, root = ports
    port = {"a": a, "b": b}[cluster]
    data = _payload(3 * (1 << 20) + 17)
    port.mkdirs(f"{root}/d")
    written = port.upload_stream(f"{root}/d/f.bin", _chunks(data))
    assert (written.size, written.sha256, written.created) == (
        len(data),
        hashlib.sha256(data).hexdigest(),
        True,
    )
    assert port.status(f"{root}/d/f.bin").size == len(data)
    assert b"".join(port.open_stream(f"{root}/d/f.bin", 256 * 1024)) == data
    assert b"".join(port.open_stream(f"{root}/d/f.bin", offset=len(data) - 17)) == data[-17:]
    port.rename(f"{root}/d/f.bin", f"{root}/d/g.bin")
    assert [(e.name, e.kind, e.size) for e in port.list(f"{root}/d")] == [
        ("g.bin", "FILE", len(data))
    ]
    port.upload_stream(f"{root}/d/h.bin", iter([b"h"]))
    with pytest.raises(HdfsPathExists, match="g.bin"):
        port.rename(f"{root}/d/h.bin", f"{root}/d/g.bin")
    # never moved *into* an existing directory (rename with options: same-type paths only)
    with pytest.raises(HdfsRequestRejected, match="must both be directories"):
        port.rename(f"{root}/d/h.bin", f"{root}/d")
    again = port.upload_stream(
        f"{root}/d/g.bin", _chunks(data), expected_sha256=hashlib.sha256(data).hexdigest()
    )
    assert again.created is False
    assert port.delete(f"{root}/d/h.bin") is True
    assert port.delete(f"{root}/d/h.bin") is False
    assert [e.name for e in port.list(f"{root}/d")] == ["g.bin"]


@pytest.mark.parametrize("cluster", ["b", "a"])
def test_c07_names_round_trip_byte_for_byte(stack: Settings, ports, cluster: str) -> None:  # type: ignore[no-untyped-def]
    b, a, root = ports
    port = {"a": a, "b": b}[cluster]
    for name in C07_NAMES:
        nfd = unicodedata.normalize("NFD", name)
        port.upload_stream(f"{root}/c07/{nfd}", iter([name.encode()]))
    listed = port.list(f"{root}/c07")
    expected = sorted(unicodedata.normalize("NFC", n) for n in C07_NAMES)
    assert sorted(e.name.encode() for e in listed) == sorted(n.encode() for n in expected)
    for entry in listed:
        assert b"".join(port.open_stream(entry.path)) == entry.name.encode()


def test_copy_b_to_a_streams_with_checksum(stack: Settings, ports, record_property) -> None:  # type: ignore[no-untyped-def]
    b, a, root = ports
    data = _payload(32 * (1 << 20), seed=1)
    sha = hashlib.sha256(data).hexdigest()
    b.upload_stream(f"{root}/staging/flights 2013-01-01.parquet", _chunks(data))
    started = time.monotonic()
    size, digest = copy_between(
        b,
        f"{root}/staging/flights 2013-01-01.parquet",
        a,
        f"{root}/incoming/flights 2013-01-01.parquet",
        retry=stack.retry,
    )
    elapsed = time.monotonic() - started
    assert (size, digest) == (len(data), sha)
    assert a.sha256(f"{root}/incoming/flights 2013-01-01.parquet") == (len(data), sha)
    assert [e.name for e in a.list(f"{root}/incoming")] == ["flights 2013-01-01.parquet"]
    record_property("copy_mb_per_s", round(len(data) / elapsed / 1e6, 1))
    log.warning(
        "copy B->A direct: %d bytes in %.2fs = %.1f MB/s (stream + read-back verify)",
        len(data),
        elapsed,
        len(data) / elapsed / 1e6,
    )
    # idempotent: a second copy writes nothing and returns the same answer
    assert copy_between(
        b,
        f"{root}/staging/flights 2013-01-01.parquet",
        a,
        f"{root}/incoming/flights 2013-01-01.parquet",
        retry=stack.retry,
    ) == (len(data), sha)


def test_c01_resets_at_namenode_and_datanode(stack: Settings, ports, record_property) -> None:  # type: ignore[no-untyped-def]
    b, _, root = ports
    cluster_a = stack.cluster("a")
    advertised_dn = f"{cluster_a.host}:{cluster_a.datanode_http_port}"
    data = _payload(24 * (1 << 20), seed=2)
    sha = hashlib.sha256(data).hexdigest()
    b.upload_stream(f"{root}/staging/f.bin", _chunks(data))

    with (
        FaultProxy(cluster_a.host, cluster_a.namenode_http_port, seed=11) as nn,
        FaultProxy(cluster_a.host, cluster_a.datanode_http_port, seed=12) as dn,
    ):
        a = _port(
            stack,
            "a",
            retry=FAST_RETRY,
            webhdfs_url_override=nn.url,
            datanode_address_map={advertised_dn: dn.address},
        )
        try:
            # 1. resets mid-write on the DataNode, plus random resets at the NameNode
            nn.reset_rate(0.5, within_bytes=400)
            dn.reset_after(5 * (1 << 20), direction="up", times=2)
            started = time.monotonic()
            got = copy_between(
                b, f"{root}/staging/f.bin", a, f"{root}/incoming/f.bin", retry=FAST_RETRY
            )
            elapsed = time.monotonic() - started
            assert got == (len(data), sha)
            assert dn.counts["reset_mid_stream"] == 2
            assert nn.counts.get("reset_rate", 0) >= 1
            record_property("copy_with_faults_s", round(elapsed, 2))
            log.warning(
                "copy B->A through proxies with %d DN + %d NN resets: %.2fs",
                dn.counts["reset_mid_stream"],
                nn.counts["reset_rate"],
                elapsed,
            )

            # 2. the DataNode completes the file but the client's answer is reset ("complete")
            nn.pass_through()
            dn.reset_on_response(min_request_bytes=len(data), times=1)
            got = copy_between(
                b, f"{root}/staging/f.bin", a, f"{root}/incoming/g.bin", retry=FAST_RETRY
            )
            assert got == (len(data), sha)
            assert dn.counts["reset_on_response"] == 1
        finally:
            a.close()

    direct = _port(stack, "a")
    try:
        entries = direct.list(f"{root}/incoming")
        assert [(e.name, e.size) for e in entries] == [("f.bin", len(data)), ("g.bin", len(data))]
        assert not any(is_temp_path(e.path) for e in entries)
        assert direct.sha256(f"{root}/incoming/f.bin") == (len(data), sha)
        assert direct.sha256(f"{root}/incoming/g.bin") == (len(data), sha)
    finally:
        direct.close()


def test_c01_rename_answer_reset_is_not_a_duplicate(stack: Settings, ports) -> None:  # type: ignore[no-untyped-def]
    b, _, root = ports
    cluster_a = stack.cluster("a")
    data = _payload(1 << 20, seed=3)
    b.upload_stream(f"{root}/s/f", _chunks(data))
    with FaultProxy(cluster_a.host, cluster_a.namenode_http_port) as nn:
        renames: list[str] = []

        class _ResetRenameAnswer(WebHdfs):
            def rename(self, src: str, dst: str, *, overwrite: bool = False) -> None:
                renames.append(src)
                if len(renames) == 1:  # the NameNode renames, its answer is lost
                    nn.reset_on_response(min_request_bytes=1, times=1)
                super().rename(src, dst, overwrite=overwrite)

        cluster = cluster_a.model_copy(update={"webhdfs_url_override": nn.url})
        a = _ResetRenameAnswer(cluster, FAST_RETRY, name="a")
        try:
            got = copy_between(b, f"{root}/s/f", a, f"{root}/t/f", retry=FAST_RETRY)
        finally:
            a.close()
        assert nn.counts["reset_on_response"] == 1
    assert got == (len(data), hashlib.sha256(data).hexdigest())
    assert len(renames) == 1  # the retry found the file in place and did not write again
    direct = _port(stack, "a")
    try:
        assert [e.name for e in direct.list(f"{root}/t")] == ["f"]
    finally:
        direct.close()


def test_c06_unreachable_datanode_fails_fast_with_address(stack: Settings, ports) -> None:  # type: ignore[no-untyped-def]
    _, _, root = ports
    cluster_a = stack.cluster("a")
    advertised = f"{cluster_a.host}:{cluster_a.datanode_http_port}"
    closed = f"127.0.0.1:{free_port()}"
    a = _port(stack, "a", datanode_address_map={advertised: closed})
    try:
        started = time.monotonic()
        with pytest.raises(DataNodeUnreachable) as info:
            a.upload_stream(f"{root}/c06/f", iter([b"x" * 1000]))
        elapsed = time.monotonic() - started
        assert elapsed < stack.retry.connect_timeout_s
        assert f"DataNode {advertised} (mapped to {closed})" in str(info.value)
        assert "datanode unreachable" in str(info.value)
        # nothing was created: the NameNode only creates the file once the DataNode asks
        assert not a.exists(f"{root}/c06/f")
        if a.exists(f"{root}/c06"):
            assert [e.name for e in a.list(f"{root}/c06")] == []
        # and copy_between does not retry it
        b = _port(stack, "b")
        b.upload_stream(f"{root}/c06/src", iter([b"y" * 10]))
        sleeps: list[float] = []
        with pytest.raises(DataNodeUnreachable):
            copy_between(
                b, f"{root}/c06/src", a, f"{root}/c06/dst", retry=FAST_RETRY, sleep=sleeps.append
            )
        assert sleeps == []
        b.close()
    finally:
        a.close()


@pytest.mark.parametrize("target", ["namenode", "datanode"])
def test_c08_stalled_peer_fails_within_timeout(stack: Settings, ports, target: str) -> None:  # type: ignore[no-untyped-def]
    _, _, root = ports
    cluster_a = stack.cluster("a")
    retry = RetrySettings(connect_timeout_s=1.0, read_timeout_s=1.5)
    upstream = (
        cluster_a.namenode_http_port if target == "namenode" else cluster_a.datanode_http_port
    )
    with FaultProxy(cluster_a.host, upstream) as proxy:
        proxy.stall()
        if target == "namenode":
            a = _port(stack, "a", retry=retry, webhdfs_url_override=proxy.url)
        else:
            advertised = f"{cluster_a.host}:{cluster_a.datanode_http_port}"
            a = _port(stack, "a", retry=retry, datanode_address_map={advertised: proxy.address})
        try:
            started = time.monotonic()
            with pytest.raises(HdfsTimeout, match=proxy.address):
                a.upload_stream(f"{root}/c08/f", iter([b"z" * 100_000]))
            elapsed = time.monotonic() - started
        finally:
            a.close()
        assert proxy.counts["stall"] >= 1
    # read timeout (or send blocked for the connect timeout) plus clean-up calls
    assert elapsed < retry.read_timeout_s + retry.connect_timeout_s + 2.0
    direct = _port(stack, "a")
    try:
        assert not direct.exists(f"{root}/c08/f")
        if direct.exists(f"{root}/c08"):
            assert [e.name for e in direct.list(f"{root}/c08")] == []
    finally:
        direct.close()
