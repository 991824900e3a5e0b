"""Ferry's HDFS port: named clusters over WebHDFS, with classified errors and safe writes.

Two implementations share one interface, :class:`HdfsPort`:

* :class:`WebHdfs` talks WebHDFS through HdfsCLI (``hdfs`` 2.7.3) and one ``requests.Session``;
  build it with ``HdfsPort.for_cluster("a")`` (house style rule 7: clusters by name).
* :class:`ferry.testing.hdfs_fake.FakeHdfs` keeps files in memory, for handler unit tests.

Rules every caller can rely on (sources in brackets):

* Every HTTP call has a ``(connect, read)`` timeout from ``settings.retry`` [C08].
* WebHDFS answers ``CREATE``/``OPEN`` with a redirect to a DataNode; the DataNode's advertised
  ``host:port`` is rewritten through ``clusters.<x>.datanode_address_map`` before it is used, so a
  NAT gateway or a fault proxy can sit in front of the DataNode [LOCAL-STACK.md, C06].
* Failures surface as Ferry errors naming the cluster, the operation, the path and the address
  (house style rule 10): :class:`~ferry.core.errors.HdfsUnavailable` /
  :class:`~ferry.core.errors.HdfsTimeout` (transient: reset, refused NameNode, timeout, safe mode,
  5xx), :class:`~ferry.core.errors.DataNodeUnreachable` (permanent, at once: the redirect target
  cannot be connected to) [C06], :class:`~ferry.core.errors.HdfsPathNotFound`,
  :class:`~ferry.core.errors.HdfsPathExists`, :class:`~ferry.core.errors.HdfsRequestRejected`.
  A port never retries; callers retry :class:`~ferry.core.errors.TransientError` by policy
  (see :func:`ferry.stages.transfer.copy.copy_between`).
* Paths are absolute and NFC-normalised on the way in (:func:`normalize_path`); names then
  round-trip byte for byte, spaces, ``%``, ``=``, ``#`` and non-ASCII letters included [C07].
* :meth:`HdfsPort.upload_stream` writes ``<dir>/.<name>.ferry-tmp-<hex>`` and renames it onto the
  final path only after the bytes read back with the same size and sha256; on failure it deletes
  only that temporary file, never a directory [C02, house style rule 12].
"""

from __future__ import annotations

import abc
import contextlib
import getpass
import hashlib
import logging
import os
import posixpath
import time
import unicodedata
import uuid
from collections.abc import Callable, Iterable, Iterator, MutableSequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Literal
from urllib.parse import urlsplit, urlunsplit

import requests
from hdfs.client import Client as _CliClient
from hdfs.client import _to_error
from hdfs.util import HdfsError as _CliError
from urllib3.exceptions import NewConnectionError

from ferry.core.errors import (
    ChecksumMismatch,
    DataNodeUnreachable,
    FerryError,
    HdfsPathExists,
    HdfsPathNotFound,
    HdfsRequestRejected,
    HdfsTimeout,
    HdfsUnavailable,
    TransientError,
)

if TYPE_CHECKING:
    from ferry.core.config import HdfsClusterSettings, RetrySettings, Settings

log = logging.getLogger(__name__)

#: Bytes per chunk read from or written to WebHDFS (1 MiB): large enough to keep the HTTP
#: overhead small, small enough that a file is never held in memory.
DEFAULT_CHUNK_SIZE = 1 << 20

#: Marker in temporary file names; files starting with ``.`` are skipped by Hive and Spark.
TEMP_MARKER = ".ferry-tmp-"

#: HDFS's default limit on one path component, in bytes of UTF-8
#: (``dfs.namenode.fs-limits.max-component-length``, hdfs-default.xml). Longer names are refused
#: by the NameNode with ``PathComponentTooLongException`` (a permanent error here).
MAX_COMPONENT_BYTES = 255

#: Redirect hops followed for a GET (NameNode → DataNode is one).
_MAX_REDIRECTS = 3

FileKind = Literal["FILE", "DIRECTORY", "SYMLINK"]


