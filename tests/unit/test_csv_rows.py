"""Records per RFC 4180 and reject reasons a person can act on (issue 15; docs/field-cases.md, C14).

Every case asserts the exact rows and reasons; see :mod:`ferry.stages.transform.rows`.
"""

from __future__ import annotations

import datetime as dt

from pyspark.sql import Row
from pyspark.testing import assertDataFrameEqual
from tests.support.factories import dataset_spec, put

from ferry.stages.transform.counts import FileCounts, file_counts, reason_code
from ferry.stages.transform.job import run_batch
from ferry.stages.transform.rows import (
    CORRUPT_COLUMN,
    REJECT_REASON_COLUMN,
    SOURCE_COLUMN,
    classify,
    read_csv,
    transform,
)

SPEC = dataset_spec(
    "rfc",
    {"id": "int", "note": "string", "dep_delay": "int", "time_hour": "timestamp", "day": "date"},
    csv={"null_value": "NA"},
    validation={"not_null": ["id"], "ranges": {"dep_delay": {"min": -60, "max": 1440}}},
    hive={"database": "ferry", "table": "rfc", "partition_by": ["day"]},
)
SPEC_LINES = SPEC.model_copy(update={"csv": SPEC.csv.model_copy(update={"multiline": False})})
HEADER = b"id,note,dep_delay,time_hour,day\n"
TS = dt.datetime(2013, 1, 1, 5, 0)
D1 = dt.date(2013, 1, 1)
#: C14: a quoted field holding the delimiter, a doubled quote and a line break.
C14_RECORD = b'2,"N1\n2""3,x",6,2013-01-01 05:00:00,2013-01-01\n'
C14_TEXT = 'N1\n2"3,x'


def eight_records() -> bytes:
    """Header and 8 records, the second one C14's (9 physical data lines)."""
    rows = [f"{i},n{i},{i},2013-01-01 05:00:00,2013-01-01\n".encode() for i in range(3, 9)]
    return HEADER + b"1,plain,1,2013-01-01 05:00:00,2013-01-01\n" + C14_RECORD + b"".join(rows)


def test_c14_quoted_delimiter_quote_and_line_break_are_one_record(spark, tmp_path):
    """C14 through the whole job: 8 records → rows_in 8, nothing rejected, the exact text."""
    p = put(tmp_path / "land" / "c14.csv", eight_records())
    res = run_batch(
        spark,
        SPEC,
        {p: "c14"},
        staging_root=str(tmp_path / "staging"),
        rejects_root=str(tmp_path / "rejects"),
    )
    assert (res["c14"].status, res["c14"].counts) == ("transformed", FileCounts(8, 8, 0))
    staged = spark.read.parquet(res["c14"].staged_path)
    assert staged.count() == 8
    assert [r.note for r in staged.where("id = 2").collect()] == [C14_TEXT]
    assert res["c14"].rejects_path is None


def test_c14_with_multiline_off_splits_the_record_and_says_so(spark, tmp_path):
    """``csv.multiline: false`` (splittable): the quoted line break cuts the record in two; both
    halves are rejected with their reasons, nothing is dropped, rows_in counts lines."""
    p = put(tmp_path / "c14-lines.csv", eight_records())
    c = classify(read_csv(spark, [p], SPEC_LINES), SPEC_LINES)
    _valid, rejects = transform(read_csv(spark, [p], SPEC_LINES), SPEC_LINES)
    assertDataFrameEqual(
        rejects.select(CORRUPT_COLUMN, REJECT_REASON_COLUMN),
        [
            Row(_corrupt_record='2,"N1', reject_reason="fields:2/5"),
            Row(
                _corrupt_record='2""3,x",6,2013-01-01 05:00:00,2013-01-01',
                reject_reason='type:id=2""3',
            ),
        ],
    )
    assert file_counts(c, [p]) == {
        p: FileCounts(9, 7, 2, {"fields:2/5": 1, "type:id": 1}),
    }


def test_multiline_off_parses_plain_records_alike(spark, tmp_path):
    p = put(tmp_path / "plain.csv", HEADER + b'1,"a,b",5,2013-01-01 05:00:00,2013-01-01\n')
    for spec in (SPEC, SPEC_LINES):
        valid, rejects = transform(read_csv(spark, [p], spec), spec)
        assertDataFrameEqual(
            valid.drop(SOURCE_COLUMN),
            [Row(id=1, note="a,b", dep_delay=5, time_hour=TS, day=D1)],
        )
        assert rejects.count() == 0


