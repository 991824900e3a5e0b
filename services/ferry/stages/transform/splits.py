"""Big files read in parallel when that parses them exactly alike (case C14's trade-off avoided).

A dataset with ``csv.multiline: true`` (the default, docs/field-cases.md C14) is read with Spark's
``multiLine`` CSV mode: each file is one task, so a 300 MB file is parsed by one core. A file
that holds no quote character (nor the escape character) has no quoted field, hence no quoted
line break: every line break ends a record, and the line-split mode (``multiLine`` off, one task
per 128 MiB split) parses it into the same records. :func:`parallel_paths` finds such files among
the big ones (over :data:`SPLIT_BYTES`; a smaller file is one task in either mode) with one
splittable text scan, and :func:`read_batch` reads them line-split, the rest as defined.

A file starting with a UTF-8 byte order mark keeps the defined mode (the multiLine parser skips
the mark, C10; the line reader would not).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING

from ferry.clusters.spark_jobs import FileSystemOps, escape_glob, path_key, source_key_column
from ferry.datasets.spec import DatasetSpec
from ferry.stages.transform.rows import read_csv

if TYPE_CHECKING:
    from pyspark.sql import DataFrame, SparkSession

#: Spark's ``spark.sql.files.maxPartitionBytes`` default (128 MiB): a file this size or smaller
#: is one task whatever the mode, so it is not probed.
SPLIT_BYTES = 128 * 1024 * 1024

_BOM = b"\xef\xbb\xbf"


def parallel_paths(
    spark: SparkSession,
    spec: DatasetSpec,
    heads: Mapping[str, bytes],
    fs: FileSystemOps,
    head_bytes: int,
) -> set[str]:
    """Of the paths of ``heads`` (``{path: first head_bytes bytes}``), those to read line-split:
    over :data:`SPLIT_BYTES` (``fs.size``, asked only of files whose head filled ``head_bytes``),
    without a byte order mark, holding neither the quote nor the escape character (one Spark
    text scan over them, split like any text file). Empty when the dataset is already
    line-split (``csv.multiline: false``)."""
    from pyspark.sql import functions as F

    if not spec.csv.multiline:
        return set()
    big = [
        p
        for p, head in heads.items()
        if len(head) >= head_bytes and not head.startswith(_BOM) and fs.size(p) > SPLIT_BYTES
    ]
    if not big:
        return set()
    marks = {spec.csv.quote, spec.csv.escape}
    hit = F.lit(False)
    for ch in marks:
        hit = hit | (F.instr(F.col("value"), ch) > 0)
    spark.sparkContext.setJobDescription(f"ferry transform {spec.name}: quote probe of {len(big)}")
    try:
        quoted = {
            r[0]
            for r in spark.read.text([escape_glob(p) for p in big])
            .where(hit)
            .select(source_key_column(F.col("_metadata.file_path")))
            .distinct()
            .collect()
        }
    finally:
        spark.sparkContext.setJobDescription(None)  # type: ignore[arg-type]
    return {p for p in big if path_key(p) not in quoted}


def read_batch(
    spark: SparkSession, paths: Sequence[str], spec: DatasetSpec, parallel: set[str]
) -> DataFrame:
    """:func:`ferry.stages.transform.rows.read_csv` of ``paths``: those in ``parallel`` with
    ``multiLine`` off (one union, same columns), the others as the dataset defines."""
    rest = [p for p in paths if p not in parallel]
    lines = [p for p in paths if p in parallel]
    frames = []
    if rest:
        frames.append(read_csv(spark, rest, spec))
    if lines:
        split_spec = spec.model_copy(
            update={"csv": spec.csv.model_copy(update={"multiline": False})}
        )
        frames.append(read_csv(spark, lines, split_spec))
    df = frames[0]
    for more in frames[1:]:
        df = df.unionByName(more)
    return df
