"""Ferry's Spark applications on Kerberos clusters (``kerberos.enabled``; docs/security.md).

Spark's standalone cluster manager has no Kerberos support of its own: ``spark-submit
--principal/--keytab`` logs in only for YARN and Kubernetes, and no delegation token reaches a
standalone executor (Spark's "Security" page, "Kerberos"). Ferry does what YARN does for a
container:

* the driver (this Python process's JVM) logs in from ``kerberos.keytab`` as
  ``kerberos.principal`` (``UserGroupInformation.loginUserFromKeytab``) before the session is
  built: its NameNode calls and the Hive metastore's SASL use that login, and Hadoop logs in again
  from the keytab when the ticket runs out;
* it fetches an HDFS delegation token of the session's cluster (``FileSystem
  .addDelegationTokens``) into a token file (0600) that every executor reads at start
  (``HADOOP_TOKEN_FILE_LOCATION``, as a YARN container does), so executors authenticate to the
  NameNode and DataNodes with the token, never with a ticket;
* driver and executors get a ``core-site.xml`` with the Kerberos keys on their class path
  (``spark.{driver,executor}.extraClassPath``) and the krb5.conf (``-Djava.security.krb5.conf``).

A delegation token lives ``dfs.namenode.delegation.token.renew-interval`` (24 h by default)
unless renewed; :class:`ferry.clusters.spark.SparkHolder` rebuilds the session, and so fetches a
new token, after ``kerberos.session_max_age_s`` (12 h). The executors must run on hosts that see
the token file's path, ``kerberos.spark_files_dir`` (the local stack's one worker does; compose
shares it between the driver's container and the worker's as a volume; a real standalone cluster
needs a shared path, or Spark on YARN).

On YARN (``spark.cluster_managers``) none of that: the driver logs in the same way, and Spark's
own token manager obtains, hands to YARN and renews the application's tokens
(:func:`session_conf` with ``yarn``; docs/yarn.md, "Kerberos on YARN").
"""

from __future__ import annotations

import os
import socket
from pathlib import Path
from typing import TYPE_CHECKING, Any

from ferry.clusters.kerberos import configure_process, hadoop_client_conf
from ferry.errors import AuthenticationFailed
from ferry.settings.client_conf import write_site_xml

if TYPE_CHECKING:
    from ferry.settings import Settings
    from ferry.settings.kerberos import KerberosSettings


def conf_dir(settings: Settings, cluster: str) -> Path:
    """Directory of the driver's and executors' Hadoop ``core-site.xml`` for ``cluster``
    (``<kerberos.spark_files_dir>/conf-<cluster>``)."""
    return settings.kerberos.spark_files_dir / f"conf-{cluster}"


def token_file(settings: Settings, cluster: str, app_name: str) -> Path:
    """The delegation token file of application ``app_name`` on ``cluster``, in
    ``kerberos.spark_files_dir``; named after this host and process, as drivers on several hosts
    may share the directory."""
    host = socket.gethostname()
    return settings.kerberos.spark_files_dir / f"{app_name}-{cluster}-{host}-{os.getpid()}.token"


def metastore_conf(krb: KerberosSettings) -> dict[str, str]:
    """Hive client keys of a SASL/Kerberos metastore (HiveConf: ``hive.metastore.sasl.enabled``,
    ``hive.metastore.kerberos.principal``)."""
    return {
        "hive.metastore.sasl.enabled": "true",
        "hive.metastore.kerberos.principal": krb.hive_principal,
    }


def client_keys(settings: Settings, cluster: str) -> dict[str, str]:
    """The Hadoop client keys of a Kerberos session on ``cluster``: Ferry's
    (:func:`ferry.clusters.kerberos.hadoop_client_conf`) under the cluster's own configuration
    (``clusters.<x>.hadoop_conf_dir``), which wins: a cluster whose RPC and data transfer
    protections differ, or that names its own principals, keeps them."""
    return {**hadoop_client_conf(settings.kerberos), **settings.cluster(cluster).hadoop_properties}


