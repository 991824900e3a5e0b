"""The per-service sections of Ferry's settings: extract, transfer, the batching stages
(transform, load) and the tracker (:mod:`ferry.core.sections` holds the clusters' and clients').
"""

from __future__ import annotations

from pathlib import Path
from typing import Literal

from pydantic import Field, SecretStr

from ferry.core.sections import REPO_ROOT, _Frozen


class TransferSettings(_Frozen):
    """The transfer service (B → A over WebHDFS). Env: ``FERRY_TRANSFER__<FIELD>``.

    Cluster A is a separate cluster behind a network path Ferry does not own: NameNode restarts,
    failovers and gateway blips of a minute or two are routine there, and every file in flight
    would fail the same way, so transfer retries a transient failure for at least
    ``outage_window_s`` before quarantining the file (``retry.max_attempts`` alone gives up
    after ~15 s of backoff). The consumer stays in its group meanwhile (the runner pauses and
    polls).
    """

    outage_window_s: float = Field(
        default=150.0,
        description=(
            "Shortest time a transient failure is retried before quarantine, s "
            "(covers a 2-minute outage)."
        ),
    )
    max_backoff_s: float = Field(
        default=10.0,
        description="Longest single backoff of transfer, s: resumes within this after A is back.",
    )


class ExtractSettings(_Frozen):
    """The extract service (NAS poller). Env: ``FERRY_EXTRACT__<FIELD>``."""

    poll_interval_s: float = Field(
        default=1.0, description="Seconds between two scans of the NAS directory."
    )
    after_extract: Literal["archive", "delete", "keep"] = Field(
        default="archive",
        description=(
            "What happens to a NAS file once its FileExtracted is acknowledged: moved under "
            "<nas_dir>/.ferry/archive/, deleted, or kept (kept files are re-extracted after a "
            "restart; harmless, every stage is idempotent on file_id)."
        ),
    )
    detection: Literal["auto", "inotify", "poll"] = Field(
        default="auto",
        description=(
            "How extract learns that a NAS file is finished (case C09): inotify events (a file "
            "closed after writing, or renamed from a hidden name, is taken at once; polling goes "
            "on as the safety net), or polling alone with the dataset's stable-size check. auto: "
            "inotify on a local Linux file system, polling on NFS/SMB/FUSE mounts, where writes "
            "made on another host raise no event (ferry.stages.extract.watcher)."
        ),
    )
    close_settle_s: float = Field(
        default=0.5,
        ge=0,
        description=(
            "Under inotify detection, seconds a file closed after writing must stay unwritten "
            "before it is taken (a writer that reopens it at once is not cut between rounds); "
            "a file renamed from a hidden name is taken at once."
        ),
    )
    chunk_bytes: int = Field(default=1 << 20, description="Read/upload chunk size, bytes.")
    workers: int = Field(
        default=4,
        ge=1,
        description=(
            "Files landed at once. Each landing is a few WebHDFS round trips, so one at a time "
            "left transform waiting (demo: ~3 files/s with 1); each file stays independent."
        ),
    )
    follow_symlinks: bool = Field(
        default=False,
        description=(
            "Follow a symbolic link in a dataset directory whose real path stays inside the NAS "
            "root; off: refused (symlink_refused). A link leaving the root or looping is always "
            "refused (docs/field-cases.md C15, docs/security.md)."
        ),
    )
    refuse_hardlinks: bool = Field(
        default=False,
        description=(
            "Refuse a NAS file with more than one hard link (hardlink_refused): its content is "
            "shared with another path, perhaps outside the share (C15)."
        ),
    )


class BatchSettings(_Frozen):
    """A batching stage (transform, load): one Spark job per batch of files."""

    batch_size: int = Field(
        default=256,
        description=(
            "Most files in one Spark job. A job's fixed cost dominates small daily files "
            "(measured on the 2-core machine: spark-submit of one daily file 12.7-14.6 s, one job "
            "over 365 files 18.6 s), so batches are big."
        ),
    )
    batch_wait_s: float = Field(
        default=3.0,
        description="Longest a batch gathers after its first file, s; it starts sooner when no "
        "further file arrives within the stage's linger (0.2 s): a lone file does not wait.",
    )
    takeover_batch: bool = Field(
        default=True,
        description=(
            "Hot standby: files of partitions this instance takes over from one that died or left "
            "run as a second batch beside a running one (same Spark session), not after it "
            "(ferry.core.runner; measured in docs/operations.md, Hot standby)."
        ),
    )


class LoadSettings(BatchSettings):
    """The load stage. Env: ``FERRY_LOAD__<FIELD>``."""

    target_file_mb: int = Field(
        default=128,
        ge=1,
        description=(
            "Size compaction's merged Parquet files aim at, MiB: files under this size are merged "
            "into files of at most this size (docs/hive-layout.md, Compaction)."
        ),
    )
    compact_max_files: int = Field(
        default=32,
        ge=2,
        description=(
            "Most data files a Hive partition keeps: load moves each file's rows in as files of "
            "their own; when a partition it touched holds more, the service's compactor (a "
            "background thread) merges its smallest files until about half this many are left "
            "(docs/hive-layout.md, Compaction)."
        ),
    )
    compact: bool = Field(
        default=True,
        description="Run the compactor in the load service (false: only `ferry compact`).",
    )


class TrackerSettings(_Frozen):
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
    data_dir: Path = Field(
        default=REPO_ROOT / "var" / "tracker",
        description="Faust data directory (one sub-directory per topic prefix).",
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


class SuperviseSettings(_Frozen):
    """``ferry up``: the five services under supervisord. Env: ``FERRY_SUPERVISE__<FIELD>``.

    A service that exits after running ``start_secs`` is restarted at once; one that exits sooner
    is a failed start, retried after 1 s, 2 s, 3 s, … (supervisord's backoff grows by one second
    per attempt) until ``start_retries`` retries failed, then it stays FATAL (the crash-loop
    limit) and ``ferry up`` / ``ferry ps`` name it.
    """

    home: Path = Field(
        default=REPO_ROOT / "var",
        description=(
            "Where supervisord keeps its files: conf/supervisord.conf, run/supervisord.sock, "
            "run/supervisord.pid, log/supervisord.log and one log/<process>.log per service."
        ),
    )
    start_secs: int = Field(
        default=10, ge=1, description="Seconds a service must stay up to count as started."
    )
    start_retries: int = Field(
        default=3, ge=0, description="Failed starts in a row retried before FATAL (crash loop)."
    )
    stop_margin_s: int = Field(
        default=15,
        ge=1,
        description=(
            "stopwaitsecs = kafka.shutdown_grace_s + this, s: after SIGTERM a service may finish "
            "its running record and leave its group before supervisord sends SIGKILL."
        ),
    )
    rpc_timeout_s: float = Field(
        default=10.0, description="Timeout of one XML-RPC call to supervisord, s."
    )
    health_timeout_s: float = Field(
        default=5.0, description="Timeout of one health probe (Kafka admin, HTTP), s."
    )
