"""Clusters described by their own client configuration: Hadoop's and Hive's ``*-site.xml``.

An edge node already holds each cluster's client configuration, usually one directory per cluster
(``core-site.xml``, ``hdfs-site.xml``; ``hive-site.xml`` for the metastore). NiFi ("Hadoop
Configuration Resources"), the Kafka Connect HDFS sink (``hadoop.conf.dir``) and DistCp take those
files; so does Ferry: ``clusters.<a|b>.hadoop_conf_dir`` and ``metastore.hive_conf_dir``
(:mod:`ferry.settings` reads them while it reads the settings). Explicit Ferry settings override
single keys; the configuration directory overrides Ferry's defaults.

Keys read (their meaning as in core-default.xml, hdfs-default.xml and Hive's HiveConf):

* ``fs.defaultFS``: ``hdfs://<nameservice>`` or ``hdfs://host[:port]`` (port 8020 when absent);
* an HA nameservice: ``dfs.nameservices``, ``dfs.ha.namenodes.<ns>``,
  ``dfs.namenode.rpc-address.<ns>.<id>``, ``dfs.namenode.http-address.<ns>.<id>`` (WebHDFS;
  port 9870 when absent);
* one NameNode: ``dfs.namenode.http-address`` (a wildcard host means ``fs.defaultFS``'s host);
* ``dfs.http.policy``: other than ``HTTP_ONLY``, WebHDFS is reached over HTTPS at
  ``dfs.namenode.https-address[.<ns>.<id>]`` (port 9871 when absent) instead;
* ``hadoop.rpc.protection`` (Ferry's ``kerberos.protection`` when Ferry sets none);
* ``hadoop.security.authentication`` (``kerberos`` turns Ferry's Kerberos client on) and the
  NameNode's principal ``dfs.namenode.kerberos.principal`` (its realm is Ferry's when Ferry sets
  none);
* every key of both files is handed to Spark (``spark.hadoop.<key>``), so client keys such as
  ``dfs.data.transfer.protection`` or ``dfs.client.*`` apply as the cluster's owners set them;
* ``hive.metastore.uris`` (the first URI), ``hive.metastore.warehouse.dir`` and every other key of
  hive-site.xml likewise.

Variables ``${name}`` in a value are replaced by another key's value (Hadoop's
``Configuration`` does the same); unknown ones are left as they are.
"""

from __future__ import annotations

import os
import re
import xml.etree.ElementTree as ET
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit
from xml.sax.saxutils import escape

from ferry.errors import ConfigError

#: Hadoop's default NameNode RPC, HTTP and HTTPS ports (hdfs-default.xml, Hadoop 3).
DEFAULT_RPC_PORT = 8020
DEFAULT_HTTP_PORT = 9870
DEFAULT_HTTPS_PORT = 9871

_VAR = re.compile(r"\$\{([^}]+)\}")


def read_site_xml(path: Path) -> dict[str, str]:
    """The ``<property>`` name → value pairs of one Hadoop ``*-site.xml`` (``${name}`` variables
    expanded from the same file, at most 20 levels deep).

    Raises:
        ConfigError: the file cannot be read or is not well-formed XML (path and parser message).
    """
    try:
        root = ET.parse(path).getroot()
    except (OSError, ET.ParseError) as exc:
        raise ConfigError(f"cannot read configuration file {path}: {exc}") from exc
    props: dict[str, str] = {}
    for prop in root.iter("property"):
        name, value = prop.findtext("name"), prop.findtext("value")
        if name:
            props[name.strip()] = (value or "").strip()

    def expand(value: str) -> str:
        for _ in range(20):
            new = _VAR.sub(lambda m: props.get(m.group(1), m.group(0)), value)
            if new == value:
                break
            value = new
        return value

    return {k: expand(v) for k, v in props.items()}


def xml_properties(props: dict[str, str]) -> str:
    """``<property>`` lines of a Hadoop ``*-site.xml`` for ``props`` (values XML-escaped)."""
    return "\n".join(
        f"  <property><name>{escape(k)}</name><value>{escape(v)}</value></property>"
        for k, v in props.items()
    )


def site_xml(props: dict[str, str]) -> str:
    """A whole ``*-site.xml`` document holding ``props``."""
    return (
        '<?xml version="1.0"?>\n<configuration>\n' + xml_properties(props) + "\n</configuration>\n"
    )


def write_site_xml(path: Path, props: dict[str, str]) -> Path:
    """Write :func:`site_xml` of ``props`` to ``path`` atomically: a temporary file named after
    this process, then ``os.replace``. A JVM starting meanwhile in another process reads the old
    file or the new one, never a truncated one (a secure CI run's Spark driver once read an empty
    ``core-site.xml`` that another service was rewriting: "Unexpected EOF in prolog")."""
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    tmp.write_text(site_xml(props), encoding="utf-8")
    os.replace(tmp, path)
    return path


def _read_dir(conf_dir: Path, names: tuple[str, ...]) -> dict[str, str]:
    if not conf_dir.is_dir():
        raise ConfigError(f"configuration directory {conf_dir} does not exist")
    props: dict[str, str] = {}
    found = [conf_dir / n for n in names if (conf_dir / n).is_file()]
    if not found:
        raise ConfigError(f"{conf_dir} holds none of {', '.join(names)}")
    for path in found:
        props |= read_site_xml(path)
    return props


def _host_port(text: str, default_port: int, *, key: str, conf_dir: Path) -> tuple[str, int]:
    host, _, port = text.strip().rpartition(":")
    if not host:
        host, port = text.strip(), str(default_port)
    if not port.isdigit():
        raise ConfigError(f"{conf_dir}: {key}={text!r} is not host:port")
    return host, int(port)


