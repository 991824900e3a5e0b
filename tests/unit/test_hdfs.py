"""WebHdfs against an in-process WebHDFS stub (and the fault proxy): redirect rewrite, error
classification (C06, C08, resets), C07 names and C02 clean-up, with exact expected values."""

from __future__ import annotations

import hashlib
import time
import unicodedata
from collections.abc import Iterator

import pytest
from hdfs.util import HdfsError as _CliError
from tests.support.webhdfs_stub import WebHdfsStub

from ferry.clusters.hdfs.errors import _remote_error
from ferry.clusters.hdfs.paths import TEMP_MARKER, is_temp_path, normalize_path, temp_path_for
from ferry.clusters.hdfs.webhdfs import WebHdfs
from ferry.errors import (
    DataNodeUnreachable,
    HdfsPathExists,
    HdfsPathNotFound,
    HdfsRequestRejected,
    HdfsTimeout,
    HdfsUnavailable,
    PermanentError,
    TransientError,
)
from ferry.settings.hdfs import HdfsClusterSettings
from ferry.settings.retry import RetrySettings
from ferry_kit.settings import StackCluster, get_kit_settings
from ferry_kit.testing.faultproxy import FaultProxy
from ferry_kit.testing.ports import free_port

FAST = RetrySettings(connect_timeout_s=0.5, read_timeout_s=0.5)

#: Case C07 names, plus the characters URL handling most often breaks.
C07_NAMES = [
    "données été.csv",
    "with space.csv",
    "100%.csv",
    "%25 literal.csv",
    "a=b.csv",
    "#hash#.csv",
    "plus+sign.csv",
    "semi;colon.csv",
    "question?.csv",
    "日本語 ファイル.csv",
]


def _cluster(url: str, address_map: dict[str, str] | None = None) -> HdfsClusterSettings:
    host, port = url.removeprefix("http://").split(":")
    return StackCluster(
        host=host,
        namenode_rpc_port=1,
        namenode_http_port=int(port),
        datanode_port=1,
        datanode_http_port=1,
        datanode_ipc_port=1,
        datanode_address_map=address_map or {},
    )


@pytest.fixture
def stub() -> Iterator[WebHdfsStub]:
    with WebHdfsStub() as s:
        yield s


def _port(
    url: str, address_map: dict[str, str] | None = None, retry: RetrySettings = FAST
) -> WebHdfs:
    return WebHdfs(_cluster(url, address_map), retry, name="t", user="ferry")


def _leftovers(stub: WebHdfsStub) -> list[str]:
    return sorted(p for p in stub.state.files if is_temp_path(p))


# -- pure helpers ------------------------------------------------------------------------------


def test_for_cluster_takes_named_settings() -> None:
    settings = get_kit_settings()
    port = WebHdfs.for_cluster("a", settings)
    assert port.cluster.webhdfs_url == settings.cluster("a").webhdfs_url
    assert port.timeout == (settings.retry.connect_timeout_s, settings.retry.read_timeout_s)
    assert port.name == "a"
    port.close()


def test_normalize_path_is_nfc_absolute_and_collapsed() -> None:
    nfd = unicodedata.normalize("NFD", "/x/données été.csv")
    assert nfd != "/x/données été.csv"
    assert normalize_path(nfd) == "/x/données été.csv"
    assert normalize_path("//a/./b//c/../d/") == "/a/b/d"
    with pytest.raises(ValueError, match="absolute"):
        normalize_path("relative/path")


def test_temp_path_is_hidden_sibling_and_unique() -> None:
    t1, t2 = temp_path_for("/d/x y.csv"), temp_path_for("/d/x y.csv")
    assert t1 != t2
    assert t1.startswith(f"/d/.x y.csv{TEMP_MARKER}")
    assert is_temp_path(t1) and not is_temp_path("/d/x y.csv")


# -- round trip and redirect rewrite -----------------------------------------------------------


def test_datanode_redirect_is_rewritten_through_address_map(stub: WebHdfsStub) -> None:
    stub.state.advertised_datanode = "datanode.invalid:9864"  # what a NAT'd DataNode advertises
    port = _port(stub.url, {"datanode.invalid:9864": stub.datanode_address})
    data = bytes(range(256)) * 5000  # 1.28 MB, several chunks
    chunks = [data[i : i + 100_000] for i in range(0, len(data), 100_000)]

    written = port.upload_stream("/in/f.bin", iter(chunks))

    assert (written.size, written.sha256) == (len(data), hashlib.sha256(data).hexdigest())
    assert stub.state.files["/in/f.bin"] == data
    assert b"".join(port.open_stream("/in/f.bin", chunk_size=65536)) == data
    assert port.sha256("/in/f.bin") == (len(data), hashlib.sha256(data).hexdigest())
    dn_ops = [(m, op) for server, m, op, _ in stub.state.requests if server == "datanode"]
    assert dn_ops == [("PUT", "CREATE"), ("GET", "OPEN"), ("GET", "OPEN"), ("GET", "OPEN")]
    assert _leftovers(stub) == []


