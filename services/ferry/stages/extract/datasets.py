"""Extract's view of the dataset definitions: each dataset's NAS sub-directory, and the
sub-directories whose files wait because their definition is invalid."""

from __future__ import annotations

import errno
import logging
from pathlib import Path

from ferry.datasets.registry import DefinitionSet
from ferry.datasets.spec import DatasetSpec
from ferry.errors import ConfigError
from ferry.settings import Settings
from ferry.stages.extract.scanner import NasScanner

log = logging.getLogger(__name__)


def require_nas_root(settings: Settings) -> None:
    """The NAS root must exist: extract never creates it.

    A mistyped ``paths.nas_dir``, or a share not mounted where the setting says, would otherwise
    become an empty local directory that extract watches while the users' files never show.

    Raises:
        ConfigError: ``paths.nas_dir`` is missing or not a directory.
    """
    root = settings.paths.nas_dir
    if not root.is_dir():
        raise ConfigError(
            f"paths.nas_dir = {root} is not a directory: mount the NAS share there or set "
            "paths.nas_dir (FERRY_PATHS__NAS_DIR); extract does not create it"
        )


def prepare_dirs(settings: Settings, datasets: dict[str, DatasetSpec]) -> dict[str, DatasetSpec]:
    """Create each dataset's NAS sub-directory when missing (below an existing NAS root, which is
    never created: :func:`require_nas_root`); returns ``datasets``.

    One that cannot be created (a plain file has that name, permissions) is logged as an error
    and that dataset is skipped by the scanner (warned once), while the others run: the NAS share
    is written by users, so a stray file there must not stop every dataset. Removing the file
    and restarting (or creating the directory) brings the dataset back.
    """
    root = settings.paths.nas_dir
    for spec in datasets.values():
        subdir = root / spec.nas.subdir
        try:
            if not root.is_dir():  # the share went away (unmounted): nothing made locally
                raise FileNotFoundError(errno.ENOENT, "the NAS root is missing", str(root))
            subdir.mkdir(parents=True, exist_ok=True)
        except OSError as exc:  # FileExistsError/NotADirectoryError: a plain file has the name
            log.error(
                "extract: dataset %r skipped: its NAS sub-directory %s cannot be created "
                "(%s: %s); if a plain file has that name, move it away and restart",
                spec.name,
                subdir,
                type(exc).__name__,
                exc.strerror or exc,
            )
    return datasets


def apply_definitions(settings: Settings, scanner: NasScanner, current: DefinitionSet) -> None:
    """Give the scanner the valid datasets (their directories created) and, for the log, the
    NAS directories of invalid definitions, whose files stay in place until they are fixed (and
    the invalid definitions that do not say their directory: any unknown one may be theirs)."""
    scanner.datasets = prepare_dirs(settings, current.specs)
    scanner.waiting = {
        Path(d.subdir).parts[0]: f"definition {d.path.name} is invalid ({d.error})"
        for d in current.invalid
        if d.subdir and Path(d.subdir).parts
    }
    scanner.unplaced = [
        f"{d.path.name}, which is invalid ({d.error})"
        for d in current.invalid
        if not (d.subdir and Path(d.subdir).parts)
    ]
