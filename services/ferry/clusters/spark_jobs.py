"""Helpers shared by the transform and load jobs: Spark types, source-path attribution, and the
small filesystem port the jobs commit through.

Source-path attribution (case C07): Spark reports a row's file (``input_file_name()``,
``_metadata.file_path``) as a percent-encoded URI (``file:///d/donn%C3%A9es%20%23%25.csv`` keeps
non-ASCII letters raw but encodes space, ``#``, ``%``, ``[``…), and its scheme/authority form varies
(``file:/`` vs ``file:///``). Ferry compares files by :func:`path_key`: the decoded path component,
without scheme or authority. :func:`source_key_column` computes the same key inside Spark, so a row
is attributed to the exact path string the caller passed, byte for byte.
"""

from __future__ import annotations

import re
import uuid
from typing import TYPE_CHECKING, Any, Protocol

from ferry.datasets.compression import codec_of, head
from ferry.datasets.fields import ColumnSpec
from ferry.errors import HdfsPathNotFound, TransientError

if TYPE_CHECKING:
    from pyspark.sql import Column, SparkSession
    from pyspark.sql.types import DataType, StructType

_SCHEME_AUTHORITY = r"^[A-Za-z][A-Za-z0-9+.\-]*:(//[^/]*)?"
_GLOB_CHARS = re.compile(r"([\\\[\]{}*?])")
_FILE_ID = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.\-]*$")


def spark_type(type_name: str) -> DataType:
    """Spark DataType of a definition type name (``int``, ``decimal(9,2)``…), without a JVM."""
    from pyspark.sql import types as T

    simple = {
        "string": T.StringType(),
        "boolean": T.BooleanType(),
        "tinyint": T.ByteType(),
        "smallint": T.ShortType(),
        "int": T.IntegerType(),
        "bigint": T.LongType(),
        "float": T.FloatType(),
        "double": T.DoubleType(),
        "date": T.DateType(),
        "timestamp": T.TimestampType(),
    }
    if type_name in simple:
        return simple[type_name]
    p, s = type_name[len("decimal(") : -1].split(",")
    return T.DecimalType(int(p), int(s))


def struct_for(columns: tuple[ColumnSpec, ...] | list[ColumnSpec]) -> StructType:
    """Nullable StructType of ``columns`` in order."""
    from pyspark.sql import types as T

    return T.StructType([T.StructField(c.name, spark_type(c.type), True) for c in columns])


def path_key(path: str) -> str:
    """The comparison key of a raw (not percent-encoded) path: its path component.

    ``hdfs://nn:8020/ferry/landing/a b.csv`` → ``/ferry/landing/a b.csv``; ``/x/y`` → ``/x/y``.
    """
    return re.sub(_SCHEME_AUTHORITY, "", path, count=1)


def source_key_column(uri: Column) -> Column:
    """Spark column: :func:`path_key` of a percent-encoded file URI reported by Spark.

    ``+`` is protected before ``url_decode`` (which reads it as a space, form-style).
    """
    from pyspark.sql import functions as F

    stripped = F.regexp_replace(uri, _SCHEME_AUTHORITY, "")
    return F.url_decode(F.replace(stripped, F.lit("+"), F.lit("%2B")))


def escape_glob(path: str) -> str:
    """Escape Hadoop glob characters (``\\ [ ] { } * ?``) so a literal file name is read as is."""
    return _GLOB_CHARS.sub(r"\\\1", path)


def check_file_id(file_id: str) -> str:
    """Return ``file_id`` if it is safe as a directory name and partition value.

    Raises:
        ValueError: empty or with characters other than letters, digits, ``_ . -``.
    """
    if not _FILE_ID.match(file_id):
        raise ValueError(f"file_id {file_id!r} must match {_FILE_ID.pattern}")
    return file_id


def java_class(spark: SparkSession, fqn: str) -> Any:
    """The py4j class ``fqn`` (``org.apache.hadoop.fs.Path``; a nested class with ``$``:
    ``org.apache.hadoop.fs.Options$Rename``) of the session's JVM, without a round trip.

    ``spark._jvm.org.apache.hadoop.fs.Path`` resolves each package step in the JVM
    (py4j's ``getUnknownMember``): a failed ``Class.forName`` of ``org``, ``org.apache`` …, each
    a search of every jar on the driver's class path that the class loader does not cache
    (issue 45: 30% of the load driver's CPU in a run of 300 small files, sampled by JDK Flight
    Recorder). A ``JavaClass`` made from the name asks the JVM only when a member is used."""
    from py4j.java_gateway import JavaClass

    gateway: Any = spark.sparkContext._gateway
    return JavaClass(fqn, gateway._gateway_client)


