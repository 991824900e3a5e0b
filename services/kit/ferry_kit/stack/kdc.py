"""The local stack's Kerberos KDC and the HDFS daemons' Kerberos keys (``kerberos.enabled``,
profile ``kerberos``; docs/security.md, "Kerberos").

The KDC is MIT's ``krb5kdc`` from Debian's ``krb5-kdc`` package, run in the foreground (``-n``)
with its configuration in ``var/conf/krb5`` (``krb5.conf`` for every client, ``kdc.conf`` for
the KDC) and its database in ``var/data/kdc``, created on first start with a random master key
(kept only in the stash file). At every start, ``kadmin.local`` (``krb5-admin-server``) makes sure
these principals exist, with random keys, and writes their keytabs (mode 0600):

==============================  =====================================  =====================
principal                       used by                                keytab
==============================  =====================================  =====================
``hdfs/<service_host>``         NameNodes and DataNodes (RPC, SASL)    var/conf/krb5/hdfs.keytab
``HTTP/<service_host>``,        WebHDFS SPNEGO on the NameNodes        same
``HTTP/127.0.0.1``              (a client names the host it dials)
``hive/<service_host>``         the Hive metastore (SASL)              var/conf/krb5/hive.keytab
``<kerberos.principal>``        Ferry's processes                      ``kerberos.keytab``
==============================  =====================================  =====================

Ferry's principal gets ``kerberos.ticket_lifetime_s`` as its longest ticket (``modprinc
-maxlife``), so a test can watch tickets being renewed. The health check gets a ticket for the
HDFS principal from its keytab (``kinit -k``) into a throw-away cache.
"""

from __future__ import annotations

import os
import secrets
import shlex
import shutil
import subprocess
import tempfile
from pathlib import Path

from ferry.core.errors import StackError
from ferry.settings import Settings
from ferry.settings.kerberos import KerberosSettings
from ferry_kit.stack import health
from ferry_kit.stack.base import Component, Layout, render, run_once
from ferry_kit.stack.process import markers

#: Debian packages of the KDC and its tools (``make test-secure`` installs them).
PACKAGES = "krb5-kdc krb5-admin-server krb5-user"


def conf_dir(lay: Layout) -> Path:
    """``var/conf/krb5``: krb5.conf, kdc.conf, the HDFS keytab."""
    return lay.conf / "krb5"


def hdfs_keytab(lay: Layout) -> Path:
    """Keytab of ``hdfs/<host>`` and the ``HTTP/`` principals (NameNode, DataNode)."""
    return conf_dir(lay) / "hdfs.keytab"


def hive_keytab(lay: Layout) -> Path:
    """Keytab of ``hive/<host>`` (the Hive metastore)."""
    return conf_dir(lay) / "hive.keytab"


def _kdc_env(krb: KerberosSettings, lay: Layout) -> dict[str, str]:
    return {"KRB5_CONFIG": str(krb.krb5_conf), "KRB5_KDC_PROFILE": str(conf_dir(lay) / "kdc.conf")}


def _tool(name: str) -> str:
    exe = shutil.which(name) or next(
        (str(p) for p in (Path("/usr/sbin") / name, Path("/usr/bin") / name) if p.exists()), None
    )
    if exe is None:
        raise StackError(f"{name} not found: apt-get install {PACKAGES} (make test-secure does)")
    return exe


def hdfs_server_conf(krb: KerberosSettings, lay: Layout) -> dict[str, str]:
    """hdfs-site keys of a Kerberos NameNode and DataNode (Hadoop's SecureMode.md and
    HttpAuthentication.md):
    their principal and keytab, SPNEGO on their web servers (WebHDFS, ``/jmx``) with every
    ``HTTP/`` principal of the keytab (``*``: a client names the host it dials, ``localhost`` or
    ``127.0.0.1``), SASL on data transfer.

    ``ignore.secure.ports.for.testing`` lets the DataNode run as a normal user without HTTPS: with
    SASL data transfer protection Hadoop otherwise wants privileged ports or ``dfs.http.policy=
    HTTPS_ONLY`` (DataNode.checkSecureConfig). A real cluster sets HTTPS_ONLY; see
    docs/security.md."""
    keytab = str(hdfs_keytab(lay))
    return {
        # every servlet of the daemons' web servers (WebHDFS, /jmx) behind SPNEGO
        "hadoop.http.authentication.type": "kerberos",
        "hadoop.http.authentication.simple.anonymous.allowed": "false",
        "hadoop.http.authentication.kerberos.principal": "*",
        "hadoop.http.authentication.kerberos.keytab": keytab,
        "hadoop.http.authentication.token.validity": str(krb.http_token_validity_s),
        "dfs.namenode.keytab.file": keytab,
        "dfs.datanode.keytab.file": keytab,
        "dfs.web.authentication.kerberos.principal": "*",
        "dfs.web.authentication.kerberos.keytab": keytab,
        "ignore.secure.ports.for.testing": "true",
        # the SASL metastore acts on HDFS as its caller (its doAs of the client's user)
        "hadoop.proxyuser.hive.hosts": "*",
        "hadoop.proxyuser.hive.groups": "*",
    }


def _principals(krb: KerberosSettings) -> list[str]:
    return [krb.hdfs_principal, krb.http_principal, f"HTTP/127.0.0.1@{krb.realm}"]


