"""Ferry's WebHDFS session is deaf to the environment (issue 45: with it on, requests looked for
``~/.netrc`` and at the CA path on every request and redirect, a fifth of the transfer service's
CPU on small files): no netrc credentials, no proxy from ``HTTP_PROXY``; the CA bundle of an
``https://`` cluster still comes from ``ssl_ca_path`` or, read once, ``REQUESTS_CA_BUNDLE``."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest
import requests

from ferry.clusters.hdfs.webhdfs import _Client, _pooled_session, ca_bundle


class _Recorder(BaseHTTPRequestHandler):
    seen: list[dict[str, str]] = []

    def do_GET(self) -> None:  # noqa: N802 - http.server's name
        type(self).seen.append(dict(self.headers))
        body = b'{"FileStatus": {}}'
        self.send_response(200)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args: Any) -> None:
        pass


@pytest.fixture
def server() -> Iterator[str]:
    _Recorder.seen = []
    httpd = ThreadingHTTPServer(("127.0.0.1", 0), _Recorder)
    thread = threading.Thread(target=httpd.serve_forever, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{httpd.server_address[1]}"
    httpd.shutdown()
    httpd.server_close()


def test_no_netrc_credentials_and_no_proxy_from_the_environment(
    server: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    netrc = tmp_path / "netrc"
    netrc.write_text("machine 127.0.0.1 login someone password secret\n")
    netrc.chmod(0o600)
    monkeypatch.setenv("NETRC", str(netrc))
    monkeypatch.setenv("HTTP_PROXY", "http://127.0.0.1:9")  # the discard port: nothing answers
    monkeypatch.delenv("NO_PROXY", raising=False)
    monkeypatch.delenv("no_proxy", raising=False)
    url = f"{server}/webhdfs/v1/f?op=GETFILESTATUS"

    # what a plain session does with that environment: the netrc's user, through the proxy
    with pytest.raises(requests.exceptions.ProxyError):
        requests.Session().get(url, timeout=(2, 2))

    client = _Client(
        server, user="ferry", timeout=(2.0, 2.0), address_map={}, session=_pooled_session()
    )
    res = client._request("GET", url)
    assert res.status_code == 200
    assert len(_Recorder.seen) == 1
    assert "Authorization" not in _Recorder.seen[0]


def test_the_ca_bundle_is_the_clusters_then_the_environments_read_once(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    ca = tmp_path / "ca.pem"
    monkeypatch.setenv("REQUESTS_CA_BUNDLE", "/etc/env-bundle.pem")
    monkeypatch.setenv("CURL_CA_BUNDLE", "/etc/curl-bundle.pem")
    assert ca_bundle(ca) == str(ca)
    assert ca_bundle(None) == "/etc/env-bundle.pem"
    monkeypatch.delenv("REQUESTS_CA_BUNDLE")
    assert ca_bundle(None) == "/etc/curl-bundle.pem"
    monkeypatch.delenv("CURL_CA_BUNDLE")
    assert ca_bundle(None) is True


class _Session:
    """Records each request's ``verify``; answers 200."""

    def __init__(self) -> None:
        self.verify: list[tuple[str, Any]] = []

    def request(self, method: str, url: str, **kwargs: Any) -> requests.Response:
        self.verify.append((url.split(":", 1)[0], kwargs["verify"]))
        res = requests.Response()
        res.status_code = 200
        return res


def test_the_ca_path_goes_only_to_https_requests() -> None:
    session = _Session()
    client = _Client(
        "https://nn:9871",
        user=None,
        timeout=(5.0, 30.0),
        address_map={},
        session=session,  # type: ignore[arg-type]
        verify="/etc/ca.pem",
    )
    client._request("GET", "https://nn:9871/webhdfs/v1/f", params={"op": "GETFILESTATUS"})
    client._request("GET", "http://dn:9864/webhdfs/v1/f", params={"op": "OPEN"})
    assert session.verify == [("https", "/etc/ca.pem"), ("http", True)]
