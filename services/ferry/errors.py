"""Ferry's exception tree.

Every error is one of three things: retried by policy
(:class:`TransientError`), sent to quarantine with a reason code (:class:`PermanentError`), or
raised to stop the process (:class:`ConfigError`). Messages name the file,
path, topic/partition/offset involved.
"""

from __future__ import annotations

from typing import TypeVar

E = TypeVar("E", bound=BaseException)


class FerryError(Exception):
    """Base of every Ferry error."""

    #: Stable reason code recorded in ``FileFailed.reason`` when a file is quarantined.
    reason: str = "error"


class ConfigError(FerryError):
    """Settings or a dataset definition are invalid; the process cannot start."""

    reason = "config"


class AuthenticationFailed(ConfigError):
    """A server refused Ferry's credentials, or none could be had (no ticket, a keytab without
    the principal, an unknown principal): the same on every file, so the process stops with this
    one-line message instead of quarantining every file (docs/security.md)."""

    reason = "authentication"


class TransientError(FerryError):
    """Worth retrying: a timeout, a reset connection, a server briefly unavailable."""

    reason = "transient"


class SparkJobFailed(TransientError):
    """A Spark job over one file alone failed (e.g. the CSV reader gave up on a malformed row):
    the batching stages isolate such a file by splitting their batch, so only it is retried, and
    quarantined with this reason after ``settings.retry``'s ceiling."""

    reason = "spark_job_failed"


class SparkUnavailable(TransientError):
    """No Spark session could be built (the master cannot be reached, the application was
    refused), or the session's context died under a job (the master pair or the worker lost it:
    "Cannot call methods on a stopped SparkContext"): says nothing about the files, so every
    stage holds it as a condition of the cluster (:func:`outage_condition`) and builds a new
    session for its next attempt.

    Attributes:
        cluster: the cluster whose Spark it is (``"a"``, ``"b"``), ``""`` if unknown.
    """

    reason = "spark_unavailable"

    def __init__(self, message: str, *, cluster: str = "") -> None:
        super().__init__(message)
        self.cluster = cluster


class DatasetNotReady(FerryError):
    """The file's dataset has no valid definition now (a definition file is invalid, or
    failed to compile): the file is neither retried nor quarantined, it *waits* in the
    ``<prefix>.waiting`` topic until its definition is fixed (:mod:`ferry.core.runtime.waiting`)."""

    reason = "dataset_not_ready"

    def __init__(self, message: str, *, dataset: str) -> None:
        super().__init__(message)
        self.dataset = dataset


class PermanentError(FerryError):
    """Retrying cannot help: the file goes to quarantine with :attr:`reason`."""

    reason = "permanent"

    def __init__(self, message: str, *, reason: str | None = None) -> None:
        super().__init__(message)
        if reason is not None:
            self.reason = reason


class SerializationError(PermanentError):
    """A record cannot be encoded or decoded (not Avro, unknown fingerprint, bad payload)."""

    reason = "undecodable"


class InputExpired(PermanentError):
    """A stage's input copy is gone: removed by its zone's retention (the ``gc`` service) or by
    hand, so replaying or releasing an old event cannot work. Quarantined at once (never
    retried) with reason ``input_expired``; the message names the zone, the path and the way back:
    re-drop the NAS file, from ``<nas>/.ferry/archive/<dataset>/`` while the archive keeps it
    (docs/operations.md, "Retention")."""

    reason = "input_expired"

    def __init__(
        self, zone: str, uri: str, *, file_id: str, source_path: str, dataset: str, why: str = ""
    ) -> None:
        name = source_path.rsplit("/", 1)[-1]
        super().__init__(
            f"input_expired: the {zone} copy {uri} of {source_path} ({file_id}) is gone"
            f"{f' ({why})' if why else ''}: removed by retention.{zone} (or by hand). To carry "
            f"the file again, drop it on the NAS anew: from .ferry/archive/{dataset}/{name} while "
            f"the archive keeps it (retention.archive), else from its source"
        )
        self.zone = zone
        self.uri = uri


# --- HDFS (WebHDFS) errors: raised by ``ferry.clusters.hdfs`` and ``ferry.stages.transfer.copy``


class HdfsUnavailable(TransientError):
    """A NameNode or DataNode call failed in a way a later attempt can fix: connection reset,
    refused by the NameNode, NameNode in standby, a 5xx answer, a truncated read (safe mode, a
    quota and no space are :class:`ClusterCondition`). Says nothing about the file: every stage
    holds it as a condition of the cluster (:func:`outage_condition`).

    Attributes:
        cluster: the cluster's name when the WebHDFS client that raised it knew it, else ``""``.
    """

    reason = "hdfs_unavailable"
    cluster: str = ""