@dataclass(frozen=True)
class FileStatus:
    """One entry of :meth:`HdfsPort.status` / :meth:`HdfsPort.list`.

    ``path`` is absolute and NFC; ``size`` is bytes (0 for a directory); ``mtime_ms`` is the
    modification time in milliseconds since the epoch.
    """

    path: str
    name: str
    kind: FileKind
    size: int
    mtime_ms: int

    @property
    def is_file(self) -> bool:
        return self.kind == "FILE"

    @property
    def is_dir(self) -> bool:
        return self.kind == "DIRECTORY"


@dataclass(frozen=True)
class Written:
    """Result of :meth:`HdfsPort.upload_stream`: final path, size in bytes, sha256 (hex), and
    whether bytes were written (``False``: the same bytes were already there)."""

    path: str
    size: int
    sha256: str
    created: bool = True


def normalize_path(path: str) -> str:
    """Return ``path`` as Ferry sends it to HDFS: absolute, Unicode NFC, ``.``/``..``/``//``
    collapsed, no trailing slash.

    NFC is Ferry's one normalisation (case C07): ``"é"`` typed as ``e`` + U+0301 and as U+00E9
    name the same file. Nothing else is changed: spaces, ``%``, ``=``, ``#``, ``+``, ``;`` stay.

    Raises:
        ValueError: ``path`` is not absolute.
    """
    if not isinstance(path, str) or not path.startswith("/"):
        raise ValueError(f"HDFS path must be absolute (start with '/'): {path!r}")
    path = unicodedata.normalize("NFC", path)
    path = posixpath.normpath(path)
    if path.startswith("//"):  # POSIX keeps a leading '//'; HDFS has no such thing
        path = "/" + path.lstrip("/")
    return path


def temp_path_for(path: str) -> str:
    """A fresh temporary sibling of ``path``: ``<dir>/.<name>.ferry-tmp-<32 hex>``.

    Same directory, so the final rename stays inside one directory (atomic on the NameNode);
    a fresh uuid per call, so concurrent attempts never share a temporary file.
    """
    parent, name = posixpath.split(normalize_path(path))
    return posixpath.join(parent, f".{name}{TEMP_MARKER}{uuid.uuid4().hex}")


def is_temp_path(path: str) -> bool:
    """True when ``path`` names a temporary file made by :func:`temp_path_for`."""
    name = posixpath.basename(path)
    return name.startswith(".") and TEMP_MARKER in name


class _Hashing:
    """Iterator over ``chunks`` that counts bytes and computes sha256 as they pass through."""

    def __init__(self, chunks: Iterable[bytes]) -> None:
        self._source = chunks
        self._it = iter(chunks)
        self._sha = hashlib.sha256()
        self.size = 0

    def __iter__(self) -> Iterator[bytes]:
        return self

    def __next__(self) -> bytes:
        chunk = next(self._it)
        if chunk:
            chunk = bytes(chunk)
            self._sha.update(chunk)
            self.size += len(chunk)
        return chunk

    def hexdigest(self) -> str:
        return self._sha.hexdigest()

    def close(self) -> None:
        for obj in (self._it, self._source):
            close = getattr(obj, "close", None)
            if close is not None:
                close()


