"""NameNode operations by zone and kind, from the NameNodes' audit log (issue 45's cost table).

The NameNode's ``/jmx`` counts operations by kind only (``bench/costs.py``). Its audit log names
every namespace call with its command and path (``FSNamesystem.audit``: ``allowed=… ugi=… ip=…
cmd=getfileinfo src=/ferry/landing/… dst=… perm=… proto=rpc|webhdfs``; Hadoop's
``FSNamesystem.logAuditEvent``), so the calls of a run can be counted by zone — landing,
staging, rejects (cluster B), incoming, the warehouse (cluster A), each ``_tmp`` — which says
which hop makes them. The stack keeps the audit logger at WARN
(``ferry_kit/stack/conf/hadoop-log4j.properties``); :func:`enable` sets it to INFO on each
running NameNode through Hadoop's ``/logLevel`` servlet (``hadoop daemonlog -setlevel``'s HTTP
form), until the NameNode restarts.

Usage: ``before = offsets(settings)``, run the work, ``by_zone(settings, before,
offsets(settings))`` → ``Counter`` keyed ``"<cluster> <zone> <cmd> <proto>"``.
"""

from __future__ import annotations

import re
from collections import Counter
from pathlib import Path

import requests

from ferry_kit.settings import KitSettings

AUDIT_LOGGER = "org.apache.hadoop.hdfs.server.namenode.FSNamesystem.audit"
TIMEOUT_S = 10.0
_LINE = re.compile(r"cmd=(?P<cmd>\S+)\s+src=(?P<src>\S+).*?proto=(?P<proto>\w+)")


def _namenode_logs(settings: KitSettings) -> dict[str, list[Path]]:
    """Each cluster's NameNode log files (the stack redirects a server's stdout to one)."""
    from ferry_kit.stack.components import build_components

    logs: dict[str, list[Path]] = {"a": [], "b": []}
    for comp in build_components(settings):
        for cluster in logs:
            if comp.name.startswith(f"hdfs-{cluster}-namenode"):
                logs[cluster].append(Path(comp.launch.log_file))
    return logs


def enable(settings: KitSettings) -> list[str]:
    """Set the audit logger to INFO on every NameNode of both clusters; returns the addresses
    it was set on.

    Raises:
        requests.RequestException: a NameNode did not answer within ``TIMEOUT_S``.
    """
    done = []
    for name in ("b", "a"):
        for nn in settings.cluster(name).namenode_list:
            url = f"http://{nn.http_address}/logLevel"
            resp = requests.get(
                url, params={"log": AUDIT_LOGGER, "level": "INFO"}, timeout=TIMEOUT_S
            )
            resp.raise_for_status()
            done.append(nn.http_address)
    return done


def offsets(settings: KitSettings) -> dict[Path, int]:
    """The current size of every NameNode log, bytes (a missing log counts 0)."""
    return {
        log: (log.stat().st_size if log.exists() else 0)
        for logs in _namenode_logs(settings).values()
        for log in logs
    }


def zones(settings: KitSettings) -> list[tuple[str, str]]:
    """(path prefix, zone name), longest prefix first: Ferry's zones from ``settings.paths`` and
    the metastore's warehouse; a ``_tmp`` directory inside a zone is ``<zone>/_tmp``."""
    p = settings.paths
    pairs = [
        (p.landing_path, "landing"),
        (p.staging_path, "staging"),
        (p.rejects_path, "rejects"),
        (p.incoming_path, "incoming"),
        (settings.metastore.warehouse_path, "warehouse"),
    ]
    return sorted(pairs, key=lambda kv: -len(kv[0]))


def zone_of(path: str, prefixes: list[tuple[str, str]]) -> str:
    """The zone of an HDFS path (:func:`zones`), ``other`` outside every zone."""
    for prefix, name in prefixes:
        if path == prefix or path.startswith(prefix.rstrip("/") + "/"):
            rest = path[len(prefix) :]
            if "/_tmp/" in rest or rest.endswith("/_tmp"):
                return f"{name}/_tmp"
            if "/_ferry/" in rest:
                return f"{name}/_ferry"
            return name
    return "other"


def by_zone(settings: KitSettings, before: dict[Path, int], after: dict[Path, int]) -> Counter[str]:
    """Audit lines written between two :func:`offsets`, counted ``"<cluster> <zone> <cmd>
    <proto>"`` (e.g. ``"b landing getfileinfo webhdfs"``)."""
    prefixes = zones(settings)
    counts: Counter[str] = Counter()
    for cluster, logs in _namenode_logs(settings).items():
        for log in logs:
            start, end = before.get(log, 0), after.get(log, 0)
            if end <= start:
                continue
            with log.open("rb") as fh:
                fh.seek(start)
                text = fh.read(end - start).decode(errors="replace")
            for line in text.splitlines():
                if "FSNamesystem.audit" not in line or "allowed=true" not in line:
                    continue
                m = _LINE.search(line)
                if m:
                    zone = zone_of(m["src"], prefixes)
                    counts[f"{cluster} {zone} {m['cmd']} {m['proto']}"] += 1
    return counts


def table(counts: Counter[str], files: int) -> list[str]:
    """Lines ``cluster zone cmd proto  per-file`` sorted by cluster and count, then each zone's
    sum per file."""
    n = max(files, 1)
    lines = [f"{'cluster zone cmd proto':<52} {'per file':>9}"]
    for key, value in sorted(counts.items(), key=lambda kv: (kv[0].split()[0], -kv[1])):
        lines.append(f"{key:<52} {value / n:9.2f}")
    sums: Counter[str] = Counter()
    for key, value in counts.items():
        cluster, zone = key.split()[:2]
        sums[f"{cluster} {zone}"] += value
    lines.append("")
    for key, value in sorted(sums.items(), key=lambda kv: -kv[1]):
        lines.append(f"{key + ' (all calls)':<52} {value / n:9.2f}")
    lines.append(f"{'all zones':<52} {sum(counts.values()) / n:9.2f}")
    return lines
