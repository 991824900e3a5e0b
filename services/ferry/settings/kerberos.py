"""The ``kerberos`` section of Ferry's settings (re-exported by :mod:`ferry.settings`).

Kerberos is off by default (the local stack's HDFS clusters run with simple authentication).
Profile ``kerberos`` (``services/kit/ferry_kit/profiles/kerberos.yaml``) turns it on: the
local
stack then runs an MIT KDC and both HDFS clusters with ``hadoop.security.authentication=
kerberos``, and Ferry's WebHDFS clients authenticate with SPNEGO (docs/security.md, "Kerberos").
"""

from __future__ import annotations

import re
from pathlib import Path

from pydantic import Field, field_validator

from ferry.settings.base import Frozen, WorkPath

#: Hadoop's SASL quality-of-protection names (``hadoop.rpc.protection``, core-default.xml).
QOP_LEVELS = ("authentication", "integrity", "privacy")

#: A realm name as MIT and AD spell them: upper-case labels separated by dots.
REALM_NAME = re.compile(r"[A-Z0-9][A-Z0-9-]*(\.[A-Z0-9][A-Z0-9-]*)*")


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
    realm: str = Field(
        default="FERRY.LOCAL",
        description="Kerberos realm of the HDFS clusters' services (krb5.conf's default realm).",
    )
    principal: str = Field(
        default="ferry",
        description=(
            "Ferry's client principal; without ``@REALM`` ``realm`` is appended. It may be in "
            "one of ``trusted_realms`` (``svc-ferry@CORP.EXAMPLE.COM``)."
        ),
    )
    trusted_realms: list[str] = Field(
        default_factory=list,
        description=(
            "Realms in two-way cross-realm trust with ``realm`` (``krbtgt/<R>@<realm>`` and "
            "``krbtgt/<realm>@<R>``), such as the corporate domain of service accounts. Ferry's "
            "principal's name in each maps to its short name (``hadoop.security.auth_to_local`` "
            "of Ferry's Hadoop clients and of the local stack's servers; no other name of R is "
            "mapped); the local stack's KDC serves each realm and the trust."
        ),
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
    spark_files_dir: WorkPath = Field(
        default=Path("var") / "run" / "spark-kerberos",
        description=(
            "Where a Spark driver writes its executors' HDFS delegation token file and Hadoop "
            "``core-site.xml``. Standalone workers get no token of their own, so this directory "
            "must be at the same path on the driver's host and on every worker's (one host, a "
            "shared volume, an NFS mount). Default: ``<var_dir>/run/spark-kerberos``."
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
            "A Spark stage on the standalone cluster rebuilds its session after this long "
            "(seconds), so its executors get a new HDFS delegation token before the old one "
            "expires (24 h unless renewed). On YARN Spark obtains new tokens itself (from "
            "``keytab``) and the session is kept."
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

    @field_validator("trusted_realms")
    @classmethod
    def _realm_names(cls, value: list[str]) -> list[str]:
        bad = [r for r in value if not REALM_NAME.fullmatch(r)]
        if bad:
            raise ValueError(f"trusted_realms {bad}: a realm is upper case, like CORP.EXAMPLE.COM")
        return list(dict.fromkeys(value))

    @property
    def client_realm(self) -> str:
        """The realm of :attr:`client_principal`."""
        return self.client_principal.rsplit("@", 1)[1]

    @property
    def auth_to_local(self) -> str:
        """``hadoop.security.auth_to_local`` rules: Ferry's principal ``name@R`` → ``name`` for
        each realm ``R`` of ``trusted_realms`` and of Ferry's own principal other than ``realm``,
        then ``DEFAULT`` (principals of ``realm``). Only Ferry's name is mapped: a rule for every
        ``.*@R`` would also make ``hdfs@R`` the clusters' superuser and ``hive@R`` a proxy user.
        Rule syntax: Hadoop's SecureMode.md, "Mapping from Kerberos principals to OS user
        accounts" (the rule's pattern must match the whole ``$1@$0``); one rule per line."""
        parts = self.client_principal.rsplit("@", 1)[0].split("/")
        # [n:$1@$0] is the first component and the realm (a two-component name/host@R maps to
        # name, whatever its host); the pattern then names Ferry's first component and R exactly
        first = re.escape(parts[0])
        foreign = dict.fromkeys([*self.trusted_realms, self.client_realm])
        rules = [
            f"RULE:[{len(parts)}:$1@$0]({first}@{re.escape(r)})s/@.*//"
            for r in foreign
            if r != self.realm
        ]
        return "\n".join([*rules, "DEFAULT"])

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
