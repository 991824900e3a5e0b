"""A tiny WebHDFS server pair (NameNode + DataNode) in memory, for unit tests of the real
:class:`ferry.clusters.hdfs.WebHdfs` client without Java.

It speaks the part of the WebHDFS REST API Ferry uses, with the real protocol's shape: ``CREATE``
and ``OPEN`` on the NameNode answer ``307`` with a ``Location`` on the DataNode's *advertised*
address (which may be unreachable, as in case C06); the DataNode creates the file as soon as the
write starts (so a failure mid-write leaves a partial file, as in case C02); errors are
``RemoteException`` JSON documents. Paths are percent-decoded as UTF-8 and stored as given, so
tests can check names byte for byte (case C07).

Not a fidelity reference: for that, run the integration tier against the real clusters.
"""

from __future__ import annotations

import http.server
import json
import posixpath
import threading
import time
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import parse_qs, quote, unquote, urlsplit

PREFIX = "/webhdfs/v1"


@dataclass
class StubState:
    """Files and directories shared by both servers, plus what tests inject and observe."""

    files: dict[str, bytes] = field(default_factory=dict)
    dirs: set[str] = field(default_factory=lambda: {"/"})
    #: every request: (server, method, op, decoded path)
    requests: list[tuple[str, str, str, str]] = field(default_factory=list)
    #: DataNode ``host:port`` put in redirects; default: the stub DataNode's real address
    advertised_datanode: str | None = None
    #: DataNode write fails with an IOException RemoteException after this many bytes
    dn_fail_after_bytes: int | None = None
    #: paths whose CREATE the NameNode redirected and no DELETE has cancelled since. A real
    #: DataNode creates the file as soon as it reads the request's headers, before any body byte;
    #: the stub's handler thread may start later, so a DELETE that arrives first (a client reset
    #: mid-body cleaning up) must not be followed by the file appearing.
    creating: set[str] = field(default_factory=set)
    #: NameNode addresses (``"127.0.0.1:port"``) answering every request with a StandbyException,
    #: as an HA standby does (HTTP 403, ``RemoteException`` ``StandbyException``)
    standby: set[str] = field(default_factory=set)
    lock: threading.RLock = field(default_factory=threading.RLock)


def _remote(
    handler: http.server.BaseHTTPRequestHandler, status: int, exception: str, message: str
) -> None:
    body = json.dumps(
        {
            "RemoteException": {
                "exception": exception,
                "javaClassName": f"org.apache.hadoop.{exception}",
                "message": message,
            }
        }
    ).encode()
    handler.send_response(status)
    handler.send_header("Content-Type", "application/json")
    handler.send_header("Content-Length", str(len(body)))
    handler.end_headers()
    handler.wfile.write(body)


def _json(handler: http.server.BaseHTTPRequestHandler, doc: Any, status: int = 200) -> None:
    body = json.dumps(doc).encode()
    handler.send_response(status)
    handler.send_header("Content-Type", "application/json")
    handler.send_header("Content-Length", str(len(body)))
    handler.end_headers()
    handler.wfile.write(body)


