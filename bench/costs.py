"""What a piece of work costs the whole stack, per file: CPU seconds by process and round trips by
kind, read before and after it (the ``cost`` table of bench/bench_pipeline.py, issue 45).

A :class:`CostMeter` takes a :class:`Snapshot` of counters that only grow, and the difference of
two snapshots is what the work between them cost:

* **CPU seconds** (user + system, ``psutil``, sampled: :class:`CostMeter`) of every stack
  component's processes, of each Ferry service's Python process and of its Spark driver JVM
  (the JVM that process started), of the Spark executors of each application (the worker's
  child JVMs, named by their application's name from the ALIVE master's ``/json``), and of the
  bench's other descendants (a peer's Python process and its ``local[2]`` JVM);
* **HDFS**: per cluster, the NameNode's ``NameNodeActivity`` operation counters (every namespace
  call, over RPC or WebHDFS: ``CreateFileOps``, ``FilesRenamed``, ``GetListingOps`` …) and its
  RPC call count (``RpcActivityForPort<port>``, ``RpcProcessingTimeNumOps``: the Java clients',
  Spark's), and the DataNode's blocks written and read (``DataNodeActivity``), from each
  server's ``/jmx`` servlet (Hadoop's "Metrics" page names every counter); and the same calls by
  zone, command and protocol from the NameNodes' audit logs (``bench/nn_audit.py``, turned on
  when the meter starts), which say which hop makes them;
* **Kafka**: records appended to each topic (the sum of its partitions' high watermarks) and
  offset commits (records appended to ``__consumer_offsets``);
* **Hive metastore**: calls by name, from its audit log (``HiveMetaStore.audit`` lines, one per
  call, in Hive's default log file ``<java.io.tmpdir>/<user>/hive.log``);
* **Spark**: jobs, stages and tasks per application from Spark's event logs, when the services
  and peers write them (:func:`event_log_env`: ``spark.eventLog.enabled`` through
  ``PYSPARK_SUBMIT_ARGS``, which pyspark hands to the ``spark-submit`` that starts a driver);
  counted by their start times inside the window.

Nothing here is asserted: the table says where the next second is.
"""

from __future__ import annotations

import contextlib
import getpass
import json
import os
import tempfile
import threading
import time
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import nn_audit
import psutil
import requests

from ferry_kit.settings import KitSettings

#: ``NameNodeActivity`` counters that are operations (each a namespace call), Hadoop 3.5.
NN_OPS = (
    "CreateFileOps",
    "FilesCreated",
    "FilesAppended",
    "GetBlockLocations",
    "FilesRenamed",
    "FilesTruncated",
    "GetListingOps",
    "DeleteFileOps",
    "FilesDeleted",
    "FileInfoOps",
    "AddBlockOps",
    "GetAdditionalDatanodeOps",
    "CreateSymlinkOps",
    "GetLinkTargetOps",
    "FilesInGetListingOps",
    "SnapshotDiffReportOps",
    "ListSnapshottableDirOps",
)
#: The counters that are one namespace call each (``FilesCreated`` and the like count files, and
#: a rename is counted only as ``FilesRenamed``): their sum is ``hdfs namespace ops``.
NN_CALLS = (
    "CreateFileOps",
    "FilesRenamed",
    "DeleteFileOps",
    "GetListingOps",
    "FileInfoOps",
    "GetBlockLocations",
    "AddBlockOps",
    "FilesAppended",
)
#: ``DataNodeActivity`` counters of block traffic.
DN_OPS = ("BlocksWritten", "BlocksRead")

TIMEOUT_S = 5.0


def event_log_env(directory: Path) -> dict[str, str]:
    """Environment that makes every pyspark driver started under it write Spark's event log
    into ``directory`` (created): ``PYSPARK_SUBMIT_ARGS`` (pyspark's ``launch_gateway``)."""
    directory.mkdir(parents=True, exist_ok=True)
    args = " ".join(
        f"--conf {k}={v}"
        for k, v in (
            ("spark.eventLog.enabled", "true"),
            ("spark.eventLog.dir", f"file://{directory}"),
            ("spark.eventLog.compress", "false"),  # JSON lines, read as they are written
            ("spark.eventLog.rolling.enabled", "false"),  # one file per application
        )
    )
    return {"PYSPARK_SUBMIT_ARGS": f"{args} pyspark-shell"}


def hive_log() -> Path:
    """Hive's default log file (hive-log4j2.properties in hive-common: ``hive.log.dir`` =
    ``${sys:java.io.tmpdir}/${sys:user.name}``), where the metastore writes its audit lines."""
    return Path(tempfile.gettempdir()) / getpass.getuser() / "hive.log"