def session_conf(
    settings: Settings, cluster: str, app_name: str, hive: bool, *, yarn: bool = False
) -> dict[str, str]:
    """The Spark keys of a Kerberos session (empty when Kerberos is off).

    On the standalone cluster: the executors' class path and token file (module docstring). On
    YARN (``yarn``): Spark's own Kerberos support instead (Spark's "Running Spark on YARN",
    "Kerberos", and "Security", "Long-Running Applications"): ``spark.kerberos.principal`` and
    ``spark.kerberos.keytab``, with which the driver obtains the application's HDFS delegation
    tokens (the ResourceManager, ``yarn.resourcemanager.principal``, their renewer), hands them to
    YARN with the application and obtains new ones at ``spark.security.credentials.
    renewalRatio`` (0.75) of their renewal interval, sending them to the executors; the
    containers get the tokens from YARN (their own ``HADOOP_TOKEN_FILE_LOCATION``) and the
    cluster's configuration from ``HADOOP_CONF_DIR`` (ferry.clusters.spark_yarn)."""
    krb = settings.kerberos
    if not krb.enabled:
        return {}
    java = f"-Djava.security.krb5.conf={krb.krb5_conf}"
    hadoop = {**client_keys(settings, cluster), **(metastore_conf(krb) if hive else {})}
    conf = {
        **{f"spark.hadoop.{k}": v for k, v in hadoop.items()},
        "spark.driver.extraJavaOptions": java,
        "spark.driver.extraClassPath": str(conf_dir(settings, cluster)),
    }
    if yarn:
        return conf | {
            "spark.kerberos.principal": krb.client_principal,
            "spark.kerberos.keytab": str(krb.keytab),
        }
    return conf | {
        "spark.executor.extraJavaOptions": java,
        "spark.executor.extraClassPath": str(conf_dir(settings, cluster)),
        "spark.executorEnv.HADOOP_TOKEN_FILE_LOCATION": str(
            token_file(settings, cluster, app_name)
        ),
    }


def write_conf_dir(settings: Settings, cluster: str) -> Path:
    """Write ``core-site.xml`` (the Kerberos client keys and ``fs.defaultFS``) into
    :func:`conf_dir`, atomically (every Spark application of every service on this host rewrites
    it at start while others may be reading it); returns the directory."""
    keys = {"fs.defaultFS": settings.cluster(cluster).fs_url}
    keys |= client_keys(settings, cluster)
    d = conf_dir(settings, cluster)
    write_site_xml(d / "core-site.xml", keys)
    return d


def prepare_driver(
    jvm: Any, settings: Settings, cluster: str, app_name: str, *, tokens: bool = True
) -> Path | None:
    """In the driver's JVM ``jvm`` (py4j, before the SparkContext exists): log in from the
    keytab and (``tokens``: the standalone cluster) write the executors' token file. Returns the
    token file, or None without ``tokens`` (on YARN Spark obtains the tokens itself:
    :func:`session_conf`).

    Raises:
        AuthenticationFailed: the keytab is refused, the login or the token fetch failed (the
            message is the JVM's first line).
    """
    krb = settings.kerberos
    configure_process(krb)
    cs = settings.cluster(cluster)
    hconf = jvm.org.apache.hadoop.conf.Configuration()
    for k, v in {"fs.defaultFS": cs.fs_url, **client_keys(settings, cluster)}.items():
        hconf.set(k, v)
    ugi = jvm.org.apache.hadoop.security.UserGroupInformation
    path = token_file(settings, cluster, app_name)
    path.parent.mkdir(parents=True, exist_ok=True)
    try:
        ugi.setConfiguration(hconf)
        ugi.loginUserFromKeytab(krb.client_principal, str(krb.keytab))
        if not tokens:
            return None
        creds = jvm.org.apache.hadoop.security.Credentials()
        fs = jvm.org.apache.hadoop.fs.FileSystem.get(jvm.java.net.URI(cs.fs_url), hconf)
        fs.addDelegationTokens(krb.principal.split("@")[0].split("/")[0], creds)
        path.unlink(missing_ok=True)
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
        os.close(fd)
        creds.writeTokenStorageFile(jvm.org.apache.hadoop.fs.Path(path.as_uri()), hconf)
    except Exception as exc:  # noqa: BLE001 - py4j wraps the JVM's exception
        first = " ".join(str(exc).split("\n\tat ")[0].split())[:300]
        raise AuthenticationFailed(
            f"Spark driver {app_name!r}: Kerberos login as {krb.client_principal} or HDFS "
            f"delegation token of cluster {cluster!r} failed: {first}"
        ) from None
    os.chmod(path, 0o600)
    return path
