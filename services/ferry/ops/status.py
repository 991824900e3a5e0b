"""``ferry status``: files per state, stuck and quarantined files, consumer lag per group.

File state comes from the tracker's HTTP API when it answers for this topic prefix
(``http://<tracker.web_host>:<web_port>/summary``, 2 s timeout); otherwise the topics are read
from their low to their high watermark and folded with the tracker's own pure function
(:func:`ferry.core.timeline.fold`), so both sources give the same answer; the files waiting for
their definition come from the tracker's marks or from the waiting topic
(:mod:`ferry.core.runtime.waiting`), and :func:`why_waiting` says why from the definitions and
the services' reports on this host. Lag is always read from the broker (committed offset vs high
watermark).
"""

from __future__ import annotations

import logging
import time
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import urlencode

import requests

from ferry.core.events import TOPIC_NAMES
from ferry.core.kafka.admin import OpsError, ScannedRecord, scan
from ferry.core.kafka.offsets import PartitionLag, consumer_lag, topic_bounds
from ferry.core.runtime.heartbeat import not_run_anywhere
from ferry.core.runtime.waiting import WAITING
from ferry.core.services import consumer_of
from ferry.core.timeline import NameLoads, Timeline, fold
from ferry.core.wire.avro import EventCodec
from ferry.datasets.registry import load_definitions
from ferry.errors import SerializationError
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
    out: dict[str, Timeline] = {}
    bad = 0
    for name in TOPIC_NAMES:
        topic = kafka.topic(name)
        try:
            marks = topic_bounds(kafka, topic)
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
    #: ``[{"dataset", "stage", "files"}]``: files waiting for their definition, per stage
    waiting: list[dict[str, Any]] = field(default_factory=list)
    #: failed files per quarantine state (open, superseded, dismissed), from the tracker's
    #: summary; ``None``: count them in ``quarantined``
    closures: dict[str, int] | None = None

    def quarantine_counts(self) -> dict[str, int]:
        """Failed files per quarantine state: :attr:`closures`, else counted in
        :attr:`quarantined` (a file without a state is open)."""
        if self.closures is not None:
            return dict(self.closures)
        out: dict[str, int] = {}
        for d in self.quarantined:
            closure = (d.get("quarantine") or {}).get("state", "open")
            out[closure] = out.get(closure, 0) + 1
        return out


def parked_stages(records: Iterable[ScannedRecord], codec: EventCodec) -> dict[str, dict[str, Any]]:
    """file id → ``{"stage", "since_ms"}`` of the files the waiting topic's ``records`` (in
    offset order) hold now: the last record of each key, unless empty (released); an
    undecodable record is skipped."""
    out: dict[str, dict[str, Any]] = {}
    for rec in records:
        if rec.key is None:
            continue
        key = rec.key.decode("utf-8", "replace")
        out.pop(key, None)
        if not rec.value:
            continue
        try:
            stage = consumer_of(codec.decode(rec.value).TOPIC)
        except SerializationError:
            continue
        if stage is not None:
            out[key] = {"stage": stage, "since_ms": rec.timestamp_ms}
    return out


def parked_files(settings: Settings, codec: EventCodec) -> dict[str, dict[str, Any]]:
    """:func:`parked_stages` of the waiting topic now (``{}`` when it does not exist)."""
    kafka = settings.kafka
    topic = kafka.topic(WAITING)
    try:
        marks = topic_bounds(kafka, topic)
    except OpsError:
        return {}
    return parked_stages(scan(kafka, topic, marks), codec)


def why_waiting(settings: Settings, dataset: str, stage: str) -> str:
    """Why files of ``dataset`` wait in ``stage``: the definition's problems as this host reads
    ``paths.datasets_dir``, else what ``stage`` running on this host reports (an expression
    that does not compile), else where to look."""
    reason = load_definitions(settings.paths.datasets_dir).wait_reason(dataset)
    if reason is not None:
        return reason
    said = not_run_anywhere(settings).get(dataset, {}).get(stage)
    if said is not None:
        return f"{stage} does not run dataset {dataset!r}: {said}"
    return (
        f"{stage} does not run dataset {dataset!r} (its log and `ferry ps` say why; a fixed "
        "definition releases the file within a minute)"
    )


