"""Where Ferry puts NAS files it has handled: ``<nas_dir>/.ferry/<outcome>/<dataset>/<name>``.

Extract moves a file it took to ``.ferry/archive/``, an empty one to ``.ferry/empty/`` and one it
could not take to ``.ferry/failed/`` (:mod:`ferry.stages.extract.service`); the ``gc`` service
removes them after their retention (:mod:`ferry.gc`). Both find a moved file's name here: the
NAS name itself when free, else ``<stem>.<tag><suffix>`` (the tag is the file id's first 12
digits, or a UTC time stamp), then ``<stem>.<tag>.2<suffix>``, ``.3`` …; so a moved file never
overwrites another.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path

#: The directory under the NAS root that holds what extract moved away.
FERRY_DIR = ".ferry"

#: Longest file name written under ``.ferry/`` (bytes; the usual local file system limit).
MAX_NAME_BYTES = 255

#: How many tagged names :func:`moved_names` tries past the last one found.
_PAST_LAST = 3


def outcome_dir(nas_dir: Path, outcome: str, dataset: str) -> Path:
    """``<nas_dir>/.ferry/<outcome>/<dataset>`` (outcome: ``archive``, ``empty``, ``failed``)."""
    return nas_dir / FERRY_DIR / outcome / dataset


def tagged_name(name: str, tag: str, n: int = 1) -> str:
    """The ``n``-th name tried when ``name`` is taken: ``<stem>.<tag><suffix>`` for n = 1, then
    ``<stem>.<tag>.<n><suffix>``; the stem is cut (bytes, never inside a UTF-8 sequence) so the
    name stays within :data:`MAX_NAME_BYTES`."""
    stem, suffix = os.path.splitext(name)
    extra = f".{tag}" if n == 1 else f".{tag}.{n}"
    return _cut(stem, MAX_NAME_BYTES - len(os.fsencode(extra + suffix))) + extra + suffix


def free_name(directory: Path, name: str, tag: str) -> Path:
    """A path in ``directory`` that does not exist yet: ``name`` if free, else
    :func:`tagged_name` ``(name, tag, n)`` for n = 1, 2, … (``flights_1.csv`` →
    ``flights_1.3f2a9c01b7d4.csv``).

    Raises:
        FileExistsError: 9,999 tagged names are taken.
    """
    first = directory / name
    if not first.exists() and not first.is_symlink():
        return first
    for n in range(1, 10_000):
        candidate = directory / tagged_name(name, tag, n)
        if not candidate.exists() and not candidate.is_symlink():
            return candidate
    raise FileExistsError(f"no free name for {name!r} in {directory}")


def moved_names(directory: Path, name: str, tag: str) -> Iterator[Path]:
    """The paths a file named ``name`` moved with ``tag`` may have in ``directory``, in the order
    :func:`free_name` hands them out, as long as they exist: ``name``, then the tagged names up
    to :data:`_PAST_LAST` past the last one found (a gap is a name removed since). One ``lstat``
    per name tried; the directory is never listed."""
    first = directory / name
    if os.path.lexists(first):
        yield first
    missing = 0
    n = 1
    while missing < _PAST_LAST:
        path = directory / tagged_name(name, tag, n)
        if os.path.lexists(path):
            missing = 0
            yield path
        else:
            missing += 1
        n += 1


def _cut(stem: str, room: int) -> str:
    """``stem`` cut to at most ``room`` bytes, never inside a UTF-8 sequence."""
    raw = os.fsencode(stem)
    cut = min(room, len(raw))
    while 0 < cut < len(raw) and raw[cut] & 0xC0 == 0x80:
        cut -= 1
    return os.fsdecode(raw[:cut])


__all__ = [
    "FERRY_DIR",
    "MAX_NAME_BYTES",
    "free_name",
    "moved_names",
    "outcome_dir",
    "tagged_name",
]
