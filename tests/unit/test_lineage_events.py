"""Ferry's OpenLineage events: every kind it emits, with exact names, ids and counts, and each
valid against the OpenLineage JSON schemas of the client's spec (tests.support.lineage_spec).
"""

from __future__ import annotations

import uuid
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest
from openlineage.client.serde import Serde
from tests.support.lineage_spec import (
    FERRY_SCHEMAS,
    client_schema_urls,
    errors,
    registry,
    schemas,
    spec_dir,
)
from tests.support.paths import REPO_ROOT

from ferry.core.events import (
    FileExtracted,
    FileLoaded,
    FileManifest,
    FileTransferred,
    FileTransformed,
    failed,
)
from ferry.core.runtime.observe import Settled
from ferry.core.runtime.stage import Record
from ferry.datasets.spec import DatasetSpec
from ferry.lineage.events import EventBuilder
from ferry.lineage.naming import Names, hdfs
from ferry.lineage.observer import LineageObserver

FID = "0123456789abcdef0123456789abcdef"
B = "hdfs://127.0.0.1:18020"
A = "hdfs://cluster-a"
NAMES = Names("ferry", Path("/nas"), "hive://127.0.0.1:19083", f"{A}/warehouse")
T0 = datetime(2026, 1, 2, 3, 4, 5, tzinfo=UTC)


class Captured:
    """An emitter that keeps the events (as JSON data)."""

    enabled = True

    def __init__(self) -> None:
        self.events: list[dict[str, Any]] = []

    def emit(self, event: Any) -> None:
        self.events.append(Serde.to_dict(event))

    def close(self) -> None: ...


def manifest(**changes: Any) -> FileManifest:
    m = FileManifest(FID, "flights", "flights/flights_1.csv", 1234, "a" * 64, T0, T0, "t" * 32)
    return m.advance(**changes)


LANDING = {"landing": f"{B}/ferry/landing/flights/{FID}/flights_1.csv"}
STAGED = {
    **LANDING,
    "staging": f"{B}/ferry/staging/flights/{FID}",
    "rejects": f"{B}/ferry/rejects/flights/{FID}",
}
COUNTS = {"rows_in": 10, "rows_out": 7, "rows_rejected": 3, "reject_reasons": {"null:carrier": 3}}


@pytest.fixture
def seen(specs: dict[str, DatasetSpec]) -> tuple[LineageObserver, Captured]:
    cap = Captured()
    return LineageObserver(EventBuilder(NAMES, specs), cap), cap  # type: ignore[arg-type]


def record(topic: str, offset: int = 5) -> Record:
    return Record(topic, 1, offset, FID.encode(), b"")


def every_kind(obs: LineageObserver) -> None:
    """One file through the four stages, plus a quarantine and a refused NAS entry."""
    obs.extracted(
        "flights",
        "flights/flights_1.csv",
        "2026-01-02T03:04:00.000+00:00",
        [FileExtracted(manifest(uris=LANDING))],
    )
    ex = FileExtracted(manifest(uris=LANDING))
    tr = FileTransformed(manifest(uris=STAGED, **COUNTS))
    tf = FileTransferred(tr.manifest.advance(uris={"incoming": f"{A}/ferry/incoming/{FID}"}))
    ld = FileLoaded(tf.manifest.advance(uris={"table": "ferry.flights"}), "ferry.flights")
    for stage, inp, out in (("transform", ex, tr), ("transfer", tr, tf), ("load", tf, ld)):
        rec = record(f"ferry.{inp.TOPIC}")
        obs.started(stage, rec, inp)
        obs.settled(stage, [Settled(rec, inp, (out,))])
    bad = failed(
        stage="transfer",
        reason="hdfs_timeout",
        error="x: timed out",
        attempt=5,
        manifest=tr.manifest,
    )
    obs.settled("transfer", [Settled(record("ferry.transformed", 9), tr, (bad,))])
    refused = failed(stage="extract", reason="symlink_outside_nas", error="flights/l.csv: no")
    obs.extracted("flights", "flights/l.csv", "2026-01-02T03:04:00.000+00:00", [refused])


def kinds(events: list[dict[str, Any]]) -> list[tuple[str, str]]:
    return [(e["job"]["name"], e["eventType"]) for e in events]


