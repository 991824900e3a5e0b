"""Spark on a cluster's own YARN (``spark.cluster_managers``: ``yarn``), client mode.

The session stays in the service's process (the driver), as on the standalone cluster: one
application per service, kept between batches, no JVM per file. YARN runs its application master
and executors in NodeManager containers. What differs from the standalone cluster is here:

* :func:`session_conf`: the Spark keys of a YARN application (Spark's "Running Spark on YARN":
  ``spark.master=yarn``, ``spark.submit.deployMode=client``, ``spark.yarn.queue``,
  ``spark.yarn.archive``, ``spark.executor.instances``, ``spark.yarn.am.memory``,
  ``spark.yarn.maxAppAttempts``);
* :func:`conf_env`: ``HADOOP_CONF_DIR`` and ``YARN_CONF_DIR``, the cluster's ``hadoop_conf_dir``:
  Spark finds the ResourceManager(s) in its ``yarn-site.xml`` ("the ResourceManager's address is
  picked up from the Hadoop configuration") and ships the directory to the containers;
* :func:`ensure_archive`: the Spark jars as one zip on the cluster's HDFS, uploaded by the first
  session that finds it absent and reused by every later one (``spark.yarn.archive``; without it
  Spark uploads its ~460 MB of jars at every application start).

With Kerberos the driver logs in from Ferry's keytab and Spark's own token manager obtains and
renews the application's delegation tokens (:func:`ferry.clusters.spark_kerberos.session_conf`).
"""

from __future__ import annotations

import logging
import os
import zipfile
from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING

from ferry.errors import ConfigError, HdfsPathExists
from ferry.settings import Settings

if TYPE_CHECKING:
    from ferry.clusters.hdfs.port import HdfsPort

log = logging.getLogger(__name__)

#: Bytes per chunk streamed from the local archive to WebHDFS.
UPLOAD_CHUNK_BYTES = 4 * 1024 * 1024


def spark_version() -> str:
    """The installed pyspark's version (``4.3.0``): the executors' jars must be the driver's."""
    import pyspark

    return str(pyspark.__version__)


def spark_jars_dir() -> Path:
    """``jars/`` of the installed pyspark distribution: what the archive holds."""
    import pyspark

    return Path(pyspark.__file__).resolve().parent / "jars"


def archive_path(settings: Settings, version: str | None = None) -> str:
    """HDFS path of the Spark jars archive: ``<spark.yarn.archive_dir>/spark-<version>-jars.zip``
    (``version`` default: the installed pyspark's), so a new Spark version stages its own."""
    name = f"spark-{version or spark_version()}-jars.zip"
    base = settings.spark.yarn.archive_dir
    return f"{base.rstrip('/')}/{name}"


def conf_dir(settings: Settings, cluster: str) -> Path:
    """The ``hadoop_conf_dir`` of ``cluster``, checked to hold a ``yarn-site.xml``.

    Raises:
        ConfigError: the cluster has no ``hadoop_conf_dir``, or it has no ``yarn-site.xml``
            (both name the setting).
    """
    cs = settings.cluster(cluster)
    if cs.hadoop_conf_dir is None:
        raise ConfigError(
            f"spark.cluster_managers.{cluster} is yarn but clusters.{cluster}.hadoop_conf_dir is "
            "not set: Spark finds the ResourceManager in that directory's yarn-site.xml"
        )
    site = cs.hadoop_conf_dir / "yarn-site.xml"
    if not site.is_file():
        raise ConfigError(
            f"clusters.{cluster}.hadoop_conf_dir: {site} does not exist (spark.cluster_managers."
            f"{cluster} is yarn: the cluster's yarn-site.xml names its ResourceManager)"
        )
    return cs.hadoop_conf_dir


def conf_env(settings: Settings, cluster: str) -> dict[str, str]:
    """``{"HADOOP_CONF_DIR": …, "YARN_CONF_DIR": …}``: the cluster's ``hadoop_conf_dir`` for the
    driver JVM's class path and for the containers (Spark ships the directory to them).

    Raises:
        ConfigError: as :func:`conf_dir`.
    """
    d = str(conf_dir(settings, cluster))
    return {"HADOOP_CONF_DIR": d, "YARN_CONF_DIR": d}


