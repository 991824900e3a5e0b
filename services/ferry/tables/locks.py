"""One writer per Hive table at a time, across processes and hosts: a ZooKeeper lock per table.

A change of a table (:mod:`ferry.tables`) reads the index entries of its files, then
deletes and moves data files and rewrites those entries; two changes of the same files at once
would each act on what the other is replacing (a lost update, or rows twice). Several load
instances (hot standby, one consumer group), the load service's compactor (for its commit) and
the maintenance commands (``ferry compact``, ``unload``, ``migrate-layout``) therefore take the
table's lock around every change. The lock is kazoo's
``Lock`` recipe (ZooKeeper's documented lock: an ephemeral sequential node per contender, the
lowest holds it), under ``<zookeeper.locks_path>/<db>.<table>``; a holder that dies loses its
session and with it the lock, so a crashed load never blocks the table for longer than the
ZooKeeper session timeout.

Limit (as with every lease-based lock): a holder that stays alive but loses its ZooKeeper session
mid-change (a network partition longer than the session timeout) no longer holds the lock while
it finishes; its journal makes the next holder finish, not undo, what it wrote.
"""

from __future__ import annotations

import contextlib
import os
import socket
import threading
from collections.abc import Iterator

from kazoo.client import KazooClient
from kazoo.exceptions import KazooException, LockTimeout
from kazoo.handlers.threading import KazooTimeoutError

from ferry.errors import TransientError
from ferry.settings import Settings


class TableLocked(TransientError):
    """Another writer held the table's lock for longer than ``zookeeper.lock_timeout_s``."""

    reason = "table_locked"


class TableLocks:
    """Table locks on the ZooKeeper ensemble of ``settings.zookeeper``; one client per process,
    connected on first use. Thread-safe.

    Args:
        settings: ``zookeeper.connect``, ``locks_path``, ``lock_timeout_s``, ``session_timeout_s``.
    """

    def __init__(self, settings: Settings) -> None:
        zk = settings.zookeeper
        self.connect = zk.connect
        self.root = zk.locks_path.rstrip("/")
        self.timeout_s = zk.lock_timeout_s
        self.session_timeout_s = zk.lock_session_timeout_s
        self._client: KazooClient | None = None
        self._guard = threading.Lock()
        self.identifier = f"{socket.gethostname()}:{os.getpid()}"

    def _zk(self) -> KazooClient:
        with self._guard:
            if self._client is None:
                client = KazooClient(hosts=self.connect, timeout=self.session_timeout_s)
                try:
                    client.start(timeout=self.session_timeout_s)
                except (KazooTimeoutError, KazooException) as exc:
                    client.close()
                    raise TransientError(
                        f"ZooKeeper {self.connect} (table locks): no session within "
                        f"{self.session_timeout_s:.0f}s: {exc}"
                    ) from exc
                self._client = client
            return self._client

    @contextlib.contextmanager
    def hold(self, table: str) -> Iterator[None]:
        """Hold ``table``'s lock (``db.table``) for the ``with`` block.

        Raises:
            TableLocked: not acquired within ``lock_timeout_s`` (the holders are named).
            TransientError: ZooKeeper did not answer.
        """
        lock = self._zk().Lock(f"{self.root}/{table}", identifier=self.identifier)
        try:
            got = lock.acquire(timeout=self.timeout_s)
        except LockTimeout:
            got = False
        except (KazooTimeoutError, KazooException) as exc:
            raise TransientError(f"lock of table {table} on {self.connect}: {exc}") from exc
        if not got:
            holders = ", ".join(lock.contenders()) or "unknown"
            raise TableLocked(
                f"table {table}: lock held by {holders} for over {self.timeout_s:.0f}s"
            )
        try:
            yield
        finally:
            with contextlib.suppress(KazooException, KazooTimeoutError):
                lock.release()  # the session's end releases it anyway

    def close(self) -> None:
        """Close the ZooKeeper session (releases every lock this process holds)."""
        with self._guard:
            if self._client is not None:
                self._client.stop()
                self._client.close()
                self._client = None


__all__ = ["TableLocked", "TableLocks"]
