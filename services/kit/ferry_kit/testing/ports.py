"""A free TCP port on the loopback interface, for a server a test or a benchmark starts."""

from __future__ import annotations

import socket


def free_port() -> int:
    """A TCP port on 127.0.0.1 that was free a moment ago: the kernel picks it (bind to port 0),
    the socket is closed at once. Another process may take it before the caller binds it; the
    callers start their server right away."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])
