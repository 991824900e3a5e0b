"""Wire privacy on HDFS (profile ``secure``: ``kerberos.protection: privacy``, both clusters on
``http_policy: HTTPS_ONLY``; docs/security.md, "Wire privacy").

Real processes: the stack's NameNode and DataNode of cluster A with ``hadoop.rpc.protection`` and
``dfs.data.transfer.protection`` = privacy and their web servers on TLS only, certificates the
stack made; Hadoop's own client (``FsShell`` from the stack's Hadoop jars, with the client
configuration directory the stack writes for edge nodes) and Ferry's WebHDFS client. What crosses
the wire is read off a recording relay (:class:`tests.secure.wire_tap.Tap`) put between the
client and the server: a file's bytes and its path go over WebHDFS and Hadoop RPC only inside TLS
and SASL encryption; a client that asks for less than privacy is refused by the NameNode (RPC)
and by the DataNode (block data transfer); a WebHDFS client that does not trust the clusters' CA
is refused with one line.
"""

from __future__ import annotations

import os
import uuid
from pathlib import Path

import pytest
from tests.secure.clients import fsshell, webhdfs_list_error
from tests.secure.wire_tap import Stream, Tap

from ferry.clusters.hdfs.webhdfs import WebHdfs
from ferry.clusters.kerberos import spnego_auth
from ferry.settings import Settings
from ferry_kit.settings import KitSettings
from ferry_kit.stack.tls import make_pki

pytestmark = [
    pytest.mark.stack("kdc", "hdfs"),
    pytest.mark.skipif(
        not (
            KitSettings().kerberos.privacy
            and KitSettings().cluster("a").http_policy == "HTTPS_ONLY"
        ),
        reason="needs wire privacy: FERRY_PROFILE=secure (make test-secure)",
    ),
]

#: First bytes of a TLS connection's client side: a handshake record (content type 22) of
#: TLS 1.x (RFC 8446 §5.1: legacy_record_version 0x0301 or 0x0303).
TLS_HANDSHAKE = (b"\x16\x03\x01", b"\x16\x03\x03")


def leaked(streams: list[Stream], secret: bytes) -> list[int]:
    """Indexes of the streams in which ``secret`` appears in either direction."""
    return [i for i, s in enumerate(streams) if secret in s.up or secret in s.down]


@pytest.fixture
def marked_file(stack: Settings) -> tuple[str, bytes]:
    """A file on cluster A whose path and content carry a random marker; (path, content)."""
    marker = f"wire-{uuid.uuid4().hex}"
    data = f"{marker},row\n".encode() * 20000
    path = f"/test/{marker}/part-0.csv"
    with WebHdfs.for_cluster("a", stack) as a:
        a.upload_stream(path, iter([data]))
    return path, data


def test_webhdfs_bytes_and_paths_cross_the_wire_only_inside_tls(stack: Settings) -> None:
    cs = stack.cluster("a")
    marker = f"wire-{uuid.uuid4().hex}".encode()
    data = marker + b",row\n" + os.urandom(64) * 16000
    path = f"/test/{marker.decode()}/part-0.csv"
    with Tap(cs.host, cs.namenode_http_port) as nn, Tap(cs.host, cs.datanode_http_port) as dn:
        tapped = cs.model_copy(
            update={
                "webhdfs_url_override": f"https://{nn.address}",
                "datanode_address_map": {f"{cs.datanode_host}:{cs.datanode_http_port}": dn.address},
            }
        )
        with WebHdfs(tapped, stack.retry, name="a", auth=spnego_auth(stack.kerberos)) as a:
            a.upload_stream(path, iter([data]))
            got = b"".join(a.open_stream(path))
        streams = nn.snapshot() + dn.snapshot()
    assert got == data
    # the relays carried the file (to the DataNode and back) and the calls naming its path ...
    assert sum(len(s.up) for s in dn.snapshot()) > len(data)
    assert sum(len(s.down) for s in dn.snapshot()) > len(data)
    assert len(nn.snapshot()) >= 1
    # ... every connection opened with a TLS handshake, and neither ever showed in clear
    assert [bytes(s.up[:3]) in TLS_HANDSHAKE for s in streams] == [True] * len(streams)
    assert leaked(streams, marker) == []
    assert leaked(streams, data[-4096:]) == []


def test_hadoop_rpc_carries_paths_only_encrypted(
    stack: Settings, marked_file: tuple[str, bytes], tmp_path: Path
) -> None:
    path, data = marked_file
    cs = stack.cluster("a")
    with Tap(cs.host, cs.namenode_rpc_port) as rpc:
        out = fsshell(stack, tmp_path, "-cat", f"hdfs://{rpc.address}{path}")
        streams = rpc.snapshot()
    assert (out.returncode, out.stdout.encode()) == (0, data), out.stderr[-2000:]
    assert sum(len(s.up) for s in streams) > 0
    # the path went to the NameNode (getBlockLocations) wrapped by SASL auth-conf
    assert leaked(streams, path.encode()) == []
    assert leaked(streams, path.split("/")[2].encode()) == []


def test_a_client_without_privacy_is_refused_by_the_namenode_and_the_datanode(
    stack: Settings, marked_file: tuple[str, bytes], tmp_path: Path
) -> None:
    path, _ = marked_file
    rpc = fsshell(stack, tmp_path, "-cat", path, hadoop_rpc_protection="authentication")
    assert rpc.returncode == 1
    assert (
        "Failed on local exception: javax.security.sasl.SaslException: No common protection "
        "layer between client and server"
    ) in rpc.stderr.splitlines()[-1], rpc.stderr[-2000:]

    block = fsshell(stack, tmp_path, "-cat", path, dfs_data_transfer_protection="authentication")
    assert block.returncode == 1
    assert (
        "javax.security.sasl.SaslException: DIGEST-MD5: No common protection layer between "
        "client and server"
    ) in block.stderr, block.stderr[-2000:]
    assert block.stderr.splitlines()[-1].startswith("cat: Could not obtain block: "), block.stderr


def test_a_webhdfs_client_that_does_not_trust_the_clusters_ca_is_refused_with_one_line(
    stack: Settings, tmp_path: Path
) -> None:
    # a real CA, made here as the stack makes its own: not the one of HDFS
    other_ca = make_pki(
        tmp_path / "pki", "localhost", tmp_path / "pki.log", name="x", common_name="x"
    )
    hdfs_ca = stack.cluster("a").ssl_ca_path
    assert hdfs_ca is not None
    assert other_ca.ca_pem.read_bytes() != hdfs_ca.read_bytes()
    rc, lines, took = webhdfs_list_error(
        stack, {"FERRY_CLUSTERS__A__SSL_CA_PATH": str(other_ca.ca_pem)}
    )
    nn = f"127.0.0.1:{stack.cluster('a').namenode_http_port}"
    assert (rc, took < 30) == (1, True)
    assert lines == [
        f"AuthenticationFailed: WebHDFS LISTSTATUS '/' on cluster 'a' via NameNode {nn}: TLS: "
        f"the certificate of {nn} is not trusted (clusters.<x>.ssl_ca_path): "
        # the server sends its chain, the stack's CA included, which this client does not trust
        "self-signed certificate in certificate chain"
    ]
