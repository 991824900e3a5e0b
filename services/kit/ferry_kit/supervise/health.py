"""Health of each supervised service, for ``ferry ps`` and ``ferry up``: something the service
does, not only that its process exists.

- transform, transfer, load: the instance is a member of its stage's consumer group (Kafka admin
  API, ``DescribeConsumerGroups``), found by its client id ``ferry-<stage>-<pid>``
  (:func:`ferry.core.runtime.runner.build_runner`); the detail lists its partitions, or says it is a
  standby without any. A Spark stage joins only once its session is warm, so "not in group" also
  covers "still warming up".
- extract: its scan loop touched its liveness file (:mod:`ferry.core.runtime.heartbeat`) recently —
  after every scan and every file landed, so a hung scan or a stuck upload turns it stale.
- tracker: its HTTP server answers ``/healthz`` with 200 (``/`` when it has no ``/healthz``).

Each of extract, transform and load also says which datasets it does not run because their
definition is invalid (:func:`ferry.core.runtime.heartbeat.datasets_status_path`): the detail ends
with ``; not run: orders`` and :attr:`Health.invalid` holds each one's error. That does not make the
service unhealthy (it runs every other dataset); ``ferry ps`` and ``ferry up`` print the errors.
- gc: its loop touched its liveness file after each step of a turn (copy, each sweep) recently.

transform and load name the Spark application of their session (its id, and ``yarn`` or the
standalone masters: :func:`ferry.core.runtime.heartbeat.spark_status_path`): the detail ends
with ``; Spark application application_1765…_0001 on yarn`` (issue 48: the application to look
for in the ResourceManager's UI, ``yarn application -status``, or a master's UI).

A stage instance holding files because of a cluster condition (case C22: a quota exceeded, safe
mode, no space; :mod:`ferry.core.runtime.conditions`) says so: the detail ends with
``; HOLDING quota_exceeded at b:/ferry/landing since … (5 file(s) held)`` and
:attr:`Health.conditions` holds each one. The service itself works (it retries and goes on when
the condition clears), so that does not make it unhealthy either.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field, replace

import requests

from ferry.core.kafka.admin import Member, active_members
from ferry.core.kafka.clients import build_admin, group_id
from ferry.core.runtime import heartbeat
from ferry.core.runtime.conditions import Held, conditions_path, read_conditions_file
from ferry.core.runtime.heartbeat import (
    age_s,
    datasets_status_path,
    heartbeat_path,
    spark_application,
    spark_status_path,
)
from ferry.errors import FerryError
from ferry_kit.settings import KitSettings
from ferry_kit.supervise.rpc import ProcessInfo


@dataclass(frozen=True)
class Health:
    """``ok`` and a short detail a person can act on."""

    ok: bool
    detail: str
    #: dataset → why this service does not run it (its definition is invalid)
    invalid: Mapping[str, str] = field(default_factory=dict)
    #: the cluster conditions holding this instance's files now
    conditions: tuple[Held, ...] = ()


def extract_stale_after_s(settings: KitSettings) -> float:
    """Seconds without a beat after which extract is unhealthy: ten poll intervals, at least
    60 s (one file landed at a time may take that long)."""
    return max(60.0, 10 * settings.extract.poll_interval_s)


def group_members(settings: KitSettings, stages: list[str]) -> dict[str, list[Member] | str]:
    """Members of each stage's consumer group, or why they could not be read."""
    admin = build_admin(settings.kafka)
    out: dict[str, list[Member] | str] = {}
    for stage in stages:
        try:
            out[stage] = active_members(admin, settings.kafka, group_id(settings.kafka, stage))
        except FerryError as exc:
            out[stage] = f"cannot describe the group: {exc}"
    return out