class HdfsPort(abc.ABC):
    """The operations Ferry needs from one HDFS cluster.

    Subclasses implement the primitives (status, list, mkdirs, rename, delete, open_stream,
    ``_create``); the safe write (:meth:`upload_stream`) and :meth:`sha256` are built on them here,
    so the fake and the real port follow the same temp-then-rename rules.
    """

    #: Cluster name (``"a"``, ``"b"``) used in error messages.
    name: str = "?"

    @classmethod
    def for_cluster(cls, name: str, settings: Settings | None = None) -> WebHdfs:
        """The WebHDFS port of cluster ``name`` (``"a"`` or ``"b"``) from ``settings``
        (default :func:`ferry.core.config.get_settings`).

        Raises:
            ConfigError: no cluster of that name.
        """
        return WebHdfs.for_cluster(name, settings)

    # -- primitives ------------------------------------------------------------------------

    @abc.abstractmethod
    def status(self, path: str) -> FileStatus:
        """Status of ``path``.

        Raises:
            HdfsPathNotFound: nothing at ``path``.
            HdfsUnavailable, HdfsTimeout: transient failure.
        """

    @abc.abstractmethod
    def list(self, path: str) -> list[FileStatus]:
        """Entries of directory ``path``, sorted by name.

        Raises:
            HdfsPathNotFound: no such directory.
            HdfsRequestRejected: ``path`` is a file.
        """

    @abc.abstractmethod
    def mkdirs(self, path: str) -> None:
        """Create directory ``path`` and its missing parents (no error if it exists).

        Raises:
            HdfsRequestRejected: a file is in the way.
        """

    @abc.abstractmethod
    def rename(self, src: str, dst: str, *, overwrite: bool = False) -> None:
        """Move ``src`` to exactly ``dst`` (never *into* ``dst``), atomically on the NameNode.

        WebHDFS ``RENAME`` with ``renameoptions`` (FileSystem ``rename(src, dst, options)``
        semantics, HADOOP-11452): ``dst``'s parent must exist; an existing ``dst`` is an error
        unless ``overwrite`` (then ``dst`` must be a file or an empty directory).

        Raises:
            HdfsPathNotFound: ``src`` or ``dst``'s parent is missing.
            HdfsPathExists: ``dst`` exists and ``overwrite`` is false.
        """

    @abc.abstractmethod
    def delete(self, path: str, *, recursive: bool = False) -> bool:
        """Delete ``path``; ``True`` if something was deleted, ``False`` if nothing was there.

        Raises:
            HdfsRequestRejected: a non-empty directory without ``recursive``.
        """

    @abc.abstractmethod
    def open_stream(
        self, path: str, chunk_size: int = DEFAULT_CHUNK_SIZE, *, offset: int = 0
    ) -> Iterator[bytes]:
        """Generator of the bytes of file ``path`` from ``offset``, in chunks of at most
        ``chunk_size`` bytes; the whole file is never in memory. Nothing is requested before the
        first ``next()``; close the generator (or exhaust it) to release the connection.

        Raises (while iterating):
            HdfsPathNotFound: no such file.
            HdfsUnavailable, HdfsTimeout: reset, refused, stalled or truncated read.
            DataNodeUnreachable: the DataNode the NameNode redirected to cannot be reached.
        """

    @abc.abstractmethod
    def _create(self, path: str, chunks: Iterable[bytes], on_started: Callable[[], None]) -> None:
        """Create file ``path`` (must not exist; parents are created) from ``chunks``; call
        ``on_started()`` once the file may exist (before the first byte goes to a DataNode), so
        a failure before that point needs no clean-up."""

    # -- built on the primitives -----------------------------------------------------------

    def status_or_none(self, path: str) -> FileStatus | None:
        """:meth:`status`, or ``None`` when nothing is at ``path``."""
        try:
            return self.status(path)
        except HdfsPathNotFound:
            return None

    def exists(self, path: str) -> bool:
        """True when a file or directory is at ``path``."""
        return self.status_or_none(path) is not None

    def sha256(self, path: str, chunk_size: int = DEFAULT_CHUNK_SIZE) -> tuple[int, str]:
        """``(size in bytes, sha256 hex)`` of file ``path``, read as a stream.

        Raises: as :meth:`open_stream`.
        """
        digest = hashlib.sha256()
        size = 0
        stream = self.open_stream(path, chunk_size)
        try:
            for chunk in stream:
                digest.update(chunk)
                size += len(chunk)
        finally:
            stream.close()  # type: ignore[attr-defined]
        return size, digest.hexdigest()

    def same_file(self, path: str, size: int, sha256: str) -> bool:
        """True when ``path`` is a file of exactly ``size`` bytes with this ``sha256``."""
        st = self.status_or_none(path)
        if st is None or not st.is_file or st.size != size:
            return False
        return self.sha256(path) == (size, sha256)

    def upload_stream(
        self,
        path: str,
        chunks: Iterable[bytes],
        *,
        overwrite: bool = False,
        expected_size: int | None = None,
        expected_sha256: str | None = None,
        verify: bool = True,
        temp_paths: MutableSequence[str] | None = None,
    ) -> Written:
        """Write ``chunks`` (an iterable of ``bytes``) to file ``path``, all or nothing.

        Steps: (1) if ``expected_sha256`` is given and ``path`` already holds a file of that
        size/sha256, return at once (``created=False``) without reading ``chunks``; (2) stream the
        chunks into a fresh temporary sibling (:func:`temp_path_for`), counting bytes and
        computing sha256 on the way; (3) check the count and digest against ``expected_*``;
        (4) if ``verify``, read the temporary file back as a stream and compare size and sha256;
        (5) rename it onto ``path``. If ``path`` appeared meanwhile (another attempt or instance
        won the race) and holds the same bytes, the temporary file is dropped and the call
        succeeds (``created=False``). On any failure only the temporary file is deleted [C02].

        ``temp_paths``, if given, gets the temporary path appended before it is created, so a
        caller can sweep it later if the clean-up itself failed (e.g. the NameNode was cut off).

        Returns:
            :class:`Written` with the final path, size and sha256 of the bytes.

        Raises:
            HdfsPathExists: ``path`` holds different bytes and ``overwrite`` is false.
            ChecksumMismatch: the bytes read back or received differ from what was expected.
            HdfsUnavailable, HdfsTimeout, DataNodeUnreachable, HdfsRequestRejected: from the
                cluster; also any error raised by ``chunks`` itself, unchanged.
        """
        final = normalize_path(path)
        if expected_sha256 is not None:
            existing = self.status_or_none(final)
            if existing is not None:
                size_ok = expected_size is None or existing.size == expected_size
                if existing.is_file and size_ok and self.sha256(final)[1] == expected_sha256:
                    _close(chunks)
                    log.info(
                        "%s: %s already holds sha256 %s; nothing to write",
                        self.name,
                        final,
                        expected_sha256,
                    )
                    return Written(final, existing.size, expected_sha256, created=False)
                if not overwrite:
                    _close(chunks)
                    raise HdfsPathExists(
                        f"cluster {self.name!r}: {final!r} exists with other bytes than sha256 "
                        f"{expected_sha256} (size {existing.size}); not overwriting"
                    )
        temp = temp_path_for(final)
        if temp_paths is not None:
            temp_paths.append(temp)
        source = _Hashing(chunks)
        started: list[bool] = []
        try:
            self._create(temp, source, lambda: started.append(True))
            size, digest = source.size, source.hexdigest()
            where = f"cluster {self.name!r}: {temp!r} (for {final!r})"
            if expected_size is not None and size != expected_size:
                raise ChecksumMismatch(
                    f"{where}: source gave {size} bytes, expected {expected_size}"
                )
            if expected_sha256 is not None and digest != expected_sha256:
                raise ChecksumMismatch(
                    f"{where}: source bytes have sha256 {digest}, expected {expected_sha256}"
                )
            if verify:
                self._verify(temp, final, size, digest)
            created = self._commit(temp, final, size, digest, overwrite=overwrite)
        except BaseException:
            source.close()
            if started:  # else the NameNode never got as far as creating it
                self._discard(temp)
            raise
        return Written(final, size, digest, created=created)

    def _verify(self, temp: str, final: str, size: int, digest: str) -> None:
        st = self.status(temp)
        if st.size != size:
            raise ChecksumMismatch(
                f"cluster {self.name!r}: {temp!r} (for {final!r}) holds {st.size} bytes after "
                f"writing {size}"
            )
        got_size, got = self.sha256(temp)
        if (got_size, got) != (size, digest):
            raise ChecksumMismatch(
                f"cluster {self.name!r}: {temp!r} (for {final!r}) reads back {got_size} bytes "
                f"sha256 {got}; wrote {size} bytes sha256 {digest}"
            )

    def _commit(self, temp: str, final: str, size: int, digest: str, *, overwrite: bool) -> bool:
        try:
            self.rename(temp, final, overwrite=overwrite)
            return True
        except HdfsPathExists:
            if self.same_file(final, size, digest):
                log.info(
                    "%s: %s appeared with the same bytes meanwhile; dropping %s",
                    self.name,
                    final,
                    temp,
                )
                self._discard(temp)
                return False
            raise

    def _discard(self, temp: str, attempts: int = 3, backoff_s: float = 0.1) -> bool:
        """Delete this attempt's temporary file (``attempts`` tries, doubling ``backoff_s``
        between them); ``True`` once it is gone. A failure is logged, never raised, so the error
        that caused the clean-up is the one the caller sees."""
        for attempt in range(1, attempts + 1):
            try:
                self.delete(temp)
                return True
            except TransientError as exc:
                if attempt == attempts:
                    log.warning(
                        "cluster %r: could not remove temporary file %r after %d tries "
                        "(%s); it stays as an orphan named *%s*",
                        self.name,
                        temp,
                        attempts,
                        exc,
                        TEMP_MARKER,
                    )
                    return False
                time.sleep(backoff_s * 2 ** (attempt - 1))
            except FerryError as exc:
                log.warning(
                    "cluster %r: could not remove temporary file %r (%s)", self.name, temp, exc
                )
                return False
        return False