def _cpu(proc: psutil.Process, children: bool = False) -> float:
    """User + system seconds of ``proc``; with ``children``, plus its reaped children's."""
    t = proc.cpu_times()
    return t.user + t.system + ((t.children_user + t.children_system) if children else 0.0)


def _jmx(address: str, query: str) -> list[dict[str, Any]]:
    """The beans a Hadoop server's ``/jmx?qry=`` answers; none when it does not answer."""
    try:
        got = requests.get(f"http://{address}/jmx", params={"qry": query}, timeout=TIMEOUT_S)
        got.raise_for_status()
    except requests.RequestException:
        return []
    return list(got.json().get("beans", []))


@dataclass
class Snapshot:
    """Counters at one moment (monotonic ones only): see the module docstring."""

    at_ms: float
    cpu: Counter[str] = field(default_factory=Counter)
    hdfs: Counter[str] = field(default_factory=Counter)
    kafka: Counter[str] = field(default_factory=Counter)
    metastore_offset: int = 0
    audit: dict[Path, int] = field(default_factory=dict)


@dataclass
class Costs:
    """What happened between two snapshots; ``files`` is what it is divided by."""

    seconds: float
    cpu: Counter[str]
    hdfs: Counter[str]
    kafka: Counter[str]
    metastore: Counter[str]
    spark: Counter[str]
    zones: Counter[str] = field(default_factory=Counter)

    def per_file(self, files: int) -> dict[str, float]:
        """Every figure divided by ``files``: ``cpu <process>``, ``hdfs <cluster> <op>``,
        ``kafka <topic>``, ``metastore <call>``, ``spark <app> jobs|stages|tasks``, and the sums
        ``cpu total``, ``hdfs namespace ops``, ``kafka records``, ``metastore calls``."""
        n = max(files, 1)
        out: dict[str, float] = {}
        for group, counts in (
            ("cpu", self.cpu),
            ("hdfs", self.hdfs),
            ("kafka", self.kafka),
            ("metastore", self.metastore),
            ("spark", self.spark),
            ("zone", self.zones),
        ):
            for key, value in counts.items():
                if value:
                    out[f"{group} {key}"] = value / n
        out["cpu total"] = sum(self.cpu.values()) / n
        out["hdfs namespace ops"] = (
            sum(v for k, v in self.hdfs.items() if k.split()[-1] in NN_CALLS) / n
        )
        out["kafka records"] = sum(v for k, v in self.kafka.items() if k != "offset commits") / n
        out["metastore calls"] = sum(self.metastore.values()) / n
        return out


