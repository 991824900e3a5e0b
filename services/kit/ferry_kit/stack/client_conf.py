"""The local stack's clusters described as their owners describe them to clients: a Hadoop client
configuration directory per HDFS cluster and a Hive one for the metastore.

``ferry stack up`` writes them under ``<var_dir>/conf/clients/`` (:func:`write_client_confs`), as
an edge node beside real clusters holds ``/etc/hadoop/conf`` of each; the test tiers start Ferry's
services with only these directories for the clusters (:func:`client_conf_env`), so what they
exercise is Ferry reading a cluster's own configuration (:mod:`ferry.settings.client_conf`).

A cluster directory has ``core-site.xml`` (``fs.defaultFS``, ``hadoop.security.authentication``
and the Kerberos keys, ``hadoop.rpc.protection`` among them) and ``hdfs-site.xml`` (the
nameservice and its NameNodes' RPC and HTTP addresses, or the one NameNode's; ``dfs.http.policy``
and the HTTPS addresses of a cluster on HTTPS; client keys). The Hive directory has
``hive-site.xml`` (``hive.metastore.uris``, ``hive.metastore.warehouse.dir`` and, on Kerberos,
the metastore's SASL keys). A cluster with YARN on the stack (profile ``yarn``) also has
``yarn-site.xml``: its ResourceManager(s) (:func:`ferry_kit.stack.yarn_conf.client_site`).
"""

from __future__ import annotations

import re
from pathlib import Path

from ferry.clusters.kerberos import hadoop_client_conf
from ferry.clusters.spark_kerberos import metastore_conf
from ferry.settings.client_conf import write_site_xml
from ferry_kit.settings import KitSettings, StackCluster, StackKerberos, StackNameNode
from ferry_kit.stack.hdfs_tls import server_keys
from ferry_kit.stack.yarn_conf import client_site

#: Hadoop client keys every local cluster's clients get: one DataNode (never look for a
#: replacement in the write pipeline; one replica).
CLIENT_KEYS = {
    "dfs.client.block.write.replace-datanode-on-failure.enable": "false",
    "dfs.replication": "1",
}


def clients_dir(settings: KitSettings) -> Path:
    """``<var_dir>/conf/clients``: where the client configurations are written."""
    return settings.var_dir / "conf" / "clients"


def cluster_conf_dir(settings: KitSettings, cluster: str) -> Path:
    """The client configuration directory of HDFS cluster ``cluster`` (``cluster-a``, …)."""
    return clients_dir(settings) / f"cluster-{cluster}"


def hive_conf_dir(settings: KitSettings) -> Path:
    """The metastore's client configuration directory."""
    return clients_dir(settings) / "hive"


def cluster_files(
    cs: StackCluster,
    krb: StackKerberos,
    namenodes: tuple[StackNameNode, ...] | None = None,
) -> dict[str, dict[str, str]]:
    """``{"core-site.xml": {…}, "hdfs-site.xml": {…}}`` of one cluster as its clients see it;
    ``namenodes`` replaces the cluster's NameNodes (e.g. their addresses through fault proxies)."""
    if namenodes is not None and cs.ha:
        cs = cs.model_copy(update={"namenodes": namenodes})
    secure = hadoop_client_conf(krb)
    core = {
        "fs.defaultFS": cs.fs_url,
        "hadoop.security.authentication": "kerberos" if krb.enabled else "simple",
        **{k: v for k, v in secure.items() if k.startswith("hadoop.")},
    }
    hdfs = dict(CLIENT_KEYS)
    if cs.ha:
        hdfs |= {k: v for k, v in cs.hadoop_client_conf().items() if k.startswith("dfs.")}
    else:
        nn = cs.namenode_list[0]
        hdfs |= {
            "dfs.namenode.rpc-address": nn.rpc_address,
            "dfs.namenode.http-address": nn.http_address,
        }
    if (
        cs.http_policy != "HTTP_ONLY"
    ):  # the web servers' ports serve HTTPS (ferry_kit.stack.hdfs_tls)
        hdfs["dfs.http.policy"] = cs.http_policy
        hdfs |= {k: v for k, v in server_keys(cs).items() if k.startswith("dfs.namenode.")}
    hdfs |= {k: v for k, v in secure.items() if k.startswith("dfs.")}
    return {"core-site.xml": core, "hdfs-site.xml": hdfs}


def yarn_files(settings: KitSettings, cluster: str) -> dict[str, dict[str, str]]:
    """``{"yarn-site.xml": {…}}`` of ``cluster`` when the stack runs a YARN for it, else ``{}``."""
    if cluster not in settings.yarn:
        return {}
    principal = settings.kerberos.yarn_principal if settings.kerberos.enabled else None
    return {"yarn-site.xml": client_site(settings.yarn[cluster], cluster, principal)}


