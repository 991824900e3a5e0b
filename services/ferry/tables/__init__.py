"""Ferry's Hive tables, made of per-file data files (docs/hive-layout.md): each source file's
rows are Parquet files of their own inside the table's partitions, named after its ``file_id``,
moved into place; a small index under ``<table location>/_ferry/`` records which data files hold
each file's rows, so loading a file again first removes exactly those, wherever they lie.

Modules: :mod:`~ferry.tables.paths` (names, Hive path escaping),
:mod:`~ferry.tables.model` (index entries, journal records, the staging marker),
:mod:`~ferry.tables.index` (the index on HDFS), :mod:`~ferry.tables.journal`
(crash-safe application of a change), :mod:`~ferry.tables.footers` (Parquet footers),
:mod:`~ferry.tables.staging` (Spark writes of per-file trees),
:mod:`~ferry.tables.replace` (loading, replacing and removing files),
:mod:`~ferry.tables.compaction`, :mod:`~ferry.tables.adopt` (tables of
earlier layouts), :mod:`~ferry.tables.hive` (the DDL and the metastore's partition calls of such
a table), :mod:`~ferry.tables.locks` (one writer per table at a time: a ZooKeeper lock per
table).
"""
