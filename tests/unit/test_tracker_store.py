"""The tracker's RocksDB stores are opened with Ferry's memory bounds, not faust's defaults (three
64 MiB write buffers and a 2 GiB block cache per table partition: the tracker's memory grew with
every file carried in the hour-long soak, docs/operations.md "Long soak")."""

from __future__ import annotations

from pathlib import Path

from ferry.settings import Settings
from ferry.tracker.app import build_app


def test_each_table_store_gets_the_settings_write_buffers_and_block_cache(tmp_path: Path):
    settings = Settings(
        tracker={
            "data_dir": tmp_path / "tracker",
            "store_url": "rocksdb://",
            "store_write_buffer_mb": 8,
            "store_block_cache_mb": 32,
        }
    )
    app = build_app(settings, create_topics=False)
    got = {
        name: (
            o.write_buffer_size,
            o.max_write_buffer_number,
            o.block_cache_size,
            app.tables[name].data.use_rocksdict,
        )
        for name in ("files", "pruned")
        for o in [app.tables[name].data.rocksdb_options]
    }
    assert got == {
        "files": (8 << 20, 2, 32 << 20, True),
        "pruned": (8 << 20, 2, 32 << 20, True),
    }


def test_the_memory_store_takes_no_rocksdb_options(tmp_path: Path):
    settings = Settings(tracker={"data_dir": tmp_path / "tracker", "store_url": "memory://"})
    app = build_app(settings, create_topics=False)
    assert [app.tables[n].options for n in ("files", "pruned")] == [None, None]