class _Base(http.server.BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    server_name_tag = "?"
    state: StubState

    def log_message(self, *args: object) -> None:
        pass

    def _parse(self) -> tuple[str, str, dict[str, str]]:
        parts = urlsplit(self.path)
        raw = parts.path[len(PREFIX) :] if parts.path.startswith(PREFIX) else parts.path
        path = unquote(raw, encoding="utf-8", errors="strict")
        query = {k: v[-1] for k, v in parse_qs(parts.query, keep_blank_values=True).items()}
        op = query.get("op", "").upper()
        with self.state.lock:
            self.state.requests.append((self.server_name_tag, self.command, op, path))
        return op, path, query

    def _status_doc(self, path: str) -> dict[str, Any]:
        is_file = path in self.state.files
        return {
            "pathSuffix": "",
            "type": "FILE" if is_file else "DIRECTORY",
            "length": len(self.state.files[path]) if is_file else 0,
            "modificationTime": int(time.time() * 1000),
        }

    def _body_chunks(self):
        """The request body as it arrives (Content-Length or chunked)."""
        if self.headers.get("Transfer-Encoding", "").lower() == "chunked":
            while True:
                size = int(self.rfile.readline().split(b";")[0].strip() or b"0", 16)
                if size == 0:
                    while self.rfile.readline() not in (b"\r\n", b"\n", b""):
                        pass
                    return
                data = self.rfile.read(size)
                self.rfile.readline()
                yield data
        else:
            left = int(self.headers.get("Content-Length", 0))
            while left > 0:
                data = self.rfile.read(min(left, 65536))
                if not data:
                    return
                left -= len(data)
                yield data


class _NameNode(_Base):
    server_name_tag = "namenode"
    datanode_address = ""

    def _redirect(self, op: str, path: str, extra: str) -> None:
        dn = self.state.advertised_datanode or self.datanode_address
        location = (
            f"http://{dn}{PREFIX}{quote(path, safe='/')}?op={op}&namenoderpcaddress=stub{extra}"
        )
        self.send_response(307)
        self.send_header("Location", location)
        self.send_header("Content-Length", "0")
        self.end_headers()

    def _standby(self) -> bool:
        """Answer as an HA standby NameNode does, if this one is listed in ``state.standby``."""
        with self.state.lock:
            address = f"127.0.0.1:{self.server.server_address[1]}"  # type: ignore[index]
            standby = address in self.state.standby
        if standby:
            _remote(
                self,
                403,
                "StandbyException",
                f"Operation category {self.command} is not supported in state standby",
            )
        return standby

    def do_GET(self) -> None:  # noqa: N802
        op, path, query = self._parse()
        if self._standby():
            return None
        s = self.state
        with s.lock:
            exists = path in s.files or path in s.dirs
            if op == "GETFILESTATUS":
                if not exists:
                    return _remote(
                        self, 404, "FileNotFoundException", f"File does not exist: {path}"
                    )
                return _json(self, {"FileStatus": self._status_doc(path)})
            if op == "LISTSTATUS":
                if not exists:
                    return _remote(
                        self, 404, "FileNotFoundException", f"File {path} does not exist."
                    )
                if path in s.files:
                    return _json(self, {"FileStatuses": {"FileStatus": [self._status_doc(path)]}})
                prefix = path.rstrip("/") + "/"
                names = sorted(
                    {
                        p[len(prefix) :].split("/")[0]
                        for p in (*s.files, *s.dirs)
                        if p.startswith(prefix) and p != prefix
                    }
                )
                entries = [{**self._status_doc(prefix + n), "pathSuffix": n} for n in names]
                return _json(self, {"FileStatuses": {"FileStatus": entries}})
            if op == "OPEN" and path not in s.files:
                return _remote(self, 404, "FileNotFoundException", f"File does not exist: {path}")
        if op == "OPEN":
            return self._redirect("OPEN", path, f"&offset={query.get('offset', '0')}")
        return _remote(
            self, 400, "IllegalArgumentException", f'Invalid value for webhdfs parameter "op": {op}'
        )

    def do_PUT(self) -> None:  # noqa: N802
        op, path, query = self._parse()
        if self._standby():
            return None
        s = self.state
        if op == "CREATE":
            with s.lock:
                s.creating.add(path)
            return self._redirect("CREATE", path, f"&overwrite={query.get('overwrite', 'false')}")
        with s.lock:
            if op == "MKDIRS":
                cur = "/"
                for part in [p for p in path.split("/") if p]:
                    cur = posixpath.join(cur, part)
                    if cur in s.files:
                        return _remote(self, 403, "ParentNotDirectoryException", f"{cur} is a file")
                    s.dirs.add(cur)
                return _json(self, {"boolean": True})
            if op == "RENAME":
                dst = query.get("destination", "")
                options = query.get("renameoptions", "")
                if path not in s.files:
                    return _remote(
                        self, 404, "FileNotFoundException", f"rename source {path} is not found."
                    )
                if posixpath.dirname(dst) not in s.dirs:
                    return _remote(
                        self,
                        404,
                        "FileNotFoundException",
                        f"rename destination parent {dst} not found.",
                    )
                exists = dst in s.files or dst in s.dirs
                if exists and ("OVERWRITE" not in options or dst in s.dirs):
                    return _remote(
                        self,
                        403,
                        "FileAlreadyExistsException",
                        f"rename destination {dst} already exists",
                    )
                s.files[dst] = s.files.pop(path)
                self.send_response(200)
                self.send_header("Content-Type", "application/octet-stream")
                self.send_header("Content-Length", "0")
                self.end_headers()
                return None
        return _remote(
            self, 400, "IllegalArgumentException", f'Invalid value for webhdfs parameter "op": {op}'
        )

    def do_DELETE(self) -> None:  # noqa: N802
        op, path, query = self._parse()
        if self._standby():
            return None
        s = self.state
        with s.lock:
            s.creating.discard(path)
            if path in s.files:
                del s.files[path]
                return _json(self, {"boolean": True})
            if path in s.dirs:
                prefix = path.rstrip("/") + "/"
                children = [p for p in (*s.files, *s.dirs) if p.startswith(prefix)]
                if children and query.get("recursive", "").lower() != "true":
                    return _remote(
                        self, 403, "PathIsNotEmptyDirectoryException", f"{path} is non empty"
                    )
                for p in children:
                    s.files.pop(p, None)
                    s.dirs.discard(p)
                s.dirs.discard(path)
                return _json(self, {"boolean": True})
        return _json(self, {"boolean": False})


class _DataNode(_Base):
    server_name_tag = "datanode"

    def do_PUT(self) -> None:  # noqa: N802
        op, path, query = self._parse()
        s = self.state
        if op != "CREATE":
            return _remote(self, 400, "IllegalArgumentException", f"op {op}")
        with s.lock:  # one step, so a DELETE cannot fall between the check and the create
            cancelled = path not in s.creating
            s.creating.discard(path)
            taken = (path in s.files or path in s.dirs) and query.get(
                "overwrite", ""
            ).lower() != "true"
            if not cancelled and not taken:
                cur = "/"
                for part in [p for p in posixpath.dirname(path).split("/") if p]:
                    cur = posixpath.join(cur, part)
                    s.dirs.add(cur)
                s.files[path] = b""
        if cancelled or taken:
            for _ in self._body_chunks():
                pass
        if cancelled:  # deleted after the NameNode's redirect: HDFS's writer would lose its lease
            return _remote(self, 404, "FileNotFoundException", f"File does not exist: {path}")
        if taken:
            return _remote(self, 403, "FileAlreadyExistsException", f"{path} already exists")
        written = bytearray()
        failed = False
        for chunk in self._body_chunks():
            if failed:
                continue  # drain the body, as the DataNode does before answering
            written += chunk
            limit = s.dn_fail_after_bytes
            with s.lock:
                if limit is not None and len(written) >= limit:
                    s.files[path] = bytes(written[:limit])
                    failed = True
                elif path in s.files:
                    s.files[path] = bytes(written)
        if failed:
            return _remote(
                self,
                403,
                "IOException",
                f"File {path} could only be written to 0 of the 1 minReplication nodes.",
            )
        self.send_response(201)
        self.send_header("Location", f"hdfs://stub{quote(path, safe='/')}")
        self.send_header("Content-Length", "0")
        self.end_headers()
        return None

    def do_GET(self) -> None:  # noqa: N802
        op, path, query = self._parse()
        with self.state.lock:
            data = self.state.files.get(path)
        if data is None:
            return _remote(self, 404, "FileNotFoundException", f"File does not exist: {path}")
        data = data[int(query.get("offset", "0") or 0) :]
        self.send_response(200)
        self.send_header("Content-Type", "application/octet-stream")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)
        return None


