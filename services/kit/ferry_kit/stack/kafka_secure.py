"""The local stack's broker on SASL_SSL (``kafka.security_protocol: SASL_SSL``, profile
``secure-kafka``; docs/security.md).

At every start (:func:`prepare`), under ``var/conf/kafka/tls`` (mode 0700), OpenSSL makes a CA
and a broker certificate signed by it (:func:`ferry_kit.stack.tls.make_pki`: subject alternative
names the broker host, ``localhost`` and ``127.0.0.1``; a PKCS#12 keystore with a random
password); the CA's PEM is copied to ``kafka.ssl_ca_path`` for the clients. SCRAM users exist
from the first start (Kafka's KIP-900: ``kafka-storage format --add-scram``):
``kafka.sasl_username`` with the clients' password, and ``ferry-broker`` (inter-broker listener)
with a random one kept in ``var/conf/kafka/broker.password`` (0600). The clients' password is
``kafka.sasl_password``, else ``kafka.sasl_password_file``, created with a random value (0600)
when missing; each service of ``kafka.service_users`` gets its user the same way.

The broker runs KRaft's ``StandardAuthorizer``: its super users are ``ferry-broker`` and
``ANONYMOUS`` (the PLAINTEXT controller listener, bound to the stack's host, which the broker
itself uses in combined mode); every other user may do only what its ACLs allow. The health check
logs in as ``ferry-broker`` and creates the ACLs of the settings' topic prefix
(:func:`grant`: each service its own topics and group, the operator ``kafka.sasl_username`` the
whole prefix); a test with a prefix of its own calls :func:`grant` for it.

The SCRAM users live in the KRaft metadata, so the SASL_SSL broker keeps its own data directory
(``var/data/kafka-sasl_ssl``, never the plaintext one) and a fingerprint of the users; when the
password changes the directory is formatted anew (local test data only).
"""

from __future__ import annotations

import hashlib
import os
import secrets
import shutil
from pathlib import Path

from pydantic import SecretStr

from ferry.core.kafka import acls
from ferry.core.kafka.clients import build_admin
from ferry.core.kafka.topics import ensure_topics
from ferry.errors import ConfigError
from ferry.ops.kafka_cli import operator_topics
from ferry.settings.secrets import read_secret_file
from ferry_kit.errors import StackError
from ferry_kit.settings import KitSettings, StackKafka
from ferry_kit.stack.base import Layout, render
from ferry_kit.stack.tls import make_pki, write_private

#: SCRAM user of the broker's own inter-broker connections.
BROKER_USER = "ferry-broker"


def data_dir(lay: Layout) -> Path:
    """Data directory of the SASL_SSL broker (apart from the plaintext one)."""
    return lay.data / "kafka-sasl_ssl"


def client_password(kf: StackKafka) -> str:
    """The clients' SCRAM password; ``kafka.sasl_password_file`` is created (random, 0600) when it
    does not exist yet.

    Raises:
        StackError: neither setting is given, or the file is refused (mode not 0600).
    """
    if kf.sasl_password is None and kf.sasl_password_file is None:
        raise StackError("kafka SASL_SSL: set kafka.sasl_password or kafka.sasl_password_file")
    file = kf.sasl_password_file
    if kf.sasl_password is None and file is not None and not file.exists():
        write_private(file, secrets.token_hex(24) + "\n")
    try:
        return kf.password().get_secret_value()
    except ConfigError as exc:
        raise StackError(f"kafka SASL_SSL: {exc}") from None


def service_password(kf: StackKafka, service: str) -> str:
    """The SCRAM password of ``service``'s own user (``kafka.service_users``); its
    ``sasl_password_file`` is created (random, 0600) when it does not exist yet.

    Raises:
        StackError: the entry has neither a password nor a file, or the file is refused.
    """
    u = kf.service_users[service]
    if u.sasl_password is None and u.sasl_password_file is None:
        raise StackError(f"kafka SASL_SSL: set kafka.service_users.{service}.sasl_password_file")
    if u.sasl_password is None and u.sasl_password_file and not u.sasl_password_file.exists():
        write_private(u.sasl_password_file, secrets.token_hex(24) + "\n")
    try:
        return kf.model_copy(update={"service": service}).password().get_secret_value()
    except ConfigError as exc:
        raise StackError(f"kafka SASL_SSL: {exc}") from None