CASES = [
    # (record, expected reject_reason or None for a valid row)
    (b"1,ok,5,2013-01-01 05:00:00,2013-01-01", None),
    (b"2,a,5,2013-01-01 05:00:00,2013-01-01,x", "fields:6/5"),  # too many fields
    (b"3,a,5", "fields:3/5"),  # too few fields
    (b"4,a,abc,2013-01-01 05:00:00,2013-01-01", "type:dep_delay=abc"),
    (b"5,a,99999999999,2013-01-01 05:00:00,2013-01-01", "overflow:dep_delay=99999999999"),
    (b"6,a,-4.7,2013-01-01 05:00:00,2013-01-01", "type:dep_delay=-4.7"),
    (b"7,a,5,2016-02-30,2013-01-01", "timestamp:time_hour=2016-02-30"),
    (b"8,a,5,2013-01-01 05:00:00,2016-02-30", "date:day=2016-02-30"),
    (b"NA,a,xyz,2013-01-01 05:00:00,2013-01-01", "type:dep_delay=xyz;null:id"),  # two problems
    (b"10,a,2000,2016-02-30,2013-01-01", "timestamp:time_hour=2016-02-30;range:dep_delay"),
    (b"11,a," + b"z" * 50 + b",2013-01-01 05:00:00,2013-01-01", "type:dep_delay=" + "z" * 40 + "…"),
    (b'12,a,"1;2\n3",2013-01-01 05:00:00,2013-01-01', "type:dep_delay=1?2?3"),
    (b'13,"a,""b""",5,2013-01-01 05:00:00,2013-01-01,extra', "fields:6/5"),  # quoted delimiter
    (b"14,a,5,2013-01-01 05:00:00", "fields:4/5"),
]


def test_each_problem_has_its_own_reason(spark, tmp_path):
    p = put(tmp_path / "cases.csv", HEADER + b"".join(r + b"\n" for r, _ in CASES))
    c = classify(read_csv(spark, [p], SPEC), SPEC)
    got = {r.id: r[REJECT_REASON_COLUMN] for r in c.collect()}
    assert got == {int(r.split(b",")[0]) if r[:2] != b"NA" else None: want for r, want in CASES}
    assert file_counts(c, [p]) == {
        p: FileCounts(
            rows_in=14,
            rows_out=1,
            rows_rejected=13,
            reject_reasons={
                "fields:6/5": 2,
                "fields:3/5": 1,
                "fields:4/5": 1,
                "type:dep_delay": 5,
                "overflow:dep_delay": 1,
                "timestamp:time_hour": 2,
                "date:day": 1,
                "null:id": 1,
                "range:dep_delay": 1,
            },
        )
    }


def test_rejects_keep_the_raw_record_of_a_refused_value(spark, tmp_path):
    p = put(tmp_path / "raw.csv", HEADER + b'4,"x\ny",abc,2013-01-01 05:00:00,2013-01-01\n')
    _valid, rejects = transform(read_csv(spark, [p], SPEC), SPEC)
    assertDataFrameEqual(
        rejects.select("id", "note", "dep_delay", CORRUPT_COLUMN, REJECT_REASON_COLUMN),
        [
            Row(
                id=4,
                note="x\ny",
                dep_delay=None,
                _corrupt_record='4,"x\ny",abc,2013-01-01 05:00:00,2013-01-01',
                reject_reason="type:dep_delay=abc",
            )
        ],
    )


def test_reason_code_strips_the_value():
    assert reason_code("type:dep_delay=a=b") == "type:dep_delay"
    assert reason_code("fields:6/5") == "fields:6/5"
    assert reason_code("null:id") == "null:id"