def test_every_event_kind_with_its_names_and_counts(seen: tuple[LineageObserver, Captured]) -> None:
    obs, cap = seen
    every_kind(obs)
    assert kinds(cap.events) == [
        ("flights", "START"),
        ("flights.extract", "START"),
        ("flights.extract", "COMPLETE"),
        ("flights.transform", "START"),
        ("flights.transform", "COMPLETE"),
        ("flights.transfer", "START"),
        ("flights.transfer", "COMPLETE"),
        ("flights.load", "START"),
        ("flights.load", "COMPLETE"),
        ("flights", "COMPLETE"),
        ("flights.transfer", "FAIL"),
        ("flights", "FAIL"),
        ("flights", "START"),
        ("flights.extract", "START"),
        ("flights.extract", "FAIL"),
        ("flights", "FAIL"),
    ]
    parent = str(uuid.uuid5(uuid.NAMESPACE_URL, f"ferry:ferry/file/{FID}"))
    ev = cap.events
    assert {e["run"]["runId"] for e in (ev[0], ev[9], ev[11])} == {parent}
    assert all(e["run"]["facets"]["parent"]["run"]["runId"] == parent for e in ev[1:9])
    transform_run = str(
        uuid.uuid5(uuid.NAMESPACE_URL, f"ferry:ferry/file/{FID}/transform/ferry.extracted/1/5")
    )
    assert ev[3]["run"]["runId"] == ev[4]["run"]["runId"] == transform_run
    assert ev[1]["run"]["runId"] == ev[2]["run"]["runId"]  # extract: one run per attempt
    # extract: NAS file (local file system) → landing on B, bytes and files
    assert [(d["namespace"], d["name"]) for d in ev[2]["inputs"]] == [
        ("file", "/nas/flights/flights_1.csv")
    ]
    assert [(d["namespace"], d["name"]) for d in ev[2]["outputs"]] == [
        (B, f"/ferry/landing/flights/{FID}/flights_1.csv")
    ]
    assert ev[2]["outputs"][0]["outputFacets"]["outputStatistics"]["size"] == 1234
    # transform: landing read (10 rows), staging 7 rows, rejects 3 rows with their quality facet
    tr = ev[4]
    assert tr["inputs"][0]["inputFacets"]["inputStatistics"]["rowCount"] == 10
    outs = {d["name"]: d for d in tr["outputs"]}
    assert (
        outs[f"/ferry/staging/flights/{FID}"]["outputFacets"]["outputStatistics"]["rowCount"] == 7
    )
    rejects = outs[f"/ferry/rejects/flights/{FID}"]
    assert rejects["facets"]["dataQualityMetrics"]["rowCount"] == 3
    assert tr["run"]["facets"]["ferry"]["rejectReasons"] == {"null:carrier": 3}
    # load: the Hive table under the metastore, its data files' directory linking to it
    load = ev[8]
    assert [(d["namespace"], d["name"]) for d in load["outputs"]] == [
        ("hive://127.0.0.1:19083", "ferry.flights"),
        (A, "/warehouse/ferry.db/flights"),
    ]
    assert load["outputs"][1]["facets"]["symlinks"]["identifiers"] == [
        {"namespace": "hive://127.0.0.1:19083", "name": "ferry.flights", "type": "TABLE"}
    ]
    assert [d["outputFacets"]["outputStatistics"]["rowCount"] for d in load["outputs"]] == [7, 7]
    assert ev[9]["outputs"][0]["name"] == "ferry.flights"
    # quarantine: FAIL with the reason code in errorMessage, on the child and the parent
    assert ev[10]["run"]["facets"]["errorMessage"]["message"] == "hdfs_timeout: x: timed out"
    assert ev[11]["run"]["facets"]["errorMessage"]["message"] == "hdfs_timeout: x: timed out"
    assert ev[10]["run"]["facets"]["ferry"]["reason"] == "hdfs_timeout"
    # refused before reading: the NAS path is the file's identity
    nas_parent = str(uuid.uuid5(uuid.NAMESPACE_URL, "ferry:ferry/nas/flights/l.csv"))
    assert ev[12]["run"]["runId"] == ev[15]["run"]["runId"] == nas_parent
    assert ev[14]["run"]["facets"]["errorMessage"]["message"].startswith("symlink_outside_nas: ")


def test_schema_facets_name_the_columns(seen: tuple[LineageObserver, Captured], specs) -> None:
    obs, cap = seen
    every_kind(obs)
    landing = cap.events[2]["outputs"][0]["facets"]["schema"]["fields"]
    table = cap.events[8]["outputs"][0]["facets"]["schema"]["fields"]
    assert [f["name"] for f in landing] == [c.name for c in specs["flights"].columns]
    assert [f["name"] for f in table] == [c.name for c in specs["flights"].table_columns]


def test_hdfs_names_follow_the_naming_spec() -> None:
    assert hdfs("hdfs://cluster-a/a/b c/é.csv") == ("hdfs://cluster-a", "/a/b c/é.csv")
    assert hdfs("hdfs://h:8020/x") == ("hdfs://h:8020", "/x")
    with pytest.raises(ValueError, match="not an hdfs"):
        hdfs("file:///x")


def test_every_event_is_valid_against_the_openlineage_schemas(
    seen: tuple[LineageObserver, Captured],
) -> None:
    reg = registry(spec_dir(REPO_ROOT), FERRY_SCHEMAS)
    obs, cap = seen
    every_kind(obs)
    assert len(cap.events) == 16
    assert {i: errors(e, reg) for i, e in enumerate(cap.events) if errors(e, reg)} == {}


def test_an_invalid_event_is_caught(seen: tuple[LineageObserver, Captured]) -> None:
    """The validation can fail: a bad run id and a facet missing a required field."""
    reg = registry(spec_dir(REPO_ROOT), FERRY_SCHEMAS)
    obs, cap = seen
    every_kind(obs)
    bad = cap.events[10]
    bad["eventType"] = "DONE"
    del bad["run"]["facets"]["errorMessage"]["programmingLanguage"]
    bad["run"]["facets"]["ferry"]["rowsIn"] = -1
    found = errors(bad, reg)
    assert len(found) == 3, found


def test_the_vendored_spec_is_the_one_the_client_names() -> None:
    """One vendored schema for each schema URL the installed client writes, stored at its URL's
    path, and nothing else: a client upgrade that names a new facet version fails here until
    its schema is vendored."""
    where = spec_dir(REPO_ROOT)
    found = schemas(where)
    assert set(found) == client_schema_urls()
    assert len(found) == 39
    for uri in found:
        assert (where / uri.removeprefix("https://openlineage.io/spec/")).is_file(), uri
    assert "https://openlineage.io/spec/2-0-2/OpenLineage.json" in found
