"""A loopback TCP relay that keeps the bytes it relays, for tests that look at what crosses the
wire (tests/secure/test_wire_privacy.py).

:class:`Tap` listens on ``127.0.0.1:<ephemeral>`` and forwards each connection to one loopback
port, keeping, per connection, what the client sent and what it got back. Unlike
:class:`ferry_kit.testing.faultproxy.FaultProxy` it injects no fault; it only records.
"""

from __future__ import annotations

import contextlib
import socket
import threading
from dataclasses import dataclass, field

from ferry_kit.testing.faultmodes import require_loopback


@dataclass
class Stream:
    """One relayed connection: the bytes the client sent (``up``) and received (``down``)."""

    up: bytearray = field(default_factory=bytearray)
    down: bytearray = field(default_factory=bytearray)


class Tap:
    """Relay ``127.0.0.1:port`` → ``target_host:target_port`` (loopback only) keeping every byte.

    Use as a context manager; :attr:`port`, :attr:`address` name the listening side and
    :attr:`streams` holds one :class:`Stream` per accepted connection.
    """

    def __init__(self, target_host: str, target_port: int) -> None:
        require_loopback(target_host)
        self.target = (target_host, target_port)
        self.streams: list[Stream] = []
        self._lock = threading.Lock()
        self._server = socket.create_server(("127.0.0.1", 0))
        self.port: int = self._server.getsockname()[1]
        self._threads: list[threading.Thread] = []
        self._socks: list[socket.socket] = []

    @property
    def address(self) -> str:
        return f"127.0.0.1:{self.port}"

    def __enter__(self) -> Tap:
        self._spawn(self._accept)
        return self

    def __exit__(self, *exc: object) -> None:
        with contextlib.suppress(OSError):  # wakes the blocked accept() (close alone does not)
            self._server.shutdown(socket.SHUT_RDWR)
        self._server.close()
        with self._lock:
            socks = list(self._socks)
        for sock in socks:  # ends the relays still open (keep-alive connections)
            with contextlib.suppress(OSError):
                sock.shutdown(socket.SHUT_RDWR)
        for t in self._threads:
            t.join(10)

    def snapshot(self) -> list[Stream]:
        """A copy of :attr:`streams` (the relays may still be writing)."""
        with self._lock:
            return [Stream(bytearray(s.up), bytearray(s.down)) for s in self.streams]

    def _spawn(self, target: object, *args: object) -> None:
        t = threading.Thread(target=target, args=args, daemon=True)  # type: ignore[arg-type]
        t.start()
        self._threads.append(t)

    def _accept(self) -> None:
        while True:
            try:
                client, _ = self._server.accept()
            except OSError:
                return  # closed by __exit__
            upstream = socket.create_connection(self.target, timeout=30)
            stream = Stream()
            with self._lock:
                self.streams.append(stream)
                self._socks += [client, upstream]
            self._spawn(self._pump, client, upstream, stream.up)
            self._spawn(self._pump, upstream, client, stream.down)

    def _pump(self, src: socket.socket, dst: socket.socket, keep: bytearray) -> None:
        try:
            while data := src.recv(65536):
                with self._lock:
                    keep += data
                dst.sendall(data)
        except OSError:
            pass
        finally:
            for sock in (src, dst):
                with contextlib.suppress(OSError):
                    sock.shutdown(socket.SHUT_RDWR)
            src.close()