def admin_settings(kf: StackKafka, lay: Layout) -> StackKafka:
    """``kf`` logging in as the broker's own user, a super user of its authorizer: what the
    stack uses to check the broker and to create the ACLs."""
    return kf.model_copy(
        update={
            "sasl_username": BROKER_USER,
            "sasl_password": SecretStr(_broker_password(lay)),
            "sasl_password_file": None,
            "service": None,
        }
    )


def grant(settings: KitSettings) -> int:
    """Create, as the broker's administrator, the ACLs of every service and of the operator for
    ``settings.kafka.topic_prefix`` (:func:`ferry.core.kafka.acls.apply`); 0 and nothing done when
    Kafka is not on SASL_SSL. Then, as the operator, creates the prefix's topics the services may
    not create (the plan's, the waiting room's and the lineage topic, which the kit's services
    write). Returns the bindings sent."""
    kf = settings.kafka
    if not kf.secure:
        return 0
    admin = build_admin(admin_settings(kf, Layout(settings.var_dir)))
    n = acls.apply(admin, kf, settings.lineage.kafka_topic)
    operator = kf.model_copy(update={"service": None})
    ensure_topics(build_admin(operator), operator, operator_topics(settings, lineage=True))
    return n


def _broker_password(lay: Layout) -> str:
    path = lay.conf / "kafka" / "broker.password"
    if not path.exists():
        write_private(path, secrets.token_hex(24) + "\n")
    return read_secret_file(path, "broker.password").get_secret_value()


def prepare(kf: StackKafka, lay: Layout, props: Path) -> list[str]:
    """Certificates, users and ``server.properties`` (0600) of the SASL_SSL broker; returns the
    storage tool's ``--add-scram`` arguments when its data directory must be formatted, else
    ``[]``.

    Raises:
        StackError: no password configured, no ``kafka.ssl_ca_path``, or an ``openssl`` step
            failed.
    """
    if kf.ssl_ca_path is None:
        raise StackError("kafka SASL_SSL: set kafka.ssl_ca_path (where the stack writes its CA)")
    password, broker_password = client_password(kf), _broker_password(lay)
    pki = make_pki(
        lay.conf / "kafka" / "tls",
        kf.host,
        lay.logs / "kafka-tls.log",
        name="broker",
        common_name="ferry-kafka",
    )
    ca, keystore, keystore_password = pki.ca_pem, pki.keystore, pki.password
    kf.ssl_ca_path.parent.mkdir(parents=True, exist_ok=True)
    shutil.copyfile(ca, kf.ssl_ca_path)
    data = data_dir(lay)
    render(
        "kafka-server-sasl_ssl.properties.tmpl",
        props,
        host=kf.host,
        port=kf.port,
        controller_port=kf.controller_port,
        data_dir=data,
        mechanism=kf.sasl_mechanism,
        mechanism_lower=kf.sasl_mechanism.lower(),
        broker_user=BROKER_USER,
        broker_password=broker_password,
        keystore=keystore,
        keystore_password=keystore_password,
        ca_pem=ca,
    )
    os.chmod(props, 0o600)
    users = [(kf.sasl_username, password), (BROKER_USER, broker_password)]
    for name, u in sorted(kf.service_users.items()):
        users.append((u.sasl_username, service_password(kf, name)))
    stamp = hashlib.sha256(repr((kf.sasl_mechanism, users)).encode()).hexdigest()
    stamp_file = data.parent / "kafka-sasl_ssl.users.sha256"
    if (data / "meta.properties").exists():
        if stamp_file.exists() and stamp_file.read_text().strip() == stamp:
            return []
        shutil.rmtree(data)  # other users/passwords: a fresh local store
    write_private(stamp_file, stamp + "\n")
    args = []
    for name, secret in users:
        args += ["--add-scram", f"{kf.sasl_mechanism}=[name={name},password={secret}]"]
    return args
