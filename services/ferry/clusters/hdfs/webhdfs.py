"""WebHDFS implementation of :class:`~ferry.clusters.hdfs.port.HdfsPort`, over HdfsCLI.

:class:`WebHdfs` talks WebHDFS through HdfsCLI (``hdfs`` 2.7.3) and one ``requests.Session``;
build it with ``WebHdfs.for_cluster("a", settings)``. Rules every caller can rely on:

* Every HTTP call has a ``(connect, read)`` timeout from ``settings.retry``, so a stalled
  NameNode or DataNode costs at most that long per call (docs/field-cases.md, C08).
* WebHDFS answers ``CREATE``/``OPEN`` with a redirect to a DataNode; the DataNode's advertised
  ``host:port`` is rewritten through ``clusters.<x>.datanode_address_map`` before it is used, so a
  NAT gateway or a fault proxy (:mod:`ferry_kit.testing.faultproxy`) can sit in front of the
  DataNode
  (docs/field-cases.md, C06).
* WebHDFS over HTTPS (``clusters.<x>.http_policy``): NameNodes' and DataNodes' certificates are
  verified against ``clusters.<x>.ssl_ca_path``; one that is not trusted is
  :class:`~ferry.errors.AuthenticationFailed` (permanent), never retried.
* Failures surface as the Ferry errors of :func:`ferry.clusters.hdfs.errors.classify`, naming
  the cluster, the operation, the path and the address. The port never retries.
* HA (``clusters.<x>.namenodes``): ``webhdfs_url`` lists every NameNode, ``;``-separated, and
  HdfsCLI's request handler tries them in turn, starting from the one that answered last (it
  keeps that one first in its rotation): a ``StandbyException`` or ``RetriableException``
  (HTTP 403 with that ``RemoteException``), a refused or reset connection, a connect or read
  timeout moves to the next NameNode; the last one's error is raised when every NameNode failed.
  One call thus costs at most (number of NameNodes) × the ``(connect, read)`` timeout; whether to
  try again is the caller's retry policy (:mod:`ferry.core.retry`). Only the NameNode hop fails
  over: a failure on the DataNode a redirect points to is raised as it is (another NameNode would
  only answer standby). A switch of NameNode is logged at WARNING (``now via NameNode …``).
"""

from __future__ import annotations

import contextlib
import getpass
import logging
import os
import posixpath
from collections.abc import Callable, Iterable, Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Any
from urllib.parse import urlsplit, urlunsplit

import requests
from hdfs.client import Client as _CliClient
from hdfs.client import _to_error
from hdfs.util import HdfsError as _CliError
from requests.adapters import HTTPAdapter

from ferry.clusters.hdfs.errors import classify, empty_answer
from ferry.clusters.hdfs.paths import FileStatus, normalize_path
from ferry.clusters.hdfs.port import HdfsPort
from ferry.clusters.kerberos import spnego_auth
from ferry.errors import ConfigError, FerryError, HdfsRequestRejected, HdfsUnavailable

if TYPE_CHECKING:
    from ferry.settings import Settings
    from ferry.settings.hdfs import HdfsClusterSettings
    from ferry.settings.retry import RetrySettings

log = logging.getLogger(__name__)

#: Redirect hops followed for a GET (NameNode → DataNode is one).
_MAX_REDIRECTS = 3


def upload_timeout(timeout: tuple[float, float]) -> tuple[float, float]:
    """The ``(connect, read)`` timeout of a request that carries a body (a CREATE or APPEND's
    bytes to a DataNode): ``(max(connect, read), read)``, seconds.

    urllib3 sends a request's body while the socket still has the *connect* timeout (it sets
    the read timeout only before reading the answer), so a DataNode that takes longer than the
    connect timeout to start reading the bytes (its SASL handshake and first block pipeline on a
    loaded machine: B's DataNode logged a PUT 10 s after its NameNode's redirect in the secure
    tier of a CI run, 2026-12-07) failed the upload with "The write operation timed out" after
    5 s although the read timeout allows 30. The body's writes are thus bounded by the read
    timeout; a refused connect still fails at once (case C06)."""
    connect, read = timeout
    return (max(connect, read), read)