def _close(obj: object) -> None:
    close = getattr(obj, "close", None)
    if close is not None:
        close()


# --------------------------------------------------------------------------------------------
# WebHDFS implementation
# --------------------------------------------------------------------------------------------

#: ``FileFailed.reason`` of a path component longer than the NameNode allows.
NAME_TOO_LONG = "name_too_long"


def _name_too_long(message: str) -> FerryError:
    return HdfsRequestRejected(message, reason=NAME_TOO_LONG)


#: Remote exception class names (``RemoteException.exception``, without the Java package or
#: outer class) that retrying cannot fix, and the Ferry error each becomes.
_PERMANENT_REMOTE: dict[str, Callable[[str], FerryError]] = {
    "FileNotFoundException": HdfsPathNotFound,
    "FileAlreadyExistsException": HdfsPathExists,
    "AlreadyBeingCreatedException": HdfsPathExists,
    "AccessControlException": HdfsRequestRejected,
    "SecurityException": HdfsRequestRejected,
    "ParentNotDirectoryException": HdfsRequestRejected,
    "IllegalArgumentException": HdfsRequestRejected,
    "HadoopIllegalArgumentException": HdfsRequestRejected,
    "InvalidPathException": HdfsRequestRejected,
    "UnsupportedOperationException": HdfsRequestRejected,
    "PathIsNotEmptyDirectoryException": HdfsRequestRejected,
    "PathIsNotDirectoryException": HdfsRequestRejected,
    "DSQuotaExceededException": HdfsRequestRejected,
    "NSQuotaExceededException": HdfsRequestRejected,
    "QuotaExceededException": HdfsRequestRejected,
    # FSLimitException$PathComponentTooLongException: same name, same answer on every attempt
    "PathComponentTooLongException": _name_too_long,
    "MaxDirectoryItemsExceededException": HdfsRequestRejected,
}


