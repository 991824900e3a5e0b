"""Classification of WebHDFS failures (``requests`` and HdfsCLI errors) into Ferry errors.

Every failure surfaces as a Ferry error whose message names the cluster, the operation, the path
and the peer address, so an operator can act on the log line alone:

* :class:`~ferry.errors.HdfsUnavailable` / :class:`~ferry.errors.HdfsTimeout`
  (transient): connection reset, NameNode refused, connect or read timeout, 5xx, any
  remote exception not listed as permanent below.
* :class:`~ferry.errors.AuthenticationFailed` (permanent): a Kerberos refusal, a principal
  the cluster's ``auth_to_local`` rules do not map (``No rules applied to …``), a TLS
  certificate that does not verify against ``clusters.<x>.ssl_ca_path`` (WebHDFS over HTTPS), or
  another TLS failure that repeats (HTTPS to a plain-HTTP server: ``WRONG_VERSION_NUMBER``).
* :class:`~ferry.errors.DataNodeUnreachable` (permanent, at once): the DataNode the NameNode
  redirected to cannot be connected to; every retry gets the same address
  (docs/field-cases.md, C06).
* :class:`~ferry.errors.HdfsPathNotFound`, :class:`~ferry.errors.HdfsPathExists`,
  :class:`~ferry.errors.HdfsRequestRejected` (permanent): remote exceptions that retrying
  cannot fix (:data:`_PERMANENT_REMOTE`, :data:`_PERMANENT_MESSAGES`); a path component longer
  than the NameNode allows is rejected with ``reason=`` :data:`NAME_TOO_LONG`.
* :class:`~ferry.errors.ClusterCondition` (transient, held for a long window): a condition
  of the cluster, not of the file (:func:`condition_of`, case C22): a space or name quota
  exceeded, a NameNode in safe mode, no DataNode with room for a block. The same text is found
  in a Spark job's Java exception (:func:`condition_in`), so transform and load hold on it too.
"""

from __future__ import annotations

import re
import ssl
from collections.abc import Callable, Iterator

import requests
from hdfs.util import HdfsError as _CliError
from urllib3.exceptions import NewConnectionError

from ferry.clusters.kerberos import gss_failure, is_transient_gss
from ferry.errors import (
    AuthenticationFailed,
    ClusterCondition,
    DataNodeUnreachable,
    FerryError,
    HdfsPathExists,
    HdfsPathNotFound,
    HdfsRequestRejected,
    HdfsTimeout,
    HdfsUnavailable,
)

#: ``FileFailed.reason`` of a path component longer than the NameNode allows.
NAME_TOO_LONG = "name_too_long"


def _name_too_long(message: str) -> FerryError:
    return HdfsRequestRejected(message, reason=NAME_TOO_LONG)


#: Remote exception class names (``RemoteException.exception``, without the Java package or
#: outer class) that retrying cannot fix, and the Ferry error each becomes.
_PERMANENT_REMOTE: dict[str, Callable[[str], FerryError]] = {
    "FileNotFoundException": HdfsPathNotFound,
    "FileAlreadyExistsException": HdfsPathExists,
    "AlreadyBeingCreatedException": HdfsPathExists,
    "AccessControlException": HdfsRequestRejected,
    "SecurityException": HdfsRequestRejected,
    "ParentNotDirectoryException": HdfsRequestRejected,
    "IllegalArgumentException": HdfsRequestRejected,
    "HadoopIllegalArgumentException": HdfsRequestRejected,
    "InvalidPathException": HdfsRequestRejected,
    "UnsupportedOperationException": HdfsRequestRejected,
    "PathIsNotEmptyDirectoryException": HdfsRequestRejected,
    "PathIsNotDirectoryException": HdfsRequestRejected,
    # FSLimitException$PathComponentTooLongException: same name, same answer on every attempt
    "PathComponentTooLongException": _name_too_long,
    "MaxDirectoryItemsExceededException": HdfsRequestRejected,
}


#: ``FileFailed.reason`` of the cluster conditions (:class:`~ferry.errors.ClusterCondition`).
QUOTA_EXCEEDED = "quota_exceeded"
SAFE_MODE = "safe_mode"
NO_SPACE = "no_space"

