"""Where a handled NAS file goes: a free name under ``<nas>/.ferry/<outcome>/<dataset>/``.

Moved files never overwrite one another: ``<name>``, or ``<stem>.<tag><suffix>`` (the file id's
first 12 hex digits, else a UTC timestamp) when that name is taken; the naming is
:mod:`ferry.nas`'s, which the ``gc`` service reads too.
"""

from __future__ import annotations

import logging
import os
import shutil
import threading
from pathlib import Path

from ferry.core.events import utc_now
from ferry.nas import free_name, outcome_dir
from ferry.settings import Settings
from ferry.stages.extract.scanner import Candidate, NasScanner, display_name

log = logging.getLogger(__name__)


def move_out(
    file: Path, marker: Path | None, dest_dir: Path, tag: str, *, delete: bool = False
) -> Path | None:
    """Move ``file`` and its ``marker`` (if any) into ``dest_dir`` under free names (see
    :func:`free_name`; the marker is named after the file's new name), or delete both. Either
    may be absent already, or be a symbolic link (moved as the link, C15). Returns the file's
    new path, ``None`` when it was deleted or absent.

    Raises:
        OSError: a move or delete failed (what was done before stays done).
    """
    moved: Path | None = None
    for path in (file, marker):
        if path is None or not os.path.lexists(path):  # a link itself (C15)
            continue
        if delete:
            path.unlink()
            continue
        dest_dir.mkdir(parents=True, exist_ok=True)
        name = path.name
        if moved is not None and name.startswith(file.name):
            name = moved.name + name[len(file.name) :]  # the marker follows its file
        dest = free_name(dest_dir, name, tag)
        shutil.move(str(path), dest)
        if path == file:
            moved = dest
    return moved


def after_extract(
    settings: Settings,
    scanner: NasScanner,
    cand: Candidate,
    outcome: str,
    file_id: str | None,
    lock: threading.Lock,
) -> Path | None:
    """Move the NAS file (and its marker) of a handled candidate out of the drop directory to
    ``.ferry/<outcome>/<dataset>/`` (``outcome``: archive, empty, failed), or delete or keep it
    (``extract.after_extract``). Returns where the file was moved (``None``: not moved).

    Never overwrites under ``.ferry/`` (:func:`move_out`; ``lock`` makes choosing a free name
    and taking it one step among the extract workers). A move or delete that fails
    (permissions, a vanished share) is logged and the file is remembered as handled, so it is
    not extracted again while unchanged (until a restart)."""
    policy = settings.extract.after_extract
    if policy == "keep" and outcome == "archive":
        scanner.done(cand)  # else the next scans would extract it again and again
        return None
    scanner.forget(cand.path)
    dest_dir = outcome_dir(settings.paths.nas_dir, outcome, cand.dataset.name)
    tag = file_id[:12] if file_id else utc_now().strftime("%Y%m%dT%H%M%S%fZ")
    delete = policy == "delete" and outcome == "archive"
    try:
        with lock:
            return move_out(cand.path, cand.marker, dest_dir, tag, delete=delete)
    except OSError as exc:
        log.error(
            "extract: %s could not be moved to %s (%s); left in place, not taken again "
            "while unchanged",
            display_name(cand.relative),
            display_name(dest_dir),
            display_name(str(exc)),
        )
        scanner.done(cand)
    return None
