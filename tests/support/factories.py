"""Test data: manifests and events with exact, reproducible values, for every test tier.

A manifest's ``file_id`` is always derived from its dataset and sha256, as extract derives it
(``ferry.core.events.derive_file_id``), so a test can recompute it. Each factory fills the fields a
test does not care about with fixed values; keyword ``fields`` override any ``FileManifest`` field.
"""

from __future__ import annotations

from dataclasses import replace
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from ferry.core.events import FileExtracted, FileFailed, FileManifest, FileTransferred
from ferry.core.events import failed as event_failed
from ferry.core.identity import derive_file_id
from ferry.datasets.spec import DatasetSpec

#: The default creation (and update) time of every factory's manifest.
T0 = datetime(2024, 1, 2, 3, 4, 5, tzinfo=UTC)
#: Cluster A's and cluster B's file-system URIs as the unit tests write them.
FS_A = "hdfs://nn-a:28020"
FS_B = "hdfs://nn-b:18020"


def numbered_sha(n: int) -> str:
    """A sha256 hex digest made of the byte ``n`` (0 to 255) 32 times, e.g. ``"0303…03"``."""
    return f"{n:02x}" * 32


def named_sha(name: str) -> str:
    """A sha256 hex digest made of ``name``'s UTF-8 bytes in hex, repeated and cut to 64 digits."""
    return (name.encode().hex() * 64)[:64]


def manifest(
    dataset: str = "flights", sha: str = "ab" * 32, *, at: datetime = T0, **fields: Any
) -> FileManifest:
    """A manifest of ``dataset`` with sha256 ``sha`` and ``file_id = derive_file_id(dataset, sha)``.

    Defaults: created_at = updated_at = ``at``; source_path ``<dataset>/<dataset>.csv``; 10 bytes;
    trace_id 32 ``t``; no URIs or row counts; attempt 1. ``fields`` override any field.
    """
    values: dict[str, Any] = {
        "source_path": f"{dataset}/{dataset}.csv",
        "size_bytes": 10,
        "created_at": at,
        "updated_at": at,
        "trace_id": "t" * 32,
        **fields,
    }
    return FileManifest(file_id=derive_file_id(dataset, sha), dataset=dataset, sha256=sha, **values)


def numbered(dataset: str, n: int, name: str | None = None, **fields: Any) -> FileManifest:
    """File number ``n`` (0 to 255) of ``dataset``: sha256 ``numbered_sha(n)``, trace_id ``n`` in
    32 hex digits, source_path ``<dataset>/<name>`` (name ``<dataset>_<n>.csv`` by default),
    ``100 + n`` bytes; ``fields`` as for ``manifest``."""
    return manifest(
        dataset,
        numbered_sha(n),
        **{
            "source_path": f"{dataset}/{name or f'{dataset}_{n}.csv'}",
            "size_bytes": 100 + n,
            "trace_id": f"{n:032x}",
            **fields,
        },
    )


def named(dataset: str, name: str, **fields: Any) -> FileManifest:
    """The file ``<dataset>/<name>.csv``: sha256 ``named_sha(name)``; ``fields`` as for
    ``manifest``."""
    return manifest(dataset, named_sha(name), **{"source_path": f"{dataset}/{name}.csv", **fields})


def extracted(dataset: str, n: int, name: str | None = None, **fields: Any) -> FileExtracted:
    """``numbered(dataset, n, name, **fields)`` as extract emits it: one URI, ``landing``, at
    ``<FS_B>/ferry/landing/<dataset>/<file_id>/<name>``."""
    m = numbered(dataset, n, name, **fields)
    base = m.source_path.split("/", 1)[1]
    return FileExtracted(
        replace(m, uris={"landing": f"{FS_B}/ferry/landing/{dataset}/{m.file_id}/{base}"})
    )


def transferred(dataset: str, n: int, rows_out: int | None = 5, **fields: Any) -> FileTransferred:
    """``numbered(dataset, n, **fields)`` as transfer emits it: ``rows_out`` rows in and out, none
    rejected, one URI, ``incoming``, at ``<FS_A>/ferry/incoming/<dataset>/<file_id>``."""
    m = numbered(
        dataset, n, **{"rows_in": rows_out, "rows_out": rows_out, "rows_rejected": 0, **fields}
    )
    return FileTransferred(
        replace(m, uris={"incoming": f"{FS_A}/ferry/incoming/{dataset}/{m.file_id}"})
    )


def failed(
    stage: str, manifest: FileManifest | None, *, at: datetime = T0, **fields: Any
) -> FileFailed:
    """``ferry.core.events.failed()`` of ``stage`` for ``manifest`` (None: a record without one),
    failed at ``at``; defaults reason ``hdfs_timeout``, error ``boom``, attempt 6; ``fields`` set
    those and the other ``FileFailed`` fields (source_topic, raw_key, ...)."""
    values: dict[str, Any] = {"reason": "hdfs_timeout", "error": "boom", "attempt": 6, **fields}
    return event_failed(stage=stage, manifest=manifest, failed_at=at, **values)


def undecodable(
    stage: str,
    source: tuple[str, int, int],
    raw_value: bytes = b"not-avro",
    *,
    raw_key: bytes | None = None,
    error: str = "not Avro",
    at: datetime = T0,
) -> FileFailed:
    """The ``FileFailed`` a stage emits for a record it cannot decode: reason ``undecodable``,
    attempt 1, no manifest, ``source`` = (topic, partition, offset) of the record, its raw bytes."""
    topic, partition, offset = source
    return failed(
        stage,
        None,
        reason="undecodable",
        error=error,
        attempt=1,
        at=at,
        source_topic=topic,
        source_partition=partition,
        source_offset=offset,
        raw_key=raw_key,
        raw_value=raw_value,
    )


def dataset_spec(name: str, columns: dict[str, str], **sections: Any) -> DatasetSpec:
    """A dataset ``name`` read from NAS ``<name>/*.csv`` with ``columns`` (name → type, in order);
    ``sections`` add the other top-level keys of a dataset definition (csv, validation, hive…)."""
    return DatasetSpec.model_validate(
        {
            "name": name,
            "nas": {"subdir": name, "pattern": "*.csv"},
            "columns": [{"name": n, "type": t} for n, t in columns.items()],
            **sections,
        }
    )


def put(path: Path, data: bytes) -> str:
    """Write ``data`` at ``path`` (parents created); returns the path as a string."""
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(data)
    return str(path)
