"""A request that carries a body (a CREATE's bytes to a DataNode) is sent under the read
timeout, not the connect timeout: urllib3 writes the body while the socket still has the
connect timeout, and the secure tier of a CI run (2026-12-07) lost a 3 MB upload with "The
write operation timed out" 8 s after the redirect, its DataNode busy with its SASL handshake."""

from __future__ import annotations

from typing import Any

import requests

from ferry.clusters.hdfs.webhdfs import _Client, upload_timeout


class Session:
    """Records each request's timeout; answers 201 without a redirect."""

    def __init__(self) -> None:
        self.timeouts: list[tuple[str, Any]] = []

    def request(self, method: str, url: str, **kwargs: Any) -> requests.Response:
        self.timeouts.append((method, kwargs["timeout"]))
        res = requests.Response()
        res.status_code = 201
        return res


def test_upload_timeout_is_the_read_timeout_for_the_body() -> None:
    assert upload_timeout((5.0, 30.0)) == (30.0, 30.0)
    assert upload_timeout((10.0, 2.0)) == (10.0, 2.0)


def test_a_body_goes_under_the_read_timeout_and_a_call_without_one_keeps_both() -> None:
    session = Session()
    client = _Client(
        "http://nn:9870",
        user="ferry",
        timeout=(5.0, 30.0),
        address_map={},
        session=session,  # type: ignore[arg-type]
    )
    client._request("PUT", "http://dn:9864/webhdfs/v1/f?op=CREATE", data=iter([b"x"]))
    client._request("GET", "http://nn:9870/webhdfs/v1/f", params={"op": "GETFILESTATUS"})
    assert session.timeouts == [("PUT", (30.0, 30.0)), ("GET", (5.0, 30.0))]
