"""Real health checks of the stack's servers. Each raises :class:`Unhealthy` with a short reason.

Every check is a real protocol call with a timeout, never "the port is open":
ZooKeeper ``ruok``; a Kafka produce + consume; WebHDFS ``GETFILESTATUS`` and the NameNode's
live-DataNode count from ``/jmx``; a Spark master's ``/json`` state (ALIVE or STANDBY) and the
worker's registration at the ALIVE master; a Hive metastore Thrift ``get_all_databases``.
"""

from __future__ import annotations

import logging
import socket
import uuid
from collections.abc import Callable
from typing import Any

import requests

TIMEOUT_S = 3.0


class Unhealthy(Exception):
    """A component answered wrongly or not at all; the message says what was seen."""


def zookeeper_ruok(host: str, port: int) -> str:
    """Send the four-letter word ``ruok``; the server answers ``imok``.

    Returns the ``srvr`` mode."""
    if _four_letter(host, port, b"ruok") != "imok":
        raise Unhealthy("ruok did not answer imok")
    for line in _four_letter(host, port, b"srvr").splitlines():
        if line.startswith("Mode:"):
            return line.split(":", 1)[1].strip()
    return "serving"


def _four_letter(host: str, port: int, word: bytes) -> str:
    try:
        with socket.create_connection((host, port), timeout=TIMEOUT_S) as sock:
            sock.sendall(word)
            chunks = []
            while chunk := sock.recv(4096):
                chunks.append(chunk)
    except OSError as exc:
        raise Unhealthy(f"{word.decode()} failed: {exc}") from exc
    return b"".join(chunks).decode("utf-8", "replace").strip()


def kafka_roundtrip(
    bootstrap: str, security: dict[str, Any] | None = None, topic: str = "ferry_kit.stack-health"
) -> str:
    """Produce one record to ``topic`` (created if missing) and consume it back; ``security``:
    librdkafka settings of the listener (:func:`ferry.core.kafka.clients.security_config`).

    Returns ``"produce+consume ok"``. Raises Unhealthy on any failure or after ~10 s.
    """
    from confluent_kafka import Consumer, KafkaException, Producer, TopicPartition
    from confluent_kafka.admin import AdminClient, NewTopic

    common: dict[str, Any] = {
        "bootstrap.servers": bootstrap,
        "socket.connection.setup.timeout.ms": 3000,
        **(security or {}),
    }
    try:
        admin = AdminClient(common)
        meta = admin.list_topics(timeout=TIMEOUT_S)
        if topic not in meta.topics:
            futures = admin.create_topics([NewTopic(topic, num_partitions=1, replication_factor=1)])
            for fut in futures.values():
                try:
                    fut.result(timeout=10)
                except KafkaException as exc:
                    if "TOPIC_ALREADY_EXISTS" not in str(exc):
                        raise
        token = uuid.uuid4().hex.encode()
        delivered: list[Any] = []
        producer = Producer({**common, "message.timeout.ms": 8000})
        producer.produce(
            topic, value=token, on_delivery=lambda err, msg: delivered.append((err, msg))
        )
        if producer.flush(10) != 0 or not delivered or delivered[0][0] is not None:
            raise Unhealthy(f"produce to {topic} not acknowledged: {delivered[:1]}")
        offset = delivered[0][1].offset()
        consumer = Consumer(
            {**common, "group.id": "ferry-stack-health", "enable.auto.commit": False}
        )
        try:
            consumer.assign([TopicPartition(topic, 0, offset)])
            msg = consumer.poll(10)
        finally:
            consumer.close()
    except KafkaException as exc:
        raise Unhealthy(f"kafka error: {exc}") from exc
    if msg is None or msg.error() or msg.value() != token:
        raise Unhealthy(f"consume from {topic}@{offset} did not return the produced record")
    return "produce+consume ok"


def _get_json(url: str, auth: Any = None, verify: str | bool = True) -> Any:
    try:
        resp = requests.get(url, timeout=(TIMEOUT_S, TIMEOUT_S), auth=auth, verify=verify)
        resp.raise_for_status()
        return resp.json()
    except (requests.RequestException, ValueError) as exc:
        raise Unhealthy(f"GET {url}: {exc}") from exc


def namenode(
    http_url: str, auth: Callable[[], Any] | None = None, verify: str | bool = True
) -> str:
    """WebHDFS ``GETFILESTATUS /`` answers a directory. Returns a short summary. ``auth`` makes
    the ``requests`` auth of a Kerberos cluster (SPNEGO as Ferry's principal; no ``user.name``);
    ``verify`` is the CA file an ``https://`` URL is verified against (``requests``' own)."""
    query = "op=GETFILESTATUS" if auth else "op=GETFILESTATUS&user.name=ferry"
    status = _get_json(f"{http_url}/webhdfs/v1/?{query}", auth() if auth else None, verify)
    if status.get("FileStatus", {}).get("type") != "DIRECTORY":
        raise Unhealthy(f"GETFILESTATUS / returned {status}")
    return "webhdfs ok"