class CostMeter:
    """Reads the counters of the stack of ``settings``; ``services`` maps a service's name to
    its Python process id (added as they start); ``event_logs`` is the Spark event log directory
    (:func:`event_log_env`), or None to count no Spark jobs.

    CPU seconds are sampled every ``every_s`` by a thread (:meth:`close` stops it): each
    process's last reading is kept, so a process that exits between two snapshots (an executor
    of a finished application, a peer's JVM, whose parent never reaps it) still counts, less at
    most ``every_s`` of its last work."""

    def __init__(
        self,
        settings: KitSettings,
        services: dict[str, int],
        event_logs: Path | None = None,
        every_s: float = 0.5,
    ) -> None:
        from ferry_kit.stack.components import build_components
        from ferry_kit.stack.manager import Stack

        self.settings = settings
        self.services = services
        self.event_logs = event_logs
        self.stack = Stack(settings)
        self.comps = build_components(settings)
        self.me = psutil.Process()
        self.every_s = every_s
        #: (pid, start time) → (label, CPU seconds when last seen)
        self._last: dict[tuple[int, float], tuple[str, float]] = {}
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="costs", daemon=True)
        self._thread.start()
        try:
            nn_audit.enable(settings)
        except requests.RequestException as exc:  # the zone rows are then empty, said below
            print(f"costs: NameNode audit log not enabled ({exc})")

    # -- reading ---------------------------------------------------------------------------------
    def snapshot(self) -> Snapshot:
        snap = Snapshot(at_ms=time.time() * 1000)
        self._cpu(snap.cpu)
        self._hdfs(snap.hdfs)
        self._kafka(snap.kafka)
        log = hive_log()
        snap.metastore_offset = log.stat().st_size if log.exists() else 0
        snap.audit = nn_audit.offsets(self.settings)
        return snap

    def costs(self, before: Snapshot, after: Snapshot) -> Costs:
        return Costs(
            seconds=(after.at_ms - before.at_ms) / 1000,
            cpu=_minus(after.cpu, before.cpu),
            hdfs=_minus(after.hdfs, before.hdfs),
            kafka=_minus(after.kafka, before.kafka),
            metastore=self._metastore(before.metastore_offset, after.metastore_offset),
            spark=self._spark(before.at_ms, after.at_ms),
            zones=nn_audit.by_zone(self.settings, before.audit, after.audit),
        )

    def _apps(self) -> dict[str, str]:
        """``{application id: name}`` from the ALIVE master's ``/json``."""
        sp = self.settings.spark
        for port in sp.master_webui_ports:
            try:
                got = requests.get(f"http://{sp.host}:{port}/json/", timeout=TIMEOUT_S).json()
            except (requests.RequestException, ValueError):
                continue
            if got.get("status") == "ALIVE":
                apps = [*got.get("activeapps", []), *got.get("completedapps", [])]
                return {a["id"]: a["name"] for a in apps}
        return {}

    def _labelled(self) -> list[tuple[str, psutil.Process]]:
        """Every process to count now, each with its label (first label wins)."""
        out: list[tuple[str, psutil.Process]] = []
        apps: dict[str, str] | None = None
        for comp in self.comps:
            pid = self.stack.pid(comp)
            if pid is None:
                continue
            try:
                proc = psutil.Process(pid)
                kids = proc.children(recursive=True)
            except psutil.Error:
                continue
            out.append((f"stack {comp.name}", proc))
            for kid in kids:
                try:
                    cmd = kid.cmdline()
                except psutil.Error:
                    continue
                if "--app-id" in cmd:  # an executor of the worker
                    if apps is None:
                        apps = self._apps()
                    app = cmd[cmd.index("--app-id") + 1]
                    out.append((f"executors {apps.get(app, app)}", kid))
                else:
                    out.append((f"stack {comp.name}", kid))
        for name, pid in list(self.services.items()):
            try:
                proc = psutil.Process(pid)
                out.append((f"service {name}", proc))
                out += [(f"driver {name}", kid) for kid in proc.children(recursive=True)]
            except psutil.Error:
                continue
        with contextlib.suppress(psutil.Error):
            out += [("bench children (peers, tools)", k) for k in self.me.children(recursive=True)]
        return out

    def _sample(self) -> None:
        """Record each process's CPU seconds as last seen (a process that exits keeps them)."""
        seen: set[tuple[int, float]] = set()
        for label, proc in self._labelled():
            try:
                key = (proc.pid, proc.create_time())
                if key in seen:
                    continue
                seen.add(key)
                secs = _cpu(proc)
            except psutil.Error:
                continue
            with self._lock:
                self._last[key] = (label, secs)

    def _run(self) -> None:
        while not self._stop.wait(self.every_s):
            self._sample()

    def close(self) -> None:
        """Stop the sampling thread."""
        self._stop.set()
        self._thread.join(10)

    def _cpu(self, into: Counter[str]) -> None:
        self._sample()
        with self._lock:
            for label, secs in self._last.values():
                into[label] += secs

    def _hdfs(self, into: Counter[str]) -> None:
        for name in ("b", "a"):
            cs = self.settings.cluster(name)
            for nn in cs.namenode_list:
                for bean in _jmx(nn.http_address, "Hadoop:service=NameNode,name=NameNodeActivity"):
                    for op in NN_OPS:
                        into[f"{name} {op}"] += int(bean.get(op, 0))
                rpc = f"Hadoop:service=NameNode,name=RpcActivityForPort{nn.rpc_port}"
                for bean in _jmx(nn.http_address, rpc):
                    into[f"{name} RPC calls"] += int(bean.get("RpcProcessingTimeNumOps", 0))
            dn = f"{cs.host}:{cs.datanode_http_port}"
            for bean in _jmx(dn, "Hadoop:service=DataNode,name=DataNodeActivity*"):
                for op in DN_OPS:
                    into[f"{name} {op}"] += int(bean.get(op, 0))

    def _kafka(self, into: Counter[str]) -> None:
        from confluent_kafka import Consumer, TopicPartition

        from ferry.core.kafka.clients import client_config

        conf = client_config(self.settings.kafka) | {
            "group.id": "ferry-bench-costs",
            "enable.auto.commit": False,
        }
        consumer = Consumer(conf)
        try:
            meta = consumer.list_topics(timeout=TIMEOUT_S)
            for topic, tmeta in meta.topics.items():
                total = 0
                for p in tmeta.partitions:
                    _, high = consumer.get_watermark_offsets(
                        TopicPartition(topic, p), timeout=TIMEOUT_S, cached=False
                    )
                    total += max(high, 0)
                key = "offset commits" if topic == "__consumer_offsets" else topic
                into[key] += total
        finally:
            consumer.close()

    def _metastore(self, start: int, end: int) -> Counter[str]:
        """Audit lines of the metastore between two offsets of its log, by call name."""
        calls: Counter[str] = Counter()
        log = hive_log()
        if not log.exists() or end <= start:
            return calls
        with log.open("rb") as fh:
            fh.seek(start)
            text = fh.read(end - start).decode(errors="replace")
        for line in text.splitlines():
            if "HiveMetaStore.audit" not in line or "cmd=source:" not in line:
                continue
            cmd = line.split("cmd=source:", 1)[1].split(" ", 1)[-1]
            calls[cmd.split(":", 1)[0].strip()] += 1
        return calls

    def _spark(self, t0_ms: float, t1_ms: float) -> Counter[str]:
        """Jobs, stages and tasks started inside [t0, t1] per application name, from the event
        logs (a log still in progress is read as far as it is flushed)."""
        got: Counter[str] = Counter()
        if self.event_logs is None or not self.event_logs.exists():
            return got
        for log in self.event_logs.rglob("*"):
            if not log.is_file() or log.name.startswith((".", "appstatus")):
                continue
            if log.stat().st_mtime * 1000 < t0_ms:
                continue
            app = log.name
            with log.open(encoding="utf-8", errors="replace") as fh:
                for line in fh:
                    try:
                        ev = json.loads(line)
                    except ValueError:
                        continue  # the last line of a log still being written
                    kind = ev.get("Event")
                    if kind == "SparkListenerApplicationStart":
                        app = ev.get("App Name", app)
                    elif kind == "SparkListenerJobStart":
                        at = ev.get("Submission Time", 0)
                        got[f"{app} jobs"] += t0_ms <= at <= t1_ms
                    elif kind == "SparkListenerStageSubmitted":
                        at = ev.get("Stage Info", {}).get("Submission Time", 0)
                        got[f"{app} stages"] += t0_ms <= at <= t1_ms
                    elif kind == "SparkListenerTaskStart":
                        at = ev.get("Task Info", {}).get("Launch Time", 0)
                        got[f"{app} tasks"] += t0_ms <= at <= t1_ms
        return got


