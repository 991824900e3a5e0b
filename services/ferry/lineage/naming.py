"""Names in Ferry's OpenLineage events: run ids, jobs, and datasets as the OpenLineage naming
conventions say (https://openlineage.io/docs/spec/naming, "Dataset naming": Local file system
``file`` + ``{path}``; HDFS ``hdfs://{namenode host}:{namenode port}`` + ``{path}``; Hive
``hive://{host}:{port}`` + ``{database}.{table}``).

Identity:

- A source file is the parent run. Its run id is ``uuid5(NAMESPACE_URL,
  "ferry:<namespace>/file/<file_id>")``: the same file (same bytes, same dataset) in the same
  deployment always has the same run, however often and by however many processes it is
  handled. A NAS entry refused before it had a file_id (bad name, symlink) uses its NAS path
  instead: ``…/nas/<relative path>``.
- Each stage's handling of it is a child run of job ``<dataset>.<stage>``; a consuming stage's run
  id is ``uuid5(NAMESPACE_URL, "ferry:<namespace>/file/<file_id>/<stage>/<topic>/<partition>/
  <offset>")``, so the START and the COMPLETE/FAIL reported for one input record (also after a
  redelivery) name the same run and a replay (a new input record) is a new run. Extract has no
  input record: its run id is a fresh UUIDv7 per attempt.
- The parent job is ``<dataset>``; every job lives in the deployment's namespace
  (``lineage.namespace``, default ``kafka.topic_prefix``).
"""

from __future__ import annotations

import uuid
from dataclasses import dataclass
from pathlib import Path

from ferry.core.events import FileExtracted, FileLoaded, FileTransferred, FileTransformed
from ferry.settings import Settings

#: The manifest URI role (``FileManifest.uris`` key) each output event writes first: the role a
#: stage consuming that event reads.
WRITES: dict[type, str] = {
    FileExtracted: "landing",
    FileTransformed: "staging",
    FileTransferred: "incoming",
    FileLoaded: "table",
}

#: Namespace of a file on the NAS mount (a local file system to the edge node).
FILE_NAMESPACE = "file"


@dataclass(frozen=True)
class Names:
    """What naming needs from the settings (:meth:`of`)."""

    namespace: str
    nas_dir: Path
    #: ``hive://<metastore host>:<port>``
    hive: str
    #: ``hdfs://<cluster A>`` + the warehouse directory
    warehouse: str

    @classmethod
    def of(cls, settings: Settings) -> Names:
        ms = settings.metastore
        return cls(
            namespace=settings.lineage.namespace or settings.kafka.topic_prefix,
            nas_dir=settings.paths.nas_dir,
            hive=f"hive://{ms.host}:{ms.port}",
            warehouse=settings.cluster("a").fs_url + ms.warehouse_path.rstrip("/"),
        )

    def parent_run_id(self, file_id: str | None, nas_path: str = "") -> str:
        """The source file's run id (see the module docstring)."""
        key = f"file/{file_id}" if file_id else f"nas/{nas_path}"
        return str(uuid.uuid5(uuid.NAMESPACE_URL, f"ferry:{self.namespace}/{key}"))

    def child_run_id(
        self, file_id: str, stage: str, topic: str, partition: int, offset: int
    ) -> str:
        """A consuming stage's run on one input record (see the module docstring)."""
        key = f"file/{file_id}/{stage}/{topic}/{partition}/{offset}"
        return str(uuid.uuid5(uuid.NAMESPACE_URL, f"ferry:{self.namespace}/{key}"))

    def nas_file(self, source_path: str) -> tuple[str, str]:
        """(namespace, name) of a NAS file given relative to the NAS root."""
        return FILE_NAMESPACE, str(self.nas_dir / source_path)

    def table(self, full_name: str) -> tuple[str, str]:
        """(namespace, name) of Hive table ``db.table``."""
        return self.hive, full_name

    def table_location(self, full_name: str) -> tuple[str, str]:
        """(namespace, name) of the directory holding a table's data files: Hive's default
        location of a managed table, ``<warehouse>/<db>.db/<table>`` on cluster A (where Spark
        creates Ferry's tables: ``spark.sql.warehouse.dir``)."""
        db, _, table = full_name.partition(".")
        return hdfs(f"{self.warehouse}/{db}.db/{table}")


def hdfs(uri: str) -> tuple[str, str]:
    """(namespace, name) of a full HDFS URI: ``hdfs://ns/a/b`` → ``("hdfs://ns", "/a/b")``. The
    path is kept byte for byte (no percent-decoding: Ferry's URIs hold the names as they are).

    Raises:
        ValueError: not an ``hdfs://`` URI with an authority.
    """
    scheme, sep, rest = uri.partition("://")
    authority, slash, path = rest.partition("/")
    if not sep or scheme != "hdfs" or not authority:
        raise ValueError(f"not an hdfs:// URI with a NameNode or nameservice: {uri!r}")
    return f"hdfs://{authority}", slash + path


__all__ = ["FILE_NAMESPACE", "WRITES", "Names", "hdfs"]
