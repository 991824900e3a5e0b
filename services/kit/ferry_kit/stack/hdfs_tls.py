"""WebHDFS over HTTPS on the local stack's NameNodes and DataNodes (``clusters.<x>.http_policy``
other than ``HTTP_ONLY``; profile ``secure``; docs/security.md, "Wire privacy").

The NameNode and DataNode of such a cluster run Hadoop's ``dfs.http.policy`` with their web
servers on TLS at the cluster's usual web ports (``dfs.namenode.https-address`` =
``namenode_http_port``, ``dfs.datanode.https.address`` = ``datanode_http_port``), their key in
``ssl-server.xml`` (Hadoop's ``ssl.server.keystore.*`` keys, read from the class path; the file
is 0600, it holds the keystore password). One CA and one server certificate serve every cluster
of the stack (:func:`ferry_kit.stack.tls.make_pki`, under ``var/conf/hdfs-tls``), made when
missing or when the CA expires within :data:`RENEW_BEFORE_S`, so a daemon restarted alone keeps
the certificate its peers and clients trust. The CA's PEM is copied to each cluster's
``ssl_ca_path``, which Ferry's WebHDFS clients verify against.

With HTTPS_ONLY and SASL on data transfer the DataNode needs no privileged ports
(``DataNode.checkSecureConfig``), so such a cluster runs without
``ignore.secure.ports.for.testing``.
"""

from __future__ import annotations

import shutil
from collections.abc import Callable
from functools import partial
from pathlib import Path
from typing import Any

from ferry.settings.client_conf import site_xml
from ferry_kit.errors import StackError
from ferry_kit.settings import StackCluster
from ferry_kit.stack.base import Layout
from ferry_kit.stack.tls import Pki, make_pki, valid_for, write_private

#: A CA that expires within this many seconds is remade at the next prepare (7 days).
RENEW_BEFORE_S = 7 * 86400


def tls_dir(lay: Layout) -> Path:
    """``var/conf/hdfs-tls``: the stack's HDFS CA, certificate and keystore (mode 0700)."""
    return lay.conf / "hdfs-tls"


def ensure_pki(lay: Layout) -> Pki:
    """The stack's HDFS CA and server keystore: the existing ones while the CA is valid for
    :data:`RENEW_BEFORE_S` more seconds, else new ones.

    Raises:
        StackError: an ``openssl`` step failed.
    """
    d = tls_dir(lay)
    keystore, password = d / "hdfs.p12", d / "keystore.password"
    if keystore.is_file() and password.is_file() and valid_for(d / "ca.pem", RENEW_BEFORE_S):
        return Pki(d / "ca.pem", keystore, password.read_text(encoding="utf-8").strip())
    return make_pki(
        d, "localhost", lay.logs / "hdfs-tls.log", name="hdfs", common_name="ferry-hdfs"
    )


def web_check(
    check: Callable[..., str], cs: StackCluster, auth: Callable[[], Any] | None
) -> Callable[[], str]:
    """A health check ``check(url, auth, verify)`` of the one NameNode's web server: its
    ``http(s)://host:port`` (``http_policy`` decides), ``auth``, and the stack's CA
    (``ssl_ca_path``; else the system's CAs) to verify it against."""
    url = f"{cs.web_scheme}://{cs.host}:{cs.namenode_http_port}"
    return partial(check, url, auth, str(cs.ssl_ca_path) if cs.ssl_ca_path else True)


def server_keys(cs: StackCluster) -> dict[str, str]:
    """hdfs-site keys of a daemon of ``cs`` serving HTTPS (hdfs-default.xml): the policy and the
    HTTPS addresses at the cluster's web ports (one NameNode); empty for ``HTTP_ONLY``."""
    if cs.http_policy == "HTTP_ONLY":
        return {}
    return {
        "dfs.http.policy": cs.http_policy,
        "dfs.datanode.https.address": f"{cs.datanode_host}:{cs.datanode_http_port}",
        "dfs.namenode.https-address": f"{cs.host}:{cs.namenode_http_port}",
    }


def prepare(lay: Layout, cs: StackCluster, conf_dir: Path, site: dict[str, str]) -> dict[str, str]:
    """For a cluster serving HTTPS: write ``ssl-server.xml`` (0600) into ``conf_dir`` with the
    stack's keystore, copy the CA to ``cs.ssl_ca_path``, and return the hdfs-site keys ``site``
    with :func:`server_keys` added and ``ignore.secure.ports.for.testing`` removed (HTTPS_ONLY
    satisfies the DataNode). ``site`` as it is, nothing written, for ``HTTP_ONLY``.

    Raises:
        StackError: the cluster serves HTTPS without ``ssl_ca_path``, in a shape the stack does
            not build (HTTP_AND_HTTPS, HA, hosts other than localhost/127.0.0.1), or the PKI
            failed.
    """
    if cs.http_policy == "HTTP_ONLY":
        return site
    # what is built: the other shapes need more than these keys (HTTP_AND_HTTPS: two web ports
    # per daemon and privileged ones for the DataNode; HA: the JournalNodes' HTTPS and an
    # ssl-client.xml for edits; other hosts: names in the certificate)
    hosts = {cs.host, cs.datanode_host} - {"localhost", "127.0.0.1"}
    if cs.http_policy != "HTTPS_ONLY" or cs.ha or hosts:
        shape = (
            cs.http_policy + (" with HA" if cs.ha else "") + (f" on {sorted(hosts)}" * bool(hosts))
        )
        raise StackError(
            f"the local stack serves HDFS over HTTPS as HTTPS_ONLY, one NameNode per cluster, "
            f"on localhost/127.0.0.1: {shape} is not built (docs/security.md, Wire privacy)"
        )
    if cs.ssl_ca_path is None:
        raise StackError(
            f"http_policy {cs.http_policy}: set the cluster's ssl_ca_path (where the stack "
            "writes its CA for Ferry's clients)"
        )
    pki = ensure_pki(lay)
    write_private(
        conf_dir / "ssl-server.xml",
        site_xml(
            {
                "ssl.server.keystore.location": str(pki.keystore),
                "ssl.server.keystore.type": "pkcs12",
                "ssl.server.keystore.password": pki.password,
                "ssl.server.keystore.keypassword": pki.password,
            }
        ),
    )
    cs.ssl_ca_path.parent.mkdir(parents=True, exist_ok=True)
    shutil.copyfile(pki.ca_pem, cs.ssl_ca_path)
    out = {k: v for k, v in site.items() if k != "ignore.secure.ports.for.testing"}
    return out | server_keys(cs)
