"""Issue 32: OpenLineage events of every file's run, read back from the ``openlineage`` topic.

Three files flow through the real pipeline (lineage on, as the kit starts every service on the
local stack): one clean, one with a rejected row, one whose header does not match (quarantined
by transform). Reading ``<prefix>.openlineage`` from the beginning rebuilds each file's chain
NAS → landing → staging (+ rejects) → HDFS A incoming → Hive table with the exact row counts,
equal to what HiveServer2 returns; the quarantined file's chain ends in FAIL with its reason.
Every event is checked against the OpenLineage JSON schemas when they are at hand
(tests.support.lineage_spec).
"""

from __future__ import annotations

import itertools
import json
import uuid
from collections.abc import Iterator
from typing import Any

import pytest
from confluent_kafka import Consumer

from ferry.core.identity import derive_file_id, sha256_file
from ferry.core.kafka.clients import client_config
from ferry.datasets.spec import load_datasets
from ferry.lineage.chain import Node, chain, hops
from ferry.lineage.emitter import lineage_topic
from ferry.lineage.naming import Names, hdfs
from ferry_kit.demo_data import csv_lines, daily_frames, write_csv
from ferry_kit.pipeline import Outcomes, drop_file
from ferry_kit.testing.waiting import wait_for
from tests.e2e.conftest import Pipeline, start_pipeline, stop_pipeline
from tests.e2e.scenario import wait_for_outcomes
from tests.support import lineage_spec
from tests.support.paths import REPO_ROOT

pytestmark = pytest.mark.e2e


@pytest.fixture(scope="module")
def pipeline(stack, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Pipeline]:  # type: ignore[no-untyped-def]
    """A private pipeline with its own flights table (a private datasets directory)."""
    work = tmp_path_factory.mktemp("lineage")
    datasets = work / "datasets"
    datasets.mkdir()
    text = (REPO_ROOT / "datasets" / "flights.yaml").read_text(encoding="utf-8")
    table = f"flights_l{uuid.uuid4().hex[:8]}"
    assert "  table: flights\n" in text
    (datasets / "flights.yaml").write_text(
        text.replace("  table: flights\n", f"  table: {table}\n")
    )
    p = start_pipeline(
        stack, work, {"paths.datasets_dir": datasets, "lineage.metrics_dir": work / "metrics"}
    )
    try:
        yield p
    finally:
        stop_pipeline(p)


def read_topic(p: Pipeline, done: Any, deadline_s: float) -> list[dict[str, Any]]:
    """Every event on ``<prefix>.openlineage`` from the beginning until ``done(events)``."""
    consumer = Consumer(
        {
            **client_config(p.settings.kafka),
            "group.id": f"e2e-lineage-{uuid.uuid4().hex[:8]}",
            "auto.offset.reset": "earliest",
            "enable.auto.commit": False,
        }
    )
    consumer.subscribe([lineage_topic(p.settings)])
    events: list[dict[str, Any]] = []

    def more() -> bool:
        msg = consumer.poll(1.0)
        if msg is not None and msg.error() is None:
            events.append(json.loads(msg.value()))
        return bool(done(events))

    try:
        wait_for(more, lambda: f"lineage events: {len(events)} read", deadline_s, poll_s=0)
    finally:
        consumer.close()
    return events


def test_each_file_chain_rebuilt_from_the_topic_with_exact_rows(pipeline: Pipeline) -> None:
    spec = load_datasets(pipeline.settings.paths.datasets_dir)["flights"]
    _, day = next(itertools.islice(daily_frames("flights"), 3, 4))
    work = pipeline.work / "files"
    clean, rejecting, bad = (work / f"flights_l{i}.csv" for i in (1, 2, 3))
    assert write_csv(clean, csv_lines(spec, day.iloc[:25]), spec) == 25
    odd = day.iloc[25:35].copy()
    odd.iloc[4, odd.columns.get_loc("month")] = 13  # range:month (and no flight_date)
    assert write_csv(rejecting, csv_lines(spec, odd), spec) == 10
    bad.write_text("a,b,c\n1,2,3\n", encoding="utf-8")
    ids = {f.name: derive_file_id("flights", sha256_file(f)) for f in (clean, rejecting, bad)}
    outcomes = Outcomes(pipeline.settings)
    for f in (clean, rejecting, bad):
        drop_file(f, pipeline.nas_dir / "flights" / f.name)
    try:
        wait_for_outcomes(
            outcomes,
            lambda: outcomes.settled(ids.values()),
            lambda: outcomes.unsettled(ids.values()),
            600,
            pipeline.group.check_alive,
        )
    finally:
        outcomes.close()
    good = {"flights_l1.csv": (25, 25, 0), "flights_l2.csv": (10, 9, 1)}
    assert {n: ids[n] in outcomes.loaded for n in good} == {n: True for n in good}

    def ended(events: list[dict[str, Any]]) -> bool:
        """Every file's parent run (no parent facet) has its terminal event."""
        finals = {
            (e["run"]["facets"]["ferry"].get("fileId"), e["eventType"])
            for e in events
            if "parent" not in e["run"]["facets"]
        }
        return all(
            (fid, "FAIL" if name == "flights_l3.csv" else "COMPLETE") in finals
            for name, fid in ids.items()
        )

    events = read_topic(pipeline, ended, 120)
    by_file = hops(events)
    names = Names.of(pipeline.settings)
    table = spec.hive.full_name
    hive = pipeline.hive_rows(table, [ids[n] for n in good])
    for name, (rows_in, rows_out, rejected) in good.items():
        fid = ids[name]
        assert [(h.stage, h.state) for h in by_file[fid]] == [
            ("extract", "COMPLETE"),
            ("transform", "COMPLETE"),
            ("transfer", "COMPLETE"),
            ("load", "COMPLETE"),
        ], name
        uris = outcomes.loaded[fid].manifest.uris
        want = [
            Node(*names.nas_file(f"flights/{name}"), None),
            Node(*hdfs(uris["landing"]), rows_in),
            Node(*hdfs(uris["staging"]), rows_out),
            *([Node(*hdfs(uris["rejects"]), rejected)] if rejected else []),
            Node(*hdfs(uris["incoming"]), rows_out),
            Node(*names.table(table), rows_out),
            Node(*names.table_location(table), rows_out),
        ]
        assert chain(by_file[fid]) == want, name
        assert hive[fid] == rows_out
    bad_hops = by_file[ids["flights_l3.csv"]]
    assert [(h.stage, h.state) for h in bad_hops] == [
        ("extract", "COMPLETE"),
        ("transform", "FAIL"),
    ]
    assert bad_hops[-1].error is not None and bad_hops[-1].error.startswith("header_mismatch: ")
    # every START has its run's COMPLETE or FAIL
    starts = {e["run"]["runId"] for e in events if e["eventType"] == "START"}
    ends = {e["run"]["runId"] for e in events if e["eventType"] in ("COMPLETE", "FAIL")}
    assert starts <= ends
    reg = lineage_spec.registry(lineage_spec.spec_dir(REPO_ROOT), lineage_spec.FERRY_SCHEMAS)
    assert [x for e in events for x in lineage_spec.errors(e, reg)] == []
