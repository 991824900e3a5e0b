"""The ``tracker`` section: the tracker service."""

from __future__ import annotations

from pathlib import Path

from pydantic import Field, SecretStr

from ferry.settings.base import Frozen, WorkPath


class TrackerSettings(Frozen):
    """The tracker service (per-file state, stuck detection, HTTP). Env: ``FERRY_TRACKER__<FIELD>``.

    A file is *stuck* when it has waited in a stage (since the event that handed it to that stage)
    longer than that stage's SLA in ``sla_s``.
    """

    web_host: str = Field(
        default="127.0.0.1", description="Address the tracker's HTTP server binds."
    )
    web_port: int = Field(
        default=16066, description="Tracker HTTP port: /files, /stuck, /metrics, /."
    )
    sla_s: dict[str, float] = Field(
        default_factory=lambda: {"transform": 1800.0, "transfer": 900.0, "load": 1800.0},
        description="Longest time a file may wait in a stage (transform, transfer, load), s.",
    )
    data_dir: WorkPath = Field(
        default=Path("var") / "tracker",
        description="Faust data directory (one sub-directory per topic prefix). Default: "
        "``<var_dir>/tracker``.",
    )
    lag_refresh_s: float = Field(
        default=15.0,
        description="How often the tracker reads consumer lag (/metrics, /healthz), s.",
    )
    health_stall_s: float = Field(
        default=120.0,
        description="/healthz turns 503 when the tracker is behind and consumed nothing this "
        "long, s.",
    )
    health_broker_s: float = Field(
        default=60.0,
        description="/healthz turns 503 when no lag read reached the broker for this long, s.",
    )
    store_url: str = Field(
        default="rocksdb://",
        description="Faust table store: rocksdb:// (RocksDB via rocksdict, kept in data_dir) or "
        "memory:// (rebuilt from the changelog at every start).",
    )
    store_write_buffer_mb: int = Field(
        default=4,
        ge=1,
        description="RocksDB write buffer (memtable) of each table partition, MiB; two are kept. "
        "faust's default, three of 64 MiB, let the tracker's memory grow about 5 KB per file "
        "carried until they filled (docs/operations.md, 'Long soak').",
    )
    store_block_cache_mb: int = Field(
        default=16,
        ge=1,
        description="RocksDB block cache of each table partition, MiB (faust's default: 2 GiB).",
    )
    loaded_retention_s: float = Field(
        default=7 * 86400.0,
        description="Loaded files' detail is dropped this long after their load, s (their "
        "counts are kept); 0 keeps every file.",
    )
    retention_sweep_s: float = Field(
        default=60.0, description="Least time between two retention sweeps of a partition, s."
    )
    page_refresh_s: float = Field(
        default=5.0, description="How often the HTML pages refresh their figures, s."
    )
    token: SecretStr | None = Field(
        default=None,
        description=(
            "Bearer token every request must carry (Authorization: Bearer <token>) except "
            "/healthz and /static/; none: open (bind 127.0.0.1 then). docs/security.md."
        ),
    )
    token_file: Path | None = Field(
        default=None,
        description="File holding the token instead (mode 0600, refused otherwise).",
    )