def session_conf(
    settings: Settings, cluster: str, archive_version: str | None = None
) -> dict[str, str]:
    """The Spark keys that put a Ferry application on ``cluster``'s YARN, client mode (Spark's
    "Running Spark on YARN"): executors sized by ``spark.executor_cores`` and
    ``spark.executor_memory_mb``, ``app_cores_max / executor_cores`` of them (at least one), no
    dynamic allocation; the application master with ``spark.yarn.am_memory_mb`` and the drivers'
    JVM options; the jars from :func:`archive_path` on the cluster's own HDFS. (Kerberos adds
    its keys in :func:`ferry.clusters.spark_kerberos.session_conf`.)
    """
    sp = settings.spark
    cs = settings.cluster(cluster)
    conf = {
        "spark.master": "yarn",
        "spark.submit.deployMode": "client",
        "spark.yarn.queue": sp.yarn.queue,
        "spark.yarn.archive": f"{cs.fs_url}{archive_path(settings, archive_version)}",
        "spark.executor.instances": str(max(1, sp.app_cores_max // sp.executor_cores)),
        "spark.dynamicAllocation.enabled": "false",
        "spark.yarn.am.memory": f"{sp.yarn.am_memory_mb}m",
        "spark.yarn.maxAppAttempts": str(sp.yarn.max_app_attempts),
    }
    if sp.driver_java_options:
        conf["spark.yarn.am.extraJavaOptions"] = sp.driver_java_options
    return conf


def write_archive(jars: Path, dest: Path) -> Path:
    """Zip every ``*.jar`` of ``jars`` (flat, stored: jars are compressed already) into ``dest``,
    through a temporary sibling renamed at the end; an existing ``dest`` is reused as is.

    Returns ``dest``.

    Raises:
        ConfigError: ``jars`` holds no jar (not a Spark distribution).
        OSError: the zip cannot be written.
    """
    if dest.is_file():
        return dest
    files = sorted(jars.glob("*.jar"))
    if not files:
        raise ConfigError(f"{jars}: no jars to stage as spark.yarn.archive")
    dest.parent.mkdir(parents=True, exist_ok=True)
    tmp = dest.with_name(f".{dest.name}.{os.getpid()}.tmp")
    try:
        with zipfile.ZipFile(tmp, "w", compression=zipfile.ZIP_STORED) as zf:
            for jar in files:
                zf.write(jar, arcname=jar.name)
        tmp.replace(dest)
    finally:
        tmp.unlink(missing_ok=True)
    return dest


def _chunks(path: Path) -> Iterator[bytes]:
    with path.open("rb") as fh:
        while chunk := fh.read(UPLOAD_CHUNK_BYTES):
            yield chunk


def ensure_archive(
    settings: Settings, cluster: str, hdfs: HdfsPort, jars: Path | None = None
) -> tuple[str, bool]:
    """Make sure the Spark jars archive is on ``cluster``'s HDFS at :func:`archive_path`:
    if it is there, nothing is read or written; if not, the jars are zipped into
    ``<var_dir>/spark/`` (:func:`write_archive`, once per machine) and uploaded through a
    temporary file renamed into place (:meth:`HdfsPort.upload_stream`). Another session that
    staged it meanwhile wins: its archive is used.

    Returns ``(hdfs path, uploaded)``.

    Raises:
        ConfigError: no jars to stage.
        ferry.errors.TransientError: the cluster did not answer (HdfsUnavailable, HdfsTimeout …).
    """
    path = archive_path(settings)
    if hdfs.exists(path):
        return path, False
    local = write_archive(jars or spark_jars_dir(), settings.var_dir / "spark" / Path(path).name)
    size = local.stat().st_size
    log.info("staging the Spark jars on cluster %s: %s (%d bytes) → %s", cluster, local, size, path)
    hdfs.mkdirs(settings.spark.yarn.archive_dir)
    try:
        hdfs.upload_stream(path, _chunks(local), expected_size=size, verify=False)
    except HdfsPathExists:
        log.info("cluster %s: %s was staged by another session meanwhile; using it", cluster, path)
        return path, False
    return path, True


__all__ = [
    "archive_path",
    "conf_dir",
    "conf_env",
    "ensure_archive",
    "session_conf",
    "spark_jars_dir",
    "spark_version",
    "write_archive",
]
