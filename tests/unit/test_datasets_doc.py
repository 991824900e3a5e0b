"""docs/datasets.md documents every key of the dataset YAML, generated from the model: a field
added to the model without a description or an example, or a table not regenerated after a
change (``ferry datasets reference --write docs/datasets.md``), fails here."""

from __future__ import annotations

import pytest
from pydantic import Field
from tests.support.paths import REPO_ROOT

from ferry.datasets import reference
from ferry.datasets.fields import CsvOptions

DOC = REPO_ROOT / "docs" / "datasets.md"


def test_every_key_of_the_model_has_a_description_and_an_example() -> None:
    assert reference.undocumented() == []


def test_the_reference_in_the_doc_is_the_generated_one() -> None:
    text = DOC.read_text(encoding="utf-8")
    assert reference.replace_block(text, reference.markdown()) == text, (
        "docs/datasets.md is stale: run `ferry datasets reference --write docs/datasets.md`"
    )


def test_every_key_has_a_row_with_its_type_and_default() -> None:
    table = reference.markdown()
    keys = [path for path, _tp, _f in reference.fields()]
    assert len(keys) == len(set(keys)) == table.count("\n| `")
    for key in ("csv.delimiter", "columns[].type", "validation.ranges.<column>.min"):
        assert f"| `{key}` |" in table
    assert "| `csv.delimiter` | string | `','` | Field separator, one character. | `;` |" in table
    assert '| `finished.policy` | "stable" or "marker" | `stable` |' in table
    assert "| `hive.table` | string | required |" in table


def test_an_undocumented_field_is_caught(monkeypatch: pytest.MonkeyPatch) -> None:
    """The check can fail: a field without description or example is named."""
    fields = dict(CsvOptions.model_fields)
    fields["comment"] = Field(default="#")  # type: ignore[assignment]
    fields["comment"].annotation = str
    monkeypatch.setattr(CsvOptions, "model_fields", fields)
    assert reference.undocumented() == [
        "csv.comment: no description",
        "csv.comment: no example",
    ]
    assert "| `csv.comment` | string | `'#'` |  |  |" in reference.markdown()
