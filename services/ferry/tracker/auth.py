"""Bearer-token access to the tracker's HTTP server (``tracker.token`` / ``tracker.token_file``).

The server binds 127.0.0.1 by default; bound to another address it serves every file's source
path, reasons and commands to whoever reaches the port, so a token can be required. When one is
configured every request must carry ``Authorization: Bearer <token>`` (compared in constant time,
:func:`hmac.compare_digest`), else ``401`` with ``WWW-Authenticate: Bearer`` and no data. Open
without it: ``/healthz`` (a probe: status and reason codes, no path or file name) and
``/static/*`` (the pages' CSS and JS, the same for everyone). ``/metrics`` needs the token too:
configure the scraper with it (Prometheus ``authorization: {credentials_file: ...}``).
Documented in docs/security.md.

The tracker's own Kafka clients (faust over aiokafka) log in as every other Ferry client does
under ``kafka.security_protocol: SASL_SSL``: :func:`broker_options`.
"""

from __future__ import annotations

import hmac
import ssl
from collections.abc import Awaitable, Callable
from typing import Any

import faust
from aiohttp import web
from pydantic import SecretStr

from ferry.settings.kafka import KafkaSettings

#: Paths served without the token (exact, or a prefix ending in ``/``).
OPEN_PATHS = ("/healthz", "/static/")

Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]


def is_open(path: str) -> bool:
    """Whether ``path`` is served without the token (:data:`OPEN_PATHS`)."""
    return any(path == p or (p.endswith("/") and path.startswith(p)) for p in OPEN_PATHS)


def authorized(header: str | None, token: SecretStr) -> bool:
    """Whether the ``Authorization`` header value carries ``token`` (``Bearer <token>``)."""
    scheme, _, given = (header or "").partition(" ")
    if scheme.lower() != "bearer":
        return False
    return hmac.compare_digest(given.strip().encode(), token.get_secret_value().encode())


def bearer_middleware(
    token: SecretStr,
) -> Callable[[web.Request, Handler], Awaitable[web.StreamResponse]]:
    """aiohttp middleware: ``401`` for a request without the token, except :data:`OPEN_PATHS`."""

    @web.middleware
    async def check(request: web.Request, handler: Handler) -> web.StreamResponse:
        if is_open(request.path) or authorized(request.headers.get("Authorization"), token):
            return await handler(request)
        return web.json_response(
            {"error": "unauthorized: send Authorization: Bearer <tracker token>"},
            status=401,
            headers={"WWW-Authenticate": 'Bearer realm="ferry-tracker"'},
        )

    return check


def broker_options(kafka: KafkaSettings) -> dict[str, Any]:
    """``faust.App`` keyword arguments for ``kafka.security_protocol``: none for PLAINTEXT; for
    SASL_SSL ``broker_credentials`` (:class:`faust.SASLCredentials`: user, password, mechanism and
    a TLS context trusting ``kafka.ssl_ca_path``, host names checked). faust's ``repr`` of the
    credentials shows the user name only.

    Raises:
        ConfigError: no usable password (:meth:`KafkaSettings.password`).
    """
    if not kafka.secure:
        return {}
    cafile = str(kafka.ssl_ca_path) if kafka.ssl_ca_path is not None else None
    context = ssl.create_default_context(cafile=cafile)
    return {
        "broker_credentials": faust.SASLCredentials(
            username=kafka.user,
            password=kafka.password().get_secret_value(),
            ssl_context=context,
            mechanism=kafka.sasl_mechanism,
        )
    }
