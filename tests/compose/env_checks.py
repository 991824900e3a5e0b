"""Ferry's settings seen as environment variables, for the compose and image checks: which
``FERRY_*`` names the settings model accepts, and settings built from an environment alone (the
kit's :class:`~ferry_kit.settings.KitSettings`: every container runs the image holding both).

Source of the rules: ``services/ferry/settings/__init__.py`` (pydantic-settings, prefix ``FERRY_``,
nested delimiter ``__``; ``FERRY_CONFIG`` names the YAML file).
"""

from __future__ import annotations

import os
import re
import types
import typing
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from typing import Any

from pydantic import BaseModel

#: Environment variables Ferry reads that are not settings fields (config.py: the YAML file).
EXTRA_FERRY_VARS = frozenset({"FERRY_CONFIG"})
#: A dict key inside an env name (e.g. the cluster name in FERRY_CLUSTERS__A__HOST): no ``__``.
_KEY = r"[A-Z0-9]+(?:_[A-Z0-9]+)*"


def _unwrap_optional(ann: Any) -> Any:
    origin = typing.get_origin(ann)
    if origin in (typing.Union, types.UnionType):
        args = [a for a in typing.get_args(ann) if a is not type(None)]
        if len(args) == 1:
            return args[0]
    return ann


def _is_model(ann: Any) -> bool:
    return isinstance(ann, type) and issubclass(ann, BaseModel)


def ferry_env_patterns(
    settings_cls: type[BaseModel] | None = None, prefix: str = "FERRY_"
) -> list[re.Pattern[str]]:
    """Full-match patterns of every environment variable name the settings model accepts.

    Walks the pydantic model: a field ``kafka`` of model type gives ``FERRY_KAFKA`` (a JSON value)
    and ``FERRY_KAFKA__<FIELD>`` for each of its fields, recursively; a ``dict[str, Model]`` field
    (``clusters``) gives ``FERRY_CLUSTERS__<KEY>`` and ``FERRY_CLUSTERS__<KEY>__<FIELD>``.
    """
    if settings_cls is None:
        from ferry_kit.settings import KitSettings

        settings_cls = KitSettings
    out: list[str] = [re.escape(n) for n in sorted(EXTRA_FERRY_VARS)] if prefix == "FERRY_" else []

    def walk(model: type[BaseModel], pre: str) -> None:
        for fname, field in model.model_fields.items():
            env = pre + re.escape(fname.upper())
            out.append(env)
            ann = _unwrap_optional(field.annotation)
            if _is_model(ann):
                walk(ann, env + "__")
            elif typing.get_origin(ann) is dict:
                args = typing.get_args(ann)
                value = _unwrap_optional(args[1]) if len(args) == 2 else None
                out.append(f"{env}__{_KEY}")
                if _is_model(value):
                    walk(value, f"{env}__{_KEY}__")

    walk(settings_cls, re.escape(prefix))
    return [re.compile(p) for p in out]


def unknown_ferry_keys(
    env: Mapping[str, Any], patterns: list[re.Pattern[str]] | None = None
) -> list[str]:
    """``FERRY_*`` names in ``env`` that no settings field accepts (pydantic-settings would ignore
    a misspelt top-level name silently, e.g. ``FERRY_VARDIR``)."""
    patterns = patterns if patterns is not None else ferry_env_patterns()
    return sorted(
        k for k in env if k.startswith("FERRY_") and not any(p.fullmatch(k) for p in patterns)
    )


@contextmanager
def ferry_environ(env: Mapping[str, str]) -> Iterator[None]:
    """``os.environ`` with every ``FERRY_*`` variable replaced by those of ``env``."""
    saved = {k: v for k, v in os.environ.items() if k.startswith("FERRY_")}
    for k in saved:
        del os.environ[k]
    os.environ.update({k: v for k, v in env.items() if k.startswith("FERRY_")})
    try:
        yield
    finally:
        for k in [k for k in os.environ if k.startswith("FERRY_")]:
            del os.environ[k]
        os.environ.update(saved)


def settings_from_env(env: Mapping[str, str]) -> Any:
    """A fresh ``Settings`` built from ``env``'s FERRY_* variables only (raises on invalid)."""
    from ferry_kit.settings import KitSettings

    with ferry_environ(env):
        return KitSettings()