class HdfsTimeout(HdfsUnavailable):
    """A WebHDFS call passed its connect or read timeout (``settings.retry``; case C08)."""

    reason = "hdfs_timeout"


class ClusterCondition(HdfsUnavailable):
    """A condition of a cluster, not of the file: a space or name quota exceeded
    (``quota_exceeded``), a NameNode in safe mode (``safe_mode``), no DataNode with room for a
    block (``no_space``). Back-pressure (case C22): the stage holds the file (left on the NAS,
    its event uncommitted) and retries it with backoff capped at ``retry.condition_backoff_s``
    for up to ``retry.condition_window_s``, then quarantines it with :attr:`reason`.
    Made by :func:`ferry.clusters.hdfs.errors.condition_of`.

    Attributes:
        cluster: the cluster's name (``"a"``, ``"b"``).
        where: the directory whose quota is exceeded; ``""`` for a condition of the whole
            cluster (safe mode, no space) or a quota message without its directory.
    """

    reason = "cluster_condition"

    def __init__(self, message: str, *, reason: str, cluster: str = "", where: str = "") -> None:
        super().__init__(message)
        self.reason = reason
        self.cluster = cluster
        self.where = where

    @property
    def key(self) -> tuple[str, str, str]:
        """``(reason, cluster, where)``: one condition, however many files it holds."""
        return self.reason, self.cluster, self.where


class ChecksumMismatch(TransientError):
    """Bytes written do not read back with the size and sha256 that were sent (a fresh attempt
    rewrites them; the final path was never touched)."""

    reason = "checksum_mismatch"


class DataNodeUnreachable(PermanentError):
    """WebHDFS redirected to a DataNode address this client cannot connect to (case C06).

    Permanent on purpose: the NameNode hands out the same advertised address on the next attempt,
    so the fix is configuration (the DataNode's advertised host or
    ``clusters.<x>.datanode_address_map``), after which a replay repairs the file.
    """

    reason = "datanode_unreachable"
    cluster: str = ""  #: the cluster's name when the WebHDFS client knew it, else ``""``


#: The errors that say a cluster is out of reach, not that a file is bad (:func:`outage_condition`).
OUTAGES = (HdfsUnavailable, DataNodeUnreachable, SparkUnavailable)


def outage_condition(exc: E, cluster: str = "") -> E | ClusterCondition:
    """``exc`` itself, or, for a cluster out of reach, the :class:`ClusterCondition` that holds
    the file until the cluster answers again.

    Out of reach is an :class:`HdfsUnavailable` that is no condition yet (a NameNode refused,
    reset or timing out past the client's own retries, a standby answering), a
    :class:`DataNodeUnreachable` (case C06: a DataNode that refuses, or whose advertised address
    cannot be reached) or a :class:`SparkUnavailable` (no session, or its context died). None
    says anything about the file, and stages that quarantined the files in flight during a
    DataNode restart, a NameNode's long pause or the Spark masters' lost good files (issue 47's
    nemesis: seeds 47 and 4747 in extract; 17835 and the hour's seed 693378033 in transfer and
    load, 31 of them while load's session's context was stopped). The condition keeps ``exc``'s
    reason (``hdfs_unavailable``, ``hdfs_timeout``, ``datanode_unreachable``,
    ``spark_unavailable``), so a file still refused after ``retry.condition_window_s`` is
    quarantined with it, and its cluster (``exc.cluster``, else ``cluster``); ``exc`` is its
    ``__cause__``.
    """
    if isinstance(exc, ClusterCondition) or not isinstance(exc, OUTAGES):
        return exc
    held = ClusterCondition(str(exc), reason=exc.reason, cluster=exc.cluster or cluster)
    held.__cause__ = exc
    return held


class HdfsPathNotFound(PermanentError):
    """The path (or its parent) does not exist on the cluster."""

    reason = "hdfs_not_found"


class HdfsPathExists(PermanentError):
    """The path exists where it must not (rename or create without overwrite), or holds
    different bytes than the ones being written."""

    reason = "hdfs_exists"


class HdfsRequestRejected(PermanentError):
    """The NameNode or DataNode refused the request itself: permission, invalid path (a quota is
    a :class:`ClusterCondition`)."""

    reason = "hdfs_rejected"
