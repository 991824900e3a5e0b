"""The ``kerberos`` section of Ferry's settings (re-exported by :mod:`ferry.settings`).

Kerberos is off by default (the local stack's HDFS clusters run with simple authentication).
Profile ``kerberos`` (``services/kit/ferry_kit/profiles/kerberos.yaml``) turns it on: the
local
stack then runs an MIT KDC and both HDFS clusters with ``hadoop.security.authentication=
kerberos``, and Ferry's WebHDFS clients authenticate with SPNEGO (docs/security.md, "Kerberos").
"""

from __future__ import annotations

from pathlib import Path

from pydantic import Field, field_validator

from ferry.settings.base import Frozen, WorkPath

#: Hadoop's SASL quality-of-protection names (``hadoop.rpc.protection``, core-default.xml).
QOP_LEVELS = ("authentication", "integrity", "privacy")


class KerberosSettings(Frozen):
    """Kerberos of the HDFS clusters. Env: ``FERRY_KERBEROS__<FIELD>``.

    Relative paths are taken under the working directory. Against a real cluster set ``realm``,
    ``krb5_conf`` (the site's ``/etc/krb5.conf``), ``principal`` and ``keytab`` (the service
    account's); ``namenode_principal``/``http_principal`` as the cluster's ``hdfs-site.xml`` has
    them (``dfs.namenode.kerberos.principal``, ``dfs.web.authentication.kerberos.principal``).
    """

    enabled: bool = Field(
        default=False,
        description="Kerberos on HDFS: SPNEGO for WebHDFS, Kerberos on Hadoop RPC.",
    )
    realm: str = Field(default="FERRY.LOCAL", description="Kerberos realm of Ferry and HDFS.")
    principal: str = Field(
        default="ferry",
        description="Ferry's client principal (without @realm: the realm is appended).",
    )
    keytab: WorkPath = Field(
        default=Path("var") / "secrets" / "ferry.keytab",
        description=(
            "Keytab of ``principal``, mode 0600; MIT Kerberos gets and renews tickets from it "
            "(KRB5_CLIENT_KTNAME). The local stack writes it. Default: "
            "``<var_dir>/secrets/ferry.keytab``."
        ),
    )
    krb5_conf: WorkPath = Field(
        default=Path("var") / "conf" / "krb5" / "krb5.conf",
        description=(
            "krb5.conf of the clients (KRB5_CONFIG, java.security.krb5.conf). Default: "
            "``<var_dir>/conf/krb5/krb5.conf`` (the local stack writes it)."
        ),
    )
    ccache: WorkPath = Field(
        default=Path("var") / "run" / "krb5cc_ferry",
        description=(
            "Ticket cache file of Ferry's processes (KRB5CCNAME=FILE:…); ``-<pid>`` is appended "
            "so that processes never share one. Default: ``<var_dir>/run/krb5cc_ferry``."
        ),
    )
    service_host: str = Field(
        default="localhost",
        description="Host part of the local stack's service principals (hdfs/<host>, HTTP/<host>).",
    )
    kdc_host: str = Field(default="127.0.0.1", description="Local stack's KDC address.")
    kdc_port: int = Field(default=17088, description="Local stack's KDC port (TCP and UDP).")
    ticket_lifetime_s: int = Field(
        default=86400,
        ge=60,
        description=(
            "Local stack only: the longest ticket the KDC issues to ``principal`` (kadmin "
            "``-maxlife``), in seconds; the tests use 120 to see tickets renewed."
        ),
    )

    http_token_validity_s: int = Field(
        default=36000,
        ge=10,
        description=(
            "Local stack only: how long the NameNodes' signed ``hadoop.auth`` cookie spares a "
            "client SPNEGO (``hadoop.http.authentication.token.validity``; Hadoop's default "
            "36000 s). The tests use 30, so clients re-authenticate with renewed tickets."
        ),
    )

    protection: str = Field(
        default="authentication",
        description=(
            "Quality of protection of Hadoop RPC and of block data transfer, as the clusters' "
            "``hadoop.rpc.protection`` and ``dfs.data.transfer.protection`` (Hadoop's "
            "SecureMode.md): ``authentication``, ``integrity`` or ``privacy`` (encrypted), or "
            "several, comma-separated. Taken from a cluster's core-site.xml when "
            "``hadoop_conf_dir`` gives one; the local stack's servers require it (profile "
            "``secure``: privacy)."
        ),
    )

    session_max_age_s: float = Field(
        default=43200,
        gt=0,
        description=(
            "A Spark stage rebuilds its session after this long (seconds), so its executors get "
            "a new HDFS delegation token before the old one expires (24 h unless renewed)."
        ),
    )

    @field_validator("protection")
    @classmethod
    def _protection_values(cls, value: str) -> str:
        levels = [v.strip().lower() for v in value.split(",") if v.strip()]
        bad = [v for v in levels if v not in QOP_LEVELS]
        if not levels or bad:
            raise ValueError(
                f"protection {value!r}: expected one or more of {', '.join(QOP_LEVELS)}, "
                "comma-separated"
            )
        return ",".join(dict.fromkeys(levels))

    @property
    def privacy(self) -> bool:
        """``protection`` includes ``privacy`` (RPC and block data encrypted on the wire)."""
        return "privacy" in self.protection.split(",")

    @property
    def client_principal(self) -> str:
        """``principal@realm`` (``principal`` as given when it names a realm)."""
        return self.principal if "@" in self.principal else f"{self.principal}@{self.realm}"

    @property
    def hdfs_principal(self) -> str:
        """The NameNode's and DataNode's principal (``dfs.namenode.kerberos.principal``)."""
        return f"hdfs/{self.service_host}@{self.realm}"

    @property
    def http_principal(self) -> str:
        """The WebHDFS SPNEGO principal (``dfs.web.authentication.kerberos.principal``)."""
        return f"HTTP/{self.service_host}@{self.realm}"

    @property
    def hive_principal(self) -> str:
        """The Hive metastore's principal (``hive.metastore.kerberos.principal``)."""
        return f"hive/{self.service_host}@{self.realm}"