class _DataNodeHopError(Exception):
    """A failure after a redirect (on the DataNode), carried past HdfsCLI's NameNode failover
    (which retries the next NameNode on any ``requests`` connection error or timeout)."""

    def __init__(self, cause: requests.RequestException, url: str) -> None:
        super().__init__(str(cause))
        self.cause, self.url = cause, url


class _Client(_CliClient):
    """HdfsCLI's client with Ferry's rules: absolute NFC paths (no ``#LATEST`` markers), the
    ``(connect, read)`` timeout and the certificate check (``verify``: a CA file) on every
    request, ``user.name`` on NameNode requests only, and every redirect target rewritten through
    the DataNode address map (GET redirects are followed here, one hop at a time, instead of
    inside ``requests``)."""

    def __init__(
        self,
        url: str,
        *,
        user: str | None,
        timeout: tuple[float, float],
        address_map: dict[str, str],
        session: requests.Session,
        verify: str | bool = True,
    ) -> None:
        super().__init__(url, timeout=timeout, session=session)
        self._user = user
        self._verify = verify
        self.address_map = dict(address_map)
        self.namenode_netlocs = {urlsplit(u).netloc for u in self.urls}

    def resolve(self, hdfs_path: str) -> str:  # noqa: D102 - HdfsCLI hook
        return normalize_path(hdfs_path)

    def rewrite(self, url: str) -> str:
        """``url`` with its ``host:port`` replaced through the address map, and a ``Location``
        header that came through as Latin-1 re-read as UTF-8 (what ``requests`` does itself)."""
        # already text, or not UTF-8 bytes: use as given
        with contextlib.suppress(UnicodeEncodeError, UnicodeDecodeError):
            url = url.encode("latin1").decode("utf8")
        parts = urlsplit(url)
        mapped = self.address_map.get(parts.netloc)
        if mapped is None:
            return url
        return urlunsplit(parts._replace(netloc=mapped))

    def _request(self, method: str, url: str, **kwargs: Any) -> requests.Response:
        kwargs.pop("allow_redirects", None)
        params = kwargs.pop("params", None)
        if params is not None and self._user is not None:
            params = {**params, "user.name": self._user}
        url = self.rewrite(url)
        timeout = upload_timeout(self._timeout) if kwargs.get("data") is not None else self._timeout
        for hop in range(_MAX_REDIRECTS + 1):
            try:
                res = self._session.request(
                    method=method,
                    url=url,
                    params=params,
                    timeout=timeout,
                    # per request, and only to an https:// address: requests looks at a CA
                    # path (os.path.isdir) on every request given one, http:// too
                    verify=self._verify if url.startswith("https:") else True,
                    allow_redirects=False,
                    headers={"content-type": "application/octet-stream"},
                    **kwargs,
                )
            except requests.RequestException as exc:
                if hop == 0:
                    raise  # the NameNode's: HdfsCLI moves to the next NameNode
                raise _DataNodeHopError(exc, url) from exc
            if method != "GET" or not res.is_redirect:
                return res  # CREATE/APPEND redirects go back to HdfsCLI, which rewrites via us
            location = res.headers["location"]
            res.close()
            url, params = self.rewrite(location), None  # the Location carries its own query
        raise HdfsUnavailable(f"more than {_MAX_REDIRECTS} WebHDFS redirects, last to {url}")

    def failed_get(self, namenode: str) -> str | None:
        """The body of ``namenode``'s (``scheme://host:port``) error answer to GETHOMEDIRECTORY,
        the cheapest call that maps the caller to a user; None if it succeeds or goes unanswered."""
        try:
            res = self._session.get(
                f"{namenode}/webhdfs/v1/?op=GETHOMEDIRECTORY",
                timeout=self._timeout,
                verify=self._verify,
            )
        except requests.RequestException:
            return None
        return None if res.ok else res.text


