"""FaultProxy against local echo and HTTP servers: every mode, exact counts, no sleeps."""

from __future__ import annotations

import errno
import http.server
import random
import socket
import socketserver
import threading
import time
from collections.abc import Iterator

import pytest
import requests

from ferry_kit.testing.faultproxy import FaultProxy
from ferry_kit.testing.waiting import wait_for

BODY = b"hello from upstream\n" * 100  # 2000 bytes


class _Echo(socketserver.BaseRequestHandler):
    def handle(self) -> None:
        while data := self.request.recv(65536):
            self.request.sendall(data)


class _Http(http.server.BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"

    def do_GET(self) -> None:  # noqa: N802 - http.server hook
        self.send_response(200)
        self.send_header("Content-Length", str(len(BODY)))
        self.end_headers()
        self.wfile.write(BODY)

    def do_PUT(self) -> None:  # noqa: N802
        n = int(self.headers.get("Content-Length", 0))
        data = self.rfile.read(n)
        self.server.received.append(data)  # type: ignore[attr-defined]
        self.send_response(201)
        self.send_header("Content-Length", "0")
        self.end_headers()

    def log_message(self, *args: object) -> None:
        pass


class _ThreadingTCP(socketserver.ThreadingTCPServer):
    daemon_threads = True
    allow_reuse_address = True


@pytest.fixture
def echo() -> Iterator[tuple[str, int]]:
    server = _ThreadingTCP(("127.0.0.1", 0), _Echo)
    t = threading.Thread(target=server.serve_forever, args=(0.05,), daemon=True)
    t.start()
    yield server.server_address  # type: ignore[misc]
    server.shutdown()
    server.server_close()


class _QuietHTTPServer(http.server.ThreadingHTTPServer):
    def handle_error(self, request: object, client_address: object) -> None:
        """Resets are what these tests inject; no traceback on stderr."""


@pytest.fixture
def http_server() -> Iterator[http.server.ThreadingHTTPServer]:
    server = _QuietHTTPServer(("127.0.0.1", 0), _Http)
    server.daemon_threads = True
    server.received = []  # type: ignore[attr-defined]
    t = threading.Thread(target=server.serve_forever, args=(0.05,), daemon=True)
    t.start()
    yield server
    server.shutdown()
    server.server_close()


def _connect(proxy: FaultProxy, timeout: float = 5.0) -> socket.socket:
    return socket.create_connection((proxy.host, proxy.port), timeout=timeout)


def _recv_exactly(sock: socket.socket, n: int) -> bytes:
    out = b""
    while len(out) < n:
        chunk = sock.recv(n - len(out))
        if not chunk:
            break
        out += chunk
    return out


def _expect_reset(sock: socket.socket, payload: bytes = b"") -> None:
    """The peer reset the connection: a recv (after an optional send) raises ECONNRESET."""
    with pytest.raises(ConnectionResetError):
        if payload:
            sock.sendall(payload)
        deadline = time.monotonic() + 5
        while time.monotonic() < deadline:
            if not sock.recv(65536):
                pytest.fail("connection closed cleanly (FIN), expected a reset (RST)")


def _expect_reset_raw(sock: socket.socket, payload: bytes) -> None:
    """Send and read until the reset raises (the caller expects ConnectionResetError)."""
    sock.sendall(payload)
    deadline = time.monotonic() + 5
    while time.monotonic() < deadline:
        if not sock.recv(65536):
            pytest.fail("connection closed cleanly (FIN), expected a reset (RST)")


def test_pass_through_echoes_exact_bytes(echo: tuple[str, int]) -> None:
    payload = bytes(range(256)) * 1000
    with FaultProxy(*echo) as proxy, _connect(proxy) as s:
        s.sendall(payload)
        assert _recv_exactly(s, len(payload)) == payload
        counts = proxy.wait_for(lambda c: c.get("bytes_down", 0) == len(payload))
    assert counts["connections"] == 1
    assert counts["bytes_up"] == len(payload)
    assert proxy.faults == 0


def test_reset_after_relays_exactly_n_bytes_then_rst(echo: tuple[str, int]) -> None:
    with FaultProxy(*echo) as proxy:
        proxy.reset_after(10, direction="up", times=1)
        with _connect(proxy) as s:
            _expect_reset(s, b"x" * 100)
        counts = proxy.wait_for(lambda c: c.get("reset_mid_stream", 0) == 1)
        assert counts["bytes_up"] == 10
        # times=1: the next connection is relayed normally
        with _connect(proxy) as s:
            s.sendall(b"again")
            assert _recv_exactly(s, 5) == b"again"
    assert proxy.counts["reset_mid_stream"] == 1


def test_reset_rate_is_seeded_and_counted(echo: tuple[str, int]) -> None:
    seed, rate, n = 7, 0.5, 30
    rng = random.Random(seed)
    expected = sum(rng.random() < rate for _ in range(n))
    resets = 0
    with FaultProxy(*echo, seed=seed) as proxy:
        proxy.reset_rate(rate)
        for _ in range(n):  # one at a time: draws happen in connection order
            try:  # a RST at accept can already surface from connect()
                with _connect(proxy) as s:
                    s.sendall(b"ping")
                    got = _recv_exactly(s, 4)
            except ConnectionResetError:
                resets += 1
            else:
                if got != b"ping":
                    resets += 1
        counts = proxy.wait_for(lambda c: c.get("connections", 0) == n)
    assert 0 < expected < n
    assert counts["reset_rate"] == expected
    assert resets == expected


def test_reset_on_response_after_server_did_the_work(
    http_server: http.server.ThreadingHTTPServer,
) -> None:
    host, port = http_server.server_address[:2]
    payload = b"z" * 5000
    with FaultProxy(str(host), int(port)) as proxy:
        proxy.reset_on_response(min_request_bytes=len(payload), times=1)
        with requests.Session() as s:
            # A small request is below the threshold and passes.
            assert s.get(f"{proxy.url}/small", timeout=5).content == BODY
            with pytest.raises(requests.ConnectionError):
                s.put(f"{proxy.url}/big", data=payload, timeout=5)
            # The server received the whole body although the client got a reset.
            assert http_server.received == [payload]  # type: ignore[attr-defined]
            assert s.put(f"{proxy.url}/big", data=payload, timeout=5).status_code == 201
    assert proxy.counts["reset_on_response"] == 1


def test_stall_fails_within_read_timeout(http_server: http.server.ThreadingHTTPServer) -> None:
    host, port = http_server.server_address[:2]
    with FaultProxy(str(host), int(port)) as proxy:
        proxy.stall()
        started = time.monotonic()
        with pytest.raises(requests.ReadTimeout):
            requests.get(f"{proxy.url}/x", timeout=(1.0, 0.5))
        elapsed = time.monotonic() - started
        assert proxy.counts["stall"] == 1
        proxy.pass_through()
        assert requests.get(f"{proxy.url}/x", timeout=5).content == BODY
    assert elapsed < 3.0


def test_refuse_closes_listener_then_reopens_same_port(echo: tuple[str, int]) -> None:
    with FaultProxy(*echo) as proxy:
        port = proxy.port
        proxy.refuse()
        with pytest.raises(ConnectionRefusedError):
            socket.create_connection(("127.0.0.1", port), timeout=2)
        proxy.pass_through()
        assert proxy.port == port
        with _connect(proxy) as s:
            s.sendall(b"back")
            assert _recv_exactly(s, 4) == b"back"
    assert proxy.counts["refused_periods"] == 1


def test_cut_off_resets_open_and_new_connections_for_a_period(echo: tuple[str, int]) -> None:
    with FaultProxy(*echo) as proxy:
        open_conn = _connect(proxy)
        open_conn.sendall(b"1")
        assert _recv_exactly(open_conn, 1) == b"1"
        proxy.cut_off(0.5)
        _expect_reset(open_conn)
        open_conn.close()
        with pytest.raises(ConnectionResetError), _connect(proxy) as s:
            _expect_reset_raw(s, b"2")
        assert proxy.wait_for(lambda c: c.get("cut_off", 0) == 2)["cut_off"] == 2
        wait_for(lambda: not proxy.cut_off_active, "the end of the cut-off", 5, 0.05)
        with _connect(proxy) as s:
            s.sendall(b"3")
            assert _recv_exactly(s, 1) == b"3"


def test_upstream_down_resets_client() -> None:
    with socket.socket() as placeholder:  # a port with nothing listening
        placeholder.bind(("127.0.0.1", 0))
        dead_port = placeholder.getsockname()[1]
    with FaultProxy("127.0.0.1", dead_port) as proxy:
        with pytest.raises(ConnectionResetError), _connect(proxy) as s:
            _expect_reset_raw(s, b"x")
        proxy.wait_for(lambda c: c.get("upstream_failed", 0) == 1)


def test_only_loopback() -> None:
    with pytest.raises(ValueError, match="loopback"):
        FaultProxy("10.0.0.1", 80)
    with pytest.raises(ValueError, match="loopback"):
        FaultProxy("127.0.0.1", 80, listen_host="0.0.0.0")


def test_stop_is_idempotent_and_frees_port(echo: tuple[str, int]) -> None:
    proxy = FaultProxy(*echo).start()
    port = proxy.port
    proxy.stop()
    proxy.stop()
    with pytest.raises(OSError) as info:
        socket.create_connection(("127.0.0.1", port), timeout=2)
    assert info.value.errno == errno.ECONNREFUSED


def test_slow_delays_each_chunk_by_its_size_and_the_latency_then_pass_through_ends_it(
    echo: tuple[str, int],
) -> None:
    payload = b"s" * 2000
    with FaultProxy(*echo) as proxy:
        proxy.slow(10_000, latency_s=0.1)  # 2000 bytes: ≥ 0.1 + 0.2 s each way
        with _connect(proxy) as s:
            t0 = time.monotonic()
            s.sendall(payload)
            assert _recv_exactly(s, len(payload)) == payload
            took = time.monotonic() - t0
        assert took >= 2 * (0.1 + len(payload) / 10_000)
        counts = proxy.wait_for(lambda c: c.get("slowed", 0) >= 2)
        assert counts["bytes_up"] == len(payload)
        proxy.pass_through()
        slowed = proxy.counts["slowed"]
        with _connect(proxy) as s:
            s.sendall(b"quick")
            assert _recv_exactly(s, 5) == b"quick"
        assert proxy.counts["slowed"] == slowed
    with pytest.raises(ValueError, match="bytes_per_s"):
        FaultProxy(*echo).slow(0)
