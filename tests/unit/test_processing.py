"""What the stage runner makes of one record (:func:`ferry.core.runtime.processing.process_batch`):
outputs, retries, quarantine reasons. The loop itself is in test_runner.py."""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import Any, cast

import pytest
from tests.support.factories import T0, manifest

from ferry.core.events import (
    FileExtracted,
    FileFailed,
    FileLoaded,
    FileTransformed,
)
from ferry.core.runtime.processing import process_batch
from ferry.core.runtime.stage import HandlerBug, Record, Stage, one_by_one
from ferry.core.wire.avro import EventCodec
from ferry.errors import ConfigError, PermanentError, TransientError
from ferry.settings import Settings, get_settings
from ferry.settings.retry import RetrySettings

SHA = "0f" * 32
MANIFEST = manifest("flights", SHA, source_path="flights/a.csv")
FILE_ID = MANIFEST.file_id
EXTRACTED = FileExtracted(MANIFEST)
TRANSFORMED = FileTransformed(MANIFEST.advance(rows_out=7, updated_at=T0))


def settings(**kafka: Any) -> Settings:
    base = get_settings()
    return base.model_copy(
        update={
            "retry": RetrySettings(max_attempts=3, initial_backoff_s=0.001, max_backoff_s=0.002),
            "kafka": base.kafka.model_copy(update={"topic_prefix": "unit", **kafka}),
        }
    )


def record(value: bytes | None, key: bytes | None = FILE_ID.encode(), offset: int = 5) -> Record:
    return Record("unit.extracted", 1, offset, key, value)


def run_one(codec: EventCodec, handler: Callable[..., Any], value: bytes | None, **kw: Any) -> Any:
    stage = Stage("transform", {FileExtracted: handler})
    return process_batch([record(value, **kw)], stage, None, codec, settings(), threading.Event())


def only_failed(codec: EventCodec, out: Any) -> FileFailed:
    assert out is not None and len(out) == 1
    assert out[0].topic == "unit.failed"
    failed = codec.decode(out[0].value)
    assert isinstance(failed, FileFailed)
    return failed


# -- process_batch: one record of a non-batching stage -----------------------------------------


def test_success_routes_outputs_by_type_and_file_id(codec: EventCodec) -> None:
    out = run_one(codec, lambda ev, deps: [TRANSFORMED], codec.encode(EXTRACTED))
    assert [(r.topic, r.key) for r in out] == [("unit.transformed", FILE_ID.encode())]
    assert codec.decode(out[0].value) == TRANSFORMED


def test_not_avro_is_quarantined_with_raw_bytes_and_coordinates(codec: EventCodec) -> None:
    calls: list[Any] = []
    out = run_one(codec, lambda ev, deps: calls.append(ev) or [], b"not-avro", key=b"k1")
    failed = only_failed(codec, out)
    assert calls == []
    assert out[0].key == b"unit.extracted-1-5"  # its coordinates, never its own key (C24)
    assert (failed.stage, failed.reason, failed.attempt) == ("transform", "undecodable", 1)
    assert (failed.source_topic, failed.source_partition, failed.source_offset) == (
        "unit.extracted",
        1,
        5,
    )
    assert (failed.raw_key, failed.raw_value, failed.manifest) == (b"k1", b"not-avro", None)
    assert failed.error.startswith("unit.extracted[1]@5: SerializationError: not Avro")


def test_unknown_fingerprint_is_quarantined(codec: EventCodec) -> None:
    data = b"\xc3\x01" + b"\x11" * 8 + b"\x00"
    failed = only_failed(codec, run_one(codec, lambda ev, deps: [], data, key=None, offset=9))
    assert (failed.reason, failed.raw_value, failed.raw_key) == ("unknown_schema", data, None)


def test_transient_errors_are_retried_then_succeed(codec: EventCodec) -> None:
    attempts: list[int] = []

    def flaky(ev: FileExtracted, deps: Any) -> list[Any]:
        attempts.append(1)
        if len(attempts) < 3:
            raise TransientError("connection reset by peer")
        return [TRANSFORMED]

    out = run_one(codec, flaky, codec.encode(EXTRACTED))
    assert len(attempts) == 3
    assert [r.topic for r in out] == ["unit.transformed"]


