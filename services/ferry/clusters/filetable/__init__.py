"""Hive tables made of per-file data files (docs/hive-layout.md): each source file's rows are
Parquet files of their own inside the table's partitions, named after its ``file_id``, moved into
place; a small index under ``<table location>/_ferry/`` records which data files hold each file's
rows, so loading a file again first removes exactly those, wherever they lie.

Modules: :mod:`~ferry.clusters.filetable.paths` (names, Hive path escaping),
:mod:`~ferry.clusters.filetable.model` (index entries, journal records, the staging marker),
:mod:`~ferry.clusters.filetable.index` (the index on HDFS), :mod:`~ferry.clusters.filetable.journal`
(crash-safe application of a change), :mod:`~ferry.clusters.filetable.footers` (Parquet footers),
:mod:`~ferry.clusters.filetable.staging` (Spark writes of per-file trees),
:mod:`~ferry.clusters.filetable.replace` (loading, replacing and removing files),
:mod:`~ferry.clusters.filetable.compaction`, :mod:`~ferry.clusters.filetable.adopt` (tables of
earlier layouts).
"""