def datanode(
    http_url: str, auth: Callable[[], Any] | None = None, verify: str | bool = True
) -> str:
    """The NameNode counts ≥1 live DataNode and has left safe mode (``auth``, ``verify``: as for
    :func:`namenode`; a Kerberos NameNode wants SPNEGO on ``/jmx`` too)."""
    a = auth() if auth else None
    jmx = _get_json(f"{http_url}/jmx?qry=Hadoop:service=NameNode,name=FSNamesystemState", a, verify)
    beans = jmx.get("beans") or [{}]
    live = int(beans[0].get("NumLiveDataNodes", 0))
    if live < 1:
        raise Unhealthy("NameNode reports 0 live DataNodes")
    info = _get_json(f"{http_url}/jmx?qry=Hadoop:service=NameNode,name=NameNodeInfo", a, verify)
    safemode = (info.get("beans") or [{}])[0].get("Safemode", "")
    if safemode:
        raise Unhealthy(f"NameNode in safe mode: {safemode}")
    return f"{live} live DataNode"


def spark_master_state(webui_url: str) -> dict[str, Any]:
    """The master's ``/json/`` document (``status`` is ALIVE, STANDBY, RECOVERING, …)."""
    return dict(_get_json(f"{webui_url}/json/"))


def spark_master(webui_url: str) -> str:
    """The master answers and is ALIVE or STANDBY. Returns the state."""
    state = spark_master_state(webui_url).get("status", "?")
    if state not in ("ALIVE", "STANDBY"):
        raise Unhealthy(f"master state {state}")
    return state


def spark_worker(master_webui_urls: list[str]) -> str:
    """Some master is ALIVE and has ≥1 ALIVE worker registered.

    Returns e.g. ``"registered, 2 cores"``."""
    errors = []
    for url in master_webui_urls:
        try:
            doc = spark_master_state(url)
        except Unhealthy as exc:
            errors.append(str(exc))
            continue
        if doc.get("status") != "ALIVE":
            continue
        workers = [w for w in doc.get("workers", []) if w.get("state") == "ALIVE"]
        if not workers:
            raise Unhealthy(f"ALIVE master {url} has no ALIVE worker")
        return f"registered at {url}, {sum(w.get('cores', 0) for w in workers)} cores"
    raise Unhealthy("no ALIVE master: " + ("; ".join(errors) or "all STANDBY"))


def tcp_open(host: str, port: int) -> str:
    """The port accepts a TCP connection (a SASL/Kerberos metastore: a plain Thrift call would be
    refused, and Ferry's stages make the authenticated calls)."""
    try:
        with socket.create_connection((host, port), timeout=TIMEOUT_S):
            return f"{host}:{port} accepts connections"
    except OSError as exc:
        raise Unhealthy(f"{host}:{port}: {exc}") from exc


def metastore(host: str, port: int) -> str:
    """Thrift ``ThriftHiveMetastore.get_all_databases()`` lists ``default``.

    Uses the ``thrift`` library's binary protocol directly (the call has no arguments and returns
    ``list<string>`` in field 0), so no generated Hive stubs are needed.
    """
    from thrift.protocol import TBinaryProtocol
    from thrift.Thrift import TApplicationException, TMessageType, TType
    from thrift.transport import TSocket, TTransport

    # TSocket logs every refused connect at ERROR; the caller reports the failure instead.
    logging.getLogger("thrift.transport.TSocket").setLevel(logging.CRITICAL)
    sock = TSocket.TSocket(host, port)
    sock.setTimeout(int(TIMEOUT_S * 1000 * 3))
    transport = TTransport.TBufferedTransport(sock)
    proto = TBinaryProtocol.TBinaryProtocol(transport)
    try:
        transport.open()
        proto.writeMessageBegin("get_all_databases", TMessageType.CALL, 1)
        proto.writeStructBegin("get_all_databases_args")
        proto.writeFieldStop()
        proto.writeStructEnd()
        proto.writeMessageEnd()
        transport.flush()
        _, mtype, _ = proto.readMessageBegin()
        if mtype == TMessageType.EXCEPTION:
            exc = TApplicationException()
            exc.read(proto)
            raise Unhealthy(f"get_all_databases raised {exc}")
        databases: list[str] = []
        proto.readStructBegin()
        while True:
            _, ftype, fid = proto.readFieldBegin()
            if ftype == TType.STOP:
                break
            if fid == 0 and ftype == TType.LIST:
                _, size = proto.readListBegin()
                databases = [proto.readString() for _ in range(size)]
                proto.readListEnd()
            else:
                proto.skip(ftype)
            proto.readFieldEnd()
        proto.readStructEnd()
        proto.readMessageEnd()
    except (TTransport.TTransportException, OSError, EOFError) as exc:
        raise Unhealthy(f"thrift call failed: {exc}") from exc
    finally:
        transport.close()
    if "default" not in databases:
        raise Unhealthy(f"get_all_databases returned {databases}")
    return f"{len(databases)} databases"
