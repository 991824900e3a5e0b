"""Settings: environment names, cluster defaults merged per field, clear errors."""

from __future__ import annotations

import os
import typing
from pathlib import Path

import pytest
from pydantic import BaseModel

from ferry.errors import ConfigError
from ferry.settings import Settings, get_settings


@pytest.fixture(autouse=True)
def _fresh_settings():  # type: ignore[no-untyped-def]
    get_settings.cache_clear()
    yield
    get_settings.cache_clear()


def test_one_cluster_field_from_the_environment_keeps_that_clusters_other_defaults(monkeypatch):  # type: ignore[no-untyped-def]
    monkeypatch.setenv("FERRY_CLUSTERS__A__NAMENODE_HTTP_PORT", "333")
    monkeypatch.setenv(
        "FERRY_CLUSTERS__A__DATANODE_ADDRESS_MAP", '{"127.0.0.1:29864": "127.0.0.1:40000"}'
    )
    s = get_settings()
    a, b = s.cluster("a"), s.cluster("b")
    assert (a.namenode_rpc_port, a.namenode_http_port) == (28020, 333)
    assert a.datanode_address_map == {"127.0.0.1:29864": "127.0.0.1:40000"}
    assert (b.namenode_http_port, b.fs_url) == (19870, "hdfs://127.0.0.1:18020")


def test_the_kits_keys_are_read_by_the_kit_and_ignored_by_ferry(monkeypatch):  # type: ignore[no-untyped-def]
    """The local stack's server settings keep their names (FERRY_SPARK__WORKER_CORES, …): the
    kit's settings read them, Ferry's ignore exactly those and still refuse a misspelt key."""
    from ferry_kit.settings import get_kit_settings

    monkeypatch.setenv("FERRY_CLUSTERS__A__NAMENODE_HEAP_MB", "333")
    monkeypatch.setenv("FERRY_SPARK__WORKER_CORES", "64")
    monkeypatch.setenv("FERRY_SUPERVISE__START_SECS", "4")
    kit = get_kit_settings()
    a, b = kit.cluster("a"), kit.cluster("b")
    assert (a.namenode_heap_mb, a.namenode_rpc_port, a.datanode_port) == (333, 28020, 29866)
    assert (b.namenode_heap_mb, b.datanode_port) == (256, 19866)
    assert (kit.spark.worker_cores, kit.supervise.start_secs) == (64, 4)
    ours = get_settings()
    assert not hasattr(ours.spark, "worker_cores") and not hasattr(ours, "supervise")
    assert ours.cluster("a").namenode_rpc_port == 28020
    get_settings.cache_clear()
    monkeypatch.setenv("FERRY_SPARK__WORKR_CORES", "64")
    with pytest.raises(ConfigError, match="workr_cores"):
        get_settings()


def test_clusters_as_json_merge_onto_the_defaults_too(monkeypatch):  # type: ignore[no-untyped-def]
    monkeypatch.setenv("FERRY_CLUSTERS", '{"a": {"webhdfs_url_override": "http://127.0.0.1:1"}}')
    s = get_settings()
    assert s.cluster("a").webhdfs_url == "http://127.0.0.1:1"
    assert s.cluster("a").fs_url == "hdfs://127.0.0.1:28020"
    assert s.cluster("b").webhdfs_url == "http://127.0.0.1:19870"


def test_nested_section_fields_from_the_environment(monkeypatch):  # type: ignore[no-untyped-def]
    monkeypatch.setenv("FERRY_TRANSFORM__BATCH_SIZE", "7")
    monkeypatch.setenv("FERRY_KAFKA__TOPIC_PREFIX", "x")
    s = get_settings()
    assert (s.transform.batch_size, s.load.batch_size) == (7, 256)
    assert (s.kafka.topic("failed"), s.kafka.port) == ("x.failed", 19092)


def test_malformed_or_invalid_values_raise_config_error(monkeypatch):  # type: ignore[no-untyped-def]
    monkeypatch.setenv("FERRY_CLUSTERS", "{not json")
    with pytest.raises(ConfigError, match="invalid Ferry settings"):
        get_settings()
    get_settings.cache_clear()
    monkeypatch.delenv("FERRY_CLUSTERS")
    monkeypatch.setenv("FERRY_KAFKA__PORT", "not-a-port")
    with pytest.raises(ConfigError, match="port"):
        get_settings()


def test_unknown_cluster_name_is_a_config_error():  # type: ignore[no-untyped-def]
    with pytest.raises(ConfigError, match="no HDFS cluster named 'c'"):
        get_settings().cluster("c")