def test_status_list_mkdirs_rename_delete(stub: WebHdfsStub) -> None:
    port = _port(stub.url)
    port.mkdirs("/a/b")
    port.upload_stream("/a/b/one", iter([b"1"]))
    port.upload_stream("/a/b/two", iter([b"22"]))
    assert [(e.name, e.kind, e.size) for e in port.list("/a/b")] == [
        ("one", "FILE", 1),
        ("two", "FILE", 2),
    ]
    port.rename("/a/b/one", "/a/b/three")
    assert port.exists("/a/b/three") and not port.exists("/a/b/one")
    with pytest.raises(HdfsPathExists, match="'/a/b/three'"):
        port.rename("/a/b/three", "/a/b/two")
    port.rename("/a/b/three", "/a/b/two", overwrite=True)
    assert stub.state.files["/a/b/two"] == b"1"
    with pytest.raises(HdfsRequestRejected, match="not a directory"):
        port.list("/a/b/two")
    with pytest.raises(HdfsRequestRejected, match="PathIsNotEmptyDirectoryException"):
        port.delete("/a")
    assert port.delete("/a", recursive=True) is True
    assert port.delete("/a") is False


@pytest.mark.parametrize("name", C07_NAMES)
def test_c07_names_round_trip_byte_for_byte(stub: WebHdfsStub, name: str) -> None:
    port = _port(stub.url)
    path = f"/c07/{unicodedata.normalize('NFD', name)}"  # NFD in, NFC stored
    expected = f"/c07/{unicodedata.normalize('NFC', name)}"
    port.upload_stream(path, iter([name.encode()]))
    assert [p.encode() for p in stub.state.files] == [expected.encode()]
    [entry] = port.list("/c07")
    assert entry.name.encode() == unicodedata.normalize("NFC", name).encode()
    assert entry.path == expected
    assert b"".join(port.open_stream(entry.path)) == name.encode()


# -- classification ----------------------------------------------------------------------------


def test_missing_path_is_permanent_not_found_with_path(stub: WebHdfsStub) -> None:
    port = _port(stub.url)
    with pytest.raises(HdfsPathNotFound) as info:
        port.status("/no/such file")
    assert isinstance(info.value, PermanentError)
    assert "'/no/such file'" in str(info.value)
    assert f"NameNode {stub.namenode_address}" in str(info.value)
    with pytest.raises(HdfsPathNotFound):
        b"".join(port.open_stream("/no/such file"))


def test_c06_unreachable_datanode_fails_fast_with_address(stub: WebHdfsStub) -> None:
    closed = f"127.0.0.1:{free_port()}"
    stub.state.advertised_datanode = "dn.example:9864"
    port = _port(stub.url, {"dn.example:9864": closed})
    started = time.monotonic()
    with pytest.raises(DataNodeUnreachable) as info:
        port.upload_stream("/c06/f", iter([b"x" * 1000]))
    elapsed = time.monotonic() - started
    assert elapsed < FAST.connect_timeout_s + 1.0
    message = str(info.value)
    assert "datanode unreachable" in message
    assert f"DataNode dn.example:9864 (mapped to {closed})" in message
    assert info.value.reason == "datanode_unreachable"
    assert not isinstance(info.value, TransientError)
    assert stub.state.files == {}  # the DataNode never created anything


def test_c06_on_read_too(stub: WebHdfsStub) -> None:
    _port(stub.url).upload_stream("/c06/r", iter([b"data"]))
    closed = f"127.0.0.1:{free_port()}"
    port = _port(stub.url, {stub.datanode_address: closed})
    with pytest.raises(DataNodeUnreachable, match=f"mapped to {closed}"):
        b"".join(port.open_stream("/c06/r"))


def test_refused_namenode_is_transient_not_datanode(stub: WebHdfsStub) -> None:
    url = f"http://127.0.0.1:{free_port()}"
    with pytest.raises(HdfsUnavailable) as info:
        _port(url).status("/x")
    assert not isinstance(info.value, HdfsTimeout)
    assert "connection refused" in str(info.value)
    assert f"NameNode {url.removeprefix('http://')}" in str(info.value)


def test_c08_stalled_namenode_times_out_within_read_timeout(stub: WebHdfsStub) -> None:
    host, nn_port = stub.namenode_address.split(":")
    with FaultProxy(host, int(nn_port)) as proxy:
        proxy.stall()
        port = _port(proxy.url)
        started = time.monotonic()
        with pytest.raises(HdfsTimeout) as info:
            port.status("/x")
        elapsed = time.monotonic() - started
    assert FAST.read_timeout_s <= elapsed < FAST.read_timeout_s + 1.0
    assert "read timeout of 0.5s" in str(info.value)
    assert proxy.counts["stall"] == 1


