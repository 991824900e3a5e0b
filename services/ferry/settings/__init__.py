"""Ferry's one settings object (its sections are in :mod:`ferry.settings`).

Every value is read once, from the environment (prefix ``FERRY_``, nested fields joined by ``__``,
e.g. ``FERRY_KAFKA__BOOTSTRAP_SERVERS``) and, optionally, from a YAML file named by
``FERRY_CONFIG`` (over the profile overlays of ``FERRY_PROFILE``: :mod:`ferry.settings.sources`).
Environment values win over the files. The object is frozen: code that needs a different value
builds a new one with :meth:`pydantic.BaseModel.model_copy`.

These are what an edge node sets: what Ferry connects to and how it behaves. Defaults point at
the kit's embedded local stack (``ferry stack up``) on one machine: every port is on 127.0.0.1.
The settings of the servers the kit starts (heaps, their own ports, supervisord) are the kit's
(``ferry_kit.settings``), read from the same environment and files; Ferry's settings ignore those
keys when the kit is installed and refuse them otherwise. Clusters are named, never addressed
directly: code asks for ``settings.cluster("a")`` (after HdfsCLI aliases).
"""

from __future__ import annotations

import os
from functools import lru_cache
from pathlib import Path
from typing import Any

from pydantic import BaseModel, Field, field_validator, model_validator
from pydantic_settings import (
    BaseSettings,
    PydanticBaseSettingsSource,
    SettingsConfigDict,
)

from ferry.errors import ConfigError
from ferry.settings.base import WorkPath, under_cwd
from ferry.settings.client_conf import cluster_from_conf_dir, metastore_from_conf_dir
from ferry.settings.hdfs import HdfsClusterSettings
from ferry.settings.hive import HiveServer2Settings, MetastoreSettings
from ferry.settings.kafka import KafkaSettings
from ferry.settings.kerberos import KerberosSettings
from ferry.settings.lineage import LineageSettings
from ferry.settings.paths import PathSettings
from ferry.settings.retention import RetentionSettings
from ferry.settings.retry import RetrySettings
from ferry.settings.sources import YamlSource, extensions, profile_files, without_keys_of
from ferry.settings.spark import SparkSettings, ZooKeeperSettings
from ferry.settings.stages import (
    ExtractSettings,
    LoadSettings,
    TransferSettings,
    TransformSettings,
)
from ferry.settings.tracker import TrackerSettings

#: The clusters' NameNodes when nothing else is given: the kit's local stack on this machine.
DEFAULT_CLUSTERS: dict[str, dict[str, Any]] = {
    "b": {"namenode_rpc_port": 18020, "namenode_http_port": 19870},
    "a": {"namenode_rpc_port": 28020, "namenode_http_port": 29870},
}