def _minus(after: Counter[str], before: Counter[str]) -> Counter[str]:
    """``after - before`` per key, keeping zero and negative differences out (a process that
    exited between the two reads loses its seconds: they are not counted, not subtracted)."""
    return Counter({k: v - before.get(k, 0) for k, v in after.items() if v - before.get(k, 0) > 0})


def cost_rows(label: str, costs: Costs, files: int) -> list[tuple[str, ...]]:
    """Table rows (part, work, seconds, rate, note) of ``costs`` per file: the sums first, then
    each process's CPU seconds over 1 % of the total, then round trips by kind."""
    per = costs.per_file(files)
    total = per["cpu total"]
    rows: list[tuple[str, ...]] = [
        (
            "cost",
            f"{label}: CPU s/file, all processes",
            f"{costs.seconds:.1f}",
            f"{total:.3f} CPU s/file",
            f"{total * files / max(costs.seconds, 1e-9):.2f} cores busy on average",
        )
    ]
    cpu = sorted(
        ((k[4:], v) for k, v in per.items() if k.startswith("cpu ") and k != "cpu total"),
        key=lambda kv: -kv[1],
    )
    for name, v in cpu:
        if v >= 0.01 * total:
            rows.append(("cost", f"  CPU {name}", "", f"{v:.3f} s/file", f"{v / total:.0%}"))
    for key in sorted(per):
        if key.startswith(
            ("hdfs ", "kafka ", "metastore ", "spark ", "zone ")
        ) and not key.startswith("cpu"):
            rows.append(("cost", f"  {key}", "", f"{per[key]:.2f}/file", ""))
    return rows


def environment_note() -> str:
    """Where the counts come from, for the table's footer."""
    spark = os.environ.get("PYSPARK_SUBMIT_ARGS", "off")
    return (
        "cost rows: per file; CPU from psutil; HDFS from /jmx; Kafka high watermarks; "
        f"metastore from {hive_log()}; Spark from event logs ({spark})"
    )
