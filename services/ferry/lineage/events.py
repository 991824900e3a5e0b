"""Ferry's OpenLineage run events, built from its own events (pure functions of the manifests;
no I/O), with the OpenLineage Python client's model (``openlineage.client.event_v2``, spec
2-0-2, and its facets).

Each source file is a parent run (job ``<dataset>``) and each stage's handling of it a child run
(job ``<dataset>.<stage>``, ``parent`` facet: the file's run); ids: :mod:`ferry.lineage.naming`.
What each event holds (docs/operations.md, "Lineage (OpenLineage)"):

==================  ===========================================================================
event               datasets and facets
==================  ===========================================================================
child START         the stage's input (schema)
child COMPLETE      input and outputs with ``schema``; ``outputStatistics`` (rows, bytes, files as
                    far as the manifest knows them); transform: ``inputStatistics`` of the landing
                    file (rows read, bytes), a ``rejects`` output with ``dataQualityMetrics``
                    (rows rejected); load: the Hive table and its data files' directory with a
                    ``symlinks`` facet naming the table
child FAIL          the input; run facet ``errorMessage`` = ``<reason>: <error>``
parent START        the NAS file (sent by extract)
parent COMPLETE     NAS file → Hive table, rows loaded (sent by load)
parent FAIL         the NAS file; ``errorMessage`` of the stage that quarantined it
==================  ===========================================================================

Every run carries ``processing_engine`` (Ferry's version) and ``ferry`` (:class:`FerryRunFacet`:
file id, dataset, NAS path, stage, attempt, reason, row counts, rejected rows per reason code;
JSON schema ``ferry/lineage/schemas/FerryRunFacet.json`` in the package).
"""

from __future__ import annotations

import functools
from collections.abc import Mapping, Sequence
from datetime import UTC, datetime
from importlib.metadata import PackageNotFoundError, version
from typing import Any, ClassVar

import attr
from openlineage.client.constants import __version__ as OPENLINEAGE_VERSION
from openlineage.client.event_v2 import (
    InputDataset,
    Job,
    OutputDataset,
    Run,
    RunEvent,
    RunState,
)
from openlineage.client.facet_v2 import (
    RunFacet,
    data_quality_metrics_dataset,
    error_message_run,
    input_statistics_input_dataset,
    job_type_job,
    output_statistics_output_dataset,
    parent_run,
    processing_engine_run,
    schema_dataset,
    symlinks_dataset,
)

from ferry.core.dismissal import FileDismissed
from ferry.core.events import Event, FileFailed, FileLoaded, FileManifest, FileTransformed
from ferry.core.services import service
from ferry.datasets.spec import DatasetSpec
from ferry.lineage.naming import WRITES, Names, hdfs

#: ``_schemaURL`` of :class:`FerryRunFacet`; ``.invalid`` (RFC 2606): no host serves it, the
#: schema ships in the package (``ferry/lineage/schemas/FerryRunFacet.json``).
FERRY_FACET_URL = "https://ferry.invalid/spec/facets/1-0-0/FerryRunFacet.json#/$defs/FerryRunFacet"


@functools.cache
def ferry_version() -> str:
    """Ferry's installed version, read once (from the package's metadata: a file read each
    call, 6% of the load service's CPU when it was read for every event; issue 45)."""
    try:
        return version("ferry")
    except PackageNotFoundError:  # a source tree that was not installed
        return "0+unknown"


#: ``producer`` of every event and facet: Ferry, with its version.
PRODUCER = f"https://ferry.invalid/ferry/{ferry_version()}"


@attr.define
class FerryRunFacet(RunFacet):
    """Ferry's facts about a run (facet key ``ferry``)."""

    dataset: str
    sourcePath: str  # noqa: N815
    fileId: str | None = None  # noqa: N815
    stage: str | None = None
    attempt: int | None = None
    reason: str | None = None
    rowsIn: int | None = None  # noqa: N815
    rowsOut: int | None = None  # noqa: N815
    rowsRejected: int | None = None  # noqa: N815
    rejectReasons: dict[str, int] | None = None  # noqa: N815
    _additional_skip_redact: ClassVar[list[str]] = ["fileId", "sourcePath"]

    @staticmethod
    def _get_schema() -> str:
        return FERRY_FACET_URL