def stage_health(stage: str, pid: int, members: list[Member] | str) -> Health:
    """An instance of a consuming stage is healthy while it is a member of its group."""
    if isinstance(members, str):
        return Health(False, members)
    mine = [m for m in members if m.client_id == f"ferry-{stage}-{pid}"]
    if not mine:
        return Health(False, f"not in group ({len(members)} other member(s)); warming up?")
    parts = sorted({p for m in mine for _t, p in m.partitions})
    if not parts:
        return Health(True, "in group, standby (no partitions)")
    return Health(True, f"in group, partitions {', '.join(map(str, parts))}")


def extract_health(settings: KitSettings, pid: int) -> Health:
    age = age_s(heartbeat_path(settings, "extract", pid))
    if age is None:
        return Health(False, "no scan yet")
    limit = extract_stale_after_s(settings)
    if age > limit:
        return Health(False, f"last scan {age:.0f} s ago (> {limit:.0f} s)")
    return Health(True, f"scanned {age:.1f} s ago")


def gc_stale_after_s(settings: KitSettings) -> float:
    """Seconds without a beat after which gc is unhealthy: five sweep intervals, at least
    300 s (a sweep after a long stop removes many copies between two beats)."""
    return max(300.0, 5 * settings.retention.interval_s)


def gc_health(settings: KitSettings, pid: int) -> Health:
    age = age_s(heartbeat_path(settings, "gc", pid))
    if age is None:
        return Health(False, "no sweep yet")
    limit = gc_stale_after_s(settings)
    if age > limit:
        return Health(False, f"last sweep step {age:.0f} s ago (> {limit:.0f} s)")
    return Health(True, f"swept {age:.1f} s ago")


def tracker_health(settings: KitSettings) -> Health:
    base = f"http://{settings.tracker.web_host}:{settings.tracker.web_port}"
    timeout = settings.supervise.health_timeout_s
    try:
        resp = requests.get(f"{base}/healthz", timeout=timeout)
        path = "/healthz"
        if resp.status_code == 404:
            resp, path = requests.get(f"{base}/", timeout=timeout), "/"
    except requests.RequestException as exc:
        return Health(False, f"{base}: {type(exc).__name__}")
    if resp.status_code == 200:
        return Health(True, f"{path} 200")
    return Health(False, f"{path} {resp.status_code}: {resp.text.strip()[:80]}")


def probe(
    settings: KitSettings,
    info: ProcessInfo,
    members: Mapping[str, list[Member] | str],
) -> Health:
    """Health of one supervised process (``info.group`` is the service name)."""
    if info.state != "RUNNING" or info.pid is None:
        return Health(False, info.state.lower())
    health = _probe(settings, info, members)
    invalid = not_run(settings, info.group, info.pid)
    if invalid:
        detail = f"{health.detail}; not run: {', '.join(sorted(invalid))}"
        health = replace(health, detail=detail, invalid=invalid)
    app = spark_application(spark_status_path(settings, info.group, info.pid))
    if app is not None:
        health = replace(health, detail=f"{health.detail}; Spark application {app[0]} on {app[1]}")
    held = tuple(read_conditions_file(conditions_path(settings, info.group, info.pid)))
    if held:
        detail = "; ".join([health.detail, *(f"HOLDING {h.line()}" for h in held)])
        health = replace(health, detail=detail, conditions=held)
    return health


def not_run(settings: KitSettings, service: str, pid: int) -> dict[str, str]:
    """The datasets instance ``pid`` of ``service`` does not run, with why (``{}``: none, or
    it did not say)."""
    return heartbeat.not_run(datasets_status_path(settings, service, pid))


def _probe(
    settings: KitSettings, info: ProcessInfo, members: Mapping[str, list[Member] | str]
) -> Health:
    assert info.pid is not None
    if info.group in members:
        return stage_health(info.group, info.pid, members[info.group])
    if info.group == "extract":
        return extract_health(settings, info.pid)
    if info.group == "tracker":
        return tracker_health(settings)
    if info.group == "gc":
        return gc_health(settings, info.pid)
    return Health(True, "running")
