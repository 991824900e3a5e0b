"""Ferry's HDFS port: named clusters over WebHDFS, with classified errors and safe writes.

The package, by concern:

* :mod:`ferry.clusters.hdfs.paths`: path rules (absolute, NFC), temporary names, the value types
  :class:`FileStatus` and :class:`Written`.
* :mod:`ferry.clusters.hdfs.port`: :class:`HdfsPort`, the abstract port and the safe write built
  on its primitives (temporary file, read-back verify, rename, clean-up of only that file).
* :mod:`ferry.clusters.hdfs.webhdfs`: :class:`WebHdfs`, the port over WebHDFS (HdfsCLI), with
  timeouts on every call and DataNode address rewriting.
* :mod:`ferry.clusters.hdfs.errors`: how ``requests``/HdfsCLI failures become Ferry errors.

The in-memory implementation for unit tests is :class:`tests.support.hdfs_fake.FakeHdfs`.
Importers take each name from the module that defines it.
"""
