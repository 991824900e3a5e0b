"""``ferry rejects FILE_ID|NAS_NAME``: a file's rejected rows, reason and raw record per row.

Transform writes each file's rejected rows as Parquet under
``<paths.rejects_path>/<dataset>/<file_id>/`` on HDFS B (``/ferry/rejects/…``): the parsed
columns (a decimal column as its source text: :func:`ferry.stages.transform.rows.split`),
``_corrupt_record`` (the record's raw text when the CSV parser refused it),
``ferry_source_path`` and ``reject_reason``. This command finds the file (a file id, or its NAS
name: the relative path ``orders/orders_1.csv``, the bare name, or a prefix naming one file,
looked up in the events on the topics), reads that directory with a local Spark session and
prints, per row, its reasons and its record: the raw text when the parser refused the record,
else the parsed values joined with the dataset's delimiter (a value rule rejected a record that
parsed, so its values are exactly what the file held, as typed; a decimal refused as ``scale:``
or ``overflow:`` is its text as dropped).
"""

from __future__ import annotations

import csv
import io
import re
from typing import Any

import typer

from ferry.ops.console import literal_console

#: How ``ferry.cli`` mounts this function (a command, not a group).
COMMAND_SETTINGS: dict[str, object] = {"no_args_is_help": True}

_FILE_ID = re.compile(r"^[0-9a-f]{32}$")
console = literal_console(200)


def resolve(settings: Any, target: str) -> tuple[str, str | None, str | None]:
    """``(file_id, dataset, NAS path)`` of ``target`` (a file id, or a NAS name or prefix).

    Raises:
        typer.Exit: no file, or several files, match (the message lists them).
    """
    from ferry.core.wire.avro import default_codec
    from ferry.ops.status import timelines_from_topics

    timelines, _bad = timelines_from_topics(settings, default_codec(settings.paths.schemas_dir))
    if _FILE_ID.match(target):
        tl = timelines.get(target)
        return target, tl.dataset if tl else None, tl.source_path if tl else None
    exact = [t for t in timelines.values() if t.source_path in (target, target.lstrip("/"))]
    named = [t for t in timelines.values() if (t.source_path or "").rsplit("/", 1)[-1] == target]
    prefix = [t for t in timelines.values() if (t.source_path or "").startswith(target)]
    found = exact or named or prefix
    if len(found) == 1:
        t = found[0]
        return t.file_id, t.dataset, t.source_path
    if not found:
        console.print(f"no file id or NAS name matches {target!r} in the events on the topics")
    else:
        console.print(f"{len(found)} files match {target!r}; give one's file id:")
        for t in sorted(found, key=lambda t: t.source_path or ""):
            console.print(f"  {t.file_id}  {t.source_path}  ({t.state})")
    raise typer.Exit(1)


def _record(row: Any, columns: list[str], delimiter: str) -> str:
    raw = row["_corrupt_record"]
    if raw is not None:
        return str(raw)
    out = io.StringIO()
    csv.writer(out, delimiter=delimiter, lineterminator="").writerow(
        ["" if row[c] is None else row[c] for c in columns]
    )
    return out.getvalue()


def rejects(
    target: str = typer.Argument(..., help="File id, or NAS name (path, name or prefix)."),
    limit: int = typer.Option(100, help="Most rows printed."),
    master: str = typer.Option("local[1]", help="Spark master of the reading session."),
) -> None:
    """Print a file's rejected rows: reasons and record per row (raw text when the parser
    refused it, else the parsed values). Exit 0 also when the file has none."""
    from ferry.clusters.hdfs.webhdfs import WebHdfs
    from ferry.clusters.spark import build_session
    from ferry.datasets.registry import load_definitions
    from ferry.settings import get_settings

    settings = get_settings()
    file_id, dataset, source = resolve(settings, target)
    hdfs = WebHdfs.for_cluster("b", settings)
    root = settings.paths.rejects_path.rstrip("/")
    if dataset is None:  # a file id the topics no longer hold: look for it under each dataset
        for entry in hdfs.list(root) if hdfs.exists(root) else []:
            if hdfs.exists(f"{root}/{entry.name}/{file_id}"):
                dataset = entry.name
    where = f"{root}/{dataset}/{file_id}"
    label = f"{source or file_id} ({dataset}, file id {file_id})"
    if dataset is None or not hdfs.exists(where):
        console.print(f"no rejected rows for {label}")
        return
    spark = build_session(settings, "ferry-rejects", "b", master=master)
    df = spark.read.parquet(f"{settings.cluster('b').fs_url}{where}")
    total = df.count()
    spec = load_definitions(settings.paths.datasets_dir).specs.get(dataset)
    names = [c.name for c in spec.columns] if spec else []
    columns = [c for c in names if c in df.columns] or [
        c for c in df.columns if c not in ("_corrupt_record", "ferry_source_path", "reject_reason")
    ]
    delimiter = spec.csv.delimiter if spec else ","
    console.print(f"{total} rejected row(s) of {label}, from {where} on HDFS B:")
    for row in df.limit(limit).collect():
        console.print(f"reason: {row['reject_reason']}")
        console.print(f"  record: {_record(row, columns, delimiter)}")
    if total > limit:
        console.print(f"… {total - limit} more (--limit)")
