"""``ferry compact``, ``ferry migrate-layout``, ``ferry unload``: Hive table maintenance (see
:mod:`ferry.ops.compact` and docs/hive-layout.md). Each builds a Hive-enabled Spark session on
cluster A; stop the load service first."""

from __future__ import annotations

from typing import Any

import typer
from rich.table import Table

from ferry.clusters.locks import TableLocks
from ferry.ops.console import literal_console

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
    master: str | None = _MASTER,
) -> None:
    """Rewrite a table's partitions that hold more files than their size needs (all partitions,
    or the given ones) into files of about load.target_file_mb; rows are unchanged."""
    from ferry.ops.compact import compact as run
    from ferry.ops.compact import parse_partition

    settings, spark = _session(master)
    spec = _spec(settings, table)
    report = run(
        spark,
        spec,
        [parse_partition(spec, p) for p in partition],
        target_file_bytes=_target(settings),
        locks=TableLocks(settings),
    )
    out = Table(title=f"compact {spec.hive.full_name}: {report.rows} rows rewritten")
    for col in ("partition", "files before", "files after", "bytes before"):
        out.add_column(col, justify="left" if col == "partition" else "right")
    for p, s in report.before.items():
        after = report.after.get(p)
        out.add_row(
            "/".join(map(str, p)), str(s.files), str(after.files if after else 0), str(s.bytes)
        )
    literal_console().print(out)


def migrate_layout(
    table: str = _TABLE,
    drop_old: bool = typer.Option(
        False, "--drop-old", help="Drop the old table after the swap (default: keep it renamed)."
    ),
    master: str | None = _MASTER,
) -> None:
    """Rewrite a table of the old per-file layout (ferry_file_id a partition column) into the
    current one; swaps only if the rows per file id are equal before and after."""
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
    console.print(
        f"{spec.hive.full_name}: {len(report.rows)} file id(s), {sum(report.rows.values())} rows, "
        f"equal before and after; partitions {report.partitions_before} → "
        f"{report.partitions_after}"
    )
    if report.old_table:
        console.print(f"old table kept as {report.old_table}: DROP TABLE it once checked")


def unload(
    table: str = _TABLE,
    file_ids: list[str] = _FILE_IDS,
    master: str | None = _MASTER,
) -> None:
    """Remove every row of the given file ids from a table (rewrites the partitions holding
    them), e.g. before re-dropping a corrected file under the same name."""
    from ferry.ops.compact import unload as run

    settings, spark = _session(master)
    spec = _spec(settings, table)
    removed = run(
        spark, spec, file_ids, target_file_bytes=_target(settings), locks=TableLocks(settings)
    )
    for fid, n in removed.items():
        literal_console().print(f"{fid}: {n} row(s) removed from {spec.hive.full_name}")