class Settings(BaseSettings):
    """All of Ferry's settings. Build with :func:`get_settings`.

    Raises:
        ConfigError: a value is missing or invalid (pydantic's message kept, with the source).
    """

    model_config = SettingsConfigDict(
        env_prefix="FERRY_",
        env_nested_delimiter="__",
        frozen=True,
        extra="forbid",
        validate_default=True,
    )

    var_dir: WorkPath = Field(
        default=Path("var"),
        description="Ferry's local state: the tracker's store (tracker.data_dir), liveness files "
        "(run/), Kerberos ticket caches; with the kit also the local stack's servers, logs and "
        "supervisord. Relative: under the working directory. The other local paths default "
        "under it.",
    )
    clusters: dict[str, HdfsClusterSettings] = Field(
        default_factory=lambda: {k: HdfsClusterSettings(**v) for k, v in DEFAULT_CLUSTERS.items()},
        description=(
            "HDFS clusters by name. Env: FERRY_CLUSTERS__<A|B>__<FIELD>; a partial value is "
            "merged onto that cluster's defaults (DEFAULT_CLUSTERS), so one field can change alone."
        ),
    )
    kafka: KafkaSettings = Field(
        default_factory=KafkaSettings, description="Kafka broker and topic plan."
    )
    zookeeper: ZooKeeperSettings = Field(
        default_factory=ZooKeeperSettings, description="ZooKeeper of the Spark master pair."
    )
    spark: SparkSettings = Field(
        default_factory=SparkSettings, description="Spark standalone cluster and app sizes."
    )
    metastore: MetastoreSettings = Field(
        default_factory=MetastoreSettings, description="Hive metastore of cluster A."
    )
    hiveserver2: HiveServer2Settings = Field(
        default_factory=HiveServer2Settings, description="HiveServer2 (JDBC) of cluster A."
    )
    retry: RetrySettings = Field(
        default_factory=RetrySettings, description="Retry policy of network calls."
    )
    paths: PathSettings = Field(
        default_factory=PathSettings, description="NAS and HDFS directories."
    )
    tracker: TrackerSettings = Field(
        default_factory=TrackerSettings, description="The tracker service."
    )
    extract: ExtractSettings = Field(
        default_factory=ExtractSettings, description="The extract service (NAS poller)."
    )
    transfer: TransferSettings = Field(
        default_factory=TransferSettings, description="The transfer service (B → A)."
    )
    transform: TransformSettings = Field(
        default_factory=TransformSettings,
        description="The transform service: batching, the warm-up at start.",
    )
    load: LoadSettings = Field(
        default_factory=LoadSettings, description="The load service: batching, file sizes."
    )
    retention: RetentionSettings = Field(
        default_factory=RetentionSettings,
        description="How long each zone keeps a file's copy; the gc service's sweeps.",
    )
    kerberos: KerberosSettings = Field(
        default_factory=KerberosSettings, description="Kerberos of the HDFS clusters (off)."
    )
    lineage: LineageSettings = Field(
        default_factory=LineageSettings, description="OpenLineage run events (off)."
    )

    @model_validator(mode="before")
    @classmethod
    def _derived_defaults(cls, data: Any) -> Any:
        """Defaults that depend on other values: the clusters' and the metastore's client
        configuration directories first (:func:`_client_configuration`), then the local files
        under ``var_dir`` (:func:`_files_under_var_dir`)."""
        if not isinstance(data, dict):
            return data
        for extension in extensions(Settings):
            if not issubclass(cls, extension):
                data = without_keys_of(data, extension, cls)
        return _files_under_var_dir(_client_configuration(data))

    @field_validator("clusters", mode="before")
    @classmethod
    def _merge_cluster_defaults(cls, value: Any) -> Any:
        """``{"a": {"namenode_http_port": 333}}`` (e.g. from one env var) keeps a's other
        defaults."""
        if not isinstance(value, dict):
            return value
        merged: dict[str, Any] = {}
        for name in [*DEFAULT_CLUSTERS, *(k for k in value if k not in DEFAULT_CLUSTERS)]:
            given = value.get(name, {})
            if isinstance(given, BaseModel):
                given = given.model_dump(exclude_unset=True)
            if name not in value and name in DEFAULT_CLUSTERS:
                given = {}
            merged[name] = {**DEFAULT_CLUSTERS.get(name, {}), **given}
        return merged

    def cluster(self, name: str) -> HdfsClusterSettings:
        """Settings of cluster ``"a"`` or ``"b"``.

        Raises:
            ConfigError: no cluster of that name is configured.
        """
        try:
            return self.clusters[name]
        except KeyError as exc:
            raise ConfigError(
                f"no HDFS cluster named {name!r}; configured: {sorted(self.clusters)}"
            ) from exc

    @classmethod
    def settings_customise_sources(
        cls,
        settings_cls: type[BaseSettings],
        init_settings: PydanticBaseSettingsSource,
        env_settings: PydanticBaseSettingsSource,
        dotenv_settings: PydanticBaseSettingsSource,
        file_secret_settings: PydanticBaseSettingsSource,
    ) -> tuple[PydanticBaseSettingsSource, ...]:
        return (init_settings, env_settings, YamlSource(settings_cls))


def _given(value: Any) -> dict[str, Any]:
    """A section as given: a dict, or a model's explicitly set fields."""
    if isinstance(value, BaseModel):
        return value.model_dump(exclude_unset=True)
    return dict(value or {})


def _client_configuration(data: dict[str, Any]) -> dict[str, Any]:
    """Fill what ``clusters.<x>.hadoop_conf_dir`` and ``metastore.hive_conf_dir`` describe
    (:mod:`ferry.settings.client_conf`) UNDER the values given explicitly and OVER Ferry's
    defaults. A cluster whose configuration says ``hadoop.security.authentication=kerberos``
    turns ``kerberos.enabled`` on (and gives ``kerberos.realm`` from its NameNode's principal,
    ``kerberos.protection`` from its ``hadoop.rpc.protection``) unless those are given.

    Raises:
        ConfigError: a configuration directory that cannot be read or lacks a required key.
    """
    clusters = {name: _given(v) for name, v in _given(data.get("clusters")).items()}
    kerberos = _given(data.get("kerberos"))
    secure = False
    realms: list[str] = []
    protections: list[str] = []
    for name, given in clusters.items():
        conf_dir = given.get("hadoop_conf_dir")
        if not conf_dir:
            continue
        try:
            found = cluster_from_conf_dir(under_cwd(Path(conf_dir)))
        except ConfigError as exc:
            raise ConfigError(f"clusters.{name}.hadoop_conf_dir: {exc}") from exc
        secure |= found.pop("kerberos")
        realms += [found.pop("kerberos_realm")] if "kerberos_realm" in found else []
        protections += [found.pop("kerberos_protection")] if "kerberos_protection" in found else []
        clusters[name] = {**found, **given}
    if clusters:
        data = {**data, "clusters": clusters}
    if secure and "enabled" not in kerberos:
        kerberos["enabled"] = True
        if realms and "realm" not in kerberos:
            kerberos["realm"] = realms[0]
        data = {**data, "kerberos": kerberos}
    if protections and "protection" not in kerberos:
        data = {**data, "kerberos": {**kerberos, "protection": protections[0]}}
    metastore = _given(data.get("metastore"))
    if metastore.get("hive_conf_dir"):
        try:
            found = metastore_from_conf_dir(under_cwd(Path(metastore["hive_conf_dir"])))
        except ConfigError as exc:
            raise ConfigError(f"metastore.hive_conf_dir: {exc}") from exc
        data = {**data, "metastore": {**found, **metastore}}
        data = _hiveserver2_from_hive_site(data, found["hive_properties"])
    return data