class _Client(_CliClient):
    """HdfsCLI's client with Ferry's rules: absolute NFC paths (no ``#LATEST`` markers), the
    ``(connect, read)`` timeout on every request, ``user.name`` on NameNode requests only, and
    every redirect target rewritten through the DataNode address map (GET redirects are followed
    here, one hop at a time, instead of inside ``requests``)."""

    def __init__(
        self,
        url: str,
        *,
        user: str,
        timeout: tuple[float, float],
        address_map: dict[str, str],
        session: requests.Session,
    ) -> None:
        super().__init__(url, timeout=timeout, session=session)
        self._user = user
        self.address_map = dict(address_map)
        self.namenode_netlocs = {urlsplit(u).netloc for u in self.urls}

    def resolve(self, hdfs_path: str) -> str:  # noqa: D102 - HdfsCLI hook
        return normalize_path(hdfs_path)

    def rewrite(self, url: str) -> str:
        """``url`` with its ``host:port`` replaced through the address map, and a ``Location``
        header that came through as Latin-1 re-read as UTF-8 (what ``requests`` does itself)."""
        # already text, or not UTF-8 bytes: use as given
        with contextlib.suppress(UnicodeEncodeError, UnicodeDecodeError):
            url = url.encode("latin1").decode("utf8")
        parts = urlsplit(url)
        mapped = self.address_map.get(parts.netloc)
        if mapped is None:
            return url
        return urlunsplit(parts._replace(netloc=mapped))

    def _request(self, method: str, url: str, **kwargs: Any) -> requests.Response:
        kwargs.pop("allow_redirects", None)
        params = kwargs.pop("params", None)
        if params is not None:
            params = {**params, "user.name": self._user}
        url = self.rewrite(url)
        for _ in range(_MAX_REDIRECTS + 1):
            res = self._session.request(
                method=method,
                url=url,
                params=params,
                timeout=self._timeout,
                allow_redirects=False,
                headers={"content-type": "application/octet-stream"},
                **kwargs,
            )
            if method != "GET" or not res.is_redirect:
                return res  # CREATE/APPEND redirects go back to HdfsCLI, which rewrites via us
            location = res.headers["location"]
            res.close()
            url, params = self.rewrite(location), None  # the Location carries its own query
        raise HdfsUnavailable(f"more than {_MAX_REDIRECTS} WebHDFS redirects, last to {url}")


