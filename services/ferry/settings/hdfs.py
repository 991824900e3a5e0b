"""HDFS cluster settings: one NameNode, or an HA nameservice of several
(``clusters.<a|b>``; re-exported by :mod:`ferry.settings`)."""

from __future__ import annotations

from typing import Literal

from pydantic import Field, model_validator

from ferry.settings.base import Frozen, WorkPath

#: The clusters Ferry knows by name.
ClusterName = Literal["a", "b"]

#: Hadoop's ``dfs.http.policy`` (hdfs-default.xml): which of the NameNodes' and DataNodes' web
#: servers run. ``HTTPS_ONLY`` is what a cluster with wire privacy runs (docs/security.md).
HttpPolicy = Literal["HTTP_ONLY", "HTTPS_ONLY", "HTTP_AND_HTTPS"]


class NameNodeSettings(Frozen):
    """One NameNode of an HA nameservice (``clusters.<x>.namenodes[i]``)."""

    id: str = Field(description="NameNode id in ``dfs.ha.namenodes.<nameservice>`` (nn1, nn2, …).")
    host: str = Field(default="127.0.0.1", description="Address the NameNode binds and advertises.")
    rpc_port: int = Field(description="NameNode RPC port.")
    http_port: int = Field(
        description="NameNode web port: WebHDFS and /jmx (HTTPS with ``http_policy`` HTTPS)."
    )

    @property
    def rpc_address(self) -> str:
        return f"{self.host}:{self.rpc_port}"

    @property
    def http_address(self) -> str:
        return f"{self.host}:{self.http_port}"


#: ``dfs.client.failover.proxy.provider.<nameservice>`` of every generated client configuration
#: (hdfs-default.xml; HDFS High Availability Using the Quorum Journal Manager, "Configuration").
FAILOVER_PROXY_PROVIDER = (
    "org.apache.hadoop.hdfs.server.namenode.ha.ConfiguredFailoverProxyProvider"
)