#: Connections kept per NameNode/DataNode address: transfer runs ``transfer.parallel_files``
#: files at once, each copying up to 4 data files (requests keeps 10 by default and drops the
#: rest with a warning).
POOL_CONNECTIONS = 32


def _pooled_session() -> requests.Session:
    """A ``requests.Session`` keeping :data:`POOL_CONNECTIONS` connections per host, deaf to
    the environment (``trust_env`` off): no ``~/.netrc`` credentials, no ``HTTP(S)_PROXY``
    (a NameNode and its DataNodes are reached directly), no CA bundle from
    ``REQUESTS_CA_BUNDLE`` per request (:func:`ca_bundle` reads it once). With the environment
    on, requests looks for ``~/.netrc`` on every request and every redirect, and for the CA
    path: a fifth of the transfer service's CPU copying 300 small files (issue 45, sampled
    with py-spy)."""
    session = requests.Session()
    session.trust_env = False
    adapter = HTTPAdapter(pool_maxsize=POOL_CONNECTIONS)
    session.mount("http://", adapter)
    session.mount("https://", adapter)
    return session


def ca_bundle(ssl_ca_path: Path | None) -> str | bool:
    """What an ``https://`` WebHDFS request verifies the server against: the cluster's
    ``ssl_ca_path``, else the environment's ``REQUESTS_CA_BUNDLE`` or ``CURL_CA_BUNDLE`` (what
    ``requests`` itself would read, read here once), else ``True`` (certifi's bundle)."""
    if ssl_ca_path is not None:
        return str(ssl_ca_path)
    return os.environ.get("REQUESTS_CA_BUNDLE") or os.environ.get("CURL_CA_BUNDLE") or True


