"""Helpers shared by the extract unit tests (``test_extract_*.py``): NAS files, candidates,
an ExtractService on FakeHdfs with a fake producer."""

from __future__ import annotations

import os
import unicodedata
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from tests.support.factories import FS_B
from tests.support.fakes import FakeProducer
from tests.support.hdfs_fake import FakeHdfs

from ferry.core.events import FileFailed
from ferry.core.wire.avro import EventCodec
from ferry.datasets.spec import DatasetSpec
from ferry.settings import Settings, get_settings
from ferry.stages.extract.handlers import ExtractDeps
from ferry.stages.extract.scanner import Candidate, NasScanner
from ferry.stages.extract.service import ExtractService

HEADER = b"year,month,day,dep_time\n"
DATA = HEADER + b"2013,1,1,517\n2013,1,1,533\n"
LANDING = "/ferry/landing"
#: A name with spaces, ``%``, ``=``, ``#`` and non-ASCII letters (docs/field-cases.md, C07).
ODD = "flights_données été 100%=#x.csv"

#: ``flights_café.csv`` written by a Latin-1 client: Python lists it with a surrogate escape.
LATIN1 = os.fsdecode(b"flights_caf\xe9.csv")


def with_(spec: DatasetSpec, **update: Any) -> DatasetSpec:
    """``spec`` with the fields in ``update`` replaced."""
    return spec.model_copy(update=update)


def drop(
    nas: Path, name: str, data: bytes, subdir: str = "flights", mtime_ns: int | None = None
) -> Path:
    """Write ``data`` to ``nas/subdir/name`` (parents created), with ``mtime_ns`` if given."""
    path = nas / subdir / name
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(data)
    if mtime_ns is not None:
        os.utime(path, ns=(mtime_ns, mtime_ns))
    return path


def names(cands: list[Candidate]) -> list[str]:
    """The candidates' NAS-relative (NFC) names, in order."""
    return [c.relative for c in cands]


def candidate(
    tmp_path: Path, spec: DatasetSpec, name: str, data: bytes, mtime_ns: int | None = None
) -> Candidate:
    """Drop ``name`` under ``tmp_path`` and make it the candidate the scanner would hand over."""
    path = drop(tmp_path, name, data, mtime_ns=mtime_ns)
    st = path.stat()
    relative = unicodedata.normalize("NFC", f"{spec.nas.subdir}/{name}")
    return Candidate(path, spec, relative, st.st_size, st.st_mtime_ns)


def deps(hdfs: FakeHdfs) -> ExtractDeps:
    """extract_file's dependencies on ``hdfs`` (cluster B at FS_B, landing root LANDING)."""
    return ExtractDeps(hdfs, LANDING, FS_B, chunk_bytes=7)  # tiny chunks: many writes


def name_of(nbytes: int, letter: str = "x") -> str:
    """``flights_<letters>.csv`` of exactly ``nbytes`` bytes of UTF-8."""
    fill = nbytes - len("flights_.csv")
    each = len(letter.encode())
    return "flights_" + letter * (fill // each) + "x" * (fill % each) + ".csv"


def svc_settings(nas: Path, after: str = "archive", workers: int = 4) -> Settings:
    """Settings for an ExtractService on ``nas``: topic prefix ``unit``, 3 fast attempts."""
    base = get_settings()
    return base.model_copy(
        update={
            "retry": base.retry.model_copy(
                update={"max_attempts": 3, "initial_backoff_s": 0.001, "max_backoff_s": 0.002}
            ),
            "kafka": base.kafka.model_copy(update={"topic_prefix": "unit"}),
            "paths": base.paths.model_copy(update={"nas_dir": nas}),
            "extract": base.extract.model_copy(update={"after_extract": after, "workers": workers}),
        }
    )


def service(
    tmp_path: Path,
    spec: DatasetSpec,
    producer: FakeProducer,
    codec: EventCodec,
    after: str = "archive",
    workers: int = 4,
) -> tuple[ExtractService, FakeHdfs]:
    """An ExtractService on ``tmp_path/nas`` for ``spec`` alone, landing on a new FakeHdfs."""
    hdfs = FakeHdfs("b")
    nas = tmp_path / "nas"
    svc = ExtractService(
        svc_settings(nas, after, workers),
        NasScanner(nas, {spec.name: spec}),
        deps(hdfs),
        producer,
        codec,
    )
    return svc, hdfs


@dataclass(frozen=True)
class Extract:
    """One test's NAS at ``tmp_path/nas`` (the ``ex`` fixture): drop files on it, then build an
    ExtractService over it (:func:`service`) for ``spec`` (the repository's flights definition)."""

    tmp_path: Path
    spec: DatasetSpec
    codec: EventCodec

    @property
    def nas(self) -> Path:
        return self.tmp_path / "nas"

    def drop(self, name: str, data: bytes, **kw: Any) -> Path:
        """:func:`drop` on this NAS (``subdir``, ``mtime_ns`` as there)."""
        return drop(self.nas, name, data, **kw)

    def service(
        self, producer: FakeProducer, *, spec: DatasetSpec | None = None, **kw: Any
    ) -> tuple[ExtractService, FakeHdfs]:
        """:func:`service` on this NAS for ``spec`` (default :attr:`spec`); ``after``,
        ``workers`` as there."""
        return service(self.tmp_path, spec or self.spec, producer, self.codec, **kw)


def take(svc: ExtractService, t0: float = 0.0) -> Candidate:
    """The one candidate three scans 2 s apart from ``t0`` find (stable policy)."""
    for t in (t0, t0 + 2.0, t0 + 4.0):
        got = svc.scanner.scan(t)
    [cand] = got
    return cand


def failed_events(codec: EventCodec, producer: FakeProducer) -> list[FileFailed]:
    """The FileFailed events ``producer`` had acknowledged on ``unit.failed``, decoded."""
    out = [codec.decode(v) for t, _, v in producer.acked if t == "unit.failed"]
    assert all(isinstance(e, FileFailed) for e in out)
    return out  # type: ignore[return-value]
