"""The HDFS port: the operations Ferry needs from one cluster, and the safe write built on them.

:class:`HdfsPort` declares the primitives (status, list, mkdirs, rename, delete, ``_open``,
``_create``) and builds the rest on them, so both implementations follow the same rules:

* :class:`ferry.clusters.hdfs.webhdfs.WebHdfs` talks WebHDFS to a real cluster; build it with
  ``WebHdfs.for_cluster("a", settings)`` (clusters are named, their addresses come from
  ``settings.clusters``).
* :class:`tests.support.hdfs_fake.FakeHdfs` keeps files in memory, for handler unit tests.

:meth:`HdfsPort.upload_stream` writes ``<dir>/.<name>.ferry-tmp-<hex>``
(:func:`~ferry.clusters.hdfs.paths.temp_path_for`) and renames it onto the final path only after
the bytes read back with the same size and sha256; on failure it deletes only that temporary
file, never a directory, so no partial file is ever visible and nothing else is touched
(docs/field-cases.md, C02). A port never retries a failed operation; callers retry
:class:`~ferry.errors.TransientError` by policy (see
:func:`ferry.stages.transfer.copy.copy_between`). The one exception is the clean-up of a
temporary file, tried a few times under :func:`ferry.core.retry.retrying` before it is left as a
named orphan.
"""

from __future__ import annotations

import abc
import hashlib
import logging
from collections.abc import Callable, Iterable, Iterator, MutableSequence
from typing import TYPE_CHECKING

from ferry.clusters.hdfs.paths import (
    DEFAULT_CHUNK_SIZE,
    TEMP_MARKER,
    FileStatus,
    Written,
    normalize_path,
    temp_path_for,
)
from ferry.core.retry import retrying
from ferry.errors import (
    ChecksumMismatch,
    FerryError,
    HdfsPathExists,
    HdfsPathNotFound,
    HdfsUnavailable,
    TransientError,
)
from ferry.settings.retry import RetrySettings

if TYPE_CHECKING:
    pass

log = logging.getLogger(__name__)

#: Policy for deleting this attempt's temporary file after a failed write: 3 tries, backoff
#: from 0.1 s doubling to at most 0.2 s (with full jitter), so a clean-up never delays the error
#: it follows by more than 0.3 s of sleeping.
DISCARD_RETRY = RetrySettings(max_attempts=3, initial_backoff_s=0.1, max_backoff_s=0.2)


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

    Subclasses implement the primitives (status, list, mkdirs, rename, delete, ``_open``,
    ``_create``); the safe write (:meth:`upload_stream`) and :meth:`sha256` are built on them here,
    so the fake and the real port follow the same temp-then-rename rules.
    """

    #: Cluster name (``"a"``, ``"b"``) used in error messages.
    name: str = "?"

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

    def open_stream(
        self, path: str, chunk_size: int = DEFAULT_CHUNK_SIZE, *, offset: int = 0
    ) -> Iterator[bytes]:
        """Generator of the bytes of file ``path`` from ``offset``, in chunks of at most
        ``chunk_size`` bytes; the whole file is never in memory. Nothing is requested before the
        first ``next()``; close the generator (or exhaust it) to release the connection.

        Raises (while iterating):
            ValueError: ``chunk_size`` is not positive, or ``path`` is not absolute.
            HdfsPathNotFound: no such file.
            HdfsUnavailable, HdfsTimeout: reset, refused, stalled or truncated read.
            DataNodeUnreachable: the DataNode the NameNode redirected to cannot be reached.
        """
        p = normalize_path(path)
        if chunk_size <= 0:
            raise ValueError(f"chunk_size must be positive, not {chunk_size}")
        yield from self._open(p, chunk_size, offset)

    @abc.abstractmethod
    def _open(self, path: str, chunk_size: int, offset: int) -> Iterator[bytes]:
        """:meth:`open_stream` of normalized ``path`` with a positive ``chunk_size``."""

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
        succeeds (``created=False``). On any failure only the temporary file is deleted
        (docs/field-cases.md, C02).

        ``temp_paths``, if given, gets the temporary path appended before it is created, so a
        caller can sweep it later if the clean-up itself failed (e.g. the NameNode was cut off);
        it is taken out again once renamed onto ``path`` (no sweep call for a file that made it).

        Returns:
            :class:`Written` with the final path, size and sha256 of the bytes.

        Raises:
            HdfsPathExists: ``path`` holds different bytes and ``overwrite`` is false.
            ChecksumMismatch: the bytes read back or received differ from what was expected.
            HdfsUnavailable, HdfsTimeout, DataNodeUnreachable, HdfsRequestRejected: from the
                cluster; also any error raised by ``chunks`` itself, unchanged.
                ``HdfsUnavailable`` also when the temporary file this call created is then "not
                found" (a NameNode answering from an older namespace after a failover), so a
                retry policy tries again instead of taking it for a missing path.
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
            try:
                if verify:
                    self._verify(temp, final, size, digest)
                created = self._commit(temp, final, size, digest, overwrite=overwrite)
            except HdfsPathNotFound as exc:
                # The NameNode accepted this attempt's temporary file a moment ago; "not found"
                # now means a NameNode with an older namespace answered (a paused active NameNode
                # resumed after a failover serves stale reads until it learns it was fenced:
                # tests/ha scenario 2 quarantined a file this way). The attempt is retried.
                raise HdfsUnavailable(
                    f"{where}: the temporary file this attempt created is not found ({exc}); "
                    "a NameNode answered from an older namespace (failover?)"
                ) from exc
        except BaseException:
            source.close()
            if started:  # else the NameNode never got as far as creating it
                self._discard(temp)
            raise
        if created and temp_paths is not None:  # renamed onto ``path``: nothing left to sweep
            temp_paths.remove(temp)
        return Written(final, size, digest, created=created)

    def _verify(self, temp: str, final: str, size: int, digest: str) -> None:
        # The read-back counts the bytes the DataNodes serve, which the NameNode's length bounds
        # (a GETFILESTATUS first answered nothing the count does not: one NameNode call less a
        # file, issue 45's cost table).
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

    def _discard(self, temp: str) -> bool:
        """Delete this attempt's temporary file under :data:`DISCARD_RETRY` (3 tries, only a
        :class:`~ferry.errors.TransientError` is retried); ``True`` once it is gone. A
        failure is logged, never raised, so the error that caused the clean-up is the one the
        caller sees."""
        try:
            retrying(DISCARD_RETRY, what=f"cluster {self.name!r}: remove {temp!r}")(
                self.delete, temp
            )
            return True
        except TransientError as exc:
            log.warning(
                "cluster %r: could not remove temporary file %r after %d tries "
                "(%s); it stays as an orphan named *%s*",
                self.name,
                temp,
                DISCARD_RETRY.max_attempts,
                exc,
                TEMP_MARKER,
            )
            return False
        except FerryError as exc:
            log.warning("cluster %r: could not remove temporary file %r (%s)", self.name, temp, exc)
            return False


def _close(obj: object) -> None:
    close = getattr(obj, "close", None)
    if close is not None:
        close()


__all__ = ["DISCARD_RETRY", "HdfsPort"]
