"""Copy throughput B → A over WebHDFS on the real stack, direct and through the fault proxies.

Uploads one file of ``--mib`` MiB of random bytes to cluster B, then copies it to cluster A with
:func:`ferry.stages.transfer.copy.copy_between` (transfer's streaming copy, checksum verified)
``--runs`` times directly, and ``--runs`` times with cluster A's NameNode and DataNode HTTP ports
behind :class:`ferry_kit.testing.faultproxy.FaultProxy` (passing bytes through, no fault: the cost
of
the proxies the fault tests use). Prints MB/s (10^6 bytes per second) and seconds of each copy.

Usage: ``python bench/bench_hdfs.py [--mib 64] [--runs 1]``.
Needs ``ferry stack up`` (started if it is not running). Cleans its HDFS paths on exit.
"""

from __future__ import annotations

import argparse
import os
import sys
import time
import uuid
from collections.abc import Iterator

from ferry.clusters.hdfs.webhdfs import WebHdfs
from ferry.stages.transfer.copy import copy_between
from ferry_kit.settings import get_kit_settings
from ferry_kit.stack.manager import Stack
from ferry_kit.testing.faultproxy import FaultProxy


def _chunks(data: bytes, size: int = 1 << 20) -> Iterator[bytes]:
    for i in range(0, len(data), size):
        yield data[i : i + size]


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--mib", type=int, default=64, help="size of the copied file, MiB")
    ap.add_argument("--runs", type=int, default=1, help="copies per way (direct, proxied)")
    args = ap.parse_args()
    if args.mib < 1 or args.runs < 1:
        ap.error("--mib and --runs must be at least 1")
    settings = get_kit_settings()
    Stack(settings).up(deadline_s=300)
    cluster_a = settings.cluster("a")
    root = f"/bench/hdfs-{uuid.uuid4().hex[:8]}"
    b, a = WebHdfs.for_cluster("b", settings), WebHdfs.for_cluster("a", settings)
    data = os.urandom(args.mib << 20)  # random: nothing on the way can compress it away
    mb = len(data) / 1e6
    try:
        b.upload_stream(f"{root}/s/f", _chunks(data))
        advertised = f"{cluster_a.host}:{cluster_a.datanode_http_port}"
        with (
            FaultProxy(cluster_a.host, cluster_a.namenode_http_port) as nn,
            FaultProxy(cluster_a.host, cluster_a.datanode_http_port) as dn,
        ):
            proxied = WebHdfs(
                cluster_a.model_copy(
                    update={
                        "webhdfs_url_override": nn.url,
                        "datanode_address_map": {advertised: dn.address},
                    }
                ),
                settings.retry,
                name="a",
            )
            try:
                for way, dest in (("direct", a), ("through proxies", proxied)):
                    for run in range(args.runs):
                        t0 = time.monotonic()
                        copy_between(
                            b, f"{root}/s/f", dest, f"{root}/{run}-{way[0]}/f", retry=settings.retry
                        )
                        s = time.monotonic() - t0
                        print(f"copy B->A {args.mib} MiB {way}: {mb / s:.1f} MB/s ({s:.2f}s)")
            finally:
                proxied.close()
    finally:
        for port in (a, b):
            try:
                port.delete(root, recursive=True)
            finally:
                port.close()
    return 0


if __name__ == "__main__":
    sys.exit(main())
