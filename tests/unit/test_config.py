"""Settings: environment names, cluster defaults merged per field, clear errors."""

from __future__ import annotations

import typing

import pytest
from pydantic import BaseModel

from ferry.core.config import Settings, get_settings
from ferry.core.errors import ConfigError


@pytest.fixture(autouse=True)
def _fresh_settings():  # type: ignore[no-untyped-def]
    get_settings.cache_clear()
    yield
    get_settings.cache_clear()


def test_one_cluster_field_from_the_environment_keeps_that_clusters_other_defaults(monkeypatch):  # type: ignore[no-untyped-def]
    monkeypatch.setenv("FERRY_CLUSTERS__A__NAMENODE_HEAP_MB", "333")
    monkeypatch.setenv(
        "FERRY_CLUSTERS__A__DATANODE_ADDRESS_MAP", '{"127.0.0.1:29864": "127.0.0.1:40000"}'
    )
    s = get_settings()
    a, b = s.cluster("a"), s.cluster("b")
    assert (a.namenode_heap_mb, a.namenode_rpc_port, a.namenode_http_port) == (333, 28020, 29870)
    assert a.datanode_address_map == {"127.0.0.1:29864": "127.0.0.1:40000"}
    assert (b.namenode_heap_mb, b.fs_url) == (256, "hdfs://127.0.0.1:18020")


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