def test_retries_exhausted_quarantine_with_reason_and_attempts(codec: EventCodec) -> None:
    class Reset(TransientError):
        reason = "connection_reset"

    def broken(ev: FileExtracted, deps: Any) -> list[Any]:
        raise Reset("namenode reset")

    failed = only_failed(codec, run_one(codec, broken, codec.encode(EXTRACTED)))
    assert (failed.reason, failed.attempt, failed.manifest) == ("connection_reset", 3, MANIFEST)
    assert (failed.raw_value, failed.raw_key) == (None, None)
    assert "namenode reset" in failed.error


def test_permanent_error_quarantines_at_once_with_its_reason(codec: EventCodec) -> None:
    attempts: list[int] = []

    def bad(ev: FileExtracted, deps: Any) -> list[Any]:
        attempts.append(1)
        raise PermanentError("header missing", reason="bad_header")

    failed = only_failed(codec, run_one(codec, bad, codec.encode(EXTRACTED)))
    assert len(attempts) == 1
    assert (failed.reason, failed.attempt, failed.manifest) == ("bad_header", 1, MANIFEST)


def test_handler_bug_is_quarantined_not_raised(codec: EventCodec) -> None:
    failed = only_failed(codec, run_one(codec, lambda ev, deps: 1 / 0, codec.encode(EXTRACTED)))
    assert failed.reason == "handler_error"
    assert "ZeroDivisionError" in failed.error


def test_config_error_stops_the_runner(codec: EventCodec) -> None:
    def misconfigured(ev: Any, deps: Any) -> list[Any]:
        raise ConfigError("no dataset flights")

    with pytest.raises(ConfigError):
        run_one(codec, misconfigured, codec.encode(EXTRACTED))


def test_event_without_handler_is_quarantined(codec: EventCodec) -> None:
    loaded = FileLoaded(MANIFEST, table="t")
    failed = only_failed(codec, run_one(codec, lambda ev, deps: [], codec.encode(loaded)))
    assert (failed.reason, failed.manifest) == ("unexpected_event", MANIFEST)


def test_handler_returning_a_non_event_is_quarantined(codec: EventCodec) -> None:
    failed = only_failed(
        codec, run_one(codec, lambda ev, deps: [{"x": 1}], codec.encode(EXTRACTED))
    )
    assert failed.reason == "unencodable"


def test_stop_requested_abandons_before_the_handler_runs(codec: EventCodec) -> None:
    stop = threading.Event()
    stop.set()
    stage = Stage("transform", {FileExtracted: lambda ev, deps: [TRANSFORMED]})
    assert (
        process_batch([record(codec.encode(EXTRACTED))], stage, None, codec, settings(), stop)
        is None
    )


def test_one_by_one_adapts_a_plain_handler_to_one_result_per_event() -> None:
    reset = TransientError("reset")
    bad = PermanentError("bad header", reason="bad_header")
    bug = ZeroDivisionError("division by zero")
    outcomes: list[Any] = [[TRANSFORMED], reset, bad, bug]

    def handler(ev: Any, deps: Any) -> list[Any]:
        assert (ev, deps) == (EXTRACTED, "deps")
        outcome = outcomes.pop(0)
        if isinstance(outcome, BaseException):
            raise outcome
        return cast("list[Any]", outcome)

    got = one_by_one(handler)([EXTRACTED] * 4, "deps")
    assert got[:3] == [[TRANSFORMED], reset, bad]
    assert isinstance(got[3], HandlerBug)
    assert (got[3].reason, got[3].original, str(got[3])) == (
        "handler_error",
        bug,
        "ZeroDivisionError: division by zero",
    )


def test_one_by_one_raises_config_errors() -> None:
    def handler(ev: Any, deps: Any) -> list[Any]:
        raise ConfigError("no dataset flights")

    with pytest.raises(ConfigError, match="no dataset flights"):
        one_by_one(handler)([EXTRACTED], None)
