"""``ferry compact``, ``ferry migrate-layout``, ``ferry unload``: Hive table maintenance (see
:mod:`ferry.ops.compact` and docs/hive-layout.md). Each builds a Hive-enabled Spark session on
cluster A and holds the table's lock while it changes the table (the load service may run)."""

from __future__ import annotations

from typing import Any

import typer
from rich.table import Table

from ferry.ops.console import literal_console
from ferry.tables.locks import TableLocks

#: How ``ferry.cli`` mounts these commands (single commands, not groups).
COMMAND_SETTINGS: dict[str, object] = {"no_args_is_help": True}

_TABLE = typer.Argument(..., help="The table (db.table) or its dataset's name.")
_MASTER = typer.Option(
    None, "--master", help="Spark master URL (default: the stack's; local[1] runs in-process)."
)

_PARTITION = typer.Option(
    [], "--partition", help="k=v of every partition column (flight_date=2013-01-01); repeatable."
)
_FILE_IDS = typer.Argument(..., help="File id(s) whose rows to remove.")


def _session(master: str | None) -> tuple[Any, Any]:
    from ferry.clusters.spark import build_session
    from ferry.settings import get_settings

    settings = get_settings()
    return settings, build_session(settings, "ferry-hive-ops", "a", hive=True, master=master)


def _spec(settings: Any, table: str) -> Any:
    from ferry.datasets.spec import load_datasets
    from ferry.ops.compact import resolve

    return resolve(load_datasets(settings.paths.datasets_dir), table)


def _target(settings: Any) -> int:
    return int(settings.load.target_file_mb) * 1024 * 1024


def compact(
    table: str = _TABLE,
    partition: list[str] = _PARTITION,
    max_files: int | None = typer.Option(
        None,
        "--max-files",
        help="Compact partitions holding more data files than this (default "
        "load.compact_max_files; 1: merge every partition's small files).",
    ),
    master: str | None = _MASTER,
) -> None:
    """Merge the small data files of a table's partitions (all, or the given ones) that hold
    more than --max-files into files of about load.target_file_mb; rows are unchanged."""
    from ferry.ops.compact import compact as run
    from ferry.ops.compact import parse_partition

    settings, spark = _session(master)
    spec = _spec(settings, table)
    report = run(
        spark,
        spec,
        [parse_partition(spec, p) for p in partition],
        max_files=max_files or settings.load.compact_max_files,
        target_file_bytes=_target(settings),
        locks=TableLocks(settings),
    )
    title = f"compact {spec.hive.full_name}: {report.rows} rows merged"
    out = Table(title=title + (f" (not committed: {report.skipped})" if report.skipped else ""))
    for col in ("partition", "files before", "files after"):
        out.add_column(col, justify="left" if col == "partition" else "right")
    for p, n in report.before.items():
        out.add_row(p, str(n), str(report.after.get(p, n)))
    literal_console().print(out)


def migrate_layout(
    table: str = _TABLE,
    drop_old: bool = typer.Option(
        False, "--drop-old", help="Drop the old table after the swap (default: keep it renamed)."
    ),
    master: str | None = _MASTER,
) -> None:
    """Bring a table of an earlier layout into the per-file one: a copy-on-write table is indexed
    in place; a per-file-partition table (ferry_file_id a partition column) is copied into a new
    table, swapped only if the rows per file id are equal before and after."""
    from ferry.ops.compact import migrate_layout as run

    settings, spark = _session(master)
    spec = _spec(settings, table)
    report = run(
        spark,
        spec,
        target_file_bytes=_target(settings),
        drop_old=drop_old,
        locks=TableLocks(settings),
    )
    console = literal_console()
    how = "indexed in place, no row rewritten" if report.in_place else "equal before and after"
    console.print(
        f"{spec.hive.full_name}: {len(report.rows)} file id(s), {sum(report.rows.values())} rows, "
        f"{how}; partitions {report.partitions_before} → {report.partitions_after}"
    )
    if report.old_table:
        console.print(f"old table kept as {report.old_table}: DROP TABLE it once checked")


def unload(
    table: str = _TABLE,
    file_ids: list[str] = _FILE_IDS,
    master: str | None = _MASTER,
) -> None:
    """Remove every row of the given file ids from a table (deletes their data files, found
    through the table's index), e.g. before re-dropping a corrected file under the same name."""
    from ferry.ops.compact import unload as run

    settings, spark = _session(master)
    spec = _spec(settings, table)
    removed = run(
        spark, spec, file_ids, target_file_bytes=_target(settings), locks=TableLocks(settings)
    )
    for fid, n in removed.items():
        literal_console().print(f"{fid}: {n} row(s) removed from {spec.hive.full_name}")