def _hiveserver2_from_hive_site(data: dict[str, Any], props: dict[str, str]) -> dict[str, Any]:
    """``hiveserver2.principal`` from the cluster's ``hive-site.xml`` when the settings do not
    give one and Kerberos is on: with ``hive.server2.authentication=KERBEROS``, its
    ``hive.server2.authentication.kerberos.principal`` with ``_HOST`` replaced by
    ``hiveserver2.host`` in lower case (Hadoop's ``SecurityUtil.getServerPrincipal``). A
    ``_HOST`` principal needs ``hiveserver2.host`` given (the default, an address, is no host
    name a KDC knows)."""
    hs2 = _given(data.get("hiveserver2"))
    principal = props.get("hive.server2.authentication.kerberos.principal", "")
    kerberized = props.get("hive.server2.authentication", "").upper() == "KERBEROS"
    krb_on = str(_given(data.get("kerberos")).get("enabled", "")).lower() in ("true", "1")
    if "principal" in hs2 or not (kerberized and principal and krb_on):
        return data
    if "_HOST" in principal:
        if not hs2.get("host"):
            raise ConfigError(
                f"metastore.hive_conf_dir: hive-site.xml names HiveServer2's principal "
                f"{principal!r}: set hiveserver2.host (or hiveserver2.principal)"
            )
        principal = principal.replace("_HOST", str(hs2["host"]).lower())
    return {**data, "hiveserver2": {**hs2, "principal": principal}}


def _files_under_var_dir(data: dict[str, Any]) -> dict[str, Any]:
    """Local files default under ``var_dir``: the tracker's store ``<var_dir>/tracker``,
    the OpenLineage file ``<var_dir>/lineage/openlineage.jsonl``
    (transport ``file``), and the Kerberos files ``<var_dir>/secrets/ferry.keytab``,
    ``<var_dir>/conf/krb5/krb5.conf``, ``<var_dir>/run/krb5cc_ferry`` and
    ``<var_dir>/run/spark-kerberos`` (beside the KDC the stack runs from that ``var_dir``); a
    value given for one of them wins."""
    var = under_cwd(Path(data.get("var_dir") or "var"))
    defaults = {
        "tracker": {"data_dir": var / "tracker"},
        "lineage": {"file_path": var / "lineage" / "openlineage.jsonl"},
        "kerberos": {
            "keytab": var / "secrets" / "ferry.keytab",
            "krb5_conf": var / "conf" / "krb5" / "krb5.conf",
            "ccache": var / "run" / "krb5cc_ferry",
            "spark_files_dir": var / "run" / "spark-kerberos",
        },
    }
    return data | {k: {**d, **_given(data.get(k))} for k, d in defaults.items()}


def use_profile(names: str) -> None:
    """Make the comma-separated profile ``names`` this process's (``FERRY_PROFILE``, inherited
    by the services it starts) and read the settings anew at the next :func:`get_settings`.

    Raises:
        ConfigError: an unknown profile (now, not at the first settings read).
    """
    profile_files(names)
    os.environ["FERRY_PROFILE"] = names
    get_settings.cache_clear()


@lru_cache(maxsize=1)
def get_settings() -> Settings:
    """The process-wide settings, read once.

    Raises:
        ConfigError: invalid environment or settings file.
    """
    from pydantic import ValidationError
    from pydantic_settings import SettingsError

    try:
        return Settings()
    except (ValidationError, SettingsError) as exc:
        raise ConfigError(f"invalid Ferry settings: {exc}") from exc


__all__ = ["DEFAULT_CLUSTERS", "Settings", "get_settings"]
