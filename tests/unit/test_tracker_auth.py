"""The tracker's bearer token (``tracker.token``, :mod:`ferry.tracker.auth`): exact status codes
of every route with and without the token, on the real faust app's aiohttp server (no broker: the
app is built without creating topics and never started, so the table views answer 503 while its
state is "recovering" — past the token check)."""

from __future__ import annotations

import asyncio
import os
from pathlib import Path
from typing import Any

import pytest
from aiohttp.test_utils import TestClient, TestServer
from pydantic import SecretStr

from ferry.errors import ConfigError
from ferry.settings import Settings, get_settings
from ferry.settings.secrets import read_secret_file, resolve_secret
from ferry.tracker.app import build_app

TOKEN = "tr-4c1d2e9f-token"
#: Every data route of ferry.tracker.views.
GUARDED = [
    "/",
    "/files",
    "/files/x",
    "/stuck",
    "/summary",
    "/overview",
    "/charts",
    "/ui/files",
    "/ui/files/x",
    "/table",
    "/metrics",
]
OPEN = ["/healthz", "/static/ferry.css"]


def settings(tmp_path: Path, **tracker: Any) -> Settings:
    base = get_settings()
    update = {"data_dir": tmp_path / "tracker", "store_url": "memory://", **tracker}
    return base.model_copy(update={"tracker": base.tracker.model_copy(update=update)})


def statuses(s: Settings, headers: dict[str, str]) -> dict[str, int]:
    """Status code of a GET on every route with ``headers``; a 401 is checked to carry the
    ``WWW-Authenticate`` challenge and a body without data."""

    async def run() -> dict[str, int]:
        app = build_app(s, create_topics=False)
        async with TestClient(TestServer(await app.web.wsgi())) as client:
            out = {}
            for path in GUARDED + OPEN:
                resp = await client.get(path, headers=headers)
                out[path] = resp.status
                if resp.status == 401:
                    assert resp.headers["WWW-Authenticate"] == 'Bearer realm="ferry-tracker"'
                    assert await resp.json() == {
                        "error": "unauthorized: send Authorization: Bearer <tracker token>"
                    }
            return out

    return asyncio.run(run())


def expect(guarded: int) -> dict[str, int]:
    """``guarded`` for every data route; /healthz 200 (just started), the CSS 200."""
    return {**dict.fromkeys(GUARDED, guarded), "/healthz": 200, "/static/ferry.css": 200}


def test_without_a_token_configured_every_route_is_open(tmp_path: Path) -> None:
    assert statuses(settings(tmp_path), {}) == expect(503)


@pytest.mark.parametrize(
    "headers",
    [
        {},
        {"Authorization": f"Basic {TOKEN}"},
        {"Authorization": "Bearer wrong"},
        {"Authorization": f"Bearer {TOKEN}x"},
        {"Authorization": "Bearer"},
    ],
)
def test_with_a_token_every_data_route_is_401_without_it(
    tmp_path: Path, headers: dict[str, str]
) -> None:
    assert statuses(settings(tmp_path, token=SecretStr(TOKEN)), headers) == expect(401)


def test_with_the_token_every_route_answers(tmp_path: Path) -> None:
    s = settings(tmp_path, token=SecretStr(TOKEN))
    assert statuses(s, {"Authorization": f"Bearer {TOKEN}"}) == expect(503)
    assert statuses(s, {"Authorization": f"bearer {TOKEN}"}) == expect(503)


def test_token_from_a_0600_file(tmp_path: Path) -> None:
    f = tmp_path / "token"
    f.write_text(TOKEN + "\n")
    f.chmod(0o600)
    s = settings(tmp_path, token_file=f)
    assert statuses(s, {}) == expect(401)
    assert statuses(s, {"Authorization": f"Bearer {TOKEN}"}) == expect(503)


def test_secret_file_readable_by_others_is_refused_without_naming_its_content(
    tmp_path: Path,
) -> None:
    f = tmp_path / "token"
    f.write_text(TOKEN)
    for mode in (0o644, 0o640, 0o604):
        os.chmod(f, mode)
        with pytest.raises(ConfigError) as exc:
            read_secret_file(f, "tracker.token_file")
        assert str(exc.value) == (
            f"tracker.token_file: {f} has mode {mode:04o}; a secret file must be readable by "
            "its owner only (chmod 600); refused"
        )
    os.chmod(f, 0o400)
    assert read_secret_file(f, "tracker.token_file").get_secret_value() == TOKEN
    with pytest.raises(ConfigError, match="set either the value or the file, not both"):
        resolve_secret(SecretStr("a"), f, "tracker.token")


def test_the_token_never_shows_in_the_settings_text(tmp_path: Path) -> None:
    s = settings(tmp_path, token=SecretStr(TOKEN))
    assert TOKEN not in f"{s!r} {s} {s.tracker.model_dump()} {s.tracker.model_dump_json()}"
