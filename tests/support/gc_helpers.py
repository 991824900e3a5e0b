"""Helpers of the gc unit tests: an in-memory gc topic with committed offsets (the Kafka calls a
:class:`~ferry.gc.sweeper.Sweeper` makes), and a pipeline's copies laid out in every zone on
:class:`~tests.support.hdfs_fake.FakeHdfs` clusters and a NAS directory."""

from __future__ import annotations

import os
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field, replace
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
from tests.support.factories import FS_A, FS_B, numbered
from tests.support.hdfs_fake import FakeHdfs

from ferry.core.events import FileManifest
from ferry.core.kafka.admin import ScannedRecord
from ferry.core.wire.avro import EventCodec
from ferry.gc import sweeper as sweeper_module
from ferry.gc.metrics import GcMetrics
from ferry.gc.plan import retention_classes
from ferry.gc.remover import Remover
from ferry.gc.sweeper import Sweeper
from ferry.settings import Settings
from ferry.settings.retention import RetentionSettings

#: Day 0 of the tests' calendar; events and copies are dated from it.
T0 = datetime(2026, 1, 1, tzinfo=UTC)
DAY_MS = 86_400_000


def ms(at: datetime) -> int:
    return int(at.timestamp() * 1000)


@dataclass
class FakeTopic:
    """The gc topic in memory: records per partition (timestamp ms, value) and committed offsets
    per group; its methods stand in for :mod:`ferry.core.kafka.admin`'s calls."""

    name: str = "p.gc"
    partitions: int = 2
    records: dict[int, list[tuple[int, bytes, bytes | None]]] = field(default_factory=dict)
    committed: dict[str, dict[int, int]] = field(default_factory=dict)
    low: dict[int, int] = field(default_factory=dict)

    def append(self, partition: int, ts_ms: int, value: bytes, key: bytes | None = None) -> None:
        """Append a record (``key``: the file id, as the stages key their events)."""
        self.records.setdefault(partition, []).append((ts_ms, value, key))

    def install(self, monkeypatch: pytest.MonkeyPatch) -> None:
        """Route the sweeper's Kafka calls here."""
        m = sweeper_module
        monkeypatch.setattr(m, "partitions_of", lambda a, k, t: list(range(self.partitions)))
        monkeypatch.setattr(m, "watermarks", self._watermarks)
        monkeypatch.setattr(m, "list_offsets", self._list_offsets)
        monkeypatch.setattr(m, "committed_offsets", self._committed)
        monkeypatch.setattr(m, "alter_offsets", self._alter)
        monkeypatch.setattr(m, "scan", self._scan)

    def _watermarks(self, admin: Any, kafka: Any, topic: str, parts: list[int]) -> dict[int, Any]:
        return {p: (self.low.get(p, 0), len(self.records.get(p, []))) for p in parts}

    def _list_offsets(self, admin: Any, kafka: Any, topic: str, specs: Mapping[int, Any]) -> Any:
        out = {}
        for p, spec in specs.items():
            recs = self.records.get(p, [])
            out[p] = next((i for i, (ts, *_) in enumerate(recs) if ts >= spec.timestamp), -1)
        return out

    def _committed(self, admin: Any, kafka: Any, group: str, topic: str, parts: list[int]) -> Any:
        return {p: self.committed.get(group, {}).get(p) for p in parts}

    def _alter(
        self, admin: Any, kafka: Any, group: str, topic: str, new: Mapping[int, int]
    ) -> None:
        self.committed.setdefault(group, {}).update(new)

    def _scan(
        self, kafka: Any, topic: str, bounds: Mapping[int, tuple[int, int]], **_: Any
    ) -> Iterator[ScannedRecord]:
        for p, (lo, hi) in sorted(bounds.items()):
            for off in range(lo, hi):
                ts, value, key = self.records[p][off]
                yield ScannedRecord(topic, p, off, ts, key, value)


