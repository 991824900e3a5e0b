"""transfer's copy of a staged per-file tree between the real HDFS clusters (WebHDFS): Hive's
escaped partition directory names (``%2F``, ``%25``, ``%3D``, a space, the default partition)
round-trip byte for byte, data files are sha256-verified, the marker comes last, and another
generation on A is replaced whole (docs/hive-layout.md, "How a file gets into the table")."""

from __future__ import annotations

import hashlib
from collections.abc import Iterator

import pytest
from tests.support.factories import manifest

from ferry.clusters.hdfs.webhdfs import WebHdfs
from ferry.core.events import FileTransformed
from ferry.core.identity import derive_file_id
from ferry.settings import Settings
from ferry.stages.transfer.handlers import TransferDeps, transfer_file
from ferry.tables.model import StagedMarker

pytestmark = [pytest.mark.integration, pytest.mark.stack("hdfs")]

SHA = "cd" * 32
FID = derive_file_id("ledger", SHA)
GEN, GEN2 = "00112233445566aa", "aa66554433221100"
DIRS = ["note=a%2Fb", "note=c%25d", "note=e f", "note=g%3Dh", "note=__HIVE_DEFAULT_PARTITION__"]


@pytest.fixture
def ports(stack: Settings, unique) -> Iterator[tuple[WebHdfs, WebHdfs, str]]:  # type: ignore[no-untyped-def]
    b, a = WebHdfs.for_cluster("b", stack), WebHdfs.for_cluster("a", stack)
    yield b, a, unique.hdfs_root
    for port in (a, b):
        try:
            port.delete(unique.hdfs_root, recursive=True)
        finally:
            port.close()


def stage(b: WebHdfs, staged: str, gen: str) -> dict[str, bytes]:
    files = {
        f"{d}/ferry-{FID}-{gen}-{n:05d}.parquet": f"PAR1 {gen} {d} PAR1".encode()
        for n, d in enumerate(DIRS)
    }
    b.delete(staged, recursive=True)
    for rel, data in files.items():
        b.upload_stream(f"{staged}/{rel}", iter([data]))
    b.upload_stream(f"{staged}/_ferry.json", iter([StagedMarker(FID, gen, tuple(files)).to_json()]))
    return files


def tree(port: WebHdfs, root: str) -> dict[str, str]:
    """``{relative path: sha256}`` of every file under ``root``."""
    out: dict[str, str] = {}
    todo = [""]
    while todo:
        rel = todo.pop()
        for st in port.list(f"{root}/{rel}" if rel else root):
            child = f"{rel}/{st.name}" if rel else st.name
            if st.is_dir:
                todo.append(child)
            else:
                out[child] = hashlib.sha256(b"".join(port.open_stream(st.path))).hexdigest()
    return out


def test_a_staged_tree_with_escaped_partition_names_round_trips_to_a(stack, ports) -> None:  # type: ignore[no-untyped-def]
    b, a, root = ports
    staged, incoming = f"{root}/staging/ledger/{FID}", f"{root}/incoming"
    fs_b, fs_a = stack.cluster("b").fs_url, stack.cluster("a").fs_url
    stage(b, staged, GEN)
    event = FileTransformed(
        manifest("ledger", SHA, uris={"landing": f"{fs_b}/x", "staging": fs_b + staged})
    )
    deps = TransferDeps(b, a, incoming, fs_a, stack.retry, threads=4)
    [out] = transfer_file(event, deps)
    dst = f"{incoming}/ledger/{FID}"
    assert out.manifest.uris["incoming"] == fs_a + dst
    assert tree(a, dst) == tree(b, staged)
    assert sorted({p.split("/")[0] for p in tree(a, dst)} - {"_ferry.json"}) == sorted(DIRS)

    new = stage(b, staged, GEN2)  # a new transform output of the same file
    transfer_file(event, deps)
    assert tree(a, dst) == tree(b, staged)
    assert set(tree(a, dst)) == {*new, "_ferry.json"}  # the earlier generation's files are gone
