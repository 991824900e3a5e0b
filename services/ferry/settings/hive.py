"""The ``metastore`` and ``hiveserver2`` sections: cluster A's Hive services."""

from __future__ import annotations

from pydantic import Field, field_validator

from ferry.settings.base import Frozen, WorkPath


class MetastoreSettings(Frozen):
    """Hive metastore (Thrift, Derby inside) for cluster A."""

    hive_conf_dir: WorkPath | None = Field(
        default=None,
        description=(
            "Directory of the metastore's client configuration (hive-site.xml): "
            "hive.metastore.uris gives host and port, hive.metastore.warehouse.dir the warehouse, "
            "every key is handed to Spark; a field set here as well wins over the file."
        ),
    )
    hive_properties: dict[str, str] = Field(
        default_factory=dict,
        description="Hive client keys handed to Spark as ``spark.hadoop.<key>`` (from "
        "hive_conf_dir).",
    )
    host: str = Field(default="127.0.0.1", description="Address the metastore binds.")
    port: int = Field(default=19083, description="Metastore Thrift port (``thrift://`` URI).")
    warehouse_path: str = Field(default="/warehouse", description="Warehouse directory on HDFS A.")
    filter_max_values: int = Field(
        default=100,
        ge=1,
        description=(
            "Most partition values a Spark job sends the metastore as one ``col IN (…)`` filter; "
            "more become ``col >= min AND col <= max`` and Spark drops the extra partitions "
            "itself (``spark.sql.hive.metastorePartitionPruningInSetThreshold``, Spark's default "
            "1000). A Derby-backed metastore, as in the local stack, fails an IN of 256 dates "
            "with 'Statement too complex' (a load batch touching 256 days did)."
        ),
    )

    @property
    def uri(self) -> str:
        return f"thrift://{self.host}:{self.port}"


class HiveServer2Settings(Frozen):
    """HiveServer2 (the Spark Thrift Server) on cluster A's side: JDBC for analysts and for the
    demo's reconciliation. Env: ``FERRY_HIVESERVER2__<FIELD>``."""

    host: str = Field(default="127.0.0.1", description="Bind and connect address.")
    port: int = Field(default=19084, description="Thrift (binary) port: jdbc:hive2://host:port.")
    user: str = Field(default="ferry", description="User name sent by the JDBC clients.")
    query_timeout_s: float = Field(
        default=120.0, description="Login and query timeout of each JDBC call, s."
    )
    principal: str | None = Field(
        default=None,
        description=(
            "HiveServer2's Kerberos service principal, the server's "
            "hive.server2.authentication.kerberos.principal with its host filled in (e.g. "
            "hive/hs2.example.com@EXAMPLE.COM). Set: JDBC clients authenticate with Kerberos "
            "(SASL GSSAPI) as kerberos.principal, and the JDBC URL carries ;principal=…; needs "
            "kerberos.enabled. Unset: the user name is sent without authentication."
        ),
    )

    @field_validator("principal")
    @classmethod
    def _principal_form(cls, value: str | None) -> str | None:
        """Blank means none (``FERRY_HIVESERVER2__PRINCIPAL=`` turns a profile's off); anything
        else must read ``service/host[@REALM]``."""
        if value is None or not value.strip():
            return None
        service, _, host = value.split("@", 1)[0].partition("/")
        if not service or not host:
            raise ValueError(f"hiveserver2.principal {value!r} is not service/host@REALM")
        return value.strip()

    @property
    def service_and_host(self) -> tuple[str, str]:
        """``(service, host)`` of :attr:`principal` (``hive/hs2.example.com@REALM`` →
        ``("hive", "hs2.example.com")``), the GSSAPI host-based service name.

        Raises:
            ValueError: no principal, or not of the form ``service/host[@REALM]``.
        """
        primary = (self.principal or "").split("@", 1)[0]
        service, _, host = primary.partition("/")
        if not service or not host:
            raise ValueError(f"hiveserver2.principal {self.principal!r} is not service/host@REALM")
        return service, host