@dataclass
class Copies:
    """One pipeline's zones: cluster B (landing, staging, rejects), cluster A (incoming) and the
    NAS, under roots ``/<prefix>/<zone>``."""

    nas: Path
    prefix: str = "ferry"
    b: FakeHdfs = field(default_factory=lambda: FakeHdfs("b"))
    a: FakeHdfs = field(default_factory=lambda: FakeHdfs("a"))

    def root(self, zone: str) -> str:
        return f"/{self.prefix}/{zone}"

    def lay(self, m: FileManifest, written: datetime, *, rejects: bool = True) -> FileManifest:
        """Write ``m``'s copies in every HDFS zone and its archived NAS file, all dated
        ``written``; return the manifest with the URIs a FileLoaded carries."""
        name = m.source_path.rsplit("/", 1)[-1]
        d = f"{m.dataset}/{m.file_id}"
        uris = {
            "landing": f"{FS_B}{self.root('landing')}/{d}/{name}",
            "staging": f"{FS_B}{self.root('staging')}/{d}",
            "incoming": f"{FS_A}{self.root('incoming')}/{d}",
        }
        self.put(self.b, f"{self.root('landing')}/{d}/{name}", b"x" * m.size_bytes, written)
        self.put(self.b, f"{self.root('staging')}/{d}/part-0.parquet", b"s" * 7, written)
        self.put(self.a, f"{self.root('incoming')}/{d}/part-0.parquet", b"s" * 7, written)
        if rejects:
            uris["rejects"] = f"{FS_B}{self.root('rejects')}/{d}"
            self.put(self.b, f"{self.root('rejects')}/{d}/part-0.parquet", b"r" * 3, written)
        self.archive(m, name, written)
        return replace(m, uris=uris, source_mtime=written)

    def archive(self, m: FileManifest, archived_as: str, mtime: datetime) -> Path:
        """The NAS file of ``m`` as extract archives it, named ``archived_as``."""
        path = self.nas / ".ferry" / "archive" / m.dataset / archived_as
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(b"x" * m.size_bytes)
        os.utime(path, ns=(ms(mtime) * 1_000_000, ms(mtime) * 1_000_000))
        return path

    @staticmethod
    def put(port: FakeHdfs, path: str, data: bytes, at: datetime) -> None:
        port.mkdirs(path.rsplit("/", 1)[0])
        port.files[path] = data
        port.set_mtime(path, ms(at))

    def everything(self) -> set[str]:
        """Every file of both clusters (``b:/path``, ``a:/path``) and of the NAS (``nas:rel``)."""
        out = {f"b:{p}" for p in self.b.files} | {f"a:{p}" for p in self.a.files}
        return out | {
            f"nas:{p.relative_to(self.nas)}" for p in self.nas.rglob("*") if not p.is_dir()
        }

    def remover(self, retention: RetentionSettings, metrics: GcMetrics) -> Remover:
        return Remover(
            hdfs={"a": self.a, "b": self.b},
            roots={z: self.root(z) for z in ("landing", "staging", "rejects", "incoming")},
            nas_dir=self.nas,
            markers={"flights": None, "weather": ".done"},
            retention=retention,
            metrics=metrics,
        )


def sweepers(
    retention: RetentionSettings, topic: FakeTopic, codec: EventCodec, remover: Remover
) -> list[Sweeper]:
    """One sweeper per retention class, as the gc service builds them."""
    kafka = Settings().kafka.model_copy(update={"topic_prefix": "p"})
    return [
        Sweeper(k, kafka, retention, None, topic.name, codec, remover, remover.metrics)  # type: ignore[arg-type]
        for k in retention_classes(retention)
    ]


def file(dataset: str, n: int, **fields: Any) -> FileManifest:
    """File ``n`` of ``dataset`` (:func:`tests.support.factories.numbered`), 100 + n bytes."""
    return numbered(dataset, n, **fields)


def after(days: float) -> datetime:
    return T0 + timedelta(days=days)


def sample(metrics: GcMetrics, name: str, **labels: str) -> float:
    """A metric's value now (0 when never set)."""
    value = metrics.registry.get_sample_value(name, labels)
    return 0.0 if value is None else value
