"""Decimal columns without silent rounding (case C20, docs/field-cases.md).

Spark's CSV reader rounds a decimal to its column's scale without a word (``12.345`` into
``decimal(10,2)`` gives ``12.35``). So a decimal column is read as text and converted here:

``scale:<col>=<value>``     more fractional digits than the scale (``12.345`` in ``decimal(10,2)``);
                            the row is rejected unless the dataset's ``decimal_rounding`` names a
                            rounding mode (``HALF_UP``, ``HALF_EVEN``), which is then applied;
``overflow:<col>=<value>``  more integer digits than ``precision - scale`` (``123456789.12``), or
                            a value whose rounding does;
``type:<col>=<value>``      not a number.

Trailing zeros are not extra digits (``12.340`` is ``12.34``). Exact down to
``38 - (precision - scale)`` fractional digits (the widest decimal Spark has): a difference past
that many digits is not seen. Thousands separators (``,``) are dropped first, as Spark's reader
does for the default locale.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from typing import TYPE_CHECKING

from ferry.datasets import ColumnSpec, DatasetSpec

if TYPE_CHECKING:
    from pyspark.sql import Column

_DECIMAL = re.compile(r"^decimal\((\d+),(\d+)\)$")
_NUMBER_TEXT = r"^[+-]?([0-9]+\.?[0-9]*|\.[0-9]+)([eE][+-]?[0-9]+)?$"


def precision_scale(type_name: str) -> tuple[int, int] | None:
    """``(precision, scale)`` of ``decimal(p,s)``, ``None`` for another type."""
    m = _DECIMAL.match(type_name)
    return (int(m.group(1)), int(m.group(2))) if m else None


def decimals(spec: DatasetSpec) -> Iterator[tuple[ColumnSpec, int, int]]:
    """The parse columns of decimal type with their precision and scale."""
    for c in spec.columns:
        ps = precision_scale(c.type)
        if ps is not None:
            yield c, *ps


def raw_column(name: str) -> str:
    """The helper column holding a decimal column's text while the row is classified."""
    return f"_ferry_raw_{name}"


def _parts(name: str, p: int, s: int, rounding: str | None) -> tuple[Column, Column, Column]:
    """(the value at full width, the value at the column's type after rounding, the scale
    problem) of the text in :func:`raw_column`."""
    from pyspark.sql import functions as F

    text = F.regexp_replace(F.col(raw_column(name)), ",", "")
    wide = text.try_cast(f"decimal(38,{38 - (p - s)})")
    half_up = wide.try_cast(f"decimal({p},{s})")  # a cast rounds HALF_UP
    value = F.bround(wide, s).try_cast(f"decimal({p},{s})") if rounding == "HALF_EVEN" else half_up
    return wide, value, wide.isNotNull() & (half_up.isNull() | (half_up != wide))


def typed(spec: DatasetSpec) -> dict[str, Column]:
    """``{column: its value}`` of each decimal column, from its text: NULL when the text is not
    a value of the column (see the module docstring for the reasons)."""
    from pyspark.sql import functions as F

    out = {}
    for c, p, s in decimals(spec):
        _, value, bad_scale = _parts(c.name, p, s, spec.decimal_rounding)
        out[c.name] = value if spec.decimal_rounding else F.when(~bad_scale, value)
    return out


def problems(spec: DatasetSpec) -> dict[str, tuple[Column, Column]]:
    """``{column: (the value is refused, its reason code prefix)}`` of each decimal column:
    ``type``, ``overflow`` or ``scale`` (the ``:<col>=<value>`` part is added by the caller)."""
    from pyspark.sql import functions as F

    out = {}
    for c, p, s in decimals(spec):
        raw = F.col(raw_column(c.name))
        wide, value, bad_scale = _parts(c.name, p, s, spec.decimal_rounding)
        numeric = F.regexp_replace(raw, ",", "").rlike(_NUMBER_TEXT)
        kind = F.when(wide.isNull() & numeric, F.lit("overflow")).when(wide.isNull(), F.lit("type"))
        if spec.decimal_rounding:
            kind = kind.when(value.isNull(), F.lit("overflow"))
        else:
            kind = kind.when(bad_scale, F.lit("scale"))
        out[c.name] = (raw.isNotNull() & kind.isNotNull(), kind)
    return out