def now_iso() -> str:
    """Now, UTC, ISO 8601 with milliseconds (an OpenLineage ``eventTime``)."""
    return datetime.now(UTC).isoformat(timespec="milliseconds")


class EventBuilder:
    """Builds the run events of one deployment (``names``) with the datasets' schemas
    (``specs``: dataset name → definition; a dataset missing there gets no schema facet)."""

    def __init__(self, names: Names, specs: Mapping[str, DatasetSpec]) -> None:
        self.names = names
        self.specs = specs

    # -- runs and jobs ------------------------------------------------------------------------
    def child(
        self,
        state: RunState,
        stage: str,
        run_id: str,
        facts: FerryRunFacet,
        *,
        at: str | None = None,
        inputs: Sequence[InputDataset] = (),
        outputs: Sequence[OutputDataset] = (),
        error: str | None = None,
    ) -> RunEvent:
        """A stage's run event (job ``<dataset>.<stage>``, facet ``parent``: the file's run)."""
        ns = self.names.namespace
        parent = parent_run.ParentRunFacet(
            run=parent_run.Run(runId=self.names.parent_run_id(facts.fileId, facts.sourcePath)),
            job=parent_run.Job(namespace=ns, name=facts.dataset),
            producer=PRODUCER,
        )
        facets: dict[str, Any] = {"parent": parent}
        facts = attr.evolve(facts, stage=stage)
        return self._event(
            state,
            run_id,
            f"{facts.dataset}.{stage}",
            "STAGE",
            facts,
            facets,
            at,
            inputs,
            outputs,
            error,
        )

    def parent(
        self,
        state: RunState,
        facts: FerryRunFacet,
        *,
        at: str | None = None,
        outputs: Sequence[OutputDataset] = (),
        error: str | None = None,
    ) -> RunEvent:
        """The source file's run event (job ``<dataset>``): input the NAS file."""
        run_id = self.names.parent_run_id(facts.fileId, facts.sourcePath)
        inputs = [self.nas_input(facts.dataset, facts.sourcePath)]
        return self._event(
            state, run_id, facts.dataset, "FILE", facts, {}, at, inputs, outputs, error
        )

    def _event(
        self,
        state: RunState,
        run_id: str,
        job: str,
        job_type: str,
        facts: FerryRunFacet,
        facets: dict[str, Any],
        at: str | None,
        inputs: Sequence[InputDataset],
        outputs: Sequence[OutputDataset],
        error: str | None,
    ) -> RunEvent:
        facets["ferry"] = facts
        facets["processing_engine"] = processing_engine_run.ProcessingEngineRunFacet(
            version=ferry_version(),
            name="Ferry",
            openlineageAdapterVersion=OPENLINEAGE_VERSION,
            producer=PRODUCER,
        )
        if error is not None:
            facets["errorMessage"] = error_message_run.ErrorMessageRunFacet(
                message=error, programmingLanguage="PYTHON", producer=PRODUCER
            )
        kind = job_type_job.JobTypeJobFacet(
            processingType="BATCH", integration="FERRY", jobType=job_type, producer=PRODUCER
        )
        return RunEvent(
            eventType=state,
            eventTime=at or now_iso(),
            run=Run(runId=run_id, facets=facets),
            job=Job(namespace=self.names.namespace, name=job, facets={"jobType": kind}),
            inputs=list(inputs),
            outputs=list(outputs),
            producer=PRODUCER,
        )

    # -- datasets -----------------------------------------------------------------------------
    def _schema(self, dataset: str, table: bool) -> dict[str, Any]:
        spec = self.specs.get(dataset)
        if spec is None:
            return {}
        cols = spec.table_columns if table else spec.columns
        fields = [schema_dataset.SchemaDatasetFacetFields(name=c.name, type=c.type) for c in cols]
        return {"schema": schema_dataset.SchemaDatasetFacet(fields=fields, producer=PRODUCER)}

    def nas_input(self, dataset: str, source_path: str) -> InputDataset:
        ns, name = self.names.nas_file(source_path)
        return InputDataset(namespace=ns, name=name, facets=self._schema(dataset, table=False))

    def stage_input(self, stage: str, m: FileManifest) -> InputDataset:
        """What ``stage`` reads of the file: the NAS file (extract) or the URI its input event
        wrote (transform: landing, transfer: staging, load: incoming)."""
        consumes = service(stage).input
        if consumes is None:
            return self.nas_input(m.dataset, m.source_path)
        role = WRITES[consumes]
        ns, name = hdfs(m.uris[role])
        facets: dict[str, Any] = {}
        if isinstance(m, FileManifest) and role == "landing" and m.rows_in is not None:
            facets["inputStatistics"] = (
                input_statistics_input_dataset.InputStatisticsInputDatasetFacet(
                    rowCount=m.rows_in, size=m.size_bytes, fileCount=1, producer=PRODUCER
                )
            )
        return InputDataset(
            namespace=ns,
            name=name,
            facets=self._schema(m.dataset, table=role != "landing"),
            inputFacets=facets,
        )

    def _output(
        self,
        where: tuple[str, str],
        dataset: str,
        table: bool,
        rows: int | None,
        size: int | None = None,
        files: int | None = None,
        **facets: Any,
    ) -> OutputDataset:
        stats = output_statistics_output_dataset.OutputStatisticsOutputDatasetFacet(
            rowCount=rows, size=size, fileCount=files, producer=PRODUCER
        )
        return OutputDataset(
            namespace=where[0],
            name=where[1],
            facets={**self._schema(dataset, table), **facets},
            outputFacets={"outputStatistics": stats},
        )

    def outputs(self, event: Event) -> list[OutputDataset]:
        """The datasets an output event's stage wrote, with their statistics."""
        if isinstance(event, (FileFailed, FileDismissed)):
            return []
        m = event.manifest
        if isinstance(event, FileLoaded):
            return self.table_outputs(m, event.table)
        role = WRITES[type(event)]
        if role == "landing":
            return [self._output(hdfs(m.uris[role]), m.dataset, False, None, m.size_bytes, 1)]
        out = [self._output(hdfs(m.uris[role]), m.dataset, True, m.rows_out)]
        if isinstance(event, FileTransformed) and m.rows_rejected and "rejects" in m.uris:
            dq = data_quality_metrics_dataset.DataQualityMetricsDatasetFacet(
                columnMetrics={}, rowCount=m.rows_rejected, fileCount=1, producer=PRODUCER
            )
            where = hdfs(m.uris["rejects"])
            out.append(self._output(where, m.dataset, True, m.rows_rejected, dataQualityMetrics=dq))
        return out

    def table_outputs(self, m: FileManifest, table: str) -> list[OutputDataset]:
        """The Hive table, and its data files' directory with a ``symlinks`` facet naming it."""
        ns, name = self.names.table(table)
        link = symlinks_dataset.SymlinksDatasetFacet(
            identifiers=[symlinks_dataset.Identifier(namespace=ns, name=name, type="TABLE")],
            producer=PRODUCER,
        )
        return [
            self._output((ns, name), m.dataset, True, m.rows_out),
            self._output(
                self.names.table_location(table), m.dataset, True, m.rows_out, symlinks=link
            ),
        ]


def facts_of(
    m: FileManifest, attempt: int | None = None, reason: str | None = None
) -> FerryRunFacet:
    """The ``ferry`` facet of a file from its manifest."""
    return FerryRunFacet(
        dataset=m.dataset,
        sourcePath=m.source_path,
        fileId=m.file_id,
        attempt=attempt if attempt is not None else m.attempt,
        reason=reason,
        rowsIn=m.rows_in,
        rowsOut=m.rows_out,
        rowsRejected=m.rows_rejected,
        rejectReasons=dict(m.reject_reasons) or None,
        producer=PRODUCER,
    )


def failure_text(failed: FileFailed) -> str:
    """The ``errorMessage`` of a quarantine: ``<reason code>: <error>``."""
    return f"{failed.reason}: {failed.error}"


__all__ = [
    "FERRY_FACET_URL",
    "PRODUCER",
    "EventBuilder",
    "FerryRunFacet",
    "facts_of",
    "failure_text",
    "ferry_version",
    "now_iso",
]