LEDGER = dataset_spec(
    "ledger",
    {"id": "int", "amount": "decimal(10,2)", "big": "decimal(38,5)", "day": "date"},
    hive={"database": "ferry", "table": "ledger", "partition_by": ["day"]},
)
LEDGER_HEADER = b"id,amount,big,day\n"
DECIMAL_CASES = [
    # (record, expected reject_reason or None, amount and big when valid)
    (b"1,12.34,1.12345,2016-01-01", None, ("12.34", "1.12345")),
    (b"2,12.345,1,2016-01-01", "scale:amount=12.345", None),  # C20: never silently 12.35
    (b"3,123456789.12,1,2016-01-01", "overflow:amount=123456789.12", None),
    (b"4,12.340,1.123450,2016-01-01", None, ("12.34", "1.12345")),  # trailing zeros: exact
    (b"5,abc,1,2016-01-01", "type:amount=abc", None),
    (b"6,1,1.123456,2016-01-01", "scale:big=1.123456", None),
    (b"7,-0.005,1e-6,2016-01-01", "scale:amount=-0.005;scale:big=1e-6", None),
    (
        b"12,120e-3,0.1000000000000000000000000000000000001,2016-01-01",
        "scale:big=0.1000000000000000000000000000000000001",
        None,
    ),
    (b"8,99999999.995,1,2016-01-01", "scale:amount=99999999.995", None),
    (
        b"9,1.2e3,123456789012345678901234567890123.4,2016-01-01",
        None,
        ("1200.00", "123456789012345678901234567890123.40000"),
    ),
    (b"10,,1,2016-01-01", None, (None, "1.00000")),  # empty: NULL, no reason
    (b"11,x,9,2016-02-30", "type:amount=x;date:day=2016-02-30", None),
]


def test_decimals_with_more_digits_than_the_scale_are_rejected_with_their_value(spark, tmp_path):
    """C20: a value the column cannot hold exactly is a reject naming column and value, never a
    silently rounded number; too many integer digits stay ``overflow:``."""
    from decimal import Decimal

    p = put(
        tmp_path / "ledger.csv", LEDGER_HEADER + b"".join(r + b"\n" for r, _, _ in DECIMAL_CASES)
    )
    c = classify(read_csv(spark, [p], LEDGER), LEDGER).collect()
    assert {r.id: r[REJECT_REASON_COLUMN] for r in c} == {
        int(rec.split(b",")[0]): want for rec, want, _ in DECIMAL_CASES
    }
    for r in c:
        values = next(v for rec, _, v in DECIMAL_CASES if int(rec.split(b",")[0]) == r.id)
        if values is not None:
            want = tuple(None if v is None else Decimal(v) for v in values)
            assert (r.amount, r.big) == want, r.id


def test_a_dataset_that_allows_rounding_rounds_half_up(spark, tmp_path):
    from decimal import Decimal

    spec = LEDGER.model_copy(update={"decimal_rounding": "HALF_UP"})
    amounts = {"12.345": "12.35", "12.344": "12.34", "-0.005": "-0.01", "1.2345e1": "12.35"}
    lines = [f"{i},{a},1,2016-01-01\n".encode() for i, a in enumerate(amounts)]
    lines.append(b"9,99999999.995,1.0000049,2016-01-01\n")  # rounds up past the precision
    p = put(tmp_path / "round.csv", LEDGER_HEADER + b"".join(lines))
    c = classify(read_csv(spark, [p], spec), spec).collect()
    got = {r.id: (r.amount, r[REJECT_REASON_COLUMN]) for r in c}
    assert got == {
        **{i: (Decimal(v), None) for i, v in enumerate(amounts.values())},
        9: (None, "overflow:amount=99999999.995"),
    }


def test_rejects_keep_a_refused_decimal_as_its_source_text(spark, tmp_path):
    """Issue 46: a ``scale:``/``overflow:`` reject had its decimal NULL, so ``ferry rejects``
    printed the field blank as if the source were empty; the rejects keep the text dropped."""
    from ferry.ops.rejects_cli import _record

    rows = b"2,12.345,1,2016-01-01\n3,123456789.12,1.5,2016-01-01\n5,abc,1e-6,2016-01-01\n"
    p = put(tmp_path / "ledger.csv", LEDGER_HEADER + rows)
    _valid, rejects = transform(read_csv(spark, [p], LEDGER), LEDGER)
    got = rejects.select("id", "amount", "big", REJECT_REASON_COLUMN).orderBy("id").collect()
    assert [tuple(r) for r in got] == [
        (2, "12.345", "1", "scale:amount=12.345"),
        (3, "123456789.12", "1.5", "overflow:amount=123456789.12"),
        (5, "abc", "1e-6", "type:amount=abc;scale:big=1e-6"),
    ]
    first = rejects.orderBy("id").first()
    assert _record(first, ["id", "amount", "big", "day"], ",") == "2,12.345,1,2016-01-01"
