"""Kafka client security settings (docs/security.md): what every librdkafka client gets under
PLAINTEXT and SASL_SSL, secret files, the secure-kafka profile, and the one-line error of a
refused login."""

from __future__ import annotations

from pathlib import Path

import pytest
from confluent_kafka import KafkaError
from pydantic import SecretStr

from ferry.core.kafka.clients import (
    _error_cb,
    build_admin,
    consumer_config,
    producer_config,
    security_config,
)
from ferry.core.kafka.topics import refused_login
from ferry.errors import ConfigError
from ferry.settings import Settings
from ferry.settings.kafka import KafkaSettings
from ferry_kit.stack.kafka_secure import client_password

PASSWORD = "pw-9f8e7d6c5b4a"


def secure(tmp_path: Path, **kw: object) -> KafkaSettings:
    (tmp_path / "ca.pem").touch()
    return KafkaSettings(
        security_protocol="SASL_SSL", ssl_ca_path=tmp_path / "ca.pem", port=29999, **kw
    )


def test_plaintext_adds_nothing() -> None:
    assert security_config(KafkaSettings()) == {}
    assert "security.protocol" not in producer_config(KafkaSettings())


def test_sasl_ssl_settings_of_every_client(tmp_path: Path) -> None:
    k = secure(tmp_path, sasl_password=SecretStr(PASSWORD))
    expected = {
        "security.protocol": "SASL_SSL",
        "sasl.mechanisms": "SCRAM-SHA-512",
        "sasl.username": "ferry",
        "sasl.password": PASSWORD,
        "ssl.endpoint.identification.algorithm": "https",
        "ssl.ca.location": str(tmp_path / "ca.pem"),
    }
    assert security_config(k) == expected
    for cfg in (producer_config(k), consumer_config(k, "g")):
        assert {key: cfg[key] for key in expected} == expected
    assert PASSWORD not in f"{k!r} {k} {k.model_dump()}"
    (tmp_path / "ca.pem").unlink()
    with pytest.raises(ConfigError, match=r"^kafka.ssl_ca_path: .*/ca.pem is not a file$"):
        build_admin(k)


def test_password_from_a_0600_file_and_refused_otherwise(tmp_path: Path) -> None:
    f = tmp_path / "kafka.password"
    f.write_text(PASSWORD + "\n")
    f.chmod(0o600)
    assert secure(tmp_path, sasl_password_file=f).password().get_secret_value() == PASSWORD
    f.chmod(0o640)
    with pytest.raises(ConfigError) as exc:
        security_config(secure(tmp_path, sasl_password_file=f))
    assert str(exc.value) == (
        f"kafka.sasl_password: {f} has mode 0640; a secret file must be readable by its owner "
        "only (chmod 600); refused"
    )
    with pytest.raises(ConfigError) as exc:
        secure(tmp_path).password()
    assert str(exc.value) == (
        "kafka.security_protocol is SASL_SSL but neither kafka.sasl_password nor "
        "kafka.sasl_password_file is set"
    )


def test_stack_creates_a_missing_password_file_0600(tmp_path: Path) -> None:
    f = tmp_path / "secrets" / "kafka.password"
    first = client_password(secure(tmp_path, sasl_password_file=f))
    assert (len(first), f.stat().st_mode & 0o777, f.parent.stat().st_mode & 0o777) == (
        48,
        0o600,
        0o700,
    )
    assert client_password(secure(tmp_path, sasl_password_file=f)) == first


def test_secure_kafka_profile(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("FERRY_PROFILE", "secure-kafka")
    k = Settings().kafka
    assert (k.security_protocol, k.sasl_mechanism, k.sasl_username) == (
        "SASL_SSL",
        "SCRAM-SHA-512",
        "ferry",
    )
    assert (k.sasl_password_file, k.ssl_ca_path) == (
        Path.cwd() / "var" / "secrets" / "kafka-ferry.password",
        Path.cwd() / "var" / "secrets" / "kafka-ca.pem",
    )


def test_a_refused_login_is_one_config_error_line(tmp_path: Path) -> None:
    k = secure(tmp_path, sasl_password=SecretStr(PASSWORD))
    refused_login(k)  # nothing seen yet: no error
    why = "SASL authentication error: Authentication failed due to invalid credentials"
    _error_cb(k.bootstrap_servers)(KafkaError(KafkaError._AUTHENTICATION, why))
    polled: list[float] = []

    class Admin:
        def poll(self, timeout: float) -> int:
            polled.append(timeout)
            return 0

    with pytest.raises(ConfigError) as exc:
        refused_login(k, Admin())  # type: ignore[arg-type]
    assert polled == [0]  # librdkafka's callbacks served before looking
    assert str(exc.value) == (
        f"kafka at 127.0.0.1:29999 refused user 'ferry' (SCRAM-SHA-512) over SASL_SSL: {why}"
    )
    assert PASSWORD not in str(exc.value)