#: Text that names a condition of the cluster, in a NameNode's or DataNode's remote exception
#: (WebHDFS) or a Java stack trace (Spark, the metastore), and its reason code. Sources: Hadoop's
#: ``DSQuotaExceededException``/``NSQuotaExceededException``/``QuotaByStorageTypeExceededException``
#: (their class names and ``getMessage``), ``SafeModeException`` ("Name node is in safe mode",
#: also inside a ``RetriableException`` on an HA pair), ``BlockManager.chooseTarget4NewBlock``
#: ("could only be written to 0 of the 1 minReplication nodes"; Hadoop 2: "could only be
#: replicated to 0 nodes") and a DataNode volume's ``DiskOutOfSpaceException``.
_CONDITIONS: tuple[tuple[str, str], ...] = (
    ("QuotaExceededException", QUOTA_EXCEEDED),  # DS, NS and QuotaByStorageType alike
    ("SafeModeException", SAFE_MODE),
    ("Name node is in safe mode", SAFE_MODE),
    ("could only be written to 0 of the", NO_SPACE),
    ("could only be replicated to 0 nodes", NO_SPACE),
    ("DiskOutOfSpaceException", NO_SPACE),
    ("No space left on device", NO_SPACE),
)

#: The directory of a quota message: "The DiskSpace quota of /d is exceeded", "The NameSpace
#: quota (directories and files) of directory /d is exceeded", "Quota by storage type : SSD on
#: path : /d is exceeded".
_QUOTA_DIR = re.compile(
    r"(?:quota(?: \([^)]*\))? of (?:directory )?|on path : )(/\S*?)[\s.,:]+is exceeded"
)


def condition_of(text: str, *, cluster: str, what: str = "") -> ClusterCondition | None:
    """The :class:`~ferry.errors.ClusterCondition` that ``text`` (a remote exception's
    class name and message, or a Java stack trace) reports, or ``None``.

    Args:
        cluster: the cluster's name, recorded on the condition.
        what: the call or job, for the message.

    The condition's ``where`` is the directory a quota message names, else ``""`` (safe mode and
    a lack of space are the whole cluster's).
    """
    reason = next((code for marker, code in _CONDITIONS if marker in text), None)
    if reason is None:
        return None
    where = ""
    if reason == QUOTA_EXCEEDED and (m := _QUOTA_DIR.search(text)):
        where = m[1]
    line = next(
        (ln.strip() for ln in text.splitlines() if any(k in ln for k, _ in _CONDITIONS)), ""
    )
    detail = " ".join(line.split()).lstrip(": ")[:300]  # a Java trace's line starts with ": "
    return ClusterCondition(
        f"{what + ': ' if what else ''}{reason} on cluster {cluster!r}"
        f"{f' at {where}' if where else ''}: {detail}",
        reason=reason,
        cluster=cluster,
        where=where,
    )


def condition_in(exc: BaseException, *, cluster: str, what: str = "") -> ClusterCondition | None:
    """:func:`condition_of` the text of ``exc`` and of what it wraps (a py4j
    ``Py4JJavaError``'s text is the Java exception's stack trace, ``Caused by`` lines included),
    or ``None``. Never raises (a dead py4j gateway has no text: ``None`` then)."""
    return condition_of(_chain_text(exc), cluster=cluster, what=what)


def _chain_text(exc: BaseException) -> str:
    """``Type: message`` of ``exc`` and of each exception it wraps, one per line (a py4j error
    whose JVM is gone has no text and is left out)."""
    texts = []
    for e in _exception_chain(exc):
        try:
            texts.append(f"{type(e).__name__}: {e}")
        except Exception:  # noqa: BLE001 - str() of a py4j error asks the JVM, which may be gone
            continue
    return "\n".join(texts)


#: Text of a Java exception (its class or message, anywhere in the trace) that says a file
#: could not be READ or WRITTEN because of the cluster, not because of the file: a block no live
#: DataNode holds (``BlockMissingException``, "Could not obtain block"), a NameNode or DataNode
#: refusing, timing out or resetting, a standby NameNode. Found by the nemesis (seed
#: 693378033): A's DataNode killed while a load read a compaction file's footer made 94 good
#: files ``schema_mismatch``; in its second hour, while a replayed file's index record was read,
#: one loaded file ``input_expired``.
OUTAGE_MARKERS = (
    "BlockMissingException",
    "Could not obtain block",
    "No live nodes contain",
    "ConnectException",
    "Connection refused",
    "Connection reset",
    "SocketTimeoutException",
    "ConnectTimeoutException",
    "NoRouteToHostException",
    "StandbyException",
    "RetriableException",
)


