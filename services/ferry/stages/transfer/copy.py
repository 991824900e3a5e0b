"""Cross-cluster copy (B → A): streamed, verified by sha256, renamed atomically, retried.

Ferry keeps this fragile step (the network path to cluster A) apart from the complicated one (the
Spark transform): one file per call, no Spark, every byte streamed from the source DataNode to the
destination DataNode through this process, never held whole in memory.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Iterator
from typing import TYPE_CHECKING

from ferry.clusters.hdfs.paths import DEFAULT_CHUNK_SIZE, TEMP_MARKER
from ferry.clusters.hdfs.port import HdfsPort
from ferry.core.retry import retrying
from ferry.errors import (
    ChecksumMismatch,
    FerryError,
    HdfsPathExists,
    HdfsRequestRejected,
)

if TYPE_CHECKING:
    from ferry.settings.retry import RetrySettings

log = logging.getLogger(__name__)


def copy_between(
    src: HdfsPort,
    src_path: str,
    dst: HdfsPort,
    dst_path: str,
    *,
    expected_sha256: str | None = None,
    overwrite: bool = False,
    target_absent: bool = False,
    retry: RetrySettings,
    chunk_size: int = DEFAULT_CHUNK_SIZE,
    sleep: Callable[[float], None] = time.sleep,
) -> tuple[int, str]:
    """Copy file ``src_path`` on ``src`` to ``dst_path`` on ``dst``; return ``(size in bytes,
    sha256 hex)`` of the file now at ``dst_path``.

    One attempt: stat the source; if ``dst_path`` already holds a file with the source's size and
    sha256, stop (idempotent: redelivery, replay, a lost rename answer); else stream the source
    into a temporary file beside ``dst_path``, hashing on the fly, re-read the temporary file from
    ``dst`` (streaming) and compare size and sha256, and only then rename it onto ``dst_path``
    (:meth:`HdfsPort.upload_stream`). A failed attempt deletes only its own temporary file, so no
    partial or duplicate file is ever visible at ``dst_path`` (docs/field-cases.md,
    C01 and C02).

    Attempts are repeated on :class:`~ferry.errors.TransientError` by
    :func:`ferry.core.retry.retrying` under the policy ``retry`` (the caller's
    ``settings.retry`` or a copy of it); each HTTP call is bounded by the ports' connect/read
    timeouts (docs/field-cases.md, C08).

    Args:
        expected_sha256: sha256 the source must have (e.g. from the manifest); checked on the
            streamed bytes, and used for the idempotency check without re-reading the source.
        overwrite: replace a ``dst_path`` that holds other bytes; otherwise that is an error.
        target_absent: the caller knows nothing was at ``dst_path`` when the call began (its
            directory was just found absent, or deleted): the first attempt does not ask the
            target's status (one NameNode call a file, issue 45); a retry does (the attempt
            before may have renamed its file there and lost the answer).
        retry: the retry policy of one call (attempts, backoff in seconds, ``min_window_s``).
        chunk_size: bytes per chunk streamed from ``src`` to ``dst``.
        sleep: the backoff sleep, in seconds (tests pass a fake clock).

    Raises:
        HdfsPathExists: ``dst_path`` holds other bytes and ``overwrite`` is false.
        HdfsPathNotFound, HdfsRequestRejected: missing source, not a file, permissions.
        DataNodeUnreachable: a redirect points at an address this host cannot reach
            (docs/field-cases.md, C06).
        ChecksumMismatch, HdfsUnavailable, HdfsTimeout: still failing after the last attempt.
    """
    what = f"copy {src.name}:{src_path} -> {dst.name}:{dst_path}"
    started = time.monotonic()
    temps: list[str] = []
    known_absent = [target_absent]  # for the first attempt only

    def attempt() -> tuple[int, str]:
        absent, known_absent[0] = known_absent[0], False
        return _copy_once(
            src, src_path, dst, dst_path, expected_sha256, overwrite, chunk_size, temps, absent
        )

    try:
        size, digest = retrying(retry, sleep=sleep, what=what)(attempt)
    finally:
        _sweep(dst, temps, retry, sleep)
    elapsed = time.monotonic() - started
    log.info("%s: %d bytes, sha256 %s, %.2fs", what, size, digest, elapsed)
    return size, digest


def _copy_once(
    src: HdfsPort,
    src_path: str,
    dst: HdfsPort,
    dst_path: str,
    expected_sha256: str | None,
    overwrite: bool,
    chunk_size: int,
    temps: list[str],
    target_absent: bool = False,
) -> tuple[int, str]:
    source = src.status(src_path)
    if not source.is_file:
        raise HdfsRequestRejected(
            f"copy source {src.name}:{source.path!r} is a {source.kind.lower()}, not a file"
        )
    existing = None if target_absent else dst.status_or_none(dst_path)
    if existing is not None:
        if existing.is_file and existing.size == source.size:
            want = expected_sha256 or src.sha256(src_path, chunk_size)[1]
            if dst.sha256(dst_path, chunk_size) == (source.size, want):
                log.info(
                    "%s:%s already holds %s:%s (sha256 %s)",
                    dst.name,
                    existing.path,
                    src.name,
                    source.path,
                    want,
                )
                return source.size, want
        if not overwrite:
            raise HdfsPathExists(
                f"copy target {dst.name}:{existing.path!r} exists ({existing.kind.lower()}, "
                f"{existing.size} bytes) with other content than {src.name}:{source.path!r}"
            )
    chunks = _exactly(src.open_stream(src_path, chunk_size), source.size, src, source.path)
    written = dst.upload_stream(
        dst_path,
        chunks,
        overwrite=overwrite,
        expected_size=source.size,
        expected_sha256=expected_sha256,  # checked on the streamed bytes, before the rename
        verify=True,
        temp_paths=temps,
    )
    return written.size, written.sha256


def _sweep(
    port: HdfsPort, temps: list[str], retry: RetrySettings, sleep: Callable[[float], None]
) -> None:
    """Make sure no temporary file of this call survives: each attempt removes its own, but that
    removal can itself fail (NameNode reset or cut off), so check again, under the retry policy.
    Only paths this call created are touched: a clean-up never deletes what it did not make."""
    for temp in temps:
        try:
            retrying(retry, sleep=sleep, what=f"remove {port.name}:{temp}")(
                lambda t=temp: port.exists(t) and port.delete(t)
            )
        except FerryError as exc:
            log.error(
                "%s:%s: temporary file may remain (%s); it is named *%s* and can be "
                "removed by hand",
                port.name,
                temp,
                exc,
                TEMP_MARKER,
            )


def _exactly(chunks: Iterator[bytes], size: int, port: HdfsPort, path: str) -> Iterator[bytes]:
    """Pass ``chunks`` through; raise :class:`ChecksumMismatch` if they add up to more than
    ``size`` bytes (a source that grew) — fewer bytes are caught by ``expected_size``."""
    seen = 0
    try:
        for chunk in chunks:
            seen += len(chunk)
            if seen > size:
                raise ChecksumMismatch(
                    f"{port.name}:{path!r} gave more than its {size} bytes; it changed while copied"
                )
            yield chunk
    finally:
        close = getattr(chunks, "close", None)
        if close is not None:
            close()