class WebHdfs(HdfsPort):
    """:class:`HdfsPort` over WebHDFS for one cluster.

    Args:
        cluster: the cluster's settings (``webhdfs_url``, ``datanode_address_map``; an
            ``https://`` URL verifies the servers' certificates against ``ssl_ca_path``).
        retry: ``connect_timeout_s`` and ``read_timeout_s`` are applied to every HTTP call.
        name: cluster name, for messages.
        user: ``user.name`` sent to the NameNode; default ``$HADOOP_USER_NAME`` or the login user.
            Not sent when ``auth`` is given (Kerberos: the NameNode takes the user from the
            ticket and refuses a ``user.name`` naming another).
        session: a ``requests.Session`` to use (default: a new one keeping
            :data:`POOL_CONNECTIONS` connections per host, owned and closed here).
        auth: a ``requests`` auth for every call (:func:`ferry.clusters.kerberos.spnego_auth`).

    Raises:
        ConfigError: ``ssl_ca_path`` is set and not a file (every call would fail the same way).
    """

    def __init__(
        self,
        cluster: HdfsClusterSettings,
        retry: RetrySettings,
        *,
        name: str = "?",
        user: str | None = None,
        session: requests.Session | None = None,
        auth: Any = None,
    ) -> None:
        if cluster.ssl_ca_path is not None and not cluster.ssl_ca_path.is_file():
            raise ConfigError(
                f"clusters.{name}.ssl_ca_path {str(cluster.ssl_ca_path)!r}: no such file (the "
                "PEM CA file of the cluster's NameNode and DataNode certificates)"
            )
        self.name = name
        self.cluster = cluster
        self.timeout = (retry.connect_timeout_s, retry.read_timeout_s)
        self._session = session or _pooled_session()
        if auth is not None:
            self._session.auth = auth
        self._client = _Client(
            cluster.webhdfs_url,
            user=None
            if auth is not None
            else user or os.environ.get("HADOOP_USER_NAME") or getpass.getuser(),
            timeout=self.timeout,
            address_map=cluster.datanode_address_map,
            session=self._session,
            verify=ca_bundle(cluster.ssl_ca_path),
        )
        self._advertised = {v: k for k, v in cluster.datanode_address_map.items()}
        self._active = self._client.urls[0]

    @classmethod
    def for_cluster(cls, name: str, settings: Settings) -> WebHdfs:
        """Port of cluster ``name`` built from ``settings``: ``settings.cluster(name)``, the
        timeouts of ``settings.retry`` and, with ``settings.kerberos.enabled``, SPNEGO.

        Raises:
            ConfigError: no cluster of that name; Kerberos on without requests-kerberos.
            AuthenticationFailed: Kerberos on, and the keytab is missing or open to others.
        """
        auth = spnego_auth(settings.kerberos) if settings.kerberos.enabled else None
        return cls(settings.cluster(name), settings.retry, name=name, auth=auth)

    def close(self) -> None:
        """Close the HTTP connections."""
        self._session.close()

    def __enter__(self) -> WebHdfs:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def __repr__(self) -> str:
        return f"WebHdfs(name={self.name!r}, url={self.cluster.webhdfs_url!r})"

    @property
    def active_url(self) -> str:
        """The NameNode URL the next call tries first: the one that answered last."""
        return str(self._client._urls[0])  # noqa: SLF001 - HdfsCLI's rotation (client.py)

    def _note_active(self) -> None:
        now = self.active_url
        if now != self._active:
            log.warning(
                "cluster %r: WebHDFS now via NameNode %s (was %s: standby or unreachable)",
                self.name,
                now,
                self._active,
            )
            self._active = now

    # -- primitives ------------------------------------------------------------------------

    def status(self, path: str) -> FileStatus:
        p = normalize_path(path)
        with self._errors("GETFILESTATUS", p):
            raw = self._client.status(p)
        return FileStatus.from_webhdfs(p, raw)

    def list(self, path: str) -> list[FileStatus]:
        p = normalize_path(path)
        with self._errors("LISTSTATUS", p):
            raw = self._client._list_status(p).json()["FileStatuses"]["FileStatus"]
        if len(raw) == 1 and raw[0].get("pathSuffix") == "" and raw[0].get("type") != "DIRECTORY":
            raise HdfsRequestRejected(f"cluster {self.name!r}: LISTSTATUS {p!r}: not a directory")
        entries = [FileStatus.from_webhdfs(posixpath.join(p, s["pathSuffix"]), s) for s in raw]
        return sorted(entries, key=lambda e: e.name)

    def mkdirs(self, path: str) -> None:
        p = normalize_path(path)
        with self._errors("MKDIRS", p):
            ok = self._client._mkdirs(p).json()["boolean"]
        if not ok:
            raise HdfsRequestRejected(f"cluster {self.name!r}: MKDIRS {p!r} returned false")

    def rename(self, src: str, dst: str, *, overwrite: bool = False) -> None:
        s, d = normalize_path(src), normalize_path(dst)
        with self._errors("RENAME", s, detail=f"to {d!r}"):
            self._client._rename(
                s, destination=d, renameoptions="OVERWRITE" if overwrite else "NONE"
            )

    def delete(self, path: str, *, recursive: bool = False) -> bool:
        p = normalize_path(path)
        if p == "/":
            raise HdfsRequestRejected(f"cluster {self.name!r}: refusing to delete '/'")
        with self._errors("DELETE", p):
            return bool(self._client.delete(p, recursive=recursive))

    def _open(self, p: str, chunk_size: int, offset: int) -> Iterator[bytes]:
        with self._errors("OPEN", p):
            res = self._client._open(p, offset=offset or None)
        try:
            with self._errors("OPEN", p, url=res.url):
                yield from res.iter_content(chunk_size)
        finally:
            res.close()

    def _create(self, path: str, chunks: Iterable[bytes], on_started: Callable[[], None]) -> None:
        # HdfsCLI's write() in two visible steps: the NameNode only picks a DataNode (nothing is
        # created yet); the DataNode creates the file and streams the body into it.
        p = normalize_path(path)
        with self._errors("CREATE", p):
            res = self._client._create(p, overwrite=False)
            location = res.headers["location"]
        on_started()
        with self._errors("CREATE", p, url=self._client.rewrite(location)):
            res = self._client._request(method="PUT", url=location, data=iter(chunks))
            if not res:
                raise _to_error(res)

    def checksum(self, path: str) -> dict[str, Any]:
        """WebHDFS ``GETFILECHECKSUM`` of ``path``: ``{"algorithm", "bytes", "length"}``.

        The value (MD5 of MD5s of CRC32C chunk sums) depends on block size and bytes per
        checksum, so it only compares files written with the same settings; Ferry's own check
        is :meth:`sha256`.
        """
        p = normalize_path(path)
        with self._errors("GETFILECHECKSUM", p):
            return dict(self._client.checksum(p))

    def content_summary(self, path: str) -> tuple[int, int, int] | None:
        """WebHDFS ``GETCONTENTSUMMARY`` of directory ``path``: ``(bytes, files, directories)``
        under it (bytes of data, before replication), or ``None`` when nothing is at ``path``.
        One NameNode call, however large the tree (the NameNode keeps the counts)."""
        p = normalize_path(path)
        with self._errors("GETCONTENTSUMMARY", p):
            raw = self._client.content(p, strict=False)
        if raw is None:
            return None
        return int(raw["length"]), int(raw["fileCount"]), int(raw["directoryCount"])

    # -- errors ----------------------------------------------------------------------------

    @contextlib.contextmanager
    def _errors(
        self, op: str, path: str, *, url: str | None = None, detail: str = ""
    ) -> Iterator[None]:
        try:
            yield
        except FerryError:
            raise
        except _DataNodeHopError as exc:
            raise self._classify(op, path, exc.cause, url=exc.url, detail=detail) from exc.cause
        except (requests.RequestException, _CliError, OSError) as exc:
            raise self._classify(op, path, exc, url=url, detail=detail) from exc
        finally:
            self._note_active()

    def _address(self, netloc: str) -> tuple[str, bool]:
        """(description, is_datanode) of the peer at ``netloc``."""
        if netloc in self._client.namenode_netlocs:
            return f"NameNode {netloc}", False
        advertised = self._advertised.get(netloc)
        if advertised:
            return f"DataNode {advertised} (mapped to {netloc})", True
        return f"DataNode {netloc}", True

    def _classify(
        self, op: str, path: str, exc: BaseException, *, url: str | None, detail: str
    ) -> FerryError:
        request = getattr(exc, "request", None)
        target = getattr(request, "url", None) or url or self.active_url
        netloc = urlsplit(target).netloc
        peer, is_datanode = self._address(netloc)
        detail = f" {detail}" if detail else ""
        what = f"WebHDFS {op} {path!r}{detail} on cluster {self.name!r} via {peer}"
        err = classify(
            what,
            exc,
            netloc=netloc,
            is_datanode=is_datanode,
            timeout=self.timeout,
            cluster=self.name,
        )
        if empty_answer(exc) and not is_datanode and self._session.auth is not None:
            # An empty HTTP 500 is the NameNode's answer to a PUT or POST whose principal its
            # auth_to_local does not map; a GET gets the reason, which makes it permanent.
            reason = self._client.failed_get(f"{urlsplit(target).scheme}://{netloc}")
            why = classify(
                what, _CliError(reason or ""), netloc=netloc, is_datanode=False, timeout=(0, 0)
            )
            err = err if isinstance(why, HdfsUnavailable) else why
        return err


__all__ = ["WebHdfs"]
