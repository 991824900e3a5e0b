"""extract: ExtractService on errors: HDFS errors, changed or vanished files, one file's error
never ends the service, a dataset directory that cannot be created.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from tests.support.extract_helpers import (
    DATA,
    HEADER,
    LATIN1,
    Extract,
    drop,
    failed_events,
    name_of,
    service,
    svc_settings,
    take,
    with_,
)
from tests.support.fakes import FakeProducer

from ferry.core.events import FileExtracted
from ferry.core.wire.avro import EventCodec
from ferry.datasets.fields import FinishedPolicy
from ferry.datasets.spec import DatasetSpec
from ferry.errors import ConfigError, HdfsPathExists, HdfsUnavailable
from ferry.stages.extract.handlers import ExtractDeps
from ferry.stages.extract.scanner import Candidate


def test_service_quarantines_a_permanent_hdfs_error_and_moves_the_file(ex: Extract) -> None:
    """The failure names the file by its file id, as every other stage's does, once extract
    hashed it (issue 46: it carried only the NAS path), and keeps the NAS path."""
    import hashlib

    from ferry.core.identity import derive_file_id

    ex.drop("flights_1.csv", DATA)
    producer = FakeProducer()
    svc, hdfs = ex.service(producer)
    hdfs.fail("create", HdfsPathExists("refused"), times=99)
    svc.handle(take(svc))
    [(topic, key, value)] = producer.acked
    ev = ex.codec.decode(value)
    file_id = derive_file_id("flights", hashlib.sha256(DATA).hexdigest())
    assert (topic, key, ev.reason, ev.attempt) == (
        "unit.failed",
        file_id.encode(),
        "hdfs_exists",
        3,
    )
    assert (ev.file_id, ev.nas_path, ev.nas_dataset) == (
        file_id,
        "flights/flights_1.csv",
        "flights",
    )
    assert ev.error.startswith("flights/flights_1.csv: ")
    assert [op for op, _ in hdfs.calls].count("create") == 1  # permanent: not retried
    assert (ex.nas / ".ferry" / "failed" / "flights" / "flights_1.csv").read_bytes() == DATA


def test_service_retries_a_transient_hdfs_error(ex: Extract) -> None:
    ex.drop("flights_1.csv", DATA)
    producer = FakeProducer()
    svc, hdfs = ex.service(producer)
    hdfs.fail("create", HdfsUnavailable("reset"), after_bytes=5, times=2)
    svc.handle(take(svc))
    assert [op for op, _ in hdfs.calls].count("create") == 3
    assert list(hdfs.files.values()) == [DATA]
    assert isinstance(ex.codec.decode(producer.acked[0][2]), FileExtracted)


def test_service_skips_a_file_that_changed_since_the_scan(ex: Extract) -> None:
    path = ex.drop("flights_1.csv", HEADER)
    producer = FakeProducer()
    svc, hdfs = ex.service(producer)
    cand = take(svc)
    with path.open("ab") as fh:
        fh.write(b"2013,1,1,1\n")
    svc.handle(cand)
    assert (producer.acked, hdfs.files, path.exists(), (ex.nas / ".ferry").exists()) == (
        [],
        {},
        True,
        False,
    )
    # forgotten: it is taken again, whole, once stable
    [again] = [c for t in (10.0, 12.0, 14.0) for c in svc.scanner.scan(t)]
    assert again.size == len(HEADER) + 11


def test_service_forgets_a_vanished_file(ex: Extract) -> None:
    path = ex.drop("flights_1.csv", DATA)
    producer = FakeProducer()
    svc, hdfs = ex.service(producer)
    cand = take(svc)
    path.unlink()
    svc.handle(cand)
    assert (producer.acked, hdfs.files, producer.flushes) == ([], {}, 0)


def test_build_skips_a_dataset_whose_directory_is_a_plain_file(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    import ferry.stages.extract.service as service_mod

    monkeypatch.setattr(service_mod, "ensure_topics", lambda *a, **kw: None)
    monkeypatch.setattr(service_mod, "build_admin", lambda *a: None)
    monkeypatch.setattr(service_mod, "build_producer", lambda *a: FakeProducer())
    nas = tmp_path / "nas"
    nas.mkdir()
    (nas / "flights").write_bytes(b"stray")
    svc = service_mod.build(svc_settings(nas))
    assert (nas / "flights").read_bytes() == b"stray"
    assert (nas / "weather").is_dir()
    [msg] = [r.getMessage() for r in caplog.records if r.levelname == "ERROR"]
    assert msg == (
        f"extract: dataset 'flights' skipped: its NAS sub-directory {nas / 'flights'} cannot "
        "be created (FileExistsError: File exists); if a plain file has that name, move it "
        "away and restart"
    )
    assert svc.run_once() == 0  # the scan goes on (the stray file is warned about once)


# -- ExtractService: one file's error never ends the service ----------------------------------


def test_service_quarantines_a_non_utf8_name_and_the_others_flow(ex: Extract) -> None:
    spec = with_(ex.spec, finished=FinishedPolicy(policy="marker"))
    for n in (LATIN1, "flights_1.csv"):
        ex.drop(n, DATA)
        ex.drop(n + ".done", b"")
    producer = FakeProducer()
    svc, hdfs = ex.service(producer, spec=spec)
    assert svc.run_once() == 2
    [failed] = failed_events(ex.codec, producer)
    assert (failed.reason, failed.raw_key) == ("bad_file_name", b"flights/flights_caf\xe9.csv")
    assert b"flights/flights_caf\\xe9.csv" in [k for _, k, _ in producer.acked]
    assert (ex.nas / ".ferry" / "failed" / "flights" / LATIN1).read_bytes() == DATA
    assert (ex.nas / ".ferry" / "failed" / "flights" / (LATIN1 + ".done")).exists()
    assert (ex.nas / ".ferry" / "archive" / "flights" / "flights_1.csv").read_bytes() == DATA
    assert [p.rsplit("/", 1)[1] for p in hdfs.files] == ["flights_1.csv"]
    assert (svc.stats.extracted, svc.stats.failed, svc.stats.by_reason) == (
        1,
        1,
        {"bad_file_name": 1},
    )


@pytest.mark.parametrize(
    "error",
    [
        OSError(116, "Stale file handle"),
        UnicodeEncodeError("utf-8", "caf\udce9", 3, 4, "surrogates not allowed"),
        KeyError("boom"),
    ],
)
def test_service_quarantines_an_unexpected_error_and_goes_on(
    tmp_path: Path,
    flights: DatasetSpec,
    codec: EventCodec,
    monkeypatch: pytest.MonkeyPatch,
    caplog: pytest.LogCaptureFixture,
    error: Exception,
) -> None:
    import ferry.stages.extract.service as service_mod

    spec = with_(flights, finished=FinishedPolicy(policy="marker"))
    nas = tmp_path / "nas"
    for n in ("flights_1.csv", "flights_2.csv"):
        drop(nas, n, DATA + n.encode() + b"\n")
        drop(nas, n + ".done", b"")
    real = service_mod.extract_file

    def extract(cand: Candidate, deps: ExtractDeps) -> Any:
        if cand.path.name == "flights_1.csv":
            raise error
        return real(cand, deps)

    monkeypatch.setattr(service_mod, "extract_file", extract)
    producer = FakeProducer()
    svc, hdfs = service(tmp_path, spec, producer, codec)
    assert svc.run_once() == 2
    [failed] = failed_events(codec, producer)
    assert (failed.stage, failed.reason, failed.attempt, failed.raw_key) == (
        "extract",
        "extract_error",
        1,
        b"flights/flights_1.csv",
    )
    assert failed.error == f"flights/flights_1.csv: {type(error).__name__}: {error}"
    assert sorted(p.name for p in (nas / ".ferry" / "failed" / "flights").iterdir()) == [
        "flights_1.csv",
        "flights_1.csv.done",
    ]
    assert [p.rsplit("/", 1)[1] for p in hdfs.files] == ["flights_2.csv"]
    assert svc.stats.by_reason == {"extract_error": 1}
    [rec] = [r for r in caplog.records if r.levelname == "ERROR"]
    assert rec.exc_info is not None and rec.exc_info[1] is error  # traceback logged


def test_service_lets_a_config_error_through(
    tmp_path: Path, flights: DatasetSpec, codec: EventCodec, monkeypatch: pytest.MonkeyPatch
) -> None:
    import ferry.stages.extract.service as service_mod

    def extract(cand: Candidate, deps: ExtractDeps) -> Any:
        raise ConfigError("bad settings")

    monkeypatch.setattr(service_mod, "extract_file", extract)
    nas = tmp_path / "nas"
    path = drop(nas, "flights_1.csv", DATA)
    producer = FakeProducer()
    svc, _ = service(tmp_path, flights, producer, codec)
    with pytest.raises(ConfigError, match="bad settings"):
        svc.handle(take(svc))
    assert (path.exists(), producer.acked, (nas / ".ferry").exists()) == (True, [], False)


@pytest.mark.parametrize(
    ("name", "data", "reason"),
    [
        ("flights_1.csv", DATA + b"\xff\n", "not_utf8"),
        (name_of(240), DATA, "name_too_long"),
    ],
)
def test_service_quarantines_refused_files_without_retries(
    tmp_path: Path, flights: DatasetSpec, codec: EventCodec, name: str, data: bytes, reason: str
) -> None:
    nas = tmp_path / "nas"
    drop(nas, name, data)
    producer = FakeProducer()
    svc, hdfs = service(tmp_path, flights, producer, codec)
    svc.handle(take(svc))
    [failed] = failed_events(codec, producer)
    assert (failed.reason, failed.attempt) == (reason, 1)
    assert (hdfs.files, hdfs.calls) == ({}, [])
    assert (nas / ".ferry" / "failed" / "flights" / name).read_bytes() == data
    assert not (nas / "flights" / name).exists()


def test_build_refuses_a_nas_root_that_does_not_exist(tmp_path: Path) -> None:
    import ferry.stages.extract.service as service_mod

    missing = tmp_path / "mnt" / "nas"
    with pytest.raises(ConfigError) as exc:
        service_mod.build(svc_settings(missing))
    assert str(exc.value) == (
        f"paths.nas_dir = {missing} is not a directory: mount the NAS share there or set "
        "paths.nas_dir (FERRY_PATHS__NAS_DIR); extract does not create it"
    )
    assert not (tmp_path / "mnt").exists()  # nothing made locally


def test_a_nas_root_gone_while_running_creates_nothing(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    from ferry.datasets.spec import load_datasets
    from ferry.stages.extract.datasets import prepare_dirs

    nas = tmp_path / "nas"  # unmounted: the directory itself is gone
    specs = load_datasets(svc_settings(nas).paths.datasets_dir)
    assert prepare_dirs(svc_settings(nas), specs) == specs
    assert not nas.exists()
    assert len([r for r in caplog.records if r.levelname == "ERROR"]) == len(specs)