class _Server(http.server.ThreadingHTTPServer):
    daemon_threads = True

    def handle_error(self, request: object, client_address: object) -> None:
        """A client reset mid-request (fault tests do that on purpose): not worth a traceback."""


class WebHdfsStub:
    """NameNode and DataNode stubs on ``127.0.0.1`` ephemeral ports; a context manager.

    Attributes: :attr:`state` (files, requests, injected faults), :attr:`namenode_address` and
    :attr:`datanode_address` (``"127.0.0.1:port"``), :attr:`url` (the WebHDFS base URL).
    """

    def __init__(self) -> None:
        self.state = StubState()
        self._servers: list[_Server] = []
        self._threads: list[threading.Thread] = []

    def start(self) -> WebHdfsStub:
        dn_handler = type("DN", (_DataNode,), {"state": self.state})
        dn = _Server(("127.0.0.1", 0), dn_handler)
        self.datanode_address = f"127.0.0.1:{dn.server_address[1]}"
        nn_handler = type(
            "NN", (_NameNode,), {"state": self.state, "datanode_address": self.datanode_address}
        )
        self._nn_handler = nn_handler
        self.namenode_address = self.add_namenode()
        self._serve(dn)
        return self

    def add_namenode(self) -> str:
        """Start one more NameNode on the same files (an HA pair); returns its address."""
        nn = _Server(("127.0.0.1", 0), self._nn_handler)
        self._serve(nn)
        return f"127.0.0.1:{nn.server_address[1]}"

    def _serve(self, server: _Server) -> None:
        server.daemon_threads = True
        t = threading.Thread(target=server.serve_forever, args=(0.05,), daemon=True)
        t.start()
        self._servers.append(server)
        self._threads.append(t)

    @property
    def url(self) -> str:
        return f"http://{self.namenode_address}"

    def stop(self) -> None:
        for server in self._servers:
            server.shutdown()
            server.server_close()
        self._servers.clear()

    def __enter__(self) -> WebHdfsStub:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()