def hive_files(settings: KitSettings) -> dict[str, dict[str, str]]:
    """``{"hive-site.xml": {…}}`` of the stack's metastore."""
    ms = settings.metastore
    hive = {
        "hive.metastore.uris": ms.uri,
        "hive.metastore.warehouse.dir": f"{settings.cluster('a').fs_url}{ms.warehouse_path}",
    }
    if settings.kerberos.enabled:
        hive |= metastore_conf(settings.kerberos)
    return {"hive-site.xml": hive}


def write_own_client_conf(settings: KitSettings, component: str) -> Path | None:
    """What server ``component`` tells its clients about its cluster, written where the stack
    keeps it (a container's volume shares it with the stages; docs/compose.md): a NameNode
    ``hdfs-<x>-namenode`` its cluster's directory, ``hive-metastore`` the metastore's. Returns the
    directory, or None for other components (an HA cluster's NameNodes write none)."""
    match = re.fullmatch(r"hdfs-(\w+)-namenode", component)
    if match and match.group(1) in settings.clusters:
        name = match.group(1)
        files = cluster_files(settings.cluster(name), settings.kerberos)
        return write_conf_dir(cluster_conf_dir(settings, name), files | yarn_files(settings, name))
    if component == "hive-metastore":
        return write_conf_dir(hive_conf_dir(settings), hive_files(settings))
    return None


def write_conf_dir(directory: Path, files: dict[str, dict[str, str]]) -> Path:
    """Write ``files`` (name → properties) into ``directory`` (each file atomically)."""
    directory.mkdir(parents=True, exist_ok=True)
    for name, props in files.items():
        write_site_xml(directory / name, props)
    return directory


def write_client_confs(settings: KitSettings) -> dict[str, Path]:
    """Write every client configuration directory of the stack; returns ``{"a": …, "b": …,
    "hive": …}``."""
    out = {
        name: write_conf_dir(
            cluster_conf_dir(settings, name),
            cluster_files(cs, settings.kerberos) | yarn_files(settings, name),
        )
        for name, cs in settings.clusters.items()
    }
    out["hive"] = write_conf_dir(hive_conf_dir(settings), hive_files(settings))
    return out


#: Profiles that describe the clusters (and so are not what a service started by
#: :func:`client_conf_env` reads), each → what of it a service does read: ``kerberos`` and
#: ``yarn-kerberos`` nothing;
#: ``ha`` its stack's other ports (``ha-services``); ``secure`` is ``secure-kafka`` plus
#: ``kerberos``; ``yarn`` its ports and the clusters' Spark on YARN (``yarn-services``).
CLUSTER_PROFILES = {
    "ha": ("ha-services",),
    "kerberos": (),
    "secure": ("secure-kafka",),
    "yarn": ("yarn-services",),
    "yarn-kerberos": (),
}


def service_profile(profile: str) -> str:
    """``FERRY_PROFILE`` for a service that reads its clusters from their client configuration:
    ``profile`` without the profiles that describe the clusters (``ha,secure`` →
    ``secure-kafka``)."""
    out: list[str] = []
    for name in (n.strip() for n in profile.split(",")):
        if name:
            out += CLUSTER_PROFILES.get(name, (name,))
    return ",".join(dict.fromkeys(out))


def yarn_client_env(settings: KitSettings, profile: str) -> dict[str, str]:
    """:func:`client_conf_env` when a cluster's Spark runs on its YARN (Spark finds each
    ResourceManager in ``yarn-site.xml`` of the client configuration directory), else ``{}``:
    what ``ferry up`` and the bench add to a service's environment."""
    if not any(settings.spark.manager(c) == "yarn" for c in settings.clusters):
        return {}
    return client_conf_env(settings, profile)


def client_conf_env(
    settings: KitSettings, profile: str, dirs: dict[str, Path] | None = None
) -> dict[str, str]:
    """Environment that makes a Ferry service read both HDFS clusters and the metastore from
    their client configuration directories (``dirs``, default the stack's) instead of the
    profile: ``FERRY_PROFILE`` from :func:`service_profile` and the ``hadoop_conf_dir`` /
    ``hive_conf_dir`` settings, and a cluster's ``ssl_ca_path`` (WebHDFS over HTTPS), which
    Hadoop's files do not give as PEM."""
    dirs = dirs or {
        **{name: cluster_conf_dir(settings, name) for name in settings.clusters},
        "hive": hive_conf_dir(settings),
    }
    env = {
        f"FERRY_CLUSTERS__{name.upper()}__HADOOP_CONF_DIR": str(path)
        for name, path in dirs.items()
        if name != "hive"
    }
    for name, cs in settings.clusters.items():
        if cs.ssl_ca_path is not None:  # a PEM CA is Ferry's setting: Hadoop's names a truststore
            env[f"FERRY_CLUSTERS__{name.upper()}__SSL_CA_PATH"] = str(cs.ssl_ca_path)
    env["FERRY_METASTORE__HIVE_CONF_DIR"] = str(dirs["hive"])
    env["FERRY_PROFILE"] = service_profile(profile)
    return env