def _kadmin(krb: KerberosSettings, lay: Layout, query: str) -> str:
    """Run one ``kadmin.local`` query; returns its output."""
    proc = subprocess.run(  # noqa: S603 - argv built here
        [_tool("kadmin.local"), "-r", krb.realm, "-q", query],
        capture_output=True,
        text=True,
        timeout=60,
        env={**os.environ, **_kdc_env(krb, lay)},
        check=False,
    )
    if proc.returncode != 0:
        raise StackError(f"kadmin.local {query.split()[0]}: {proc.stderr.strip()[-300:]}")
    return proc.stdout + proc.stderr


def _ensure_principal(krb: KerberosSettings, lay: Layout, principal: str) -> None:
    if "Principal:" not in _kadmin(krb, lay, f"getprinc {principal}"):
        _kadmin(krb, lay, f"addprinc -randkey {principal}")


def _write_keytab(krb: KerberosSettings, lay: Layout, path: Path, principals: list[str]) -> None:
    """(Re)write ``path`` with the current keys of ``principals`` (``ktadd -norandkey``)."""
    path.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
    path.unlink(missing_ok=True)
    out = _kadmin(krb, lay, f"ktadd -k {path} -norandkey {' '.join(principals)}")
    if not path.exists() or "added to keytab" not in out:
        raise StackError(f"kadmin.local ktadd {path}: {out.strip()[-300:]}")
    os.chmod(path, 0o600)


def prepare_realm(settings: Settings, lay: Layout) -> None:
    """Render krb5.conf and kdc.conf, create the realm's database (first start), the principals
    and their keytabs.

    Raises:
        StackError: a Kerberos tool is missing or failed.
    """
    krb = settings.kerberos
    data = lay.data / "kdc"
    values = dict(
        realm=krb.realm,
        kdc_host=krb.kdc_host,
        kdc_port=krb.kdc_port,
        service_host=krb.service_host,
        data_dir=data,
        log_file=lay.logs / "kdc-audit.log",
    )
    render("krb5.conf.tmpl", krb.krb5_conf, **values)
    render("kdc.conf.tmpl", conf_dir(lay) / "kdc.conf", **values)
    if not (data / "principal").exists():
        data.mkdir(parents=True, exist_ok=True, mode=0o700)
        (data / "kadm5.acl").write_text("", encoding="utf-8")
        run_once(
            "kdc",
            # the master key is random and kept only in the stash file (-s)
            [_tool("kdb5_util"), "create", "-s", "-r", krb.realm, "-P", secrets.token_hex(24)],
            lay.logs / "kdc-create.log",
            env=_kdc_env(krb, lay),
        )
    for principal in [*_principals(krb), krb.hive_principal, krb.client_principal]:
        _ensure_principal(krb, lay, principal)
    _kadmin(krb, lay, f'modprinc -maxlife "{krb.ticket_lifetime_s} seconds" {krb.client_principal}')
    _write_keytab(krb, lay, hdfs_keytab(lay), _principals(krb))
    _write_keytab(krb, lay, hive_keytab(lay), [krb.hive_principal])
    _write_keytab(krb, lay, krb.keytab, [krb.client_principal])


def check(settings: Settings, lay: Layout) -> str:
    """Health: a ticket for the HDFS principal from its keytab (``kinit -k``), in a throw-away
    cache. Raises :class:`ferry_kit.stack.health.Unhealthy` with kinit's message."""
    krb = settings.kerberos
    with tempfile.TemporaryDirectory() as tmp:
        proc = subprocess.run(  # noqa: S603 - argv built here
            [_tool("kinit"), "-k", "-t", str(hdfs_keytab(lay)), krb.hdfs_principal],
            capture_output=True,
            text=True,
            timeout=15,
            env={**os.environ, "KRB5_CONFIG": str(krb.krb5_conf), "KRB5CCNAME": f"FILE:{tmp}/cc"},
            check=False,
        )
    if proc.returncode != 0:
        raise health.Unhealthy(f"kinit {krb.hdfs_principal}: {proc.stderr.strip()[-200:]}")
    return f"realm {krb.realm}"


def kdc(settings: Settings, lay: Layout) -> Component:
    """The KDC of realm ``kerberos.realm`` (``krb5kdc -n``); only when ``kerberos.enabled``."""
    krb = settings.kerberos

    def prepare() -> None:
        prepare_realm(settings, lay)

    kdc_argv = [shutil.which("krb5kdc") or "/usr/sbin/krb5kdc", "-n", "-r", krb.realm]
    # krb5kdc takes no free-form arguments, so a shell that waits for it carries the markers the
    # stack finds its processes by (ferry_kit.stack.process.owned_pid); stopping signals the whole
    # process group, the KDC included.
    script = f"{shlex.join(kdc_argv)} & wait $!"
    argv = ["/bin/sh", "-c", script, "ferry-kdc", *markers("kdc", lay.var)]
    return Component(
        "kdc",
        f"{krb.kdc_host}:{krb.kdc_port} ({krb.realm})",
        lay.launch("kdc", argv, _kdc_env(krb, lay)),
        check=lambda: check(settings, lay),
        ports=(krb.kdc_port,),
        host=krb.kdc_host,
        prepare=prepare,
        group="kdc",
    )