def _undescribed(model: type[BaseModel], path: str = "") -> list[str]:
    missing = []
    for name, field in model.model_fields.items():
        if not (field.description or "").strip():
            missing.append(f"{path}{name}")
        for arg in (field.annotation, *typing.get_args(field.annotation)):
            if isinstance(arg, type) and issubclass(arg, BaseModel):
                missing += _undescribed(arg, f"{path}{name}.")
    return missing


def test_every_setting_has_a_description():  # type: ignore[no-untyped-def]
    assert _undescribed(Settings) == []


def test_profile_overlays_merge_under_the_config_file_and_the_environment(  # type: ignore[no-untyped-def]
    monkeypatch, tmp_path
):
    (tmp_path / "p1.yaml").write_text("kafka: {topic_prefix: p1, port: 1111}\n")
    (tmp_path / "p2.yaml").write_text("kafka: {port: 2222}\ntransform: {batch_size: 5}\n")
    top = tmp_path / "top.yml"
    top.write_text("transform: {batch_size: 9}\n")
    monkeypatch.setenv("FERRY_PROFILES_DIR", str(tmp_path))
    monkeypatch.setenv("FERRY_PROFILE", "p1,p2")
    monkeypatch.setenv("FERRY_CONFIG", str(top))
    monkeypatch.setenv("FERRY_KAFKA__TOPIC_PREFIX", "env")
    s = Settings()
    assert (s.kafka.topic_prefix, s.kafka.port, s.transform.batch_size) == ("env", 2222, 9)
    monkeypatch.setenv("FERRY_PROFILE", "p1,nope")
    known = r"unknown profile 'nope'; known profiles: \[.*'p1', 'p2'.*\]"
    with pytest.raises(ConfigError, match=known):
        Settings()


def test_the_shipped_default_profile_changes_nothing(monkeypatch):  # type: ignore[no-untyped-def]
    monkeypatch.delenv("FERRY_CONFIG", raising=False)
    monkeypatch.setenv("FERRY_PROFILE", "default")
    with_profile = Settings()
    monkeypatch.delenv("FERRY_PROFILE")
    assert with_profile == Settings()


def test_the_secure_profile_is_secure_kafka_and_kerberos_with_wire_privacy_and_a_trust(monkeypatch):  # type: ignore[no-untyped-def]
    monkeypatch.delenv("FERRY_CONFIG", raising=False)
    monkeypatch.setenv("FERRY_PROFILE", "secure")
    secure = Settings()
    monkeypatch.setenv("FERRY_PROFILE", "secure-kafka,kerberos")
    both = Settings()
    assert (secure.kafka.security_protocol, secure.kerberos.enabled) == ("SASL_SSL", True)
    # plus wire privacy (RPC and block data encrypted, WebHDFS over HTTPS on both clusters) and a
    # partner realm in trust
    assert secure.kerberos == both.kerberos.model_copy(
        update={"protection": "privacy", "trusted_realms": ["PARTNER.FERRY.LOCAL"]}
    )
    ca = Path.cwd() / "var" / "secrets" / "hdfs-ca.pem"
    assert {n: (c.http_policy, c.ssl_ca_path) for n, c in secure.clusters.items()} == {
        "a": ("HTTPS_ONLY", ca),
        "b": ("HTTPS_ONLY", ca),
    }
    assert secure.model_copy(update={"kerberos": both.kerberos, "clusters": both.clusters}) == both


def test_stack_up_takes_a_profile_as_the_root_option_does(monkeypatch):  # type: ignore[no-untyped-def]
    from typer.testing import CliRunner

    from ferry.settings import get_settings
    from ferry_kit.stack import cli as stack_cli

    monkeypatch.setenv("FERRY_PROFILE", "")  # restored after the test (use_profile sets it)
    out = CliRunner().invoke(stack_cli.app, ["up", "--profile", "nope"])
    assert out.exit_code == 2
    assert "stack up failed: unknown profile 'nope'; known profiles: [" in out.output
    monkeypatch.setattr(stack_cli, "get_kit_settings", lambda: (_ for _ in ()).throw(SystemExit(7)))
    out = CliRunner().invoke(stack_cli.app, ["up", "--profile", "secure"])
    # the profile is taken before the settings are read (here: the read stops the command)
    assert (out.exit_code, os.environ.get("FERRY_PROFILE")) == (7, "secure")
    assert get_settings.cache_info().currsize == 0