def join_path(root: str, *parts: str) -> str:
    """``root`` and ``parts`` joined by single slashes (works for URIs and plain paths)."""
    out = root.rstrip("/")
    for p in parts:
        out += "/" + p.strip("/")
    return out


class FileSystemOps(Protocol):
    """What the jobs need from a filesystem to commit by rename (no partial directory is seen)."""

    def exists(self, path: str) -> bool: ...
    def rename(self, src: str, dst: str) -> None: ...
    def move(self, src: str, dst: str) -> None: ...
    def mkdirs(self, path: str) -> None: ...
    def delete(self, path: str, recursive: bool = True) -> None: ...
    def read_head(self, path: str, nbytes: int) -> bytes: ...
    def size(self, path: str) -> int: ...
    def list_files(self, path: str) -> dict[str, int]: ...
    def write_bytes(self, path: str, data: bytes) -> None: ...


#: Most compressed bytes read for a compressed file's head: a bzip2 block is up to 900 kB
#: compressed and yields nothing before it is whole.
HEAD_RAW_CAP = 4 * 1024 * 1024


class HadoopFileSystem:
    """:class:`FileSystemOps` over the Hadoop FileSystem API of a SparkSession's JVM.

    Works for any scheme the session can read (``hdfs://``, ``file:``); unqualified paths resolve
    against the session's ``fs.defaultFS``. Raises :class:`TransientError` when an operation
    reports failure (Hadoop's ``rename``/``mkdirs``/``delete`` return ``false`` instead of raising).
    """

    def __init__(self, spark: SparkSession) -> None:
        self._conf = spark._jsc.hadoopConfiguration()
        self._gateway: Any = spark.sparkContext._gateway
        self._path_class = java_class(spark, "org.apache.hadoop.fs.Path")
        self._rename_class = java_class(spark, "org.apache.hadoop.fs.Options$Rename")
        self._file_context = java_class(spark, "org.apache.hadoop.fs.FileContext")
        self._filesystems: dict[str, Any] = {}  # scheme://authority → FileSystem (cached by Hadoop)

    def _fs_path(self, path: str) -> tuple[Any, Any]:
        p = self._path_class(path)
        m = re.match(_SCHEME_AUTHORITY, path)
        key = m.group(0) if m else ""
        fs = self._filesystems.get(key)
        if fs is None:
            fs = self._filesystems[key] = p.getFileSystem(self._conf)
        return fs, p

    def exists(self, path: str) -> bool:
        fs, p = self._fs_path(path)
        return bool(fs.exists(p))

    def rename(self, src: str, dst: str) -> None:
        fs, s = self._fs_path(src)
        _, d = self._fs_path(dst)
        parent = d.getParent()
        if parent is not None:
            fs.mkdirs(parent)
        if not fs.rename(s, d):
            raise TransientError(f"rename {src} -> {dst} failed")

    def replace(self, src: str, dst: str) -> None:
        """Rename ``src`` onto the existing file ``dst`` in ONE step (HDFS's rename with
        ``Options.Rename.OVERWRITE``, through ``FileContext``): a reader sees the old file or the
        new one, never neither (one NameNode call).

        Raises:
            TransientError: the rename failed (missing source; ``dst`` a non-empty directory).
        """
        s, d = self._path_class(src), self._path_class(dst)
        rename = self._rename_class
        opts = self._gateway.new_array(rename, 1)
        opts[0] = rename.OVERWRITE
        try:
            self._file_context.getFileContext(s.toUri(), self._conf).rename(s, d, opts)
        except Exception as exc:  # noqa: BLE001 - py4j wraps the Java IOException
            raise TransientError(f"replace {dst} by {src} failed: {exc}") from exc

    def mkdirs(self, path: str) -> None:
        fs, p = self._fs_path(path)
        if not fs.mkdirs(p):
            raise TransientError(f"mkdirs {path} failed")

    def delete(self, path: str, recursive: bool = True) -> None:
        fs, p = self._fs_path(path)
        if fs.exists(p) and not fs.delete(p, recursive):
            raise TransientError(f"delete {path} failed")

    def size(self, path: str) -> int:
        """Length of file ``path``, bytes (one NameNode call)."""
        fs, p = self._fs_path(path)
        return int(fs.getFileStatus(p).getLen())

    def read_head(self, path: str, nbytes: int) -> bytes:
        """The first ``nbytes`` bytes of file ``path`` (fewer when it is shorter); of a
        compressed file (``*.gz``, ``*.bz2``: :mod:`ferry.datasets.compression`) the first
        ``nbytes`` decompressed bytes, reading at most :data:`HEAD_RAW_CAP` compressed ones.

        Raises:
            HdfsPathNotFound: no file at ``path`` (Hadoop's ``FileNotFoundException``).
            CorruptArchive: a compressed file whose head does not decompress.
        """
        fs, p = self._fs_path(path)
        try:
            stream = fs.open(p)
        except Exception as exc:  # noqa: BLE001 - py4j's error: only "not found" is named here
            if _java_class(exc) == "java.io.FileNotFoundException":
                raise HdfsPathNotFound(f"{path}: no such file") from None
            raise
        try:
            codec = codec_of(path.rsplit("/", 1)[-1])
            if codec is None:
                return bytes(stream.readNBytes(nbytes))
            return head(lambda n: bytes(stream.readNBytes(n)), codec, nbytes, raw_cap=HEAD_RAW_CAP)
        finally:
            stream.close()

    # -- what the per-file table layout needs (ferry.tables) -----------------------

    def move(self, src: str, dst: str) -> None:
        """Rename ``src`` to ``dst`` whose parent exists (one NameNode call; no ``mkdirs``).

        Raises:
            TransientError: the rename reported failure (missing source, existing target).
        """
        fs, s = self._fs_path(src)
        if not fs.rename(s, self._path_class(dst)):
            raise TransientError(f"rename {src} -> {dst} failed")

    def delete_quiet(self, path: str, recursive: bool = True) -> bool:
        """Delete ``path``; ``False`` when it did not exist (one NameNode call)."""
        fs, p = self._fs_path(path)
        return bool(fs.delete(p, recursive))

    def read_bytes(self, path: str) -> bytes | None:
        """The whole content of a small file; ``None`` when it does not exist (asked first: a
        Java exception through py4j costs ~0.25 s, an ``exists`` one NameNode call)."""
        fs, p = self._fs_path(path)
        if not fs.exists(p):
            return None
        try:
            stream = fs.open(p)
        except Exception as exc:  # noqa: BLE001 - py4j wraps java.io.FileNotFoundException
            if "FileNotFoundException" in str(exc):
                return None
            raise
        try:
            return bytes(stream.readAllBytes())
        finally:
            stream.close()

    def write_bytes(self, path: str, data: bytes) -> None:
        """Create (or replace) file ``path`` holding ``data`` (parents are created)."""
        fs, p = self._fs_path(path)
        out = fs.create(p, True)
        try:
            out.write(bytearray(data))
        finally:
            out.close()

    def list_dir(self, path: str) -> list[tuple[str, bool, int]]:
        """``(name, is directory, bytes)`` of each entry of directory ``path``, sorted by name;
        ``[]`` when it does not exist."""
        fs, p = self._fs_path(path)
        try:
            found = fs.listStatus(p)
        except Exception as exc:  # noqa: BLE001 - py4j wraps java.io.FileNotFoundException
            if "FileNotFoundException" in str(exc):
                return []
            raise
        out = [
            (str(st.getPath().getName()), bool(st.isDirectory()), int(st.getLen())) for st in found
        ]
        return sorted(out)

    def list_files(self, path: str) -> dict[str, int]:
        """Data files under directory ``path``, recursively: ``{relative path: bytes}``; names
        starting with ``.`` or ``_`` (checksums, markers, hidden directories) are skipped at
        every level; ``{}`` when ``path`` does not exist. One listing per directory."""
        out: dict[str, int] = {}
        todo = [""]
        while todo:
            rel = todo.pop()
            for name, is_dir, size in self.list_dir(join_path(path, rel) if rel else path):
                if name.startswith((".", "_")):
                    continue
                child = f"{rel}/{name}" if rel else name
                if is_dir:
                    todo.append(child)
                else:
                    out[child] = size
        return out


def _java_class(exc: BaseException) -> str | None:
    """The Java class name of a py4j ``Py4JJavaError``'s exception, else ``None``."""
    java = getattr(exc, "java_exception", None)
    try:
        return str(java.getClass().getName()) if java is not None else None
    except Exception:  # noqa: BLE001 - the gateway may be gone: no name then
        return None


def commit_dir(fs: FileSystemOps, src: str, dst: str) -> None:
    """Make directory ``src`` visible as ``dst`` by rename, replacing an existing ``dst``.

    A Hadoop rename onto an existing directory would move ``src`` INSIDE it, so an existing
    ``dst`` is first renamed aside (``<dst>.replaced-<random>``), then deleted after the
    commit. Readers see either the old or the new directory, never a partial one.

    Raises:
        TransientError: a rename failed.
    """
    aside = None
    if fs.exists(dst):
        aside = f"{dst.rstrip('/')}.replaced-{uuid.uuid4().hex[:12]}"
        fs.rename(dst, aside)
    fs.rename(src, dst)
    if aside is not None:
        fs.delete(aside, recursive=True)