def outage_marker(text: str) -> str | None:
    """The first :data:`OUTAGE_MARKERS` text found in ``text``, or ``None``."""
    return next((m for m in OUTAGE_MARKERS if m in text), None)


def outage_in(exc: BaseException, *, cluster: str, what: str = "") -> HdfsUnavailable | None:
    """An :class:`~ferry.errors.HdfsUnavailable` of ``cluster`` when the text of ``exc`` or of
    what it wraps (a py4j ``Py4JJavaError``: the Java stack trace) holds an
    :data:`OUTAGE_MARKERS` text, else ``None``: a Spark job or a driver read that failed because
    the cluster was out of reach says nothing about its files (a stage holds them:
    :func:`ferry.errors.outage_condition`). Never raises."""
    text = _chain_text(exc)
    marker = outage_marker(text)
    if marker is None:
        return None
    first = text.splitlines()[0][:300]
    err = HdfsUnavailable(f"{what}: cluster {cluster!r} out of reach ({marker}): {first}")
    err.cluster = cluster
    return err


def classify(
    what: str,
    exc: BaseException,
    *,
    netloc: str,
    is_datanode: bool,
    timeout: tuple[float, float],
    cluster: str = "",
) -> FerryError:
    """The Ferry error for ``exc``, raised by one WebHDFS call.

    Args:
        what: the call, for the message (``"WebHDFS OPEN '/p' on cluster 'a' via NameNode h:p"``).
        exc: a ``requests`` exception, an HdfsCLI ``HdfsError`` (a remote exception) or an
            ``OSError``.
        netloc: ``host:port`` the call went to.
        is_datanode: ``netloc`` is a DataNode (a redirect target), not the NameNode.
        timeout: the ``(connect, read)`` timeout of the call in seconds, for the message.
        cluster: the cluster's name, recorded on a :class:`~ferry.errors.ClusterCondition`
            and on an :class:`~ferry.errors.HdfsUnavailable` or
            :class:`~ferry.errors.DataNodeUnreachable` (a stage holds those as a condition of
            the cluster: :func:`ferry.errors.outage_condition`).
    """
    err = _classified(
        what, exc, netloc=netloc, is_datanode=is_datanode, timeout=timeout, cluster=cluster
    )
    if isinstance(err, (HdfsUnavailable, DataNodeUnreachable)) and cluster:
        err.cluster = cluster  # a stage holds it as a condition of this cluster
    return err


def _classified(
    what: str,
    exc: BaseException,
    *,
    netloc: str,
    is_datanode: bool,
    timeout: tuple[float, float],
    cluster: str,
) -> FerryError:
    if isinstance(exc, _CliError):
        return _remote_error(what, exc, cluster)
    gss = gss_failure(exc)
    if gss is not None:  # no ticket could be had: transient only when the KDC did not answer
        if is_transient_gss(gss):
            return HdfsUnavailable(f"{what}: Kerberos: {gss}")
        return AuthenticationFailed(f"{what}: Kerberos: {gss}")
    chain = list(_exception_chain(exc))
    untrusted = next((e for e in chain if isinstance(e, ssl.SSLCertVerificationError)), None)
    if untrusted is not None:  # the same certificate on every attempt: never transient
        return AuthenticationFailed(
            f"{what}: TLS: the certificate of {netloc} is not trusted "
            f"(clusters.<x>.ssl_ca_path): {untrusted.verify_message or untrusted}"
        )
    # the other TLS failures (a plain-HTTP server, no common protocol or cipher) repeat on every
    # attempt; an EOF in the handshake is a dropped connection, and transient
    tls = next(
        (
            e
            for e in chain
            if isinstance(e, ssl.SSLError)
            and not isinstance(e, (ssl.SSLEOFError, ssl.SSLZeroReturnError))
        ),
        None,
    )
    if tls is not None:
        return AuthenticationFailed(
            f"{what}: TLS with {netloc} failed: {tls.reason or tls} "
            "(clusters.<x>.http_policy must be the cluster's dfs.http.policy)"
        )
    connect_failed = any(
        isinstance(e, (requests.ConnectTimeout, NewConnectionError, ConnectionRefusedError))
        for e in chain
    )
    timed_out = any(isinstance(e, (requests.Timeout, TimeoutError)) for e in chain)
    cause = _short(exc)
    if connect_failed and is_datanode:
        return DataNodeUnreachable(
            f"{what}: datanode unreachable at {netloc} (connect timeout {timeout[0]}s): {cause}"
        )
    if timed_out:
        limit = "connect" if connect_failed else "read"
        seconds = timeout[0] if connect_failed else timeout[1]
        return HdfsTimeout(f"{what}: no answer within the {limit} timeout of {seconds}s: {cause}")
    if connect_failed:
        return HdfsUnavailable(f"{what}: connection refused: {cause}")
    if any(isinstance(e, ConnectionResetError) for e in chain):
        return HdfsUnavailable(f"{what}: connection reset: {cause}")
    return HdfsUnavailable(f"{what}: {cause}")


