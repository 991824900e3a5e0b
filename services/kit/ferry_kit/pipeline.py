"""Run the four stage services as real processes and watch their outcomes.

Used by ``ferry demo``, the e2e tests and the compose tests, so all three drive the pipeline the
same way a user does: files dropped on the NAS, services started with ``ferry run <stage>``,
outcomes read from the ``loaded`` and ``failed`` topics.
"""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
import time
import uuid
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ferry.core.events import FileFailed, FileLoaded
from ferry.core.kafka.clients import build_admin, client_config
from ferry.core.kafka.topics import ensure_topics
from ferry.core.services import STAGES, service_argv
from ferry.core.wire.avro import default_codec
from ferry.errors import FerryError, SerializationError
from ferry_kit.settings import KitSettings

#: KitSettings the kit gives every service it starts on the local stack unless the caller's
#: environment sets them: lineage on, to the stack's own broker (``<prefix>.openlineage``). The
#: product's default is off (a production deployment opts in, docs/operations.md); the kit is
#: what runs the local stack, so ``ferry up``, the demo and the test pipelines get it here.
LOCAL_STACK_ENV: dict[str, str] = {"FERRY_LINEAGE__TRANSPORT": "kafka"}


def settings_env(overrides: Mapping[str, Any]) -> dict[str, str]:
    """``{"kafka.topic_prefix": "x"}`` → ``{"FERRY_KAFKA__TOPIC_PREFIX": "x"}``."""
    return {"FERRY_" + k.replace(".", "__").upper(): str(v) for k, v in overrides.items()}


def private_overrides(prefix: str, token: str, nas_dir: Path) -> dict[str, Any]:
    """Settings overrides (dotted names, for :func:`settings_env`) that give one test or soak run
    its own topic prefix ``<prefix><token>``, NAS directory ``nas_dir`` and HDFS paths under
    ``/test/<token>/``, with short waits: transform and load batches 2 s, extract polls 0.5 s;
    a gc service among them serves ``/metrics`` on any free port. Creates ``nas_dir`` (the
    run's share: extract refuses a NAS root that does not exist)."""
    nas_dir.mkdir(parents=True, exist_ok=True)
    return {
        "kafka.topic_prefix": f"{prefix}{token}",
        "paths.nas_dir": nas_dir,
        "paths.landing_path": f"/test/{token}/landing",
        "paths.staging_path": f"/test/{token}/staging",
        "paths.rejects_path": f"/test/{token}/rejects",
        "paths.incoming_path": f"/test/{token}/incoming",
        "transform.batch_wait_s": 2,
        "load.batch_wait_s": 2,
        "extract.poll_interval_s": 0.5,
        "retention.metrics_port": 0,
    }


def run_cli(env: Mapping[str, str], *args: str, timeout: float) -> subprocess.CompletedProcess[str]:
    """``python -m ferry.cli <args>`` as an operator runs it, with ``env`` over this process's
    environment; stdout and stderr captured as text, the exit status left to the caller.

    Raises:
        subprocess.TimeoutExpired: it ran longer than ``timeout`` seconds.
    """
    return subprocess.run(
        [sys.executable, "-m", "ferry.cli", *args],
        capture_output=True,
        text=True,
        env={**os.environ, **env},
        timeout=timeout,
        check=False,
    )


