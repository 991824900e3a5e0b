"""Tracker state at scale: RSS and restart time with N synthetic files (no broker, no Spark).

Each file gets the four events of a clean run (extracted → transformed → transferred → loaded;
1 % stop half-way, 0.5 % fail in transform), load times spread over the last ``--span-h`` hours.
They are folded exactly as the tracker's agent does (:func:`ferry.tracker.record.apply`, JSON
values, the in-memory index, the retention sweep) into RocksDB opened with faust's own options
(``faust.stores.rocksdb.RocksDBOptions``, rocksdict driver). "Restart" is a fresh process that
opens the same databases and rebuilds the index, as the tracker's recovery callback does; faust
itself then only reads the changelog past the offset stored in RocksDB (none here).

    python bench/bench_tracker.py --files 100000 [--retention-h 24 --span-h 240]
        [--store-options ferry|faust] [--rss-every 5000]

Prints one line per phase: wall time, s, and the process's RSS (VmRSS), MB.
"""

from __future__ import annotations

import argparse
import json
import shutil
import subprocess
import sys
import tempfile
import time
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

from faust.stores.rocksdb import RocksDBOptions

from ferry.core.events import (
    FileExtracted,
    FileFailed,
    FileLoaded,
    FileManifest,
    FileTransferred,
    FileTransformed,
)
from ferry.settings.tracker import TrackerSettings
from ferry.tracker.app import store_options
from ferry.tracker.record import apply
from ferry.tracker.state import TrackerState

PARTITIONS = 3


def rss_mb() -> float:
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    return float("nan")


#: ``--store-options``: the tracker's own (:func:`ferry.tracker.app.store_options`) or faust's
#: defaults (three 64 MiB write buffers, a 2 GiB block cache per partition).
STORE_OPTIONS = "ferry"


def open_dbs(path: Path) -> list[Any]:
    kw: dict[str, Any] = {}
    if STORE_OPTIONS == "ferry":
        kw = {k: v for k, v in store_options(TrackerSettings()).items() if k != "driver"}
    opts = RocksDBOptions(use_rocksdict=True, **kw)
    return [opts.open(path / f"files-{p}.db", read_only=False) for p in range(PARTITIONS)]


def events_of(i: int, now: datetime, span_h: float, n: int) -> list[Any]:
    fid = f"{i:032x}"
    loaded_at = now - timedelta(hours=span_h * (n - i) / n)
    t0 = loaded_at - timedelta(minutes=6)
    m = FileManifest(
        file_id=fid,
        dataset=("weather", "flights", "planes")[i % 3],
        source_path=f"nas/in/{i:08d}.csv",
        size_bytes=1_000_000 + i % 1000,
        sha256=f"{i:064x}",
        created_at=t0,
        updated_at=t0,
        trace_id="1" * 32,
        uris={"landing": f"hdfs://b/landing/{fid}"},
    )

    def at(minutes: int, **kw: Any) -> FileManifest:
        return FileManifest(**{**m.__dict__, "updated_at": t0 + timedelta(minutes=minutes), **kw})

    evs: list[Any] = [FileExtracted(at(0))]
    if i % 200 == 7:
        return evs + [
            FileFailed(
                stage="transform",
                reason="rows_invalid",
                error="no valid rows",
                attempt=1,
                failed_at=t0 + timedelta(minutes=1),
                manifest=at(0),
            )
        ]
    evs.append(FileTransformed(at(2, rows_in=100, rows_out=99, rows_rejected=1)))
    if i % 100 == 3:
        return evs
    return evs + [
        FileTransferred(at(3)),
        FileLoaded(at(6), table=f"ferry.{m.dataset}", partition={"day": "2024-03-01"}),
    ]


