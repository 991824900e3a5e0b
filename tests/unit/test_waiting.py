"""A file whose dataset's definition is invalid waits: the batch handlers answer
DatasetNotReady, processing parks the input record on ``<prefix>.waiting`` byte for byte (no
retry, no quarantine), the other files of the batch go on. Releasing is tested on the real stack
(tests/e2e/test_datasets.py)."""

from __future__ import annotations

import shutil
import threading
from pathlib import Path

from tests.support.factories import FS_B, extracted
from tests.unit.test_processing import EXTRACTED, FILE_ID, TRANSFORMED, record, settings

from ferry.core.events import FileExtracted
from ferry.core.runtime.processing import process_batch
from ferry.core.runtime.stage import RunStats, Stage
from ferry.core.wire.avro import EventCodec
from ferry.datasets.reload import Definitions
from ferry.errors import DatasetNotReady, PermanentError
from ferry.stages.transform.counts import FileCounts
from ferry.stages.transform.handlers import TransformDeps, transform_batch
from ferry.stages.transform.job import FileResult
from ferry_kit.supervise.cli import first_error_line


def test_a_waiting_file_is_parked_byte_for_byte_and_never_retried(codec: EventCodec) -> None:
    calls: list[int] = []

    def handler(events, deps):  # type: ignore[no-untyped-def]
        calls.append(len(events))
        return [DatasetNotReady("orders waits", dataset="orders"), [TRANSFORMED]]

    value = codec.encode(EXTRACTED)
    stage = Stage("transform", {FileExtracted: handler}, batch_size=8)
    stats = RunStats()
    recs = [record(value), record(value, key=b"other", offset=6)]
    out = process_batch(recs, stage, None, codec, settings(), threading.Event(), stats)
    assert out is not None
    assert [(r.topic, r.key, r.value, r.source) for r in out] == [
        ("unit.waiting", FILE_ID.encode(), value, ("unit.extracted", 1)),
        ("unit.transformed", FILE_ID.encode(), codec.encode(TRANSFORMED), ("unit.extracted", 1)),
    ]
    assert calls == [2] and stats.handler_calls == 1  # no retry of the waiting file


def _deps(defs: Path, seen: list[str]) -> TransformDeps:
    def run_batch(spark, spec, files, **kw):  # type: ignore[no-untyped-def]
        seen.append(spec.name)
        return {
            fid: FileResult(fid, path, "transformed", FileCounts(3, 3, 0), staged_path="/s")
            for path, fid in files.items()
        }

    return TransformDeps(
        datasets=Definitions(defs, "transform"),
        spark=lambda: object(),
        reset_spark=lambda: None,
        run_batch=run_batch,
        staging_root=f"{FS_B}/ferry/staging",
        rejects_root=f"{FS_B}/ferry/rejects",
    )


def test_transform_runs_the_valid_dataset_and_makes_the_invalid_ones_wait(
    tmp_path: Path, specs
) -> None:  # type: ignore[no-untyped-def]
    from tests.support.paths import REPO_ROOT

    defs = tmp_path / "datasets"
    shutil.copytree(REPO_ROOT / "datasets", defs)
    weather = defs / "weather.yaml"
    weather.write_text(weather.read_text().replace("type: double}", "type: long}", 1))
    seen: list[str] = []
    deps = _deps(defs, seen)
    f, w, x = extracted("flights", 1), extracted("weather", 2), extracted("nosuch", 3)
    fr, wr, xr = transform_batch([f, w, x], deps)
    assert seen == ["flights"]
    [t] = fr  # type: ignore[misc]
    assert t.manifest.definition_version == deps.datasets.current().version("flights")  # type: ignore[union-attr]
    assert isinstance(wr, DatasetNotReady) and wr.dataset == "weather"
    assert str(wr).endswith(
        "dataset 'weather' waits for a valid definition (weather.yaml: columns.5.type: "
        "unsupported type 'long'; use one of ['bigint', 'boolean', 'date', 'double', 'float', "
        "'int', 'smallint', 'string', 'timestamp', 'tinyint'] or decimal(p,s))"
    )
    assert isinstance(xr, PermanentError) and xr.reason == "unknown_dataset"

    # fixed on disk: the next batch runs it, no restart
    weather.write_text(weather.read_text().replace("type: long}", "type: double}", 1))
    [wt] = transform_batch([w], deps)[0]  # type: ignore[misc]
    assert seen == ["flights", "weather"]
    assert wt.manifest.rows_out == 3


def test_first_error_line_of_a_crash_looping_service(tmp_path: Path) -> None:
    log = tmp_path / "extract.log"
    log.write_text(
        "2026-12-01 INFO ferry: starting\n"
        "ferry: ConfigError: datasets directory /x does not exist\n"
        "2026-12-01 INFO again\n"
        "ferry: ConfigError: datasets directory /y does not exist\n"
    )
    assert first_error_line(str(log)) == "ferry: ConfigError: datasets directory /y does not exist"
    log.write_text(
        "Traceback (most recent call last):\n"
        '  File "x.py", line 1, in <module>\n'
        "    boom()\n"
        "confluent_kafka.KafkaException: KafkaError{code=_TRANSPORT}: broker down\n"
    )
    assert first_error_line(str(log)) == (
        "confluent_kafka.KafkaException: KafkaError{code=_TRANSPORT}: broker down"
    )
    log.write_text("all fine\n")
    assert first_error_line(str(log)) is None
    assert first_error_line(str(tmp_path / "missing.log")) is None


def test_the_tracker_marks_a_parked_file_and_clears_it_when_released() -> None:
    from tests.support.factories import manifest

    from ferry.tracker.pages import definitions_alert
    from ferry.tracker.record import apply, park, parked

    ev = FileExtracted(manifest("orders", "ab" * 32, source_path="orders/o1.csv"))
    _before, record = apply(None, ev, ev.file_id, 0)
    assert park(None, "transform", 5) is None  # nothing known of the file: nothing to mark
    waiting = park(record, "transform", 5)
    assert waiting is not None and parked(waiting) == ("orders", "transform")
    _before, again = apply(waiting, ev, ev.file_id, 0)  # later events keep the mark
    assert parked(again) == ("orders", "transform")
    released = park(again, None, 9)
    assert released is not None and parked(released) is None
    html = definitions_alert([], {("orders", "transform"): 2})
    assert "<li data-waiting='orders:transform'><b>2</b> file(s) of dataset <b>orders</b>" in html
    assert definitions_alert([], {}) == ""


def test_a_rejected_row_prints_its_raw_text_or_its_parsed_values() -> None:
    from ferry.ops.rejects_cli import _record

    raw = {"_corrupt_record": '1,"a\nb",x', "id": None, "note": None}
    assert _record(raw, ["id", "note"], ",") == '1,"a\nb",x'
    parsed = {"_corrupt_record": None, "id": 7, "note": "Smith, Jane"}
    assert _record(parsed, ["id", "note"], ",") == '7,"Smith, Jane"'
    assert _record({**parsed, "note": None}, ["id", "note"], ";") == "7;"