class WebHdfs(HdfsPort):
    """:class:`HdfsPort` over WebHDFS for one cluster.

    Args:
        cluster: the cluster's settings (``webhdfs_url``, ``datanode_address_map``).
        retry: ``connect_timeout_s`` and ``read_timeout_s`` are applied to every HTTP call.
        name: cluster name, for messages.
        user: ``user.name`` sent to the NameNode; default ``$HADOOP_USER_NAME`` or the login user.
        session: a ``requests.Session`` to use (default: a new one, owned and closed here).
    """

    def __init__(
        self,
        cluster: HdfsClusterSettings,
        retry: RetrySettings,
        *,
        name: str = "?",
        user: str | None = None,
        session: requests.Session | None = None,
    ) -> None:
        self.name = name
        self.cluster = cluster
        self.timeout = (retry.connect_timeout_s, retry.read_timeout_s)
        self._session = session or requests.Session()
        self._client = _Client(
            cluster.webhdfs_url,
            user=user or os.environ.get("HADOOP_USER_NAME") or getpass.getuser(),
            timeout=self.timeout,
            address_map=cluster.datanode_address_map,
            session=self._session,
        )
        self._advertised = {v: k for k, v in cluster.datanode_address_map.items()}

    @classmethod
    def for_cluster(cls, name: str, settings: Settings | None = None) -> WebHdfs:
        """Port of cluster ``name`` built from ``settings`` (default: the process settings).

        Raises:
            ConfigError: no cluster of that name.
        """
        if settings is None:
            from ferry.core.config import get_settings

            settings = get_settings()
        return cls(settings.cluster(name), settings.retry, name=name)

    def close(self) -> None:
        """Close the HTTP connections."""
        self._session.close()

    def __enter__(self) -> WebHdfs:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def __repr__(self) -> str:
        return f"WebHdfs(name={self.name!r}, url={self.cluster.webhdfs_url!r})"

    # -- primitives ------------------------------------------------------------------------

    def status(self, path: str) -> FileStatus:
        p = normalize_path(path)
        with self._errors("GETFILESTATUS", p):
            raw = self._client.status(p)
        return _file_status(p, raw)

    def list(self, path: str) -> list[FileStatus]:
        p = normalize_path(path)
        with self._errors("LISTSTATUS", p):
            raw = self._client._list_status(p).json()["FileStatuses"]["FileStatus"]
        if len(raw) == 1 and raw[0].get("pathSuffix") == "" and raw[0].get("type") != "DIRECTORY":
            raise HdfsRequestRejected(f"cluster {self.name!r}: LISTSTATUS {p!r}: not a directory")
        entries = [_file_status(posixpath.join(p, s["pathSuffix"]), s) for s in raw]
        return sorted(entries, key=lambda e: e.name)

    def mkdirs(self, path: str) -> None:
        p = normalize_path(path)
        with self._errors("MKDIRS", p):
            ok = self._client._mkdirs(p).json()["boolean"]
        if not ok:
            raise HdfsRequestRejected(f"cluster {self.name!r}: MKDIRS {p!r} returned false")

    def rename(self, src: str, dst: str, *, overwrite: bool = False) -> None:
        s, d = normalize_path(src), normalize_path(dst)
        with self._errors("RENAME", s, detail=f"to {d!r}"):
            self._client._rename(
                s, destination=d, renameoptions="OVERWRITE" if overwrite else "NONE"
            )

    def delete(self, path: str, *, recursive: bool = False) -> bool:
        p = normalize_path(path)
        if p == "/":
            raise HdfsRequestRejected(f"cluster {self.name!r}: refusing to delete '/'")
        with self._errors("DELETE", p):
            return bool(self._client.delete(p, recursive=recursive))

    def open_stream(
        self, path: str, chunk_size: int = DEFAULT_CHUNK_SIZE, *, offset: int = 0
    ) -> Iterator[bytes]:
        p = normalize_path(path)
        if chunk_size <= 0:
            raise ValueError(f"chunk_size must be positive, not {chunk_size}")
        with self._errors("OPEN", p):
            res = self._client._open(p, offset=offset or None)
        try:
            with self._errors("OPEN", p, url=res.url):
                yield from res.iter_content(chunk_size)
        finally:
            res.close()

    def _create(self, path: str, chunks: Iterable[bytes], on_started: Callable[[], None]) -> None:
        # HdfsCLI's write() in two visible steps: the NameNode only picks a DataNode (nothing is
        # created yet); the DataNode creates the file and streams the body into it.
        p = normalize_path(path)
        with self._errors("CREATE", p):
            res = self._client._create(p, overwrite=False)
            location = res.headers["location"]
        on_started()
        with self._errors("CREATE", p, url=self._client.rewrite(location)):
            res = self._client._request(method="PUT", url=location, data=iter(chunks))
            if not res:
                raise _to_error(res)

    def checksum(self, path: str) -> dict[str, Any]:
        """WebHDFS ``GETFILECHECKSUM`` of ``path``: ``{"algorithm", "bytes", "length"}``.

        The value (MD5 of MD5s of CRC32C chunk sums) depends on block size and bytes per
        checksum, so it only compares files written with the same settings; Ferry's own check
        is :meth:`sha256`.
        """
        p = normalize_path(path)
        with self._errors("GETFILECHECKSUM", p):
            return dict(self._client.checksum(p))

    # -- errors ----------------------------------------------------------------------------

    @contextlib.contextmanager
    def _errors(
        self, op: str, path: str, *, url: str | None = None, detail: str = ""
    ) -> Iterator[None]:
        try:
            yield
        except FerryError:
            raise
        except (requests.RequestException, _CliError, OSError) as exc:
            raise self._classify(op, path, exc, url=url, detail=detail) from exc

    def _address(self, netloc: str) -> tuple[str, bool]:
        """(description, is_datanode) of the peer at ``netloc``."""
        if netloc in self._client.namenode_netlocs:
            return f"NameNode {netloc}", False
        advertised = self._advertised.get(netloc)
        if advertised:
            return f"DataNode {advertised} (mapped to {netloc})", True
        return f"DataNode {netloc}", True

    def _classify(
        self, op: str, path: str, exc: BaseException, *, url: str | None, detail: str
    ) -> FerryError:
        request = getattr(exc, "request", None)
        target = getattr(request, "url", None) or url or self._client.urls[0]
        netloc = urlsplit(target).netloc
        peer, is_datanode = self._address(netloc)
        detail = f" {detail}" if detail else ""
        what = f"WebHDFS {op} {path!r}{detail} on cluster {self.name!r} via {peer}"
        if isinstance(exc, _CliError):
            return _remote_error(what, exc)
        chain = list(_exception_chain(exc))
        connect_failed = any(
            isinstance(e, (requests.ConnectTimeout, NewConnectionError, ConnectionRefusedError))
            for e in chain
        )
        timed_out = any(isinstance(e, (requests.Timeout, TimeoutError)) for e in chain)
        cause = _short(exc)
        if connect_failed and is_datanode:
            return DataNodeUnreachable(
                f"{what}: datanode unreachable at {netloc} "
                f"(connect timeout {self.timeout[0]}s): {cause}"
            )
        if timed_out:
            limit = "connect" if connect_failed else "read"
            seconds = self.timeout[0] if connect_failed else self.timeout[1]
            return HdfsTimeout(
                f"{what}: no answer within the {limit} timeout of {seconds}s: {cause}"
            )
        if connect_failed:
            return HdfsUnavailable(f"{what}: connection refused: {cause}")
        if any(isinstance(e, ConnectionResetError) for e in chain):
            return HdfsUnavailable(f"{what}: connection reset: {cause}")
        return HdfsUnavailable(f"{what}: {cause}")