def ingest(path: Path, n: int, span_h: float, retention_h: float, rss_every: int = 0) -> None:
    dbs = open_dbs(path)
    state = TrackerState()
    pruned: dict[str, int] = {}
    now = datetime.now(UTC)
    retention_ms = int(retention_h * 3600_000)
    sweep_every = 500 if rss_every else 10_000
    started = time.monotonic()
    events = 0
    rss: list[str] = []
    for i in range(n):
        p = i % PARTITIONS
        db = dbs[p]
        key = f"{i:032x}"
        for ev in events_of(i, now, span_h, n):
            raw = db.get(key.encode())
            _, record = apply(json.loads(raw) if raw else None, ev, key, p)
            db.put(key.encode(), json.dumps(record).encode())
            state.put(record)
            events += 1
        if rss_every and i % rss_every == rss_every - 1:
            rss.append(f"{i + 1}: {rss_mb():.0f}")
        if retention_ms and (i % sweep_every == sweep_every - 1 or i == n - 1):  # retention sweep
            cutoff = int(time.time() * 1000) - retention_ms
            for part in range(PARTITIONS):
                for e in state.expired(part, cutoff, limit=n):
                    dbs[part].delete(e.file_id.encode())
                    state.drop(e.file_id)
                    k = f"{part}:{e.dataset}"
                    pruned[k] = pruned.get(k, 0) + 1
    dbs[0].put(b"__pruned__", json.dumps(pruned).encode())
    took = time.monotonic() - started
    for db in dbs:
        db.close()
    print(
        f"ingest: {n} files, {events} events in {took:.1f} s ({events / took:.0f} events/s); "
        f"retained {len(state.entries)}, pruned {sum(pruned.values())}; RSS {rss_mb():.0f} MB"
    )
    if rss:
        print(f"  RSS, MB, by files ingested ({STORE_OPTIONS} store options): {', '.join(rss)}")


def restart(path: Path) -> None:
    started = time.monotonic()
    dbs = open_dbs(path)
    pruned = json.loads(dbs[0].get(b"__pruned__") or b"{}")

    def records() -> Any:
        for db in dbs:
            for k, v in db.items():
                if k != b"__pruned__":
                    yield json.loads(v)

    state = TrackerState()
    state.load(records(), pruned)
    took = time.monotonic() - started
    counts = state.counts(int(time.time() * 1000), {"transform": 1800.0})
    print(
        f"restart: opened the store and indexed {len(state.entries)} files in {took:.2f} s; "
        f"RSS {rss_mb():.0f} MB; states {counts['states']}"
    )


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--files", type=int, nargs="+", default=[100_000])
    ap.add_argument("--span-h", type=float, default=240.0, help="load times spread over, h")
    ap.add_argument("--retention-h", type=float, default=24.0, help="0 keeps every file, h")
    ap.add_argument("--phase", choices=["all", "ingest", "restart"], default="all")
    ap.add_argument("--dir", type=Path)
    ap.add_argument("--store-options", choices=["ferry", "faust"], default="ferry")
    ap.add_argument("--rss-every", type=int, default=0, help="print RSS every N files ingested")
    args = ap.parse_args()
    global STORE_OPTIONS
    STORE_OPTIONS = args.store_options
    if args.phase == "ingest":
        return ingest(args.dir, args.files[0], args.span_h, args.retention_h, args.rss_every)
    if args.phase == "restart":
        return restart(args.dir)
    for n in args.files:
        tmp = Path(tempfile.mkdtemp(prefix="ferry-bench-tracker-"))
        try:
            print(f"== {n} files, retention {args.retention_h:g} h of {args.span_h:g} h of loads")
            base = [sys.executable, __file__, "--dir", str(tmp), "--files", str(n)]
            opts = ["--span-h", str(args.span_h), "--retention-h", str(args.retention_h)]
            opts += ["--store-options", args.store_options, "--rss-every", str(args.rss_every)]
            for phase in ("ingest", "restart"):
                t = time.monotonic()
                subprocess.run([*base, *opts, "--phase", phase], check=True)
                print(f"   ({phase} process: {time.monotonic() - t:.1f} s wall)")
            size = sum(f.stat().st_size for f in tmp.rglob("*") if f.is_file())
            print(f"   store on disk: {size / 1e6:.0f} MB")
        finally:
            shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    main()
