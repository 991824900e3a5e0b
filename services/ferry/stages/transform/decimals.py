"""Decimal columns without silent rounding (case C20, docs/field-cases.md).

Spark's CSV reader rounds a decimal to its column's scale without a word (``12.345`` into
``decimal(10,2)`` gives ``12.35``). So a decimal column is read as text and converted here:

``scale:<col>=<value>``     more fractional digits than the scale (``12.345`` in ``decimal(10,2)``);
                            the row is rejected unless the dataset's ``decimal_rounding`` names
                            the rounding mode, ``HALF_UP`` (the one Spark's decimal cast applies:
                            ``12.345`` → ``12.35``, ``-0.005`` → ``-0.01``);
``overflow:<col>=<value>``  more integer digits than ``precision - scale`` (``123456789.12``), or
                            a value whose rounding needs one more;
``type:<col>=<value>``      not a number.

The fractional digits are counted on the text, exponent included, trailing zeros not
(``12.340`` is ``12.34``; ``1e-6`` has 6): exact for any length. Surrounding spaces and
thousands separators (``,``) are dropped first, as Spark's reader does for the default locale.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from typing import TYPE_CHECKING

from ferry.datasets.fields import ColumnSpec
from ferry.datasets.spec import DatasetSpec

if TYPE_CHECKING:
    from pyspark.sql import Column

_DECIMAL = re.compile(r"^decimal\((\d+),(\d+)\)$")
_NUMBER_TEXT = r"^[+-]?([0-9]+\.?[0-9]*|\.[0-9]+)([eE][+-]?[0-9]+)?$"
#: (integer digits, fractional digits, exponent) of a number's text
_PARTS = r"^[+-]?([0-9]*)\.?([0-9]*)(?:[eE]([+-]?[0-9]+))?$"


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


def _parts(name: str, p: int, s: int) -> tuple[Column, Column, Column]:
    """(the text is a number, its fractional digits, its value at the column's type rounded
    HALF_UP: NULL when the integer part does not fit) of the text in :func:`raw_column`."""
    from pyspark.sql import functions as F

    text = F.trim(F.regexp_replace(F.col(raw_column(name)), ",", ""))
    numeric = text.rlike(_NUMBER_TEXT)
    whole, frac = F.regexp_extract(text, _PARTS, 1), F.regexp_extract(text, _PARTS, 2)
    exp = F.coalesce(F.regexp_extract(text, _PARTS, 3).try_cast("int"), F.lit(0))
    # the digits without trailing zeros, and where the point is among them
    digits = F.regexp_replace(F.concat(whole, frac), "0+$", "")
    fraction = F.greatest(F.lit(0), F.length(digits) - (F.length(whole) + exp))
    return numeric, fraction, text.try_cast(f"decimal({p},{s})")  # a cast rounds HALF_UP


def typed(spec: DatasetSpec) -> dict[str, Column]:
    """``{column: its value}`` of each decimal column, from its text: NULL when the text is not
    a value of the column (see the module docstring for the reasons)."""
    from pyspark.sql import functions as F

    out = {}
    for c, p, s in decimals(spec):
        _, fraction, value = _parts(c.name, p, s)
        out[c.name] = value if spec.decimal_rounding else F.when(fraction <= s, value)
    return out


def problems(spec: DatasetSpec) -> dict[str, tuple[Column, Column]]:
    """``{column: (the value is refused, its reason code prefix)}`` of each decimal column:
    ``type``, ``scale`` or ``overflow`` (the ``:<col>=<value>`` part is added by the caller)."""
    from pyspark.sql import functions as F

    out = {}
    for c, p, s in decimals(spec):
        raw = F.col(raw_column(c.name))
        numeric, fraction, value = _parts(c.name, p, s)
        kind = F.when(~numeric, F.lit("type"))
        if not spec.decimal_rounding:
            kind = kind.when(fraction > s, F.lit("scale"))
        kind = kind.when(value.isNull(), F.lit("overflow"))
        out[c.name] = (raw.isNotNull() & kind.isNotNull(), kind)
    return out
