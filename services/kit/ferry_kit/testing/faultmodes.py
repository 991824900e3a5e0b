"""The fault proxy's connection state and fault decisions (see :mod:`ferry_kit.testing.faultproxy`).

:class:`Mode` is the fault mode in force (switched from the test's thread), :class:`Conn` one
relayed connection with its byte counts; :func:`threshold` decides after how many bytes a
connection is reset; :func:`abort` resets both sides of a relay with a TCP RST (``SO_LINGER``
``(1, 0)`` and an abortive close). Only loopback addresses pass :func:`require_loopback`.
"""

from __future__ import annotations

import asyncio
import contextlib
import ipaddress
import socket
import struct
import threading
import time
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Literal

#: Which way bytes flow: client → server (``"up"``) or server → client (``"down"``).
Direction = Literal["up", "down"]


def require_loopback(host: str) -> None:
    if host == "localhost":
        return
    try:
        ok = ipaddress.ip_address(host).is_loopback
    except ValueError:
        ok = False
    if not ok:
        raise ValueError(f"FaultProxy only works on loopback addresses, not {host!r}")


@dataclass
class Mode:
    kind: str = "pass"
    rate: float = 0.0
    within_bytes: int = 0
    n_bytes: int = 0
    direction: Direction = "up"
    min_request_bytes: int = 0
    times: int | None = None  # remaining connections to fault; None = unlimited
    bytes_per_s: int = 0  # "slow": the link's bandwidth, each direction of each connection
    latency_s: float = 0.0  # "slow": added before each chunk is relayed


@dataclass(eq=False)
class Conn:
    """One relayed connection. ``gen``/``base_*`` record the mode generation this connection
    last adopted and its byte counts at that moment; faults count bytes from there."""

    client: asyncio.StreamWriter
    upstream: asyncio.StreamWriter | None = None
    up_bytes: int = 0
    down_bytes: int = 0
    gen: int = -1
    base_up: int = 0
    base_down: int = 0
    rate_at: int | None = None  # reset-rate draw for this generation: bytes, or None (spared)
    stalled: bool = False
    tasks: list[asyncio.Task[None]] = field(default_factory=list)


def threshold(conn: Conn, m: Mode, direction: Direction) -> tuple[int | None, str]:
    """(bytes in ``direction`` since the mode was adopted at which to reset, count key)."""
    if m.kind == "rate" and m.direction == direction and conn.rate_at is not None:
        return conn.rate_at, "reset_rate"
    if m.kind == "after" and m.direction == direction:
        return m.n_bytes, "reset_mid_stream"
    return None, ""


def rst(writer: asyncio.StreamWriter | None) -> None:
    if writer is None or writer.transport.is_closing():
        return
    sock = writer.get_extra_info("socket")
    if sock is not None:
        with contextlib.suppress(OSError):  # already shut down by the peer: abort is enough
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
    writer.transport.abort()


def abort(conn: Conn) -> None:
    rst(conn.client)
    rst(conn.upstream)


def close(conn: Conn) -> None:
    for w in (conn.client, conn.upstream):
        if w is not None and not w.transport.is_closing():
            w.close()


class FaultCounts:
    """Thread-safe counters of a fault proxy (``connections``, ``bytes_up``, ``bytes_down`` and
    one key per fault kind) that a test can wait on."""

    def __init__(self) -> None:
        self._counts: Counter[str] = Counter()
        self._cond = threading.Condition()

    @property
    def counts(self) -> dict[str, int]:
        """Copy of the counters: ``connections``, ``bytes_up``, ``bytes_down`` and one key per
        fault kind (see the module table)."""
        with self._cond:
            return dict(self._counts)

    @property
    def faults(self) -> int:
        """Number of faults injected so far (all kinds)."""
        c = self.counts
        return sum(v for k, v in c.items() if k not in ("connections", "bytes_up", "bytes_down"))

    def wait_for(
        self, predicate: Callable[[dict[str, int]], bool], timeout: float = 10.0
    ) -> dict[str, int]:
        """Block until ``predicate(counts)`` is true; return the counts.

        Raises:
            TimeoutError: not true within ``timeout`` seconds (the counts are in the message).
        """
        deadline = time.monotonic() + timeout
        with self._cond:
            while not predicate(dict(self._counts)):
                left = deadline - time.monotonic()
                if left <= 0:
                    raise TimeoutError(
                        f"condition not met within {timeout}s; counts {dict(self._counts)}"
                    )
                self._cond.wait(left)
            return dict(self._counts)

    def _count(self, key: str, n: int = 1) -> None:
        with self._cond:
            self._counts[key] += n
            self._cond.notify_all()
