"""Issue 27 on the whole pipeline: a replay leaves exactly the file's new output in Hive (C19),
a crash between removing a file's old data files and adding its new ones is repaired by the
redelivered batch, decimals are never silently rounded (C20). Exact Hive rows per file, read
through HiveServer2 as an analyst does.

The module runs its own pipeline with a private datasets directory holding a ``ledger`` dataset
(partitioned by a derived ``book_date``) whose definition the tests change, and two decimal
datasets. It uses only what any Ferry version offers (the CLI, the services, HiveServer2), so
it can be run against an earlier one.
"""

from __future__ import annotations

import os
import signal
import uuid
from collections.abc import Iterator
from decimal import Decimal
from pathlib import Path

import pytest

from ferry.clusters.hiveserver2 import query
from ferry.core.identity import derive_file_id, sha256_file
from ferry_kit.pipeline import Outcomes, drop_file
from ferry_kit.testing.waiting import wait_for
from tests.e2e.conftest import Pipeline, start_pipeline, stop_pipeline
from tests.e2e.scenario import wait_for_outcomes

pytestmark = pytest.mark.e2e

HEADER = "txn_date,acct_id,amount,big,note\n"
DEFINITION = """name: {name}
nas: {{subdir: {name}, pattern: "{name}_*.csv"}}
columns:
  - {{name: txn_date, type: date}}
  - {{name: acct_id, type: int}}
  - {{name: amount, type: "decimal(10,2)"}}
  - {{name: big, type: "decimal(38,5)"}}
  - {{name: note, type: string}}
csv: {{header: true, null_value: "NA"}}
validation:
  not_null: [txn_date, acct_id]
  ranges: {ranges}
derived:
  - {{name: book_date, type: date, expr: "{book_date}"}}
hive: {{database: ferry, table: {table}, partition_by: [book_date]}}
{extra}
"""


def write_definition(
    defs: Path,
    token: str,
    name: str,
    *,
    ranges: str = "{}",
    book_date: str = "txn_date",
    extra: str = "",
) -> None:
    """Write dataset ``name``'s definition (table ``ferry.<name>_<token>``) into ``defs``."""
    text = DEFINITION.format(
        name=name, ranges=ranges, book_date=book_date, table=f"{name}_{token}", extra=extra
    )
    (defs / f"{name}.yaml").write_text(text, encoding="utf-8")


class Ledger:
    """The module's pipeline and the definitions it changes."""

    def __init__(self, p: Pipeline, defs: Path, token: str) -> None:
        self.p, self.defs, self.token = p, defs, token
        self.outcomes = Outcomes(p.settings)

    def table(self, name: str = "ledger") -> str:
        return f"ferry.{name}_{self.token}"

    def define(self, *, ranges: str = "{}", book_date: str = "txn_date") -> None:
        """Change the ``ledger`` definition: transform and load read it again before their next
        batch (``ferry.datasets.reload``), as an operator's edit is picked up, with no restart."""
        write_definition(self.defs, self.token, "ledger", ranges=ranges, book_date=book_date)

    def restart(self, *stages: str, env: dict[str, str] | None = None) -> None:
        """Stop ``stages`` (SIGTERM) and start them again, with ``env`` added to theirs only."""
        for stage in stages:
            self.p.group.kill(stage, signal.SIGTERM)
        saved = {k: os.environ.get(k) for k in env or {}}
        os.environ.update(env or {})
        try:
            for stage in stages:
                self.p.group.start(stage)
        finally:
            for k, v in saved.items():
                if v is None:
                    os.environ.pop(k, None)
                else:
                    os.environ[k] = v

    def drop(self, name: str, dataset: str, lines: list[str]) -> str:
        src = self.p.work / "src" / f"{dataset}_{name}.csv"
        src.parent.mkdir(parents=True, exist_ok=True)
        src.write_text(HEADER + "".join(f"{line}\n" for line in lines), encoding="utf-8")
        fid = derive_file_id(dataset, sha256_file(src))
        drop_file(src, self.p.nas_dir / dataset / src.name)
        return fid

    def wait_loaded(self, fid: str, times: int, what: str, deadline_s: float = 300) -> None:
        wait_for_outcomes(
            self.outcomes,
            lambda: self.outcomes.loaded_count.get(fid, 0) >= times,
            f"{what}: {fid} loaded {times} time(s)",
            deadline_s,
            self.p.group.check_alive,
        )

    def replay_transform(self, fid: str) -> None:
        done = self.p.ferry("replay", "transform", "--file", fid)
        assert done.returncode == 0, done.stdout + done.stderr

    def rows(self, fids: list[str], name: str = "ledger") -> dict[tuple[str, str], int]:
        """Hive rows per (file id, book_date) of ``fids``, over JDBC."""
        ids = ", ".join(f"'{f}'" for f in fids)
        [res] = query(
            self.p.settings,
            f"SELECT ferry_file_id, CAST(book_date AS STRING), count(*) FROM {self.table(name)} "
            f"WHERE ferry_file_id IN ({ids}) GROUP BY ferry_file_id, book_date",
        )
        return {(r[0], r[1]): int(r[2]) for r in res.rows}


