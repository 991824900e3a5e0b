"""What every settings section shares: the frozen model base, and paths under the working
directory."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

from pydantic import AfterValidator, BaseModel, ConfigDict


def under_cwd(path: Path) -> Path:
    """``path`` made absolute against the current working directory (an absolute path as is).

    Ferry's path settings default to places under the directory a command runs in (``var/``,
    ``var/nas``, ``datasets``), which is the checkout during development; an edge node names
    absolute paths in its settings file (README, "Install on an edge node"). Resolving once, when
    the settings are read, gives every part of a process the same paths.
    """
    return path if path.is_absolute() else Path.cwd() / path


#: A filesystem path setting; relative values (and defaults) are taken under the working directory.
WorkPath = Annotated[Path, AfterValidator(under_cwd)]

#: Where the Avro schemas shipped with the package live (``ferry/schemas``: ``schemas/`` of the
#: source tree, package data in the wheel).
PACKAGE_SCHEMAS = Path(__file__).resolve().parents[1] / "schemas"


class Frozen(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid", validate_default=True)
