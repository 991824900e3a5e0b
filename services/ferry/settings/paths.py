"""The ``paths`` section: where data lives on the NAS and on each cluster."""

from __future__ import annotations

from pathlib import Path

from pydantic import Field

from ferry.settings.base import REPO_ROOT, Frozen


class PathSettings(Frozen):
    """Where data lives on the NAS and on each cluster."""

    nas_dir: Path = Field(
        default=REPO_ROOT / "var" / "nas",
        description="NAS drop directory (one sub-dir per dataset).",
    )
    landing_path: str = Field(default="/ferry/landing", description="Landing directory on HDFS B.")
    staging_path: str = Field(
        default="/ferry/staging", description="Parquet staging directory on HDFS B."
    )
    rejects_path: str = Field(
        default="/ferry/rejects", description="Rejected rows (with reasons) on HDFS B."
    )
    incoming_path: str = Field(
        default="/ferry/incoming", description="Transferred files on HDFS A."
    )
    datasets_dir: Path = Field(
        default=REPO_ROOT / "datasets", description="Dataset definitions (YAML)."
    )
    schemas_dir: Path = Field(
        default=REPO_ROOT / "schemas",
        description=(
            "Avro schemas (ferry.<Name>.avsc) and released versions under released/<version>/."
        ),
    )
