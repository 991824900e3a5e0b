"""A fault-injecting TCP proxy for tests (cases C01, C06, C08).

:class:`FaultProxy` listens on a loopback address with an ephemeral port and forwards every
connection to one loopback ``host:port`` (a NameNode or DataNode HTTP port, a test server). It runs
an asyncio loop in a background thread. The fault mode can be switched at any time from the test's
thread; a switch applies to new connections and, from their next bytes on, to open (keep-alive)
ones, whose byte thresholds count from the switch. ``times`` limits are used up only when a fault
actually fires:

* ``pass_through()``: a transparent relay.
* ``reset_rate(p, within_bytes=k)``: each connection, with probability ``p`` (seeded RNG, one draw
  per connection and mode switch), gets a TCP RST after ``0..k`` bytes. Count ``reset_rate``.
* ``reset_after(n, direction=, times=)``: RST once ``n`` bytes went client→server (``"up"``) or
  server→client (``"down"``); exactly ``n`` bytes are relayed first. Count ``reset_mid_stream``.
* ``reset_on_response(min_request_bytes=, times=)``: the request reaches the server, which does the
  work and answers; the client gets a RST instead of the answer (HTTP ``close``/``complete``).
  Count ``reset_on_response``.
* ``stall()``: the connection is accepted and read, never answered. Count ``stall``.
* ``slow(bytes_per_s, latency_s=)``: every chunk waits ``latency_s`` plus its size at
  ``bytes_per_s`` before it is relayed, each direction (a slow WAN link). Count ``slowed``
  (chunks).
* ``refuse()``: the listener is closed; connects get ECONNREFUSED. Count ``refused_periods``.
* ``cut_off(s)``: for ``s`` seconds open connections are reset and new ones get a RST at once.
  Count ``cut_off``.

A RST is made with ``SO_LINGER`` ``(1, 0)`` and an abortive close; both sides of the relay are
reset. Only loopback addresses are accepted, so the proxy can never touch a real network.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import random
import threading
import time
from collections.abc import Callable

from ferry_kit.testing.faultmodes import (
    Conn,
    Direction,
    FaultCounts,
    Mode,
    abort,
    close,
    require_loopback,
    threshold,
)

log = logging.getLogger(__name__)

_READ = 64 * 1024


class FaultProxy(FaultCounts):
    """TCP proxy ``127.0.0.1:<ephemeral>`` → ``target_host:target_port`` with switchable faults.

    Use as a context manager (``with FaultProxy("127.0.0.1", 29870) as proxy:``) or with
    :meth:`start`/:meth:`stop`. :attr:`port`, :attr:`address` (``"127.0.0.1:port"``) and
    :attr:`url` (``"http://127.0.0.1:port"``) name the listening side.

    Args:
        target_host, target_port: where connections are forwarded (loopback only).
        seed: seed of the RNG that :meth:`reset_rate` draws from, one draw per connection.

    Raises:
        ValueError: a non-loopback address.
    """

    def __init__(
        self,
        target_host: str,
        target_port: int,
        *,
        listen_host: str = "127.0.0.1",
        seed: int = 0,
    ) -> None:
        require_loopback(target_host)
        require_loopback(listen_host)
        self.target = (target_host, int(target_port))
        self.host = listen_host
        self.port = 0
        self._rng = random.Random(seed)
        self._mode = Mode()
        self._gen = 0
        self._cut_until = 0.0
        super().__init__()
        self._loop: asyncio.AbstractEventLoop | None = None
        self._thread: threading.Thread | None = None
        self._server: asyncio.base_events.Server | None = None
        self._conns: set[Conn] = set()

    # -- life cycle ------------------------------------------------------------------------

    @property
    def address(self) -> str:
        return f"{self.host}:{self.port}"

    @property
    def url(self) -> str:
        return f"http://{self.host}:{self.port}"

    def start(self, timeout: float = 10.0) -> FaultProxy:
        """Start listening; returns ``self`` once the port is bound.

        Raises:
            RuntimeError: already started, or not listening within ``timeout`` seconds.
        """
        if self._thread is not None:
            raise RuntimeError("FaultProxy already started")
        ready = threading.Event()
        errors: list[BaseException] = []

        def run() -> None:
            loop = asyncio.new_event_loop()
            self._loop = loop
            try:
                loop.run_until_complete(self._listen())
            except (OSError, RuntimeError) as exc:  # handed to the starting thread below
                errors.append(exc)
                ready.set()
                loop.close()
                return
            ready.set()
            try:
                loop.run_forever()
            finally:
                loop.run_until_complete(loop.shutdown_asyncgens())
                loop.close()

        self._thread = threading.Thread(target=run, name=f"faultproxy->{self.target}", daemon=True)
        self._thread.start()
        if not ready.wait(timeout):
            raise RuntimeError(f"FaultProxy to {self.target} did not start within {timeout}s")
        if errors:
            self._thread = None
            raise RuntimeError(
                f"FaultProxy to {self.target} failed to start: {errors[0]}"
            ) from errors[0]
        log.info("fault proxy %s -> %s:%d", self.address, *self.target)
        return self

    def stop(self, timeout: float = 10.0) -> None:
        """Close the listener and every relayed connection (abortively); join the thread."""
        loop, thread = self._loop, self._thread
        if loop is None or thread is None:
            return
        fut = asyncio.run_coroutine_threadsafe(self._shutdown(), loop)
        with contextlib.suppress(TimeoutError):
            fut.result(timeout)
        loop.call_soon_threadsafe(loop.stop)
        thread.join(timeout)
        self._thread = None
        self._loop = None

    def __enter__(self) -> FaultProxy:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    async def _listen(self) -> None:
        self._server = await asyncio.start_server(
            self._handle, self.host, self.port, reuse_address=True
        )
        self.port = self._server.sockets[0].getsockname()[1]

    async def _shutdown(self) -> None:
        if self._server is not None:
            self._server.close()
            self._server = None
        for conn in list(self._conns):
            abort(conn)
        tasks = [t for c in self._conns for t in c.tasks if t is not asyncio.current_task()]
        for t in tasks:
            t.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)

    def _call(self, coro_factory: Callable[[], object], timeout: float = 10.0) -> None:
        if self._loop is None:
            raise RuntimeError("FaultProxy not started")
        asyncio.run_coroutine_threadsafe(coro_factory(), self._loop).result(timeout)  # type: ignore[arg-type]

    # -- modes -----------------------------------------------------------------------------

    def _set(self, mode: Mode) -> None:
        listening = self._server is not None
        with self._cond:
            self._mode = mode
            self._gen += 1
        if mode.kind == "refuse" and listening:
            self._call(self._close_listener)
        elif mode.kind != "refuse" and not listening and self._loop is not None:
            self._call(self._listen)

    async def _close_listener(self) -> None:
        if self._server is not None:
            self._server.close()
            self._server = None

    def pass_through(self) -> None:
        """Relay everything unchanged (also ends :meth:`refuse`)."""
        self._set(Mode())

    def reset_rate(
        self,
        rate: float,
        *,
        within_bytes: int = 0,
        direction: Direction = "up",
        times: int | None = None,
    ) -> None:
        """Reset each new connection with probability ``rate`` (0..1), after a number of bytes
        drawn uniformly from ``0..within_bytes`` in ``direction`` (0: at accept)."""
        if not 0.0 <= rate <= 1.0:
            raise ValueError(f"rate must be within [0, 1], not {rate}")
        self._set(
            Mode("rate", rate=rate, within_bytes=within_bytes, direction=direction, times=times)
        )

    def reset_after(
        self, n_bytes: int, *, direction: Direction = "up", times: int | None = 1
    ) -> None:
        """Reset the next ``times`` connections (``None``: all) once ``n_bytes`` bytes went in
        ``direction`` (``"up"``: client→server, ``"down"``: server→client); exactly ``n_bytes``
        are relayed first."""
        self._set(Mode("after", n_bytes=n_bytes, direction=direction, times=times))

    def reset_on_response(self, *, min_request_bytes: int = 0, times: int | None = 1) -> None:
        """On the next ``times`` connections that sent at least ``min_request_bytes`` to the
        server, reset the client when the server's first response bytes arrive (they are
        dropped). The server has then done the work (e.g. completed a file) but the client
        never hears of it."""
        self._set(Mode("response", min_request_bytes=min_request_bytes, times=times))

    def stall(self) -> None:
        """Accept new connections, read what they send, never connect upstream or answer."""
        self._set(Mode("stall"))

    def slow(self, bytes_per_s: int, *, latency_s: float = 0.0) -> None:
        """Relay every chunk (up to 64 KB) after ``latency_s`` seconds plus ``len / bytes_per_s``,
        in each direction of each connection, open ones included.

        Raises:
            ValueError: ``bytes_per_s`` < 1 or ``latency_s`` < 0.
        """
        if bytes_per_s < 1 or latency_s < 0:
            raise ValueError(
                f"need bytes_per_s ≥ 1 and latency_s ≥ 0, not {bytes_per_s}, {latency_s}"
            )
        self._set(Mode("slow", bytes_per_s=bytes_per_s, latency_s=latency_s))

    def refuse(self) -> None:
        """Close the listener: connects fail with ECONNREFUSED until another mode is set."""
        with self._cond:
            self._counts["refused_periods"] += 1
            self._cond.notify_all()
        self._set(Mode("refuse"))

    def cut_off(self, seconds: float) -> None:
        """For ``seconds``: reset every open relayed connection now and every new one at once.
        The mode set before keeps applying afterwards."""
        with self._cond:
            self._cut_until = time.monotonic() + seconds
        if self._loop is not None:
            self._call(self._cut_open)

    async def _cut_open(self) -> None:
        for conn in list(self._conns):
            self._count("cut_off")
            abort(conn)

    @property
    def cut_off_active(self) -> bool:
        return time.monotonic() < self._cut_until

    # -- relay -----------------------------------------------------------------------------

    def _adopt(self, conn: Conn) -> Mode:
        """The current mode; if it changed since ``conn`` last looked, rebase ``conn``'s byte
        counts and, in rate mode, draw whether (and after how many bytes) it is reset."""
        with self._cond:
            m = self._mode
            if conn.gen != self._gen:
                conn.gen = self._gen
                conn.base_up, conn.base_down = conn.up_bytes, conn.down_bytes
                conn.rate_at = None
                if m.kind == "rate" and self._rng.random() < m.rate:
                    conn.rate_at = self._rng.randint(0, m.within_bytes) if m.within_bytes else 0
            return m

    def _consume(self, m: Mode) -> bool:
        """Use up one of ``m.times``; False when none is left."""
        with self._cond:
            if m.times is None:
                return True
            if m.times <= 0:
                return False
            m.times -= 1
            return True

    async def _handle(self, creader: asyncio.StreamReader, cwriter: asyncio.StreamWriter) -> None:
        conn = Conn(cwriter)
        self._conns.add(conn)
        task = asyncio.current_task()
        if task is not None:
            conn.tasks.append(task)
        self._count("connections")
        try:
            if self.cut_off_active:
                self._count("cut_off")
                abort(conn)
                return
            m = self._adopt(conn)
            if m.kind == "stall":
                self._stall(conn)
                while await creader.read(_READ):
                    pass
                return
            for direction in ("up", "down"):
                at, key = threshold(conn, m, direction)
                if at == 0 and self._consume(m):
                    self._count(key)
                    abort(conn)
                    return
            try:
                ureader, uwriter = await asyncio.open_connection(*self.target)
            except OSError as exc:
                log.info("fault proxy %s: upstream %s:%d: %s", self.address, *self.target, exc)
                self._count("upstream_failed")
                abort(conn)
                return
            conn.upstream = uwriter
            up = asyncio.ensure_future(self._pump(conn, creader, uwriter, "up"))
            down = asyncio.ensure_future(self._pump(conn, ureader, cwriter, "down"))
            conn.tasks += [up, down]
            await asyncio.gather(up, down, return_exceptions=True)
        except asyncio.CancelledError:
            abort(conn)  # proxy stopping; end quietly
        finally:
            close(conn)
            self._conns.discard(conn)

    def _stall(self, conn: Conn) -> None:
        if not conn.stalled:
            conn.stalled = True
            self._count("stall")

    async def _pump(
        self,
        conn: Conn,
        reader: asyncio.StreamReader,
        writer: asyncio.StreamWriter,
        direction: Direction,
    ) -> None:
        try:
            while True:
                data = await reader.read(_READ)
                if not data:
                    if writer.can_write_eof() and not conn.stalled:
                        writer.write_eof()
                    return
                if self.cut_off_active:
                    self._count("cut_off")
                    abort(conn)
                    return
                m = self._adopt(conn)
                if m.kind == "stall" or conn.stalled:
                    self._stall(conn)  # an open connection goes silent too
                    continue
                if (
                    direction == "down"
                    and m.kind == "response"
                    and conn.up_bytes - conn.base_up >= m.min_request_bytes
                    and self._consume(m)
                ):
                    self._count("reset_on_response")
                    abort(conn)
                    return
                at, key = threshold(conn, m, direction)
                done = (
                    (conn.up_bytes - conn.base_up)
                    if direction == "up"
                    else (conn.down_bytes - conn.base_down)
                )
                if at is not None and done + len(data) >= at and self._consume(m):
                    head = data[: max(0, at - done)]
                    if head:
                        writer.write(head)
                        await writer.drain()
                        self._add(conn, direction, len(head))
                    self._count(key)
                    abort(conn)
                    return
                if m.kind == "slow":
                    self._count("slowed")
                    await asyncio.sleep(m.latency_s + len(data) / m.bytes_per_s)
                writer.write(data)
                await writer.drain()
                self._add(conn, direction, len(data))
        except asyncio.CancelledError:
            return  # proxy stopping
        except (ConnectionError, OSError) as exc:
            log.debug("fault proxy %s: %s pump ended: %s", self.address, direction, exc)
            abort(conn)

    def _add(self, conn: Conn, direction: Direction, n: int) -> None:
        if direction == "up":
            conn.up_bytes += n
            self._count("bytes_up", n)
        else:
            conn.down_bytes += n
            self._count("bytes_down", n)