#: Messages of plain ``IOException``s that the NameNode raises for a request that can never
#: succeed as sent (FSDirRenameOp, FSDirMkdirOp, FSDirectory); other IOExceptions are transient.
_PERMANENT_MESSAGES = (
    "must both be directories",
    "is not a directory",
    "Parent path is not a directory",
    "Invalid path name",
    "is non empty",
    "is a directory",
)

#: Message of the NameNode's ``PathComponentTooLongException`` (FSDirectory
#: .verifyMaxComponentLength), also matched when it arrives wrapped in a plain IOException.
_NAME_TOO_LONG_MESSAGE = "maximum path component name limit"


#: Hadoop's ``KerberosName$NoMatchingRule`` as a NameNode's web server reports it: the
#: authenticated principal is not mapped to a user by the cluster's ``auth_to_local`` rules.
_NO_RULE = re.compile(r"No rules applied to ([^\s<]+)")


def _remote_error(what: str, exc: _CliError, cluster: str = "") -> FerryError:
    name = (exc.exception or "").rsplit(".", 1)[-1].rsplit("$", 1)[-1]
    message = " ".join(_text(exc).split())[:500]
    condition = condition_of(f"{name}: {message}", cluster=cluster, what=what)
    if condition is not None:  # before the permanent ones: a quota is the cluster's, not the file's
        return condition
    if name in _PERMANENT_REMOTE:
        return _PERMANENT_REMOTE[name](f"{what}: {name}: {message}")
    if _NAME_TOO_LONG_MESSAGE in message:
        return _name_too_long(f"{what}: {name or 'error'}: {message}")
    if any(m in message for m in _PERMANENT_MESSAGES):
        return HdfsRequestRejected(f"{what}: {name or 'error'}: {message}")
    unmapped = _NO_RULE.search(message)
    if unmapped:  # the same on every attempt: the NameNode answers HTTP 500 with an HTML page
        return AuthenticationFailed(
            f"{what}: the cluster maps {unmapped[1]} to no user (No rules applied: its "
            "hadoop.security.auth_to_local has no rule for this principal)"
        )
    if not name and "Authentication failure" in message:  # HTTP 401 (HdfsCLI's _to_error)
        return AuthenticationFailed(f"{what}: HTTP 401, the server refused Ferry's credentials")
    return HdfsUnavailable(f"{what}: {name or 'HTTP error'}: {message}")


def empty_answer(exc: BaseException) -> bool:
    """``exc`` is an HTTP error answer with no body and no remote exception (HdfsCLI's
    ``HdfsError`` of it), as a NameNode's web server gives a PUT or POST it failed."""
    return isinstance(exc, _CliError) and not exc.exception and not _text(exc).strip()


def _text(exc: _CliError) -> str:
    """HdfsCLI's message of ``exc``: a remote exception's text, or an HTTP answer's body."""
    message = exc.message
    return message.decode("utf-8", "replace") if isinstance(message, bytes) else str(message or "")


def _exception_chain(exc: BaseException) -> Iterator[BaseException]:
    """``exc`` and everything it wraps (args, ``reason``, ``__cause__``, ``__context__``)."""
    seen: set[int] = set()
    todo: list[BaseException] = [exc]
    while todo:
        e = todo.pop()
        if id(e) in seen:
            continue
        seen.add(id(e))
        yield e
        inner = [*e.args, getattr(e, "reason", None), e.__cause__, e.__context__]
        todo.extend(x for x in inner if isinstance(x, BaseException))


def _short(exc: BaseException) -> str:
    return " ".join(f"{type(exc).__name__}: {exc}".split())[:400]


__all__ = [
    "NAME_TOO_LONG",
    "NO_SPACE",
    "QUOTA_EXCEEDED",
    "SAFE_MODE",
    "classify",
    "condition_in",
    "condition_of",
    "empty_answer",
]
