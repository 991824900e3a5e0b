"""Applying a journal moves each data file with one NameNode call into a partition directory
that exists (the metastore made it when the partition was registered), and still moves it into
one that is missing (issue 45: no ``mkdirs`` per partition per batch). Over a local directory
with the rename semantics of HDFS's ``FileSystem.rename``: ``false`` when the target's parent is
missing or the target exists (no JVM)."""

from __future__ import annotations

from collections import Counter
from pathlib import Path

from ferry.errors import TransientError
from ferry.tables.index import TableIndex
from ferry.tables.journal import Catalog, commit
from ferry.tables.model import Group, Journal


class PosixFs:
    """The calls :mod:`ferry.tables` makes, over local paths, counted by name."""

    def __init__(self) -> None:
        self.calls: Counter[str] = Counter()

    def exists(self, path: str) -> bool:
        self.calls["exists"] += 1
        return Path(path).exists()

    def move(self, src: str, dst: str) -> None:
        self.calls["move"] += 1
        s, d = Path(src), Path(dst)
        if not s.exists() or d.exists() or not d.parent.is_dir():
            raise TransientError(f"rename {src} -> {dst} failed")
        s.rename(d)

    def mkdirs(self, path: str) -> None:
        self.calls["mkdirs"] += 1
        Path(path).mkdir(parents=True, exist_ok=True)

    def delete_quiet(self, path: str, recursive: bool = True) -> bool:
        self.calls["delete"] += 1
        p = Path(path)
        if not p.exists():
            return False
        p.unlink()
        return True

    def read_bytes(self, path: str) -> bytes | None:
        self.calls["read"] += 1
        p = Path(path)
        return p.read_bytes() if p.exists() else None

    def write_bytes(self, path: str, data: bytes) -> None:
        self.calls["write"] += 1
        Path(path).parent.mkdir(parents=True, exist_ok=True)
        Path(path).write_bytes(data)

    def list_dir(self, path: str) -> list[tuple[str, bool, int]]:
        self.calls["list"] += 1
        p = Path(path)
        if not p.is_dir():
            return []
        return [(c.name, c.is_dir(), 0 if c.is_dir() else c.stat().st_size) for c in p.iterdir()]


def test_moves_into_existing_and_missing_partition_directories(tmp_path: Path) -> None:
    table, staged = tmp_path / "t", tmp_path / "staged"
    (table / "d=1").mkdir(parents=True)  # registered before: the metastore made it
    staged.mkdir()
    for n in ("a", "b"):
        (staged / n).write_bytes(n.encode())
    fs = PosixFs()
    index = TableIndex(fs, str(table))  # type: ignore[arg-type]
    registered: list[object] = []
    catalog = Catalog(("d",), registered.extend, lambda _: None)
    journal = Journal(
        "load",
        groups=(Group(moves=((str(staged / "a"), "d=1/a"), (str(staged / "b"), "d=2/b"))),),
    )
    fs.calls.clear()
    done = commit(index, journal, catalog)
    assert (done.moved, done.lost) == (2, [])
    assert (table / "d=1" / "a").read_bytes() == b"a"
    assert (table / "d=2" / "b").read_bytes() == b"b"  # its directory was missing
    # the journal's own rename, a's one move; b's failed move, two exists, mkdirs, move again
    assert fs.calls["move"] == 1 + 1 + 2
    assert fs.calls["mkdirs"] == 1
    assert fs.calls["exists"] == 2
    assert not list(staged.iterdir())
