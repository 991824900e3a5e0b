"""``ferry schemas``: check schema evolution, and release a snapshot of the current schemas."""

from __future__ import annotations

import re
import shutil
import tempfile
from pathlib import Path

import typer

from ferry.core.wire.avro import released_dir
from ferry.core.wire.schema_compat import check_schemas
from ferry.errors import ConfigError

app = typer.Typer(no_args_is_help=True)

_VERSION_RE = re.compile(r"^[0-9]+(\.[0-9]+)*([-+][A-Za-z0-9.]+)?$")

_DIR_OPTION = typer.Option(
    None, "--dir", help="Schema directory (default: settings.paths.schemas_dir)."
)


def _schemas_dir(directory: Path | None) -> Path:
    if directory is not None:
        return directory
    from ferry.settings import get_settings

    return get_settings().paths.schemas_dir


def release_schemas(schemas_dir: Path, version: str) -> Path:
    """Copy the current ``ferry.*.avsc`` files to ``released/<version>/`` (atomically, by rename).

    Returns:
        the new release directory.

    Raises:
        ConfigError: bad version name, the version exists, or the current schemas fail
            :func:`ferry.core.wire.schema_compat.check_schemas`.
    """
    if not _VERSION_RE.match(version):
        raise ConfigError(f"release version {version!r} must look like 1, 1.2 or 1.2.3(-tag)")
    target = released_dir(schemas_dir) / version
    if target.exists():
        raise ConfigError(
            f"schema release {version} already exists at {target}; releases are immutable"
        )
    problems = check_schemas(schemas_dir)
    if problems:
        raise ConfigError("current schemas fail the check:\n  " + "\n  ".join(problems))
    target.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=f".{version}.", dir=target.parent))
    try:
        for path in sorted(schemas_dir.glob("ferry.*.avsc")):
            shutil.copy2(path, tmp / path.name)
        tmp.rename(target)
    except OSError:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    return target


@app.command("check")
def check(directory: Path | None = _DIR_OPTION) -> None:
    """Fail (exit 1) when a schema change would break reading in either direction, or lacks docs."""
    schemas_dir = _schemas_dir(directory)
    problems = check_schemas(schemas_dir)
    for problem in problems:
        typer.echo(problem, err=True)
    if problems:
        typer.echo(f"{len(problems)} schema problem(s) in {schemas_dir}", err=True)
        raise typer.Exit(1)
    rel = released_dir(schemas_dir)
    releases = sorted(p.name for p in rel.iterdir() if p.is_dir()) if rel.is_dir() else []
    typer.echo(
        f"schemas in {schemas_dir} are documented and compatible with "
        f"{len(releases)} release(s): {', '.join(releases) or 'none yet'}"
    )


@app.command("release")
def release(version: str, directory: Path | None = _DIR_OPTION) -> None:
    """Snapshot the current schemas as release VERSION (schemas/released/VERSION/)."""
    try:
        target = release_schemas(_schemas_dir(directory), version)
    except ConfigError as exc:
        typer.echo(str(exc), err=True)
        raise typer.Exit(1) from exc
    typer.echo(f"released schemas {version} to {target}")