@dataclass
class ServiceGroup:
    """The stage services as child processes, each logging to ``log_dir/<stage>.log``."""

    env: Mapping[str, str]
    log_dir: Path
    stages: tuple[str, ...] = STAGES
    procs: dict[str, subprocess.Popen[bytes]] = field(default_factory=dict)

    def start(self, stage: str | None = None) -> None:
        """Start every stage (or one), each in its own process group."""
        self.log_dir.mkdir(parents=True, exist_ok=True)
        for name in [stage] if stage else self.stages:
            log = (self.log_dir / f"{name}.log").open("ab")
            self.procs[name] = subprocess.Popen(  # noqa: S603
                service_argv(name),
                stdout=log,
                stderr=subprocess.STDOUT,
                stdin=subprocess.DEVNULL,
                env={**LOCAL_STACK_ENV, **os.environ, **self.env},
                start_new_session=True,
            )
            log.close()

    def kill(self, stage: str, sig: int = signal.SIGKILL) -> None:
        """Signal one stage's process group and wait for it to exit (30 s)."""
        proc = self.procs[stage]
        os.killpg(proc.pid, sig)
        proc.wait(timeout=30)

    def check_alive(self) -> None:
        """Raise FerryError naming the stage and its log if a service exited."""
        for name, proc in self.procs.items():
            if proc.poll() is not None:
                tail = (self.log_dir / f"{name}.log").read_text(errors="replace")[-3000:]
                raise FerryError(f"service {name} exited with {proc.returncode}; log tail:\n{tail}")

    def wait_ready(self, settings: KitSettings, deadline_s: float) -> float:
        """Wait until every started service says it is healthy as ``ferry ps`` reads it: each
        consuming stage's instance a member of its consumer group (it joins after its warm-up,
        ``ferry.core.runtime.runner``), extract having scanned, the others running. ``settings``
        must be the services' own (their topic prefix names the groups). Returns the seconds
        waited.

        Raises:
            TimeoutError: not all healthy within ``deadline_s`` (names the ones that are not).
            FerryError: a service exited (:meth:`check_alive`).
        """
        from ferry.core.services import CONSUMING_STAGES
        from ferry_kit.supervise.health import extract_health, group_members, stage_health

        t0 = time.monotonic()
        while True:
            self.check_alive()
            consuming = [n for n in self.procs if n in CONSUMING_STAGES]
            members = group_members(settings, consuming) if consuming else {}
            waiting = [
                name
                for name in consuming
                if not stage_health(name, self.procs[name].pid, members[name]).ok
            ]
            if (
                "extract" in self.procs
                and not extract_health(settings, self.procs["extract"].pid).ok
            ):
                waiting.append("extract")
            if not waiting:
                return time.monotonic() - t0
            if time.monotonic() - t0 > deadline_s:
                raise TimeoutError(f"services not ready after {deadline_s:.0f} s: {waiting}")
            time.sleep(0.5)  # polling the group's membership, a condition with a deadline

    def stop(self, timeout_s: float = 60) -> dict[str, int | None]:
        """SIGTERM every service, wait, SIGKILL stragglers. Returns exit codes."""
        for proc in self.procs.values():
            if proc.poll() is None:
                os.killpg(proc.pid, signal.SIGTERM)
        deadline = time.monotonic() + timeout_s
        codes: dict[str, int | None] = {}
        for name, proc in self.procs.items():
            try:
                codes[name] = proc.wait(timeout=max(0.1, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                os.killpg(proc.pid, signal.SIGKILL)
                codes[name] = proc.wait(timeout=30)
        return codes


class Outcomes:
    """Reads the stage topics (``<prefix>.extracted`` … ``<prefix>.failed``) from the beginning
    and keeps, per ``file_id``, the last FileLoaded and every FileFailed, plus the Kafka timestamp
    (ms) of every event seen on every stage topic (for latencies).

    The consumer is assigned every partition of those topics (the topic plan, made first if
    missing): no consumer group, so no rebalance to rejoin. A group-subscribed reader stopped
    receiving for good after the broker was killed for 24 s then paused for 47 s (nemesis seed
    686632, 2026-12-07: the pipeline loaded all 42 files, this reader saw none of them)."""

    TOPICS = ("extracted", "transformed", "transferred", "loaded", "failed")

    def __init__(self, settings: KitSettings, since_ms: int = 0) -> None:
        """``since_ms``: ignore events the broker stamped before this time (ms since the epoch),
        e.g. outcomes of an earlier run of the same files."""
        from confluent_kafka import OFFSET_BEGINNING, Consumer, TopicPartition

        self.settings = settings
        self.since_ms = since_ms
        self.codec = default_codec(settings.paths.schemas_dir)
        self.loaded: dict[str, FileLoaded] = {}
        self.loaded_count: dict[str, int] = {}
        self.failed: dict[str, list[FileFailed]] = {}
        #: (source topic, partition, offset) of every FileFailed without a manifest: a stranger's
        #: record a stage set aside (case C24)
        self.set_aside: set[tuple[str, int, int]] = set()
        self.stamps: dict[str, dict[str, int]] = {}
        self.events: dict[str, int] = {t: 0 for t in self.TOPICS}
        kafka = settings.kafka
        self._consumer = Consumer(
            {
                **client_config(kafka),
                # never joined (assign below) nor committed; under the prefix for the ACLs
                "group.id": f"{kafka.topic_prefix}.outcomes-{uuid.uuid4().hex[:8]}",
                "auto.offset.reset": "earliest",
                "enable.auto.commit": False,
            }
        )
        ensure_topics(build_admin(kafka), kafka, self.TOPICS, retry=settings.retry)
        topics = [kafka.topic(t) for t in self.TOPICS]
        meta = self._consumer.list_topics(timeout=kafka.request_timeout_s).topics
        self._consumer.assign(
            [TopicPartition(t, p, OFFSET_BEGINNING) for t in topics for p in meta[t].partitions]
        )

    def poll(self, seconds: float = 1.0) -> None:
        """Read what arrived within ``seconds``."""
        end = time.monotonic() + seconds
        while time.monotonic() < end:
            msg = self._consumer.poll(max(0.05, end - time.monotonic()))
            if msg is None or msg.error() is not None or msg.timestamp()[1] < self.since_ms:
                continue
            full_topic, value = msg.topic(), msg.value()
            if full_topic is None:
                raise FerryError(
                    f"outcomes: consumed record without a topic (partition {msg.partition()}, "
                    f"offset {msg.offset()})"
                )
            topic = full_topic.rsplit(".", 1)[-1]
            self.events[topic] += 1
            try:
                if value is None:
                    raise SerializationError(
                        f"{full_topic}[{msg.partition()}]@{msg.offset()} has no value (tombstone)",
                        reason="undecodable",
                    )
                ev = self.codec.decode(value)
            except FerryError:
                continue
            fid = getattr(ev, "file_id", None)
            if isinstance(ev, FileFailed) and ev.manifest is None and ev.source_topic is not None:
                self.set_aside.add(
                    (ev.source_topic, ev.source_partition or 0, ev.source_offset or 0)
                )
            if fid is None:
                continue
            self.stamps.setdefault(fid, {}).setdefault(topic, msg.timestamp()[1])
            if isinstance(ev, FileLoaded):
                self.loaded[fid] = ev
                self.loaded_count[fid] = self.loaded_count.get(fid, 0) + 1
            elif isinstance(ev, FileFailed):
                self.failed.setdefault(fid, []).append(ev)

    def settled(self, file_ids: Iterable[str]) -> bool:
        """Every file has an outcome (loaded, or failed)."""
        return all(f in self.loaded or f in self.failed for f in file_ids)

    def unsettled(self, file_ids: Iterable[str]) -> str:
        """Which of ``file_ids`` have no outcome yet, each with the last stage topic it reached,
        e.g. ``2 of 12 file(s) without an outcome: 6ee1aecb (transferred), 7d7ab1e9 (none)``;
        for a timeout's message."""
        ids = list(file_ids)
        open_ = [f for f in ids if f not in self.loaded and f not in self.failed]
        stamps = {f: self.stamps.get(f, {}) for f in open_}
        last = [
            f"{f[:8]} ({max(s, key=s.__getitem__) if s else 'none'})" for f, s in stamps.items()
        ]
        return f"{len(open_)} of {len(ids)} file(s) without an outcome: " + ", ".join(last)

    def close(self) -> None:
        self._consumer.close()


def drop_file(src: Path, dest: Path, *, mode: str = "rename", rate_bytes_s: float = 20e6) -> None:
    """Put ``src`` on the NAS at ``dest`` the way upstreams do.

    ``rename``: write ``.<name>.part`` then rename (atomic); ``slow``: copy in 64 KiB chunks at
    about ``rate_bytes_s`` straight to ``dest`` (case C09: extract must wait until it is complete).
    """
    dest.parent.mkdir(parents=True, exist_ok=True)
    if mode == "rename":
        tmp = dest.with_name(f".{dest.name}.part")
        shutil.copyfile(src, tmp)
        os.replace(tmp, dest)
        return
    chunk = 64 * 1024
    with src.open("rb") as fin, dest.open("wb") as fout:
        while data := fin.read(chunk):
            fout.write(data)
            fout.flush()
            time.sleep(len(data) / rate_bytes_s)