def cluster_from_conf_dir(conf_dir: Path) -> dict[str, Any]:
    """The fields of :class:`ferry.settings.hdfs.HdfsClusterSettings` that a cluster's client
    configuration (``core-site.xml`` and ``hdfs-site.xml`` in ``conf_dir``) gives: ``host``,
    ``namenode_rpc_port``, ``namenode_http_port`` (one NameNode) or ``nameservice`` and
    ``namenodes`` (HA), ``http_policy``, ``kerberos`` (``hadoop.security.authentication``),
    ``kerberos_realm`` (from the NameNode's principal, when Kerberos is on),
    ``kerberos_protection`` (``hadoop.rpc.protection``, when given) and ``hadoop_properties``
    (every key).

    Raises:
        ConfigError: the directory or its files are missing, unreadable, or lack
            ``fs.defaultFS`` or a NameNode address the nameservice names.
    """
    props = _read_dir(conf_dir, ("core-site.xml", "hdfs-site.xml"))
    default_fs = props.get("fs.defaultFS") or props.get("fs.default.name")
    if not default_fs:
        raise ConfigError(f"{conf_dir}: no fs.defaultFS in core-site.xml")
    url = urlsplit(default_fs)
    if url.scheme != "hdfs" or not url.hostname:
        raise ConfigError(f"{conf_dir}: fs.defaultFS={default_fs!r} is not an hdfs:// URI")
    out: dict[str, Any] = {"hadoop_properties": props}
    policy = props.get("dfs.http.policy", "HTTP_ONLY").strip().upper()
    if policy not in ("HTTP_ONLY", "HTTPS_ONLY", "HTTP_AND_HTTPS"):
        raise ConfigError(f"{conf_dir}: dfs.http.policy={policy!r} is not one of Hadoop's")
    out["http_policy"] = policy
    web, web_port = (
        ("http", DEFAULT_HTTP_PORT) if policy == "HTTP_ONLY" else ("https", DEFAULT_HTTPS_PORT)
    )
    nameservices = [s.strip() for s in props.get("dfs.nameservices", "").split(",") if s.strip()]
    ns = url.hostname if url.port is None and url.hostname in nameservices else None
    if ns is not None:
        ids = [i.strip() for i in props.get(f"dfs.ha.namenodes.{ns}", "").split(",") if i.strip()]
        if not ids:
            raise ConfigError(f"{conf_dir}: nameservice {ns!r} has no dfs.ha.namenodes.{ns}")
        namenodes = []
        for nn in ids:
            rpc_key, http_key = (
                f"dfs.namenode.rpc-address.{ns}.{nn}",
                f"dfs.namenode.{web}-address.{ns}.{nn}",
            )
            if rpc_key not in props:
                raise ConfigError(f"{conf_dir}: no {rpc_key} for NameNode {nn} of {ns}")
            host, rpc = _host_port(props[rpc_key], DEFAULT_RPC_PORT, key=rpc_key, conf_dir=conf_dir)
            http_host, http = _host_port(
                props.get(http_key, f"{host}:{web_port}"), web_port, key=http_key, conf_dir=conf_dir
            )
            namenodes.append({"id": nn, "host": http_host, "rpc_port": rpc, "http_port": http})
        out |= {"nameservice": ns, "namenodes": namenodes, "host": namenodes[0]["host"]}
    else:
        host, rpc = url.hostname, url.port or DEFAULT_RPC_PORT
        http_key = f"dfs.namenode.{web}-address"
        http_host, http = _host_port(
            props.get(http_key, f"{host}:{web_port}"), web_port, key=http_key, conf_dir=conf_dir
        )
        if http_host in ("0.0.0.0", "::", "[::]"):
            http_host = host
        if http_host != host:
            out["webhdfs_url_override"] = f"{web}://{http_host}:{http}"
        out |= {"host": host, "namenode_rpc_port": rpc, "namenode_http_port": http}
    kerberos = props.get("hadoop.security.authentication", "simple").lower() == "kerberos"
    out["kerberos"] = kerberos
    principal = props.get("dfs.namenode.kerberos.principal", "")
    if kerberos and "@" in principal:
        out["kerberos_realm"] = principal.rsplit("@", 1)[1]
    if kerberos and props.get("hadoop.rpc.protection", "").strip():
        out["kerberos_protection"] = props["hadoop.rpc.protection"].strip()
    return out


def metastore_from_conf_dir(conf_dir: Path) -> dict[str, Any]:
    """The fields of :class:`ferry.settings.hive.MetastoreSettings` that ``hive-site.xml`` in
    ``conf_dir`` gives: ``host`` and ``port`` of the first ``hive.metastore.uris`` URI,
    ``warehouse_path`` (the path of ``hive.metastore.warehouse.dir``) and ``hive_properties``
    (every key, handed to Spark).

    Raises:
        ConfigError: no hive-site.xml, or no ``thrift://host:port`` in ``hive.metastore.uris``.
    """
    props = _read_dir(conf_dir, ("hive-site.xml",))
    uris = [u.strip() for u in props.get("hive.metastore.uris", "").split(",") if u.strip()]
    first = urlsplit(uris[0]) if uris else None
    if first is None or first.scheme != "thrift" or not first.hostname or not first.port:
        raise ConfigError(
            f"{conf_dir}: hive.metastore.uris={props.get('hive.metastore.uris')!r} names no "
            f"thrift://host:port"
        )
    out: dict[str, Any] = {"host": first.hostname, "port": first.port, "hive_properties": props}
    warehouse = props.get("hive.metastore.warehouse.dir")
    if warehouse:
        out["warehouse_path"] = urlsplit(warehouse).path or warehouse
    return out
