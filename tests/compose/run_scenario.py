"""Run the end-to-end scenario inside the compose network (the ``scenario`` service).

``test_compose_stack.py`` executes ``python -m tests.compose.run_scenario`` in that container, whose
FERRY_* environment is the stages' own (docker-compose.yml, ``x-ferry-env``), so the scenario
reaches Kafka, HDFS and the metastore by the same names as the stages. Only ferry, its
dependencies and the standard library are imported: the image has no pytest.

Exit code 0 when ``assert_scenario`` holds; 1 with the assertion on stderr otherwise. Prints one
JSON line with the files and their outcomes either way.
"""

from __future__ import annotations

import json
import sys
import tempfile
import traceback
from pathlib import Path


def main() -> int:
    # The scenario's contract (tests/e2e/scenario.py): run_pipeline_scenario(settings, nas_dir,
    # work, hive_rows, *, deadline_s) -> ScenarioResult, then assert_scenario(result).
    from tests.e2e.scenario import assert_scenario, run_pipeline_scenario

    from ferry.clusters.spark import build_session
    from ferry.core.config import get_settings

    settings = get_settings()
    # Count rows with a local driver: the worker's two cores belong to transform and load, whose
    # long-lived applications would keep a third one waiting. Hive metadata and files are shared.
    spark = build_session(settings, "ferry-compose-scenario", "a", hive=True, master="local[1]")

    def hive_rows(table: str, file_ids: list[str]) -> dict[str, int]:
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

    work = Path(tempfile.mkdtemp(prefix="ferry-compose-scenario-"))
    try:
        result = run_pipeline_scenario(
            settings, settings.paths.nas_dir, work, hive_rows, deadline_s=900
        )
        summary = {"files": [d.relative for d in result.dropped], "hive": result.hive}
        print(json.dumps(summary, default=str))
        assert_scenario(result)
    except AssertionError:
        traceback.print_exc()
        return 1
    finally:
        spark.stop()
    return 0


if __name__ == "__main__":
    sys.exit(main())