@pytest.fixture(scope="module")
def ledger(stack, tmp_path_factory) -> Iterator[Ledger]:  # type: ignore[no-untyped-def]
    work = tmp_path_factory.mktemp("layout")
    defs = work / "datasets"
    defs.mkdir()
    token = uuid.uuid4().hex[:8]
    extra = {"paths.datasets_dir": defs, "kafka.session_timeout_ms": 10_000}
    write_definition(defs, token, "ledger")
    write_definition(defs, token, "ledgerd")
    write_definition(defs, token, "ledgerr", extra="decimal_rounding: HALF_UP")
    p = start_pipeline(stack, work, extra)
    lg = Ledger(p, defs, token)
    try:
        yield lg
    finally:
        lg.outcomes.close()
        stop_pipeline(p)


def test_a_replay_whose_new_output_is_empty_leaves_no_row_of_the_file(ledger):  # type: ignore[no-untyped-def]
    """C19 (the issue's case): F has 6 records, 4 loaded; a rule tightened so every record is
    rejected; ``ferry replay transform --file F``: Hive holds none of F's rows (0 of 6 out),
    and G, in the same partition, keeps its rows."""
    f = ledger.drop(
        "f",
        "ledger",
        [f"2016-01-01,{i},1.00,1,f{i}" for i in range(1, 5)]
        + ["2016-01-01,NA,1.00,1,null", "2016-01-01,NA,2.00,1,null"],
    )
    g = ledger.drop("g", "ledger", ["2016-01-01,150,3.00,1,g1", "2016-01-01,160,4.00,1,g2"])
    ledger.wait_loaded(f, 1, "first load")
    ledger.wait_loaded(g, 1, "first load")
    m = ledger.outcomes.loaded[f].manifest
    assert (m.rows_in, m.rows_out, m.rows_rejected) == (6, 4, 2)
    assert ledger.rows([f, g]) == {(f, "2016-01-01"): 4, (g, "2016-01-01"): 2}

    ledger.define(ranges="{acct_id: {min: 100, max: 200}}")
    ledger.replay_transform(f)
    ledger.wait_loaded(f, 2, "the replay")
    m = ledger.outcomes.loaded[f].manifest
    assert (m.rows_in, m.rows_out, m.rows_rejected) == (6, 0, 6)
    assert ledger.rows([f, g]) == {(g, "2016-01-01"): 2}


def test_a_replay_after_a_definition_change_moves_the_files_rows_to_their_new_partition(
    ledger,
):  # type: ignore[no-untyped-def]
    """C19: the derived partition column is computed differently (a day later); after the replay
    the file's rows are all in the new partition, none in the old one."""
    ledger.define(ranges="{acct_id: {min: 100, max: 200}}")
    h = ledger.drop("h", "ledger", [f"2016-01-05,{120 + i},1.00,1,h{i}" for i in range(3)])
    ledger.wait_loaded(h, 1, "first load")
    assert ledger.rows([h]) == {(h, "2016-01-05"): 3}
    ledger.define(ranges="{acct_id: {min: 100, max: 200}}", book_date="date_add(txn_date, 1)")
    ledger.replay_transform(h)
    ledger.wait_loaded(h, 2, "the replay")
    assert ledger.rows([h]) == {(h, "2016-01-06"): 3}