#: Messages of plain ``IOException``s that the NameNode raises for a request that can never
#: succeed as sent (FSDirRenameOp, FSDirMkdirOp, FSDirectory); other IOExceptions are transient.
_PERMANENT_MESSAGES = (
    "must both be directories",
    "is not a directory",
    "Parent path is not a directory",
    "Invalid path name",
    "is non empty",
    "is a directory",
)

#: Message of the NameNode's ``PathComponentTooLongException`` (FSDirectory
#: .verifyMaxComponentLength), also matched when it arrives wrapped in a plain IOException.
_NAME_TOO_LONG_MESSAGE = "maximum path component name limit"


def _remote_error(what: str, exc: _CliError) -> FerryError:
    name = (exc.exception or "").rsplit(".", 1)[-1].rsplit("$", 1)[-1]
    message = exc.message
    if isinstance(message, bytes):
        message = message.decode("utf-8", "replace")
    message = " ".join(str(message).split())[:500]
    if name in _PERMANENT_REMOTE:
        return _PERMANENT_REMOTE[name](f"{what}: {name}: {message}")
    if _NAME_TOO_LONG_MESSAGE in message:
        return _name_too_long(f"{what}: {name or 'error'}: {message}")
    if any(m in message for m in _PERMANENT_MESSAGES):
        return HdfsRequestRejected(f"{what}: {name or 'error'}: {message}")
    if not name and "Authentication failure" in message:
        return HdfsRequestRejected(f"{what}: {message}")
    return HdfsUnavailable(f"{what}: {name or 'HTTP error'}: {message}")


def _exception_chain(exc: BaseException) -> Iterator[BaseException]:
    """``exc`` and everything it wraps (args, ``reason``, ``__cause__``, ``__context__``)."""
    seen: set[int] = set()
    todo: list[BaseException] = [exc]
    while todo:
        e = todo.pop()
        if id(e) in seen:
            continue
        seen.add(id(e))
        yield e
        inner = [*e.args, getattr(e, "reason", None), e.__cause__, e.__context__]
        todo.extend(x for x in inner if isinstance(x, BaseException))


def _short(exc: BaseException) -> str:
    return " ".join(f"{type(exc).__name__}: {exc}".split())[:400]


def _file_status(path: str, raw: dict[str, Any]) -> FileStatus:
    return FileStatus(
        path=path,
        name=raw.get("pathSuffix") or posixpath.basename(path),
        kind=raw["type"],
        size=int(raw.get("length", 0)),
        mtime_ms=int(raw.get("modificationTime", 0)),
    )


__all__ = [
    "DEFAULT_CHUNK_SIZE",
    "FileStatus",
    "HdfsPort",
    "TEMP_MARKER",
    "WebHdfs",
    "Written",
    "is_temp_path",
    "normalize_path",
    "temp_path_for",
]
