"""What the batching stages (transform, load) share: sorting a batch of events by dataset."""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Any

from ferry.core.runtime.stage import BatchResult
from ferry.errors import DatasetNotReady, PermanentError


def group_by_dataset(
    events: Sequence[Any],
    datasets: Mapping[str, Any],
    uri_role: str,
    waits: Callable[[str], str | None] = lambda _name: None,
) -> tuple[dict[int, BatchResult], dict[str, list[int]]]:
    """Split a batch of manifest events into per-dataset groups of event indexes.

    An event whose dataset must wait (``waits(name)`` gives why: its definition is invalid) gets
    :class:`DatasetNotReady` (parked, :mod:`ferry.core.runtime.waiting`); one whose dataset has no
    definition otherwise gets ``PermanentError(reason="unknown_dataset")``;
    one whose manifest lacks the ``uri_role`` URI (``landing`` for transform, ``incoming`` for
    load) gets ``PermanentError(reason="bad_manifest")``.

    Returns:
        (results already decided, by event index; ``{dataset: [event index, …]}`` for the rest)
    """
    results: dict[int, BatchResult] = {}
    groups: dict[str, list[int]] = {}
    for i, ev in enumerate(events):
        m = ev.manifest
        why = None if m.dataset in datasets else waits(m.dataset)
        if why is not None:
            results[i] = DatasetNotReady(
                f"{m.source_path} ({ev.file_id}): {why}", dataset=m.dataset
            )
        elif m.dataset not in datasets:
            results[i] = PermanentError(
                f"{m.source_path} ({ev.file_id}): unknown dataset {m.dataset!r}",
                reason="unknown_dataset",
            )
        elif uri_role not in m.uris:
            results[i] = PermanentError(
                f"{ev.file_id}: manifest has no {uri_role} URI", reason="bad_manifest"
            )
        else:
            groups.setdefault(m.dataset, []).append(i)
    return results, groups
