"""The ``lineage`` section: OpenLineage run events for every file's run (docs/operations.md,
"Lineage (OpenLineage)")."""

from __future__ import annotations

from pathlib import Path
from typing import Literal

from pydantic import Field, SecretStr

from ferry.settings.base import Frozen, WorkPath


class LineageSettings(Frozen):
    """Where Ferry's OpenLineage events go. Env: ``FERRY_LINEAGE__<FIELD>``.

    Off (``transport: none``) unless set: a production deployment opts in. The kit's ``ferry up``
    and its test pipelines turn it on (``kafka``) for the local stack.
    """

    transport: Literal["none", "kafka", "http", "file"] = Field(
        default="none",
        description=(
            "none: no events; kafka: the topic <kafka.topic_prefix>.<kafka_topic> on Ferry's own "
            "broker, with the kafka section's security (SASL_SSL included); http: POST to "
            "http_url (Marquez, DataHub, any OpenLineage collector); file: one JSON event per "
            "line appended to file_path."
        ),
    )
    namespace: str | None = Field(
        default=None,
        description=(
            "OpenLineage job namespace of this deployment (the runs' identity is derived from "
            "it and the file_id); None: kafka.topic_prefix."
        ),
    )
    kafka_topic: str = Field(
        default="openlineage",
        description="Short name of the topic for transport kafka (full name: <prefix>.<name>).",
    )
    http_url: str | None = Field(
        default=None,
        description=(
            "Collector base URL for transport http: Marquez http://marquez:5000, DataHub "
            "https://<gms>:8080/openapi/openlineage/ (a path ends with '/': the endpoint is "
            "joined to it as a relative URL)."
        ),
    )
    http_endpoint: str = Field(
        default="api/v1/lineage",
        description="Path under http_url events are POSTed to (Marquez and DataHub: the default).",
    )
    http_api_key: SecretStr | None = Field(
        default=None, description="Bearer token sent to the collector (never printed)."
    )
    http_retries: int = Field(
        default=1, ge=0, le=5, description="Retries of one HTTP POST (connect, read, 5xx)."
    )
    file_path: WorkPath = Field(
        default=Path("var") / "lineage" / "openlineage.jsonl",
        description=(
            "File for transport file (one JSON event per line, appended); default "
            "<var_dir>/lineage/openlineage.jsonl."
        ),
    )
    timeout_s: float = Field(
        default=5.0,
        gt=0,
        description=(
            "Longest one event may take to be sent (Kafka acknowledgement, HTTP connect and "
            "read), s; then it is counted as failed and dropped. Events are sent from a "
            "background thread: a stage never waits for them."
        ),
    )
    queue_size: int = Field(
        default=10_000,
        ge=1,
        description="Events waiting to be sent, at most; more (a long collector outage) are "
        "dropped and counted.",
    )
    metrics_dir: WorkPath | None = Field(
        default=None,
        description=(
            "Where each stage process writes its lineage counters in Prometheus text format "
            "(<service>.<pid>.prom, for node_exporter's textfile collector); None: "
            "<var_dir>/metrics."
        ),
    )
