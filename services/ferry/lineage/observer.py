"""The stages' lineage hooks: what each stage emits, when.

- The consuming stages (transform, transfer, load) get a :class:`LineageObserver` from their
  ``build()`` (``build_runner(..., observer=lineage_observer(settings, name))``): the stage
  runtime calls :meth:`~LineageObserver.started` before a file's handler runs (child START) and
  :meth:`~LineageObserver.settled` once its output event or FileFailed was acknowledged (child
  COMPLETE or FAIL; load's COMPLETE also completes the file's parent run; any FAIL fails it).
- Extract has no input record and learns the file_id only by reading the file, so it reports
  after the fact with :meth:`~LineageObserver.extracted`: parent START and child START (both
  stamped with the time extraction began), then child COMPLETE or FAIL.

Building an event never raises into the stage: an error is logged and counted as failed.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from typing import Any

import attr
from openlineage.client.event_v2 import RunState
from openlineage.client.uuid import generate_new_uuid

from ferry.core.events import Event, FileFailed, FileLoaded, FileManifest
from ferry.core.runtime.observe import Settled
from ferry.core.runtime.stage import Record
from ferry.datasets.registry import load_definitions
from ferry.lineage.emitter import LineageEmitter, build_emitter
from ferry.lineage.events import PRODUCER, EventBuilder, FerryRunFacet, facts_of, failure_text
from ferry.lineage.naming import Names
from ferry.settings import Settings

log = logging.getLogger("ferry.lineage")


class LineageObserver:
    """Builds a stage's run events (:class:`EventBuilder`) and hands them to ``emitter``."""

    def __init__(self, builder: EventBuilder, emitter: LineageEmitter) -> None:
        self.builder = builder
        self.emitter = emitter

    def _emit(self, make: Any, *args: Any) -> None:
        if not self.emitter.enabled:
            return
        try:
            events = make(*args)
        except Exception:  # noqa: BLE001 - lineage never fails a file
            log.warning("lineage: cannot build the events of %s", args, exc_info=True)
            self.emitter._tally("failed", "event not built")
            return
        for ev in events:
            self.emitter.emit(ev)

    # -- the stage runtime's hook (ferry.core.runtime.observe.FileObserver) --------------------
    def started(self, stage: str, record: Record, event: Event) -> None:
        self._emit(self._started, stage, record, event)

    def settled(self, stage: str, files: Sequence[Settled]) -> None:
        for f in files:
            if f.event is not None:
                self._emit(self._settled, stage, f)

    def close(self) -> None:
        self.emitter.close()

    def _run_id(self, stage: str, record: Record, file_id: str) -> str:
        r = record
        return self.builder.names.child_run_id(file_id, stage, r.topic, r.partition, r.offset)

    def _started(self, stage: str, record: Record, event: Event) -> list[Any]:
        m = manifest_of(event)
        b = self.builder
        run_id = self._run_id(stage, record, m.file_id)
        return [
            b.child(RunState.START, stage, run_id, facts_of(m), inputs=[b.stage_input(stage, m)])
        ]

    def _settled(self, stage: str, f: Settled) -> list[Any]:
        m = manifest_of(f.event)
        return self.outcome(stage, self._run_id(stage, f.record, m.file_id), f.outputs, m)

    def outcome(
        self, stage: str, run_id: str, outputs: Sequence[Event], m: FileManifest
    ) -> list[Any]:
        """Child COMPLETE (with the outputs) or FAIL (with the quarantine's reason), and the
        parent's end when this is the file's last step (loaded) or a failure."""
        b = self.builder
        failed = next((ev for ev in outputs if isinstance(ev, FileFailed)), None)
        if failed is not None:
            m = failed.manifest or m
            facts = facts_of(m, failed.attempt, failed.reason)
            error = failure_text(failed)
            inputs = [b.stage_input(stage, m)]
            return [
                b.child(RunState.FAIL, stage, run_id, facts, inputs=inputs, error=error),
                b.parent(RunState.FAIL, facts, error=error),
            ]
        out = manifest_of(outputs[0])
        facts = facts_of(out)
        events = [
            b.child(
                RunState.COMPLETE,
                stage,
                run_id,
                facts,
                inputs=[b.stage_input(stage, out)],
                outputs=[o for ev in outputs for o in b.outputs(ev)],
            )
        ]
        loaded = next((ev for ev in outputs if isinstance(ev, FileLoaded)), None)
        if loaded is not None:
            events.append(
                b.parent(RunState.COMPLETE, facts, outputs=b.table_outputs(out, loaded.table)[:1])
            )
        return events

    # -- extract ------------------------------------------------------------------------------
    def extracted(
        self, dataset: str, source_path: str, started_at: str, outputs: Sequence[Event]
    ) -> None:
        """Extract handled one NAS file (``source_path`` relative to the NAS root) that began
        at ``started_at`` (ISO 8601) and published ``outputs`` (FileExtracted or FileFailed)."""
        self._emit(self._extracted, dataset, source_path, started_at, outputs)

    def _extracted(
        self, dataset: str, source_path: str, started_at: str, outputs: Sequence[Event]
    ) -> list[Any]:
        b = self.builder
        m = next((mm for ev in outputs if (mm := getattr(ev, "manifest", None))), None)
        if m is not None:
            facts = facts_of(m)
        else:  # refused before it was read: no file_id
            facts = FerryRunFacet(dataset=dataset, sourcePath=source_path, producer=PRODUCER)
        run_id = str(generate_new_uuid())
        nas = [b.nas_input(dataset, source_path)]
        start = [
            b.parent(RunState.START, facts, at=started_at),
            b.child(RunState.START, "extract", run_id, facts, at=started_at, inputs=nas),
        ]
        if m is None:
            failed = next(ev for ev in outputs if isinstance(ev, FileFailed))
            facts, error = attr.evolve(facts, reason=failed.reason), failure_text(failed)
            return [
                *start,
                b.child(RunState.FAIL, "extract", run_id, facts, inputs=nas, error=error),
                b.parent(RunState.FAIL, facts, error=error),
            ]
        return start + self.outcome("extract", run_id, outputs, m)


def manifest_of(event: Event | None) -> FileManifest:
    """The manifest an event carries.

    Raises:
        ValueError: it has none (an undecodable input's FileFailed).
    """
    m = getattr(event, "manifest", None)
    if m is None:
        raise ValueError(f"{type(event).__name__} carries no manifest")
    return m


def lineage_observer(settings: Settings, service: str) -> LineageObserver:
    """The lineage hook of ``service`` per ``settings.lineage`` (off: one that emits nothing).

    Raises:
        ConfigError: bad lineage or dataset settings. TransientError: see
            :func:`ferry.lineage.emitter.build_transport`.
    """
    emitter = build_emitter(settings, service)
    # The valid definitions at start (schema facets); an invalid one does not stop the service.
    specs = load_definitions(settings.paths.datasets_dir).specs if emitter.enabled else {}
    return LineageObserver(EventBuilder(Names.of(settings), specs), emitter)


__all__ = ["LineageObserver", "lineage_observer"]
