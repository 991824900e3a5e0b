"""Ferry's HDFS port: named clusters over WebHDFS, with classified errors and safe writes.

The package, by concern:

* :mod:`ferry.clusters.hdfs.paths`: path rules (absolute, NFC), temporary names, the value types
  :class:`FileStatus` and :class:`Written`.
* :mod:`ferry.clusters.hdfs.port`: :class:`HdfsPort`, the abstract port and the safe write built
  on its primitives (temporary file, read-back verify, rename, clean-up of only that file).
* :mod:`ferry.clusters.hdfs.webhdfs`: :class:`WebHdfs`, the port over WebHDFS (HdfsCLI), with
  timeouts on every call and DataNode address rewriting.
* :mod:`ferry.clusters.hdfs.errors`: how ``requests``/HdfsCLI failures become Ferry errors.

The in-memory implementation for unit tests is :class:`ferry.testing.hdfs_fake.FakeHdfs`.
Importers use the names re-exported here.
"""

from __future__ import annotations

from ferry.clusters.hdfs.errors import NAME_TOO_LONG
from ferry.clusters.hdfs.paths import (
    DEFAULT_CHUNK_SIZE,
    MAX_COMPONENT_BYTES,
    TEMP_MARKER,
    FileKind,
    FileStatus,
    Written,
    hdfs_name,
    is_temp_path,
    normalize_path,
    temp_path_for,
)
from ferry.clusters.hdfs.port import HdfsPort
from ferry.clusters.hdfs.webhdfs import WebHdfs

__all__ = [
    "DEFAULT_CHUNK_SIZE",
    "MAX_COMPONENT_BYTES",
    "NAME_TOO_LONG",
    "TEMP_MARKER",
    "FileKind",
    "FileStatus",
    "HdfsPort",
    "WebHdfs",
    "Written",
    "hdfs_name",
    "is_temp_path",
    "normalize_path",
    "temp_path_for",
]
