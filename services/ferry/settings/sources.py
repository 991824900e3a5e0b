"""Where Ferry's settings come from besides the environment: the YAML files (the profile
overlays named by ``FERRY_PROFILE``, then the file named by ``FERRY_CONFIG``), and the settings
classes of other packages that read the same places (:data:`EXTENSIONS_GROUP`)."""

from __future__ import annotations

import os
import typing
from functools import lru_cache
from importlib.metadata import entry_points
from pathlib import Path
from typing import Any

import yaml
from pydantic import BaseModel
from pydantic_settings import PydanticBaseSettingsSource

from ferry.errors import ConfigError

#: Entry point group naming settings classes that extend :class:`~ferry.settings.Settings` with
#: sections or fields of their own, read from the same environment and YAML (the kit's settings:
#: server heaps and ports, ``supervise``). Ferry's settings ignore exactly the keys such a class
#: adds; any other unknown key is still refused.
EXTENSIONS_GROUP = "ferry.settings"


def extensions(base: type[BaseModel]) -> list[type[BaseModel]]:
    """The settings classes registered under :data:`EXTENSIONS_GROUP` that extend ``base``
    (Ferry's :class:`~ferry.settings.Settings`; anything else is skipped)."""
    return [c for c in _registered() if isinstance(c, type) and issubclass(c, base)]


@lru_cache(maxsize=1)
def _registered() -> tuple[Any, ...]:
    """What the :data:`EXTENSIONS_GROUP` entry points name, loaded once per process (reading
    the installed distributions' entry points takes tens of milliseconds)."""
    return tuple(
        ep.load() for ep in sorted(entry_points(group=EXTENSIONS_GROUP), key=lambda e: e.name)
    )


def _models(annotation: Any) -> list[type[BaseModel]]:
    """The pydantic models an annotation holds: ``M``, ``dict[str, M]``, ``tuple[M, ...]``."""
    args = typing.get_args(annotation) or (annotation,)
    return [a for a in args if isinstance(a, type) and issubclass(a, BaseModel)]


def without_keys_of(data: Any, theirs: type[BaseModel], ours: type[BaseModel]) -> Any:
    """``data`` (a mapping as read from the environment and YAML) without the keys model
    ``theirs`` has and model ``ours`` lacks, at every depth (sections, ``clusters.<name>``,
    ``namenodes[i]``); keys neither model has stay, for ``ours`` to refuse."""
    if isinstance(data, (list, tuple)):
        return [without_keys_of(v, theirs, ours) for v in data]
    if not isinstance(data, dict):
        return data
    out = {}
    for key, value in data.items():
        mine, other = ours.model_fields.get(key), theirs.model_fields.get(key)
        if mine is None:
            if other is None:
                out[key] = value
            continue
        pair = (_models(other.annotation), _models(mine.annotation)) if other else ([], [])
        if pair[0] and pair[1] and pair[0][0] is not pair[1][0]:
            nested = typing.get_origin(mine.annotation) is dict and isinstance(value, dict)
            if nested:
                value = {k: without_keys_of(v, pair[0][0], pair[1][0]) for k, v in value.items()}
            else:
                value = without_keys_of(value, pair[0][0], pair[1][0])
        out[key] = value
    return out


#: Entry point group naming directories of profile overlays (``<name>.yaml``); the kit registers
#: the local stack's (``ha``, ``kerberos``, ``secure-kafka``, ``secure``).
PROFILES_GROUP = "ferry.profiles"


def profile_dirs() -> list[Path]:
    """Where profile overlays are looked up, in order: the directories of ``FERRY_PROFILES_DIR``
    (``os.pathsep``-separated), then each directory registered under the ``ferry.profiles`` entry
    point group (an attribute holding a path)."""
    dirs = [Path(d) for d in os.environ.get("FERRY_PROFILES_DIR", "").split(os.pathsep) if d]
    for ep in sorted(entry_points(group=PROFILES_GROUP), key=lambda e: e.name):
        dirs.append(Path(ep.load()))
    return dirs


def profile_files(names: str) -> list[Path]:
    """The overlay files of the comma-separated profile ``names``, in order, each the first
    ``<name>.yaml`` found in :func:`profile_dirs`.

    ``"ha,secure"`` → ``[<dir>/ha.yaml, <dir>/secure.yaml]``; empty names are skipped.

    Raises:
        ConfigError: a profile with no file; the message lists the known profiles.
    """
    files = []
    dirs = profile_dirs() if names.strip(", ") else []
    for name in (n.strip() for n in names.split(",")):
        if not name:
            continue
        found = next((d / f"{name}.yaml" for d in dirs if (d / f"{name}.yaml").is_file()), None)
        if found is None:
            known = sorted({p.stem for d in dirs for p in d.glob("*.yaml")})
            raise ConfigError(f"unknown profile {name!r}; known profiles: {known}")
        files.append(found)
    return files


def _read_yaml(path: Path, what: str) -> dict[str, Any]:
    try:
        data = yaml.safe_load(path.read_text(encoding="utf-8")) or {}
    except (OSError, yaml.YAMLError) as exc:
        raise ConfigError(f"cannot read settings file {what}={path}: {exc}") from exc
    if not isinstance(data, dict):
        raise ConfigError(f"settings file {path} must hold a mapping, not {type(data).__name__}")
    return data


def _deep_merge(base: dict[str, Any], top: dict[str, Any]) -> dict[str, Any]:
    """``top`` over ``base``; mappings merge key by key, anything else is replaced."""
    out = dict(base)
    for key, value in top.items():
        if isinstance(value, dict) and isinstance(out.get(key), dict):
            out[key] = _deep_merge(out[key], value)
        else:
            out[key] = value
    return out


class YamlSource(PydanticBaseSettingsSource):
    """Values from YAML (lowest precedence): the profile overlays named by ``FERRY_PROFILE``
    (e.g. the kit's ``ha``), then the file named by
    ``FERRY_CONFIG`` over them."""

    def get_field_value(self, field: Any, field_name: str) -> tuple[Any, str, bool]:
        return None, field_name, False

    def __call__(self) -> dict[str, Any]:
        data: dict[str, Any] = {}
        for path in profile_files(os.environ.get("FERRY_PROFILE", "")):
            data = _deep_merge(data, _read_yaml(path, "FERRY_PROFILE"))
        config_file = os.environ.get("FERRY_CONFIG")
        if config_file:
            data = _deep_merge(data, _read_yaml(Path(config_file), "FERRY_CONFIG"))
        return data
