"""Records per RFC 4180 and reject reasons a person can act on (issue 15; docs/field-cases.md, C14).

Every case asserts the exact rows and reasons; see :mod:`ferry.stages.transform.rows`.
"""

from __future__ import annotations

import datetime as dt

from pyspark.sql import Row
from pyspark.testing import assertDataFrameEqual
from tests.factories import dataset_spec, put

from ferry.stages.transform.job import run_batch
from ferry.stages.transform.rows import (
    CORRUPT_COLUMN,
    REJECT_REASON_COLUMN,
    SOURCE_COLUMN,
    FileCounts,
    classify,
    file_counts,
    read_csv,
    reason_code,
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
