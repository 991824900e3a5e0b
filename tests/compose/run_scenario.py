"""The test driver inside the compose networks (the ``scenario`` service, docker-compose.yml).

``test_compose_stack.py`` runs ``python -m tests.compose.run_scenario <command>`` in that container,
whose FERRY_* environment is the stages' own, so it reaches Kafka, HDFS and the metastore by the
same names. Only ferry, its dependencies and the standard library are imported: the image has no
pytest. Every command prints ONE JSON document on its last stdout line.

- ``daily``: the end-to-end scenario of tests/e2e/scenario.py (daily files and field cases);
  exit 0 when ``assert_scenario`` holds, 1 with the assertion on stderr otherwise.
- ``drop FIRST COUNT ROWS``: drop COUNT flights slices of ROWS rows (slices FIRST.. of
  :func:`ferry_kit.testing.slices.dataset_slices`, disjoint between callers) on the NAS;
  prints ``[{"relative", "file_id", "rows"}]``.
- ``settle DEADLINE_S ID...``: read the outcome topics until every file is loaded or failed, or
  DEADLINE_S passes; prints ``{"settled", "loaded": {id: count}, "failed": {id: [reasons]},
  "stamps": {id: {topic: ms}}, "unsettled": "<files without an outcome, each's last stage>"}``;
  exit 0 settled, 1 not.
- ``reached TOPIC DEADLINE_S ID...``: read the stage topics until one of the files has an event
  on TOPIC (e.g. ``transformed``), or DEADLINE_S passes; prints ``{"reached": [id...]}``; exit 0
  when one did, 1 not.
- ``hive ID...``: rows per file in the flights table (a local Spark session on the metastore);
  prints ``{id: rows}``.
- ``hs2 ID...``: rows per file in every dataset's table, read through HiveServer2 as an analyst
  reads them (:func:`ferry.clusters.hiveserver2.query`, Ferry's ticket on the two-realm
  deployment); prints ``{id: rows}`` for the files that have rows.
"""

from __future__ import annotations

import json
import sys
import tempfile
import time
import traceback
from pathlib import Path
from typing import Any


def _hive_session() -> Any:
    from ferry.clusters.spark import build_session
    from ferry.settings import get_settings

    # A local driver: the clusters' workers belong to transform and load; Hive metadata and files
    # are shared.
    return build_session(
        get_settings(), "ferry-compose-scenario", "a", hive=True, master="local[1]"
    )


def _hive_rows(spark: Any, table: str, file_ids: list[str]) -> dict[str, int]:
    from pyspark.sql import functions as F

    spark.catalog.refreshTable(table)  # load rewrote partitions since this session listed them
    rows = (
        spark.table(table)
        .where(F.col("ferry_file_id").isin(file_ids))
        .groupBy("ferry_file_id")
        .count()
        .collect()
    )
    return {r["ferry_file_id"]: int(r["count"]) for r in rows}


def daily() -> int:
    # The scenario's contract (tests/e2e/scenario.py): run_pipeline_scenario(settings, nas_dir,
    # work, hive_rows, *, deadline_s) -> ScenarioResult, then assert_scenario(result).
    from tests.e2e.scenario import assert_scenario, run_pipeline_scenario

    from ferry.settings import get_settings

    settings = get_settings()
    spark = _hive_session()
    work = Path(tempfile.mkdtemp(prefix="ferry-compose-scenario-"))
    try:
        result = run_pipeline_scenario(
            settings,
            settings.paths.nas_dir,
            work,
            lambda table, ids: _hive_rows(spark, table, ids),
            deadline_s=600,
        )
        print(json.dumps({"files": [d.relative for d in result.dropped], "hive": result.hive}))
        assert_scenario(result)
    except AssertionError:
        traceback.print_exc()
        return 1
    finally:
        spark.stop()
    return 0


def drop(first: int, count: int, rows: int) -> int:
    from ferry.settings import get_settings
    from ferry_kit.pipeline import drop_file
    from ferry_kit.testing.slices import dataset_slices

    settings = get_settings()
    work = Path(tempfile.mkdtemp(prefix="ferry-compose-drop-"))
    files = dataset_slices(settings, work, count, rows=rows, first=first)
    for f in files:
        drop_file(f.src, settings.paths.nas_dir / f.relative)
    doc = [{"relative": f.relative, "file_id": f.file_id, "rows": f.rows} for f in files]
    print(json.dumps(doc))
    return 0


def settle(deadline_s: float, ids: list[str]) -> int:
    from ferry.settings import get_settings
    from ferry_kit.pipeline import Outcomes

    outcomes = Outcomes(get_settings())
    end = time.monotonic() + deadline_s
    while not outcomes.settled(ids) and time.monotonic() < end:
        outcomes.poll(1.0)
    outcomes.poll(1.0)  # a duplicate FileLoaded right behind the first would show here
    doc = {
        "settled": outcomes.settled(ids),
        "loaded": {i: outcomes.loaded_count[i] for i in ids if i in outcomes.loaded_count},
        "failed": {i: [f.reason for f in outcomes.failed[i]] for i in ids if i in outcomes.failed},
        "stamps": {i: outcomes.stamps.get(i, {}) for i in ids},
        "unsettled": outcomes.unsettled(ids),
    }
    print(json.dumps(doc))
    return 0 if doc["settled"] else 1


def reached(topic: str, deadline_s: float, ids: list[str]) -> int:
    from ferry.settings import get_settings
    from ferry_kit.pipeline import Outcomes

    outcomes = Outcomes(get_settings())
    end = time.monotonic() + deadline_s

    def seen() -> list[str]:
        return [i for i in ids if topic in outcomes.stamps.get(i, {})]

    while not seen() and time.monotonic() < end:
        outcomes.poll(1.0)
    outcomes.close()
    print(json.dumps({"reached": seen()}))
    return 0 if seen() else 1


def hive(ids: list[str]) -> int:
    from ferry.datasets.spec import load_datasets
    from ferry.settings import get_settings

    table = load_datasets(get_settings().paths.datasets_dir)["flights"].hive.full_name
    spark = _hive_session()
    try:
        print(json.dumps(_hive_rows(spark, table, ids)))
    finally:
        spark.stop()
    return 0


def hs2(ids: list[str]) -> int:
    from ferry.clusters.hiveserver2 import query
    from ferry.datasets.spec import load_datasets
    from ferry.settings import get_settings

    settings = get_settings()
    listed = ", ".join(f"'{i}'" for i in ids)  # file ids are hex digests: nothing to escape
    rows: dict[str, int] = {}
    for spec in load_datasets(settings.paths.datasets_dir).values():
        sql = (
            f"SELECT ferry_file_id, COUNT(*) FROM {spec.hive.full_name} "
            f"WHERE ferry_file_id IN ({listed}) GROUP BY ferry_file_id"
        )
        for result in query(settings, sql):
            rows.update({str(r[0]): int(str(r[1])) for r in result.rows})
    print(json.dumps(rows))
    return 0


def main(argv: list[str]) -> int:
    cmd, args = (argv[0], argv[1:]) if argv else ("daily", [])
    if cmd == "daily":
        return daily()
    if cmd == "drop":
        return drop(int(args[0]), int(args[1]), int(args[2]))
    if cmd == "settle":
        return settle(float(args[0]), args[1:])
    if cmd == "reached":
        return reached(args[0], float(args[1]), args[2:])
    if cmd == "hive":
        return hive(args)
    if cmd == "hs2":
        return hs2(args)
    print(f"unknown command {cmd!r}: daily | drop | settle | reached | hive | hs2", file=sys.stderr)
    return 2


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
