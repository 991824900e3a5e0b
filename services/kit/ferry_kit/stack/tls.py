"""Certificates of the local stack's TLS servers: the SASL_SSL broker
(:mod:`ferry_kit.stack.kafka_secure`) and WebHDFS over HTTPS on the NameNodes and DataNodes
(:mod:`ferry_kit.stack.hdfs_tls`).

:func:`make_pki` has OpenSSL make a CA and one server certificate signed by it (subject
alternative names: the server host, ``localhost`` and ``127.0.0.1``), packed with its key into a
PKCS#12 keystore whose password is random. Passwords go through files (mode 0600), never on a
command line; private keys are 0600 in a 0700 directory.
"""

from __future__ import annotations

import ipaddress
import os
import secrets
import shutil
import subprocess
from dataclasses import dataclass
from pathlib import Path

from ferry_kit.errors import StackError
from ferry_kit.stack.base import run_once

#: Days the stack's CAs and server certificates are valid.
CERT_DAYS = 30


@dataclass(frozen=True)
class Pki:
    """What :func:`make_pki` made: the CA's PEM, the server's PKCS#12 keystore and its
    password (the key's too)."""

    ca_pem: Path
    keystore: Path
    password: str


def write_private(path: Path, text: str) -> None:
    """Write ``text`` to ``path`` readable by its owner only (created 0600, parents 0700)."""
    path.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "w", encoding="utf-8") as fh:
        fh.write(text)
    os.chmod(path, 0o600)


def _openssl() -> str:
    exe = shutil.which("openssl")
    if exe is None:
        raise StackError("openssl not found (Debian package openssl)")
    return exe


def _alt_names(host: str) -> str:
    try:
        ipaddress.ip_address(host)
        names = {f"IP:{host}", "IP:127.0.0.1", "DNS:localhost"}
    except ValueError:
        names = {f"DNS:{host}", "IP:127.0.0.1", "DNS:localhost"}
    return ",".join(sorted(names))


def make_pki(tls: Path, host: str, log: Path, *, name: str, common_name: str) -> Pki:
    """A new CA and server certificate under ``tls`` (emptied first): ``ca.pem``,
    ``<name>.p12`` (alias ``name``) and ``keystore.password``. The certificate is valid
    :data:`CERT_DAYS` days for ``host``, ``localhost`` and ``127.0.0.1``.

    Raises:
        StackError: openssl is missing or a step failed (its output is in ``log``).
    """
    openssl = _openssl()
    if tls.exists():
        shutil.rmtree(tls)
    tls.mkdir(parents=True, mode=0o700)
    password = secrets.token_hex(16)
    write_private(tls / "keystore.password", password)
    (tls / f"{name}.ext").write_text(f"subjectAltName={_alt_names(host)}\n")
    t = {n: str(tls / n) for n in ("ca.key", "ca.pem", f"{name}.key", f"{name}.csr", f"{name}.pem")}
    steps = [
        ["req", "-x509", "-newkey", "rsa:2048", "-nodes", "-keyout", t["ca.key"], "-out",
         t["ca.pem"], "-days", str(CERT_DAYS), "-subj", f"/CN=Ferry local stack CA ({name})",
         "-addext", "basicConstraints=critical,CA:TRUE",
         "-addext", "keyUsage=critical,keyCertSign,cRLSign"],
        ["req", "-newkey", "rsa:2048", "-nodes", "-keyout", t[f"{name}.key"], "-out",
         t[f"{name}.csr"], "-subj", f"/CN={common_name}"],
        ["x509", "-req", "-in", t[f"{name}.csr"], "-CA", t["ca.pem"], "-CAkey", t["ca.key"],
         "-CAcreateserial", "-out", t[f"{name}.pem"], "-days", str(CERT_DAYS),
         "-extfile", str(tls / f"{name}.ext")],
        ["pkcs12", "-export", "-in", t[f"{name}.pem"], "-inkey", t[f"{name}.key"], "-certfile",
         t["ca.pem"], "-name", name, "-out", str(tls / f"{name}.p12"),
         "-passout", f"file:{tls / 'keystore.password'}"],
    ]  # fmt: skip
    for step in steps:
        run_once(f"{name}-tls", [openssl, *step], log, timeout_s=60)
    for key in ("ca.key", f"{name}.key"):
        os.chmod(t[key], 0o600)
    return Pki(tls / "ca.pem", tls / f"{name}.p12", password)


def valid_for(cert: Path, seconds: int) -> bool:
    """``cert`` (PEM) exists and is still valid ``seconds`` from now (``openssl x509
    -checkend``)."""
    if not cert.is_file():
        return False
    proc = subprocess.run(  # noqa: S603 - argv built here
        [_openssl(), "x509", "-checkend", str(seconds), "-noout", "-in", str(cert)],
        capture_output=True,
        timeout=30,
        check=False,
    )
    return proc.returncode == 0
