"""The per-stage sections: extract, transfer and the batching stages (transform, load)."""

from __future__ import annotations

from typing import Literal

from pydantic import Field

from ferry.settings.base import Frozen


class TransferSettings(Frozen):
    """The transfer service (B → A over WebHDFS). Env: ``FERRY_TRANSFER__<FIELD>``.

    Cluster A is a separate cluster behind a network path Ferry does not own: NameNode restarts,
    failovers and gateway blips of a minute or two are routine there, and every file in flight
    would fail the same way. A cluster out of reach (a NameNode or DataNode refusing, resetting or
    silent) is held as a condition of that cluster for ``retry.condition_window_s``, as in every
    stage (:func:`ferry.errors.outage_condition`); any other transient failure (a checksum
    mismatch, a tree staged anew meanwhile) is retried for at least ``outage_window_s`` before
    the file is quarantined (``retry.max_attempts`` alone gives up after ~15 s of backoff). The
    consumer stays in its group meanwhile (the runner pauses and polls).
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
    parallel_files: int = Field(
        default=4,
        ge=1,
        description=(
            "Files copied at once by one transfer instance (each file's data files are copied "
            "4 at a time besides). A small file's copy is a dozen WebHDFS round trips waiting on "
            "the NameNodes and DataNodes, not on this host's CPU: one at a time, transfer "
            "carried 1.5 small files/s on the busy 2-core machine of the long soak and fell "
            "behind transform (docs/operations.md, 'Long soak')."
        ),
    )
    batch_size: int = Field(
        default=32,
        ge=1,
        description=(
            "Most files taken from the topic for one round of parallel copies; the round "
            "gathers at most batch_wait_s after its first file (a lone file starts at once)."
        ),
    )
    batch_wait_s: float = Field(
        default=0.5, ge=0, description="Longest a round gathers files after its first one, s."
    )


class ExtractSettings(Frozen):
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
    hold_open_files: bool = Field(
        default=True,
        description=(
            "Never take a NAS file while a process holds it open for writing, whatever the "
            "stable window says: a write seen by inotify and not closed since, or a write "
            "descriptor in /proc/<pid>/fdinfo (issue 33; ferry.stages.extract.writers). Sees "
            "this host's processes only: on NFS/SMB a writer on another host stays invisible."
        ),
    )
    watch_after_s: float = Field(
        default=86400.0,
        ge=0,
        description=(
            "Seconds a file moved under <nas_dir>/.ferry/ (archive, empty) stays watched for "
            "writes after it was taken: a change is reported (changed_after_extract) and its "
            "new bytes flow as a new version (issue 33; ferry.stages.extract.afterwards). 0: "
            "not watched."
        ),
    )
    watch_check_s: float = Field(
        default=10.0,
        gt=0,
        description="Seconds between two checks (size, mtime) of a watched moved file.",
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


class BatchSettings(Frozen):
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
            "(ferry.core.runtime.runner; measured in docs/operations.md, Hot standby)."
        ),
    )


class TransformSettings(BatchSettings):
    """The transform stage. Env: ``FERRY_TRANSFORM__<FIELD>``."""

    warm_up_datasets: int = Field(
        default=4,
        ge=0,
        description=(
            "Datasets (in name order) that get a synthetic batch before the stage joins its "
            "group (ferry.stages.transform.warmup); 0 builds and warms the session only. The first "
            "batch pays the JVM's class loading once for every dataset and each schema's code "
            "generation for its own, so the warm-up's cost, paid at every start and takeover, "
            "stays bounded when many datasets are defined (measured in docs/operations.md, "
            "First batch after a start)."
        ),
    )
    share_files: bool = Field(
        default=True,
        description=(
            "A batch of two files or more of a partitioned table writes ONE data file per "
            "partition holding every file's rows (shared by the batch's files), instead of one "
            "per file and partition: the batch's HDFS writes, cross-cluster copies and moves "
            "into the table go with the partitions it touches, not with files × partitions "
            "(issue 45, case C23). Replay and removal stay per file (the load rewrites a shared "
            "file without the rows of a file replaced). false: every file keeps files of its own."
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