def collect_status(settings: Settings, codec: EventCodec) -> StatusReport:
    """Build the report (tracker first, topics as fallback; lag from the broker).

    Raises:
        TransientError: the broker did not answer in time.
    """
    lag = consumer_lag(settings)
    if tracker_answers(settings):
        summ = _get(settings, "/summary") or {}
        stuck = (_get(settings, "/stuck") or {}).get("files", [])
        failed = (_get(settings, "/files?state=failed") or {}).get("files", [])
        return StatusReport(
            "tracker",
            summ.get("states", {}),
            stuck,
            failed,
            lag,
            int(summ.get("bad_records", 0)),
            list(summ.get("waiting") or []),
            summ.get("quarantine"),
        )
    timelines, bad = timelines_from_topics(settings, codec)
    now = int(time.time() * 1000)
    sla = dict(settings.tracker.sla_s)
    states: dict[str, int] = {}
    for tl in timelines.values():
        states[tl.state or "unknown"] = states.get(tl.state or "unknown", 0) + 1
    stuck = [tl.to_dict() for tl in timelines.values() if tl.stuck(now, sla)]
    loads = name_loads(timelines)
    failed = [_view(tl, now, sla, loads) for tl in timelines.values() if tl.state == "failed"]
    per: dict[tuple[str, str], int] = {}
    for file_id, where in parked_files(settings, codec).items():
        known = timelines[file_id].dataset if file_id in timelines else None
        key = (known or "?", str(where["stage"]))
        per[key] = per.get(key, 0) + 1
    waiting = [{"dataset": d, "stage": s, "files": n} for (d, s), n in sorted(per.items())]
    return StatusReport("topics", states, stuck, failed, lag, bad, waiting)


def name_loads(timelines: Mapping[str, Timeline]) -> NameLoads:
    """The loads by NAS name of ``timelines`` (first load time), to tell superseded entries."""
    loads = NameLoads()
    for tl in timelines.values():
        if "loaded" in tl.steps and tl.source_path:
            loads.add(tl.source_path, tl.dataset, tl.file_id, tl.steps["loaded"].first_ms)
    return loads


def _view(
    tl: Timeline,
    now: int,
    sla: Mapping[str, float],
    loads: NameLoads,
    parked: Mapping[str, dict[str, Any]] | None = None,
) -> dict[str, Any]:
    """What the tracker's ``/files/{id}`` answers, built from a timeline folded here: the
    timeline dict, ``stuck``, ``waiting`` when ``parked`` (:func:`parked_files`) holds the file,
    and a failed file's ``quarantine`` state (as the tracker tells it: superseded by a later
    load of its NAS name, else dismissed, else open)."""
    body = {**tl.to_dict(), "stuck": tl.stuck(now, sla)}
    if parked and tl.file_id in parked:
        body["waiting"] = dict(parked[tl.file_id])
    if tl.state == "failed" and tl.failure is not None:
        later = loads.superseding(tl.source_path, tl.dataset, tl.file_id, tl.failure.at_ms)
        dismissal = tl.dismissal
        body["quarantine"] = (
            {"state": "superseded", "detail": later[0]}
            if later
            else {"state": "dismissed", "detail": dismissal.note}
            if dismissal
            else {"state": "open", "detail": None}
        )
    return body


def file_status(settings: Settings, codec: EventCodec, file_id: str) -> dict[str, Any] | None:
    """One file's timeline dict by its id (or the key of a failure without one; tracker first,
    else folded from the topics); ``None``: unknown. A NAS path is looked up with
    :func:`files_by_name`."""
    if "/" in file_id:
        return None
    if tracker_answers(settings):
        body = _get(settings, f"/files/{file_id}")
        return body or None
    timelines, _bad = timelines_from_topics(settings, codec, file_id)
    tl = timelines.get(file_id)
    if tl is None:
        return None
    if tl.state == "failed":  # superseded or not: every file's loads tell
        timelines, _bad = timelines_from_topics(settings, codec)
    sla = dict(settings.tracker.sla_s)
    parked = parked_files(settings, codec)
    return _view(tl, int(time.time() * 1000), sla, name_loads(timelines), parked)


def files_by_name(settings: Settings, codec: EventCodec, name: str) -> list[dict[str, Any]]:
    """Timeline dicts of the files whose NAS path is ``name``, else whose NAS path or base name
    starts with it; newest (by the time they entered their state) first. From the tracker's
    ``/lookup`` when it answers, else folded from the topics."""
    if tracker_answers(settings):
        body = _get(settings, "/lookup?" + urlencode({"name": name})) or {}
        return list(body.get("files") or [])
    timelines, _bad = timelines_from_topics(settings, codec)
    hits = [tl for tl in timelines.values() if tl.source_path == name]
    if not hits:
        hits = [
            tl
            for tl in timelines.values()
            if tl.source_path
            and (
                tl.source_path.startswith(name)
                or tl.source_path.rsplit("/", 1)[-1].startswith(name)
            )
        ]
    hits.sort(key=lambda tl: (-(tl.entered_ms() or 0), tl.file_id))
    now, sla, loads = int(time.time() * 1000), dict(settings.tracker.sla_s), name_loads(timelines)
    parked = parked_files(settings, codec)
    return [_view(tl, now, sla, loads, parked) for tl in hits]
