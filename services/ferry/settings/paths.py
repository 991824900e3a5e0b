"""The ``paths`` section: where data lives on the NAS and on each cluster."""

from __future__ import annotations

from pathlib import Path

from pydantic import Field

from ferry.settings.base import PACKAGE_SCHEMAS, Frozen, WorkPath


class PathSettings(Frozen):
    """Where data lives on the NAS and on each cluster."""

    nas_dir: WorkPath = Field(
        default=Path("var") / "nas",
        description="NAS drop directory (one sub-dir per dataset); relative: under the working "
        "directory.",
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
    datasets_dir: WorkPath = Field(
        default=Path("datasets"),
        description="Dataset definitions (YAML); relative: under the working directory.",
    )
    schemas_dir: WorkPath = Field(
        default=PACKAGE_SCHEMAS,
        description=(
            "Avro schemas (ferry.<Name>.avsc) and released versions under released/<version>/. "
            "Default: the schemas shipped in the package (the source tree's schemas/)."
        ),
    )
