"""Issue 4: the pipeline end to end on the real local stack, with the field cases."""

from __future__ import annotations

import itertools
import shutil
import uuid
from collections.abc import Iterator

import pandas as pd
import pytest

from ferry.clusters.hdfs.webhdfs import WebHdfs
from ferry.clusters.hiveserver2 import query
from ferry.core.events import FileTransferred
from ferry.core.identity import derive_file_id, sha256_file
from ferry.core.kafka.clients import OutboundRecord, build_producer, produce_and_wait
from ferry.core.wire.avro import default_codec
from ferry.datasets.spec import load_datasets
from ferry.tables.model import StagedMarker
from ferry.tables.paths import MARKER_NAME
from ferry_kit.demo_data import csv_lines, daily_frames, write_csv
from ferry_kit.pipeline import drop_file
from tests.e2e.conftest import Pipeline, private_definitions, start_pipeline, stop_pipeline
from tests.e2e.scenario import assert_scenario, run_pipeline_scenario, wait_for_outcomes

pytestmark = pytest.mark.e2e


@pytest.fixture(scope="module")
def pipeline(stack, tmp_path_factory) -> Iterator[Pipeline]:  # type: ignore[no-untyped-def]
    """The pipeline with the repository's definitions on private tables
    (``ferry.<dataset>_<token>``): the shared ``ferry.flights`` may hold rows of the same sample
    files (same file ids) written by other runs, other checkouts and other layouts."""
    work = tmp_path_factory.mktemp("e2e")
    token = uuid.uuid4().hex[:8]
    defs = private_definitions(stack, work, token)
    p = start_pipeline(stack, work, {"paths.datasets_dir": defs})
    try:
        yield p
    finally:
        stop_pipeline(p)


@pytest.fixture(scope="module")
def first_run(pipeline):  # type: ignore[no-untyped-def]
    return run_pipeline_scenario(
        pipeline.settings,
        pipeline.nas_dir,
        pipeline.work,
        pipeline.hive_rows,
        deadline_s=600,
        check_alive=pipeline.group.check_alive,
    )


def test_sample_and_field_cases_reach_hive_with_exact_counts(first_run):
    assert_scenario(first_run)
    assert sum(1 for d in first_run.dropped if d.rows is not None) == 7
    assert first_run.outcomes.events["failed"] == 2  # the 0-byte and the header-only file


def _wait_loaded(outcomes, file_id: str, count: int, pipeline, deadline_s: float = 300) -> None:  # type: ignore[no-untyped-def]
    wait_for_outcomes(
        outcomes,
        lambda: outcomes.loaded_count.get(file_id, 0) >= count,
        f"{file_id} loaded {count} time(s)",
        deadline_s,
        pipeline.group.check_alive,
    )
    assert outcomes.loaded_count.get(file_id, 0) == count


def test_redrop_renamed_and_redelivery_change_nothing(first_run, pipeline):  # type: ignore[no-untyped-def]
    day = next(
        d
        for d in first_run.dropped
        if d.dataset == "flights" and d.relative.startswith("flights/flights_2013")
    )
    table = load_datasets(pipeline.settings.paths.datasets_dir)["flights"].hive.full_name
    before = pipeline.hive_rows(table, [day.file_id])
    assert before == {day.file_id: day.rows}
    outcomes = first_run.outcomes
    # The same bytes dropped again under another name: recognised (same file_id), loaded once.
    archived = pipeline.nas_dir / ".ferry" / "archive" / "flights" / day.relative.split("/", 1)[1]
    shutil.copyfile(archived, pipeline.nas_dir / "flights" / "flights_renamed_copy.csv")
    _wait_loaded(outcomes, day.file_id, 2, pipeline)
    assert outcomes.loaded[day.file_id].manifest.source_path == "flights/flights_renamed_copy.csv"
    assert pipeline.hive_rows(table, [day.file_id]) == before
    # A redelivered FileTransferred (what a replay of the load stage sends): still one copy.
    ev = FileTransferred(outcomes.loaded[day.file_id].manifest)
    codec = default_codec(pipeline.settings.paths.schemas_dir)
    producer = build_producer(pipeline.settings.kafka, "e2e-redeliver")
    produce_and_wait(
        producer,
        [
            OutboundRecord(
                pipeline.settings.kafka.topic("transferred"), day.file_id.encode(), codec.encode(ev)
            )
        ],
        30,
    )
    _wait_loaded(outcomes, day.file_id, 3, pipeline)
    assert pipeline.hive_rows(table, [day.file_id]) == before
    # Other files in the same table are untouched.
    others = [d for d in first_run.dropped if d.dataset == "flights" and d.rows]
    assert pipeline.hive_rows(table, [d.file_id for d in others]) == {
        d.file_id: d.rows for d in others
    }