class HdfsClusterSettings(Frozen):
    """One HDFS cluster: a NameNode (or an HA nameservice of several) and one DataNode, with
    WebHDFS on.

    A single NameNode is ``host`` + ``namenode_rpc_port`` + ``namenode_http_port``. An HA cluster
    sets ``nameservice`` and ``namenodes`` (each with its id, host, RPC and HTTP port): then
    ``fs_url`` is ``hdfs://<nameservice>`` (no host, so a failover never changes a URI Ferry
    wrote), :meth:`hadoop_client_conf` is the client configuration Hadoop needs to resolve it, and
    WebHDFS tries the NameNodes in turn (:mod:`ferry.clusters.hdfs.webhdfs`).

    Env: ``FERRY_CLUSTERS__<A|B>__<FIELD>``; ``namenodes`` as JSON
    (``[{"id": "nn1", "rpc_port": 28020, "http_port": 29870}, …]``).
    """

    hadoop_conf_dir: WorkPath | None = Field(
        default=None,
        description=(
            "The cluster's Hadoop client configuration directory (core-site.xml, hdfs-site.xml): "
            "fs.defaultFS, the nameservice and its NameNodes' RPC and HTTP addresses, "
            "hadoop.security.authentication and every other key are read from it "
            "(:mod:`ferry.settings.client_conf`); a field set here as well wins over the file."
        ),
    )
    hadoop_properties: dict[str, str] = Field(
        default_factory=dict,
        description=(
            "Hadoop client keys handed to Spark as ``spark.hadoop.<key>`` (filled from "
            "hadoop_conf_dir; the HA keys of ``namenodes`` are added to them)."
        ),
    )
    host: str = Field(
        default="127.0.0.1", description="Address the NameNode and DataNode bind and advertise."
    )
    namenode_rpc_port: int = Field(description="NameNode RPC port (``hdfs://`` URLs).")
    namenode_http_port: int = Field(
        description=(
            "NameNode web port: WebHDFS and /jmx; ``dfs.namenode.https-address``'s port when "
            "``http_policy`` is not HTTP_ONLY."
        )
    )
    nameservice: str | None = Field(
        default=None,
        description="HA nameservice id (``dfs.nameservices``); set with ``namenodes``. "
        "None: one NameNode at host:namenode_rpc_port.",
    )
    namenodes: tuple[NameNodeSettings, ...] = Field(
        default=(),
        description="The nameservice's NameNodes, in the order clients try them (HA only).",
    )
    webhdfs_url_override: str | None = Field(
        default=None,
        description=(
            "WebHDFS base URL clients use instead of the NameNode's own (e.g. through a proxy); "
            "several separated by ';' for an HA pair."
        ),
    )
    http_policy: HttpPolicy = Field(
        default="HTTP_ONLY",
        description=(
            "The cluster's ``dfs.http.policy``. Not HTTP_ONLY: Ferry's WebHDFS clients use "
            "``https://`` and verify the servers' certificates against ``ssl_ca_path``; the local "
            "stack serves WebHDFS over TLS only (HTTPS_ONLY) on the web ports above."
        ),
    )
    ssl_ca_path: WorkPath | None = Field(
        default=None,
        description=(
            "PEM file of the CA(s) that signed the NameNodes' and DataNodes' certificates "
            "(WebHDFS over HTTPS); None: ``REQUESTS_CA_BUNDLE`` or the system's CAs. The local "
            "stack writes its CA there."
        ),
    )
    datanode_address_map: dict[str, str] = Field(
        default_factory=dict,
        description=(
            "host:port → host:port rewrites applied to WebHDFS redirects, for DataNodes that "
            "advertise an address this client cannot reach (NAT, gateways, fault proxies)."
        ),
    )

    @model_validator(mode="after")
    def _check_ha(self) -> HdfsClusterSettings:
        if self.namenodes and not self.nameservice:
            raise ValueError("namenodes given without a nameservice")
        if self.nameservice and not self.namenodes:
            raise ValueError(f"nameservice {self.nameservice!r} has no namenodes")
        ids = [nn.id for nn in self.namenodes]
        if len(set(ids)) != len(ids):
            raise ValueError(f"duplicate NameNode ids in {ids}")
        return self

    @property
    def ha(self) -> bool:
        """A nameservice is configured (clients address it, never one NameNode)."""
        return self.nameservice is not None

    @property
    def namenode_list(self) -> tuple[NameNodeSettings, ...]:
        """Every NameNode: ``namenodes``, or the single one of ``host``/``namenode_*_port``."""
        if self.namenodes:
            return self.namenodes
        return (
            NameNodeSettings(
                id="nn1",
                host=self.host,
                rpc_port=self.namenode_rpc_port,
                http_port=self.namenode_http_port,
            ),
        )

    @property
    def fs_url(self) -> str:
        """``hdfs://<nameservice>`` (HA) or ``hdfs://host:port`` of the one NameNode."""
        if self.nameservice:
            return f"hdfs://{self.nameservice}"
        return f"hdfs://{self.host}:{self.namenode_rpc_port}"

    @property
    def web_scheme(self) -> str:
        """``https`` unless ``http_policy`` is HTTP_ONLY (then ``http``)."""
        return "http" if self.http_policy == "HTTP_ONLY" else "https"

    @property
    def webhdfs_url(self) -> str:
        """The override, or ``<web_scheme>://host:port`` of each NameNode, ``;``-separated
        (HdfsCLI's form for HA: it tries them in turn)."""
        if self.webhdfs_url_override:
            return self.webhdfs_url_override
        return ";".join(f"{self.web_scheme}://{nn.http_address}" for nn in self.namenode_list)

    def hadoop_client_conf(self) -> dict[str, str]:
        """Hadoop client keys: :attr:`hadoop_properties` (the cluster's own configuration), and
        the keys that make ``fs_url`` resolvable: none for one NameNode; for HA,
        ``dfs.nameservices``, ``dfs.ha.namenodes.<ns>``, ``dfs.namenode.rpc-address.<ns>.<id>``,
        ``dfs.namenode.http-address.<ns>.<id>`` (``https-address`` unless ``http_policy`` is
        HTTP_ONLY) and ``dfs.client.failover.proxy.provider.<ns>``
        (:data:`FAILOVER_PROXY_PROVIDER`) — the keys of hdfs-default.xml and of Hadoop's "HDFS
        High Availability Using the Quorum Journal Manager" page. Spark takes them prefixed with
        ``spark.hadoop.``; the metastore and HiveServer2 in their hdfs-site.xml."""
        ns = self.nameservice
        if not ns:
            return dict(self.hadoop_properties)
        conf = {
            **self.hadoop_properties,
            "dfs.nameservices": ns,
            f"dfs.ha.namenodes.{ns}": ",".join(nn.id for nn in self.namenodes),
            f"dfs.client.failover.proxy.provider.{ns}": FAILOVER_PROXY_PROVIDER,
        }
        for nn in self.namenodes:
            conf[f"dfs.namenode.rpc-address.{ns}.{nn.id}"] = nn.rpc_address
            conf[f"dfs.namenode.{self.web_scheme}-address.{ns}.{nn.id}"] = nn.http_address
        return conf
