"""The nemesis's strangers' records (issue 47, case C24): none decodes as a Ferry event, each
for its own reason, and the same seed gives the same records."""

from __future__ import annotations

from pathlib import Path

import pytest

from ferry.core.wire.avro import default_codec
from ferry.errors import SerializationError
from ferry_kit.nemesis.faults import stranger_records

SCHEMAS = Path(__file__).resolve().parents[2] / "schemas"


def test_each_stranger_fails_to_decode_with_its_own_reason() -> None:
    codec = default_codec(SCHEMAS)
    known = next(iter(codec.known_fingerprints()))
    records = stranger_records(7, known)
    assert [v is None for _, v in records] == [False, False, False, True]
    reasons = []
    for _, value in records[:3]:
        with pytest.raises(SerializationError) as err:
            codec.decode(value)  # type: ignore[arg-type]
        reasons.append(err.value.reason)
    assert reasons == ["undecodable", "undecodable", "unknown_schema"]
    assert records[1][1][:10] == b"\xc3\x01" + known  # a Ferry header, then a cut payload
    assert len({k for k, _ in records}) == 4


def test_the_same_seed_gives_the_same_records_and_another_seed_others() -> None:
    known = bytes(8)
    assert stranger_records(3, known) == stranger_records(3, known)
    assert stranger_records(3, known) != stranger_records(4, known)