#: The type name a JDBC client reads for each definition type (``ResultSetMetaData``).
JDBC_TYPES = {"int": "int", "bigint": "bigint", "double": "double", "string": "string"}
JDBC_TYPES |= {"date": "date", "timestamp": "timestamp", "boolean": "boolean"}


def test_a_jdbc_client_sees_the_table_as_defined_with_exact_values(first_run, pipeline):  # type: ignore[no-untyped-def]
    """Issue: query the result the way analysts do — names lower-case, types as defined,
    timestamps not shifted by a time zone, decimals exact, every row as the CSV had it."""
    import csv
    from decimal import Decimal

    spec = load_datasets(pipeline.settings.paths.datasets_dir)["weather"]
    day = next(d for d in first_run.dropped if d.dataset == "weather" and d.rows)
    [res] = query(
        pipeline.settings,
        f"SELECT * FROM {spec.hive.full_name} WHERE ferry_file_id = '{day.file_id}' "
        "ORDER BY time_hour, origin",
    )
    expected = [
        (c.name, "decimal" if c.type.startswith("decimal") else JDBC_TYPES[c.type])
        for c in spec.table_columns
    ]
    assert [(c.name, c.type) for c in res.columns] == expected
    precip = next(c for c in res.columns if c.name == "precip")
    assert (precip.precision, precip.scale) == (4, 2)

    archived = pipeline.nas_dir / ".ferry" / "archive" / day.relative
    with archived.open(encoding="utf-8", newline="") as fh:
        source = list(csv.DictReader(fh))
    want = sorted(
        (
            # java.sql.Timestamp's text: the CSV's UTC time, unshifted, with its ".0" fraction.
            r["time_hour"].replace("T", " ").removesuffix("Z") + ".0",
            r["origin"],
            None if r["precip"] == "NA" else str(Decimal(r["precip"]).quantize(Decimal("0.01"))),
        )
        for r in source
    )
    names = [c.name for c in res.columns]
    at = {n: names.index(n) for n in ("time_hour", "origin", "precip")}
    got = [(r[at["time_hour"]], r[at["origin"]], r[at["precip"]]) for r in res.rows]
    assert got == want
    # Every row names its file: the id, and the exact NAS name the manifest carries.
    source_at, id_at = names.index("ferry_source_path"), names.index("ferry_file_id")
    assert {(r[id_at], r[source_at]) for r in res.rows} == {(day.file_id, day.relative)}


def test_a_file_spanning_300_days_loads_in_one_rewrite_of_300_partitions(first_run, pipeline):  # type: ignore[no-untyped-def]
    """One file whose rows fall on 300 days (the first flight of each of the year's first 300
    days): its load moves 300 data files into 300 ``flight_date`` partitions and registers them in
    one metastore call; counting its rows over JDBC, Spark asks the metastore for those partitions
    as a date range, not an IN of 300 dates, which the stack's Derby-backed metastore refuses
    ("Statement too complex", seen with 256; docs/hive-layout.md, "Partition filters"); the other
    files in those partitions keep their rows."""
    spec = load_datasets(pipeline.settings.paths.datasets_dir)["flights"]
    firsts = pd.concat(
        rows.iloc[:1] for _day, rows in itertools.islice(daily_frames("flights"), 300)
    )
    path = pipeline.work / "span" / "flights_first_of_300_days.csv"
    assert write_csv(path, csv_lines(spec, firsts), spec) == 300
    file_id = derive_file_id("flights", sha256_file(path))
    others = [d for d in first_run.dropped if d.dataset == "flights" and d.rows]
    drop_file(path, pipeline.nas_dir / "flights" / path.name)
    _wait_loaded(first_run.outcomes, file_id, 1, pipeline)
    assert file_id not in first_run.outcomes.failed
    assert first_run.outcomes.loaded[file_id].manifest.rows_out == 300
    assert pipeline.hive_rows(spec.hive.full_name, [file_id]) == {file_id: 300}
    assert pipeline.hive_rows(spec.hive.full_name, [d.file_id for d in others]) == {
        d.file_id: d.rows for d in others
    }


