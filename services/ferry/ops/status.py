"""``ferry status``: files per state, stuck and quarantined files, consumer lag per group.

File state comes from the tracker's HTTP API when it answers for this topic prefix
(``http://<tracker.web_host>:<web_port>/summary``, 2 s timeout); otherwise the topics are read
from their low to their high watermark and folded with the tracker's own pure function
(:func:`ferry.core.timeline.fold`), so both sources give the same answer. Lag is always read
from the broker (committed offset vs high watermark).
"""

from __future__ import annotations

import logging
import time
from dataclasses import dataclass
from typing import Any

import requests

from ferry.core.errors import SerializationError
from ferry.core.events import TOPIC_NAMES
from ferry.core.kafka.admin import (
    OpsError,
    PartitionLag,
    consumer_lag,
    partitions_of,
    scan,
    watermarks,
)
from ferry.core.kafka.clients import build_admin
from ferry.core.timeline import Timeline, fold
from ferry.core.wire.avro import EventCodec
from ferry.settings import Settings
from ferry.settings.secrets import resolve_secret

log = logging.getLogger(__name__)

_HTTP_TIMEOUT_S = 2.0


def tracker_url(settings: Settings) -> str:
    t = settings.tracker
    return f"http://{t.web_host}:{t.web_port}"


def _get(settings: Settings, path: str) -> Any | None:
    """GET ``path`` from the tracker, with its bearer token when one is configured
    (:mod:`ferry.tracker.auth`); ``None`` when it does not answer 200 (or 404: ``{}``)."""
    t = settings.tracker
    token = resolve_secret(t.token, t.token_file, "tracker.token")
    headers = {"Authorization": f"Bearer {token.get_secret_value()}"} if token else {}
    try:
        resp = requests.get(tracker_url(settings) + path, headers=headers, timeout=_HTTP_TIMEOUT_S)
    except requests.RequestException as exc:
        log.info("tracker not reachable at %s: %s", tracker_url(settings), exc)
        return None
    if resp.status_code == 404:
        return {}
    if resp.status_code != 200:
        return None
    return resp.json()


def tracker_answers(settings: Settings) -> bool:
    """True when a tracker for this topic prefix answers at :func:`tracker_url`."""
    body = _get(settings, "/summary")
    return isinstance(body, dict) and body.get("topic_prefix") == settings.kafka.topic_prefix


def timelines_from_topics(
    settings: Settings, codec: EventCodec, file_id: str | None = None
) -> tuple[dict[str, Timeline], int]:
    """Fold every event now on the plan's topics (or only ``file_id``'s).

    Returns:
        (file id → timeline, undecodable record count).
    """
    kafka = settings.kafka
    admin = build_admin(kafka)
    out: dict[str, Timeline] = {}
    bad = 0
    for name in TOPIC_NAMES:
        topic = kafka.topic(name)
        try:
            marks = watermarks(admin, kafka, topic, partitions_of(admin, kafka, topic))
        except OpsError:
            continue
        for rec in scan(kafka, topic, marks):
            if file_id is not None and rec.key is not None and rec.key != file_id.encode():
                continue
            try:
                if rec.value is None:
                    raise SerializationError("no value")
                event = codec.decode(rec.value)
            except SerializationError:
                bad += 1
                continue
            key = (
                event.file_id
                or (rec.key or b"").decode("utf-8", "replace")
                or (f"{rec.topic}[{rec.partition}]@{rec.offset}")
            )
            if file_id is not None and key != file_id:
                continue
            out[key] = fold(out.get(key), event, key)
    return out, bad


@dataclass(frozen=True)
class StatusReport:
    """What ``ferry status`` shows. ``files`` are timeline dicts (:meth:`Timeline.to_dict`)."""

    source: str  #: "tracker" or "topics"
    states: dict[str, int]
    stuck: list[dict[str, Any]]
    quarantined: list[dict[str, Any]]
    lag: list[PartitionLag]
    bad_records: int


def collect_status(settings: Settings, codec: EventCodec) -> StatusReport:
    """Build the report (tracker first, topics as fallback; lag from the broker).

    Raises:
        TransientError: the broker did not answer in time.
    """
    lag = consumer_lag(build_admin(settings.kafka), settings)
    if tracker_answers(settings):
        summ = _get(settings, "/summary") or {}
        stuck = (_get(settings, "/stuck") or {}).get("files", [])
        failed = (_get(settings, "/files?state=failed") or {}).get("files", [])
        return StatusReport(
            "tracker", summ.get("states", {}), stuck, failed, lag, int(summ.get("bad_records", 0))
        )
    timelines, bad = timelines_from_topics(settings, codec)
    now = int(time.time() * 1000)
    sla = dict(settings.tracker.sla_s)
    states: dict[str, int] = {}
    for tl in timelines.values():
        states[tl.state or "unknown"] = states.get(tl.state or "unknown", 0) + 1
    stuck = [tl.to_dict() for tl in timelines.values() if tl.stuck(now, sla)]
    failed = [tl.to_dict() for tl in timelines.values() if tl.state == "failed"]
    return StatusReport("topics", states, stuck, failed, lag, bad)


def file_status(settings: Settings, codec: EventCodec, file_id: str) -> dict[str, Any] | None:
    """One file's timeline dict (tracker first, else folded from the topics); ``None``: unknown."""
    if tracker_answers(settings):
        body = _get(settings, f"/files/{file_id}")
        return body or None
    timelines, _bad = timelines_from_topics(settings, codec, file_id)
    tl = timelines.get(file_id)
    if tl is None:
        return None
    sla = dict(settings.tracker.sla_s)
    return {**tl.to_dict(), "stuck": tl.stuck(int(time.time() * 1000), sla)}
