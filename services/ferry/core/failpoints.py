"""Named points where a test can make a process crash, hang or fail: the crash-safety tests'
way to stop a service at one exact step (e.g. between removing a file's old data files from a
Hive table and moving its new ones in) on the real stack.

Off unless the environment variable :data:`ENV` is set, so production pays one dictionary
lookup per point. Its value is ``name=action`` items joined by ``,``; actions:

``exit``   the process ends at once with status :data:`EXIT_STATUS` (``os._exit``: no clean-up,
           no ``finally``, what SIGKILL leaves);
``hang``   the calling thread sleeps until the process is killed (at most :data:`HANG_S`, then
           exits like ``exit``), so a test can look at the state and SIGKILL it;
``raise``  :class:`FailpointHit` is raised (in-process tests).

The points are listed in :data:`POINTS` (a name not listed there is refused: a typo would make
a test that cannot fail). Pattern: FoundationDB's and TiKV's fail points, reduced to what Ferry's
tests need.
"""

from __future__ import annotations

import logging
import os
import time
from collections.abc import Mapping

log = logging.getLogger(__name__)

#: The environment variable naming the armed points.
ENV = "FERRY_FAILPOINTS"
#: Exit status of ``exit`` (and of ``hang`` past :data:`HANG_S`).
EXIT_STATUS = 86
#: Longest a ``hang`` sleeps, s.
HANG_S = 3600.0

#: Every point, with where it is.
POINTS: Mapping[str, str] = {
    "filetable.removed": "a journal group's old data files are deleted, its new ones not yet "
    "moved in (ferry.tables.journal)",
    "filetable.moving": "the first of a group's new data files is moved in, the others not yet",
    "filetable.applied": "a journal is applied to the table, the index not yet written",
}

_ACTIONS = ("exit", "hang", "raise")


class FailpointHit(RuntimeError):
    """Raised at an armed point whose action is ``raise``."""


def armed(environ: Mapping[str, str] | None = None) -> dict[str, str]:
    """``{point: action}`` from :data:`ENV`.

    Raises:
        ValueError: an item is not ``name=action``, the point is unknown, or the action is.
    """
    text = (os.environ if environ is None else environ).get(ENV, "")
    out: dict[str, str] = {}
    for item in filter(None, (i.strip() for i in text.split(","))):
        name, sep, action = item.partition("=")
        if not sep or name not in POINTS or action not in _ACTIONS:
            raise ValueError(
                f"{ENV}: {item!r} must be point=action, point in {sorted(POINTS)}, "
                f"action in {list(_ACTIONS)}"
            )
        out[name] = action
    return out


def hit(name: str) -> None:
    """Pass point ``name``: nothing unless :data:`ENV` arms it (see the module docstring).

    Raises:
        FailpointHit: the point is armed with ``raise``.
        KeyError: ``name`` is not in :data:`POINTS` (a programming error).
    """
    if name not in POINTS:
        raise KeyError(f"unknown fail point {name!r}")
    if ENV not in os.environ:
        return
    action = armed().get(name)
    if action is None:
        return
    log.warning("fail point %s: %s (%s)", name, action, POINTS[name])
    if action == "raise":
        raise FailpointHit(f"fail point {name}")
    if action == "hang":
        time.sleep(HANG_S)
    logging.shutdown()
    os._exit(EXIT_STATUS)