def _files_of(pipeline, table: str, file_ids: list[str]) -> dict[str, set[str]]:  # type: ignore[no-untyped-def]
    """The data files (names) holding rows of each of ``file_ids`` in ``table``, as HiveServer2
    reads them (``input_file_name()``)."""
    ids = ", ".join(f"'{f}'" for f in file_ids)
    [res] = query(
        pipeline.settings,
        f"SELECT DISTINCT ferry_file_id, input_file_name() FROM {table} "
        f"WHERE ferry_file_id IN ({ids})",
    )
    out: dict[str, set[str]] = {f: set() for f in file_ids}
    for fid, path in res.rows:
        out[fid].add(str(path).rsplit("/", 1)[-1])
    return out


def test_files_over_the_same_60_days_share_one_data_file_per_partition(first_run, pipeline):  # type: ignore[no-untyped-def]
    """Issue 45, case C23: four files, each holding one flight of each of the year's first 60
    days, dropped together. Files transformed in one batch write ONE data file per partition for
    the batch (not one per file and partition), transfer copies it once and the load moves it
    into its partition whole: the table holds 60 data files per transform batch for them, each
    file's rows exact. Then ``ferry replay transform --file`` of one of them: its rows leave the
    shared files (rewritten without them) and come back as 60 files of its own, still exact."""
    spec = load_datasets(pipeline.settings.paths.datasets_dir)["flights"]
    table = spec.hive.full_name
    days = list(itertools.islice(daily_frames("flights"), 60))
    fids = []
    for k in range(4):
        rows = pd.concat(frame.iloc[k : k + 1] for _day, frame in days)
        path = pipeline.work / "share" / f"flights_share_{k}.csv"
        assert write_csv(path, csv_lines(spec, rows), spec) == 60
        fids.append(derive_file_id("flights", sha256_file(path)))
    for k in range(len(fids)):
        src = pipeline.work / "share" / f"flights_share_{k}.csv"
        drop_file(src, pipeline.nas_dir / "flights" / src.name)
    for fid in fids:
        _wait_loaded(first_run.outcomes, fid, 1, pipeline)
    assert pipeline.hive_rows(table, fids) == dict.fromkeys(fids, 60)

    b = WebHdfs.for_cluster("b", pipeline.settings)
    staging = f"{pipeline.settings.paths.staging_path}/flights"
    markers = {
        f: StagedMarker.from_json(b"".join(b.open_stream(f"{staging}/{f}/{MARKER_NAME}")))
        for f in fids
    }
    batches: dict[str, list[str]] = {}
    for f, m in markers.items():
        batches.setdefault(m.generation, []).append(f)
    for members in batches.values():
        for f in members:
            m = markers[f]
            if len(members) > 1:  # shared: one row in each of the batch's 60 data files
                assert (m.files, sorted(m.shared.values())) == ((), [1] * 60)
            else:  # transformed alone: 60 files of its own
                assert (len(m.files), m.shared) == (60, {})
    assert len(batches) < 4, f"no two of the files were transformed together: {batches}"
    held = _files_of(pipeline, table, fids)
    assert len(set().union(*held.values())) == 60 * len(batches)
    for f in fids:
        assert len(held[f]) == 60
    a = WebHdfs.for_cluster("a", pipeline.settings)
    incoming = f"{pipeline.settings.paths.incoming_path}/flights/_shared"
    for gen, members in batches.items():
        if len(members) > 1:  # every file of the batch loaded: its directory on A is gone
            assert not a.exists(f"{incoming}/{gen}")

    first = fids[0]
    done = pipeline.ferry("replay", "transform", "--file", first)
    assert done.returncode == 0, done.stdout + done.stderr
    _wait_loaded(first_run.outcomes, first, 2, pipeline)
    assert pipeline.hive_rows(table, fids) == dict.fromkeys(fids, 60)
    again = _files_of(pipeline, table, fids)
    assert len(again[first]) == 60
    assert all(name.startswith(f"ferry-{first}-") for name in again[first])
    for f in fids[1:]:
        assert len(again[f]) == 60