def test_a_crash_between_removing_a_files_old_data_files_and_adding_its_new_ones_is_repaired(
    ledger,
):  # type: ignore[no-untyped-def]
    """The load service is stopped (SIGKILL) after it removed K's old data files and before it
    moved the new ones in: a reader sees none of K's rows then (never both), other files'
    rows stay; the restarted service gets the batch again (its offset was not committed) and
    leaves K's rows exactly once."""
    ledger.define(ranges="{acct_id: {min: 100, max: 200}}")
    k = ledger.drop("k", "ledger", [f"2016-02-01,{130 + i},1.00,1,k{i}" for i in range(4)])
    n = ledger.drop("n", "ledger", ["2016-02-01,140,1.00,1,n0"])
    ledger.wait_loaded(k, 1, "first load")
    ledger.wait_loaded(n, 1, "first load")
    assert ledger.rows([k, n]) == {(k, "2016-02-01"): 4, (n, "2016-02-01"): 1}

    log = ledger.p.work / "logs" / "load.log"
    seen = log.read_text(errors="replace").count("fail point filetable.removed: hang")
    ledger.restart("load", env={"FERRY_FAILPOINTS": "filetable.removed=hang"})
    ledger.replay_transform(k)  # a new transform output of K: the load replaces its rows
    wait_for(
        lambda: log.read_text(errors="replace").count("fail point filetable.removed: hang") > seen,
        "the load service stopped between removing K's old data files and adding its new ones",
        300,
    )
    assert ledger.rows([k, n]) == {(n, "2016-02-01"): 1}  # what a reader sees in the window
    ledger.p.group.kill("load", signal.SIGKILL)
    ledger.p.group.start("load")
    ledger.wait_loaded(k, 2, "the redelivered batch")
    assert ledger.rows([k, n]) == {(k, "2016-02-01"): 4, (n, "2016-02-01"): 1}


def test_decimals_are_rejected_with_their_column_and_value_unless_rounding_is_allowed(
    ledger, cluster_spark
):  # type: ignore[no-untyped-def]
    """C20: 12.345 into decimal(10,2) is ``scale:amount=12.345`` (never 12.35 silently),
    123456789.12 stays ``overflow:amount=…``, 1.123456 into decimal(38,5) is ``scale:big=…``;
    a dataset with ``decimal_rounding: HALF_UP`` stores 12.35."""
    lines = [
        "2016-03-01,101,12.34,1.12345,ok",
        "2016-03-01,102,12.345,1,scale",
        "2016-03-01,103,123456789.12,1,overflow",
        "2016-03-01,104,1,1.123456,big scale",
        "2016-03-01,105,12.340,1.123450,trailing zeros",
    ]
    d = ledger.drop("d", "ledgerd", lines)
    r = ledger.drop("r", "ledgerr", lines)
    ledger.wait_loaded(d, 1, "decimals")
    ledger.wait_loaded(r, 1, "decimals, rounding allowed")
    m = ledger.outcomes.loaded[d].manifest
    assert (m.rows_in, m.rows_out, m.rows_rejected) == (5, 2, 3)
    assert dict(m.reject_reasons) == {"scale:amount": 1, "overflow:amount": 1, "scale:big": 1}
    rejects = cluster_spark.read.parquet(m.uris["rejects"]).select("acct_id", "reject_reason")
    assert sorted(map(tuple, rejects.collect())) == [
        (102, "scale:amount=12.345"),
        (103, "overflow:amount=123456789.12"),
        (104, "scale:big=1.123456"),
    ]
    [res] = query(
        ledger.p.settings,
        f"SELECT acct_id, amount, big FROM {ledger.table('ledgerd')} ORDER BY acct_id",
    )
    assert [(int(a), Decimal(x), Decimal(y)) for a, x, y in res.rows] == [
        (101, Decimal("12.34"), Decimal("1.12345")),
        (105, Decimal("12.34"), Decimal("1.12345")),
    ]
    mr = ledger.outcomes.loaded[r].manifest
    assert (mr.rows_out, dict(mr.reject_reasons)) == (4, {"overflow:amount": 1})
    [res] = query(
        ledger.p.settings,
        f"SELECT acct_id, amount, big FROM {ledger.table('ledgerr')} ORDER BY acct_id",
    )
    assert [(int(a), Decimal(x), Decimal(y)) for a, x, y in res.rows] == [
        (101, Decimal("12.34"), Decimal("1.12345")),
        (102, Decimal("12.35"), Decimal("1.00000")),
        (104, Decimal("1.00"), Decimal("1.12346")),
        (105, Decimal("12.34"), Decimal("1.12345")),
    ]
