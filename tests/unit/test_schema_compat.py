"""The schema evolution gate: `ferry schemas check` passes good changes and fails breaking ones."""

from __future__ import annotations

import io
import json
import shutil
from collections.abc import Callable
from pathlib import Path
from typing import Any

import fastavro
import pytest
from fastavro.read import SchemaResolutionError
from typer.testing import CliRunner

from ferry.core.wire.avro import load_schema_dir
from ferry.core.wire.schema_compat import check_schemas, resolution_problems
from ferry.errors import ConfigError
from ferry.ops.schemas_cli import app, release_schemas
from ferry.settings import get_settings

REPO_SCHEMAS = get_settings().paths.schemas_dir


def test_repo_schemas_pass_the_check() -> None:
    """The build gate: the schemas in the repo read and are read by every released version."""
    assert check_schemas(REPO_SCHEMAS) == []


@pytest.fixture
def schemas(tmp_path: Path) -> Path:
    """A copy of the repo's current schemas, released as 1.0, ready to be edited."""
    for path in REPO_SCHEMAS.glob("ferry.*.avsc"):
        shutil.copy(path, tmp_path / path.name)
    release_schemas(tmp_path, "1.0")
    return tmp_path


def edit(schemas_dir: Path, name: str, change: Callable[[dict[str, Any]], None]) -> None:
    path = schemas_dir / f"ferry.{name}.avsc"
    doc = json.loads(path.read_text())
    change(doc)
    path.write_text(json.dumps(doc, indent=2))


def add_field(field: dict[str, Any]) -> Callable[[dict[str, Any]], None]:
    return lambda doc: doc["fields"].append(field)


def set_field_type(name: str, type_: Any) -> Callable[[dict[str, Any]], None]:
    def change(doc: dict[str, Any]) -> None:
        for f in doc["fields"]:
            if f["name"] == name:
                f["type"] = type_

    return change


def test_release_snapshot_is_exact_copy(schemas: Path) -> None:
    released = schemas / "released" / "1.0"
    names = sorted(p.name for p in schemas.glob("ferry.*.avsc"))
    assert sorted(p.name for p in released.iterdir()) == names
    for name in names:
        assert (released / name).read_bytes() == (schemas / name).read_bytes()
    assert check_schemas(schemas) == []


def test_field_added_with_default_passes(schemas: Path) -> None:
    edit(
        schemas,
        "FileManifest",
        add_field({"name": "owner", "type": "string", "default": "", "doc": "Owner."}),
    )
    assert check_schemas(schemas) == []


def test_field_added_without_default_fails(schemas: Path) -> None:
    edit(schemas, "FileManifest", add_field({"name": "owner", "type": "string", "doc": "Owner."}))
    problems = check_schemas(schemas)
    # FileManifest itself and the five events that embed it: each cannot read release 1.0 data.
    assert len(problems) == 6
    assert (
        "ferry.FileManifest: current cannot read release 1.0 data: ferry.FileManifest.owner: "
        "reader field has no default and the writer does not write it" in problems
    )


def test_field_removed_that_old_readers_need_fails(schemas: Path) -> None:
    edit(
        schemas,
        "FileLoaded",
        lambda doc: doc.update(fields=[f for f in doc["fields"] if f["name"] != "table"]),
    )
    assert check_schemas(schemas) == [
        "ferry.FileLoaded: release 1.0 cannot read current data: ferry.FileLoaded.table: "
        "reader field has no default and the writer does not write it"
    ]


def test_type_narrowed_or_widened_fails_in_one_direction(schemas: Path) -> None:
    edit(schemas, "FileFailed", set_field_type("attempt", "long"))  # int -> long
    assert check_schemas(schemas) == [
        "ferry.FileFailed: release 1.0 cannot read current data: ferry.FileFailed.attempt: "
        "writer type long cannot be read as int"
    ]


def test_union_branch_added_fails_forward(schemas: Path) -> None:
    edit(schemas, "FileFailed", set_field_type("source_offset", ["null", "long", "string"]))
    assert check_schemas(schemas) == [
        "ferry.FileFailed: release 1.0 cannot read current data: ferry.FileFailed.source_offset: "
        "writer type string matches no branch of reader union [null, long]"
    ]


def test_type_removed_fails(schemas: Path) -> None:
    (schemas / "ferry.FileTransferred.avsc").unlink()
    assert check_schemas(schemas) == [
        "ferry.FileTransferred: in release 1.0 but removed from current"
    ]


def test_field_without_doc_fails(schemas: Path) -> None:
    edit(schemas, "FileLoaded", add_field({"name": "note", "type": "string", "default": ""}))
    assert check_schemas(schemas) == ["ferry.FileLoaded.avsc: field FileLoaded.note has no doc"]


def _fastavro_reads(writer: Any, reader: Any, datum: dict[str, Any]) -> bool:
    buf = io.BytesIO()
    fastavro.schemaless_writer(buf, writer, datum)
    buf.seek(0)
    try:
        fastavro.schemaless_reader(buf, writer, reader)
    except SchemaResolutionError:
        return False
    return True


def test_checker_agrees_with_fastavro_both_outcomes(schemas: Path) -> None:
    old = load_schema_dir(schemas / "released" / "1.0")["ferry.FileManifest"]
    datum = {
        "file_id": "f",
        "dataset": "d",
        "source_path": "p",
        "size_bytes": 1,
        "sha256": "s",
        "created_at": 0,
        "updated_at": 0,
        "trace_id": "t",
    }
    edit(schemas, "FileManifest", add_field({"name": "owner", "type": "string", "doc": "Owner."}))
    no_default = load_schema_dir(schemas)["ferry.FileManifest"]
    assert resolution_problems(old, no_default) != []
    assert _fastavro_reads(old, no_default, datum) is False

    edit(schemas, "FileManifest", lambda doc: doc["fields"][-1].update(default="nobody"))
    with_default = load_schema_dir(schemas)["ferry.FileManifest"]
    assert resolution_problems(old, with_default) == []
    assert _fastavro_reads(old, with_default, datum) is True


def test_cli_check_exit_codes(schemas: Path) -> None:
    runner = CliRunner()
    ok = runner.invoke(app, ["check", "--dir", str(schemas)])
    assert ok.exit_code == 0, ok.output
    edit(schemas, "FileManifest", add_field({"name": "owner", "type": "string", "doc": "Owner."}))
    bad = runner.invoke(app, ["check", "--dir", str(schemas)])
    assert bad.exit_code == 1
    assert "6 schema problem(s)" in bad.output


def test_cli_release_and_its_refusals(schemas: Path) -> None:
    runner = CliRunner()
    made = runner.invoke(app, ["release", "1.1", "--dir", str(schemas)])
    assert made.exit_code == 0, made.output
    assert (schemas / "released" / "1.1" / "ferry.FileFailed.avsc").is_file()
    again = runner.invoke(app, ["release", "1.1", "--dir", str(schemas)])
    assert again.exit_code == 1
    assert "already exists" in again.output
    with pytest.raises(ConfigError, match="must look like"):
        release_schemas(schemas, "../evil")
    edit(schemas, "FileManifest", add_field({"name": "owner", "type": "string", "doc": "Owner."}))
    with pytest.raises(ConfigError, match="fail the check"):
        release_schemas(schemas, "1.2")
    assert not (schemas / "released" / "1.2").exists()