def test_c08_stalled_datanode_write_times_out_and_cleans_up(stub: WebHdfsStub) -> None:
    host, dn_port = stub.datanode_address.split(":")
    with FaultProxy(host, int(dn_port)) as proxy:
        proxy.stall()
        port = _port(stub.url, {stub.datanode_address: proxy.address})
        started = time.monotonic()
        with pytest.raises(HdfsTimeout, match=f"mapped to {proxy.address}"):
            port.upload_stream("/c08/f", iter([b"y" * 10_000]))
        elapsed = time.monotonic() - started
    assert elapsed < FAST.read_timeout_s + FAST.connect_timeout_s + 1.0
    assert stub.state.files == {}


def test_reset_by_namenode_is_transient(stub: WebHdfsStub) -> None:
    host, nn_port = stub.namenode_address.split(":")
    with FaultProxy(host, int(nn_port)) as proxy:
        proxy.reset_rate(1.0)
        with pytest.raises(HdfsUnavailable, match=f"via NameNode {proxy.address}"):
            _port(proxy.url).status("/x")
        assert proxy.counts["reset_rate"] >= 1


# -- C02: failure after the file was created -----------------------------------------------------


def test_c02_datanode_error_after_create_leaves_nothing(stub: WebHdfsStub) -> None:
    port = _port(stub.url)
    port.upload_stream("/c02/keep.csv", iter([b"other file"]))  # a sibling that must survive
    stub.state.dn_fail_after_bytes = 10
    with pytest.raises(HdfsUnavailable, match="minReplication"):
        port.upload_stream("/c02/new.csv", iter([b"a" * 8, b"b" * 8, b"c" * 8]))
    assert sorted(stub.state.files) == ["/c02/keep.csv"]
    assert "/c02" in stub.state.dirs
    deletes = [path for _, method, _, path in stub.state.requests if method == "DELETE"]
    assert len(deletes) == 1 and is_temp_path(deletes[0])
    assert deletes[0].startswith("/c02/.new.csv" + TEMP_MARKER)


def test_c02_reset_mid_body_leaves_nothing(stub: WebHdfsStub) -> None:
    host, dn_port = stub.datanode_address.split(":")
    with FaultProxy(host, int(dn_port)) as proxy:
        proxy.reset_after(50_000, direction="up", times=1)
        port = _port(stub.url, {stub.datanode_address: proxy.address})
        with pytest.raises(HdfsUnavailable, match="DataNode"):
            port.upload_stream("/c02/r.bin", (b"z" * 10_000 for _ in range(100)))
        assert proxy.counts["reset_mid_stream"] == 1
    assert stub.state.files == {}


def test_existing_target_with_other_bytes_is_not_overwritten(stub: WebHdfsStub) -> None:
    port = _port(stub.url)
    port.upload_stream("/t/f", iter([b"first"]))
    with pytest.raises(HdfsPathExists):
        port.upload_stream("/t/f", iter([b"second"]))
    assert stub.state.files == {"/t/f": b"first"}
    assert port.upload_stream("/t/f", iter([b"second"]), overwrite=True).created is True
    assert stub.state.files == {"/t/f": b"second"}


# -- a name over the NameNode's component limit is permanent (name_too_long) -------------------

_TOO_LONG = (
    "The maximum path component name limit of x in directory /ferry/landing/flights/abc is "
    "exceeded: limit=255 length=300"
)


@pytest.mark.parametrize(
    ("exception", "message"),
    [
        ("PathComponentTooLongException", _TOO_LONG),
        (
            "org.apache.hadoop.hdfs.protocol.FSLimitException$PathComponentTooLongException",
            _TOO_LONG,
        ),
        ("IOException", _TOO_LONG),  # wrapped: matched by its message
    ],
)
def test_path_component_too_long_is_permanent_name_too_long(exception: str, message: str) -> None:
    err = _remote_error(
        "WebHDFS CREATE '/d/x' on cluster 't' via NameNode n:1",
        _CliError(message, exception=exception),
    )
    assert isinstance(err, HdfsRequestRejected) and isinstance(err, PermanentError)
    assert err.reason == "name_too_long"
    name = exception.rsplit("$", 1)[-1].rsplit(".", 1)[-1]
    assert str(err) == f"WebHDFS CREATE '/d/x' on cluster 't' via NameNode n:1: {name}: {message}"


def test_other_remote_errors_keep_their_reasons() -> None:
    err = _remote_error("w", _CliError("denied", exception="AccessControlException"))
    assert (type(err), err.reason) == (HdfsRequestRejected, "hdfs_rejected")
    err = _remote_error("w", _CliError("busy", exception="RetriableException"))
    assert (type(err), err.reason) == (HdfsUnavailable, "hdfs_unavailable")
