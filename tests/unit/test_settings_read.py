"""Ferry's settings hold what an edge node sets: every field of :class:`ferry.settings.Settings`
(each section, each nested model) is read somewhere in the product (``services/ferry``). A field
only the kit reads (a local server's heap, the KDC's port, supervisord's retries) belongs to the
kit's settings (:mod:`ferry_kit.settings`), which read the same environment and YAML keys.

"Read" is looked up in the product's code with ``ast``: an attribute of that name
(``settings.kafka.port``), or the name as a positional string argument of a call
(``getattr(settings.paths, "landing_path")``, ``given.get("hadoop_conf_dir")``,
``Zone(..., "landing_path", ...)``). Field names shared by two sections (``host``, ``port``) are
checked by name only: a kit-only field that shares a product field's name would pass.
"""

from __future__ import annotations

import ast
import typing
from pathlib import Path

from pydantic import BaseModel

from ferry.settings import Settings

PRODUCT = Path(__file__).resolve().parents[2] / "services" / "ferry"


def fields(model: type[BaseModel], path: str = "") -> dict[str, str]:
    """``dotted path → field name`` of every field of ``model``, nested models included."""
    out: dict[str, str] = {}
    for name, field in model.model_fields.items():
        out[f"{path}{name}"] = name
        for arg in (field.annotation, *typing.get_args(field.annotation)):
            if isinstance(arg, type) and issubclass(arg, BaseModel):
                out |= fields(arg, f"{path}{name}.")
    return out


def names_read(source: Path) -> set[str]:
    """Attribute names, and string constants passed positionally to a call, in every module
    under ``source``."""
    found: set[str] = set()
    for path in source.rglob("*.py"):
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            if isinstance(node, ast.Attribute):
                found.add(node.attr)
            elif isinstance(node, ast.Call):
                found |= {
                    a.value
                    for a in node.args
                    if isinstance(a, ast.Constant) and isinstance(a.value, str)
                }
    return found


def unread(model: type[BaseModel], read: set[str]) -> list[str]:
    return sorted(path for path, name in fields(model).items() if name not in read)


def test_every_setting_of_ferry_is_read_by_ferry():
    assert unread(Settings, names_read(PRODUCT)) == []


def test_the_check_finds_a_field_nobody_reads(tmp_path):
    class Section(BaseModel):
        used: int = 0
        heap_mb: int = 0

    class Top(BaseModel):
        section: Section = Section()
        by_name: str = ""

    (tmp_path / "m.py").write_text("def f(s):\n    return s.section.used, getattr(s, 'by_name')\n")
    assert unread(Top, names_read(tmp_path)) == ["section.heap_mb"]
