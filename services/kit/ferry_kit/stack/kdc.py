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
``HTTP/<service_host>``,        WebHDFS SPNEGO on the NameNodes and    same
``HTTP/127.0.0.1``, ``HTTP/``   DataNodes (a client names the host it
of each NameNode/DataNode host  dials; hosts of another realm's
                                ``kerberos.domain_realm`` excepted)
``hive/<service_host>``         the Hive metastore (SASL)              var/conf/krb5/hive.keytab
``yarn/<service_host>``         ResourceManagers and NodeManagers      var/conf/krb5/yarn.keytab
                                (profile ``yarn``)
``<kerberos.principal>``        Ferry's processes                      ``kerberos.keytab``
==============================  =====================================  =====================

Ferry's principal gets ``kerberos.ticket_lifetime_s`` as its longest ticket (``modprinc
-maxlife``), so a test can watch tickets being renewed. The health check gets a ticket for the
HDFS principal from its keytab (``kinit -k``) into a throw-away cache.

Each realm of ``kerberos.trusted_realms`` is served by the same ``krb5kdc`` (``-r`` per realm),
from a database of its own in ``var/data/kdc/<REALM>``, in two-way trust with ``kerberos.realm``:
``krbtgt/<R>@<realm>`` and ``krbtgt/<realm>@<R>`` exist in both databases with the same keys
(MIT's "Cross-realm authentication" in the Kerberos admin guide), and krb5.conf names the path in
``[capaths]``. :func:`add_principal` makes a principal of any of these realms with its keytab.

A trusted realm listed in ``kerberos.realm_kdcs`` is another host's KDC (compose runs one per
cluster network, docs/compose.md): this KDC keeps no database for it, only the two cross-realm
principals in its own, made with the password of ``kerberos.trust_password_file``, which the
other KDC reads too; same password, same salt (realm and name), same kvno 1: the same keys on
both sides. They are made once: a new password needs both databases made anew.
"""

from __future__ import annotations

import contextlib
import os
import secrets
import shlex
import shutil
import subprocess
import tempfile
from collections.abc import Iterator
from pathlib import Path

from ferry_kit.errors import StackError
from ferry_kit.settings import KitSettings, StackKerberos
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


def yarn_keytab(lay: Layout) -> Path:
    """Keytab of ``yarn/<host>`` (the ResourceManagers and NodeManagers of profile ``yarn``)."""
    return conf_dir(lay) / "yarn.keytab"


def hive_keytab(lay: Layout) -> Path:
    """Keytab of ``hive/<host>`` (the Hive metastore)."""
    return conf_dir(lay) / "hive.keytab"


def _kdc_env(krb: StackKerberos, lay: Layout) -> dict[str, str]:
    return {"KRB5_CONFIG": str(krb.krb5_conf), "KRB5_KDC_PROFILE": str(conf_dir(lay) / "kdc.conf")}


def _tool(name: str) -> str:
    exe = shutil.which(name) or next(
        (str(p) for p in (Path("/usr/sbin") / name, Path("/usr/bin") / name) if p.exists()), None
    )
    if exe is None:
        raise StackError(f"{name} not found: apt-get install {PACKAGES} (make test-secure does)")
    return exe


def hdfs_server_conf(krb: StackKerberos, lay: Layout) -> dict[str, str]:
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
        # YARN's ResourceManager (yarn/<host>, profile yarn) gets new delegation tokens for a
        # long-running application as its user when the old ones near their max lifetime
        # (yarn.resourcemanager.proxy-user-privileges.enabled: ferry_kit.stack.yarn_conf); on a
        # stack without YARN no principal of that name exists, so the grant is unused
        "hadoop.proxyuser.yarn.hosts": "*",
        "hadoop.proxyuser.yarn.groups": "*",
        **{
            f"dfs.namenode.delegation.token.{key}": str(seconds * 1000)
            for key, seconds in (
                ("renew-interval", krb.delegation_token_renew_interval_s),
                ("max-lifetime", krb.delegation_token_max_lifetime_s),
            )
            if seconds is not None
        },
    }


def _principals(settings: KitSettings) -> list[str]:
    """The HDFS keytab's principals: ``hdfs/<service_host>``, and ``HTTP/<host>`` for
    ``service_host``, 127.0.0.1 and every NameNode and DataNode host of the clusters (a WebHDFS
    client names the host it dials) but those ``kerberos.domain_realm`` puts in another realm."""
    krb = settings.kerberos
    hosts = [krb.service_host, "127.0.0.1"]
    for cs in settings.clusters.values():
        hosts += [nn.host for nn in cs.namenode_list] + [cs.datanode_host]
    ours = [h for h in dict.fromkeys(hosts) if krb.domain_realm.get(h, krb.realm) == krb.realm]
    return [krb.hdfs_principal, *(f"HTTP/{h}@{krb.realm}" for h in ours)]


def _realm_of(principal: str) -> str:
    return principal.rsplit("@", 1)[1]


def _kadmin(krb: StackKerberos, lay: Layout, query: str, realm: str | None = None) -> str:
    """Run one ``kadmin.local`` query on ``realm``'s database (default ``krb.realm``), given on
    its standard input (a password in it never shows in the process list); returns its output."""
    proc = subprocess.run(  # noqa: S603 - argv built here
        [_tool("kadmin.local"), "-r", realm or krb.realm],
        input=query + "\n",
        capture_output=True,
        text=True,
        timeout=60,
        env={**os.environ, **_kdc_env(krb, lay)},
        check=False,
    )
    if proc.returncode != 0:
        raise StackError(f"kadmin.local {query.split()[0]}: {proc.stderr.strip()[-300:]}")
    return proc.stdout + proc.stderr


def _exists(krb: StackKerberos, lay: Layout, principal: str, realm: str) -> bool:
    return "Principal:" in _kadmin(krb, lay, f"getprinc {principal}", realm)


def _ensure_principal(krb: StackKerberos, lay: Layout, principal: str) -> None:
    realm = _realm_of(principal)
    if not _exists(krb, lay, principal, realm):
        _kadmin(krb, lay, f"addprinc -randkey {principal}", realm)


def _write_keytab(krb: StackKerberos, lay: Layout, path: Path, principals: list[str]) -> None:
    """(Re)write ``path`` with the current keys of ``principals`` (``ktadd -norandkey``; all of
    one realm)."""
    path.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
    path.unlink(missing_ok=True)
    query = f"ktadd -k {path} -norandkey {' '.join(principals)}"
    out = _kadmin(krb, lay, query, _realm_of(principals[0]))
    if not path.exists() or "added to keytab" not in out:
        raise StackError(f"kadmin.local ktadd {path}: {out.strip()[-300:]}")
    os.chmod(path, 0o600)


def _add_with_password(
    krb: StackKerberos, lay: Layout, name: str, password: str, realm: str
) -> None:
    """``addprinc -pw`` of ``name`` in ``realm``'s database (the password on kadmin's standard
    input). Raises StackError when kadmin does not say it was created."""
    # the output echoes the query, password included: checked, never shown
    if f'Principal "{name}" created' not in _kadmin(
        krb, lay, f"addprinc -pw {password} {name}", realm
    ):
        raise StackError(f"kadmin.local -r {realm}: {name} was not created")


def _ensure_trust(krb: StackKerberos, lay: Layout, other: str) -> None:
    """Two-way trust between ``krb.realm`` and ``other``: both cross-realm ``krbtgt`` principals
    in both databases with the same keys (one random password, kvno 1 everywhere). A partial
    set (one database recreated) is replaced whole."""
    home = krb.realm
    names = [f"krbtgt/{other}@{home}", f"krbtgt/{home}@{other}"]
    realms = (home, other)
    present = {(r, n): _exists(krb, lay, n, r) for r in realms for n in names}
    if all(present.values()):
        return
    password = secrets.token_urlsafe(32)
    for (realm, name), exists in present.items():
        if exists:
            _kadmin(krb, lay, f"delprinc -force {name}", realm)
        _add_with_password(krb, lay, name, password, realm)


def _trust_password(krb: StackKerberos, other: str) -> str:
    """The cross-realm password shared with ``other``'s KDC (``kerberos.trust_password_file``).

    Raises:
        StackError: no file is set, or it cannot be read, or it is empty.
    """
    path = krb.trust_password_file
    if path is None:
        raise StackError(
            f"kerberos.realm_kdcs serves {other} elsewhere: set kerberos.trust_password_file to "
            "the password both KDCs make the cross-realm krbtgt principals with"
        )
    try:
        password = path.read_text(encoding="utf-8").strip()
    except OSError as exc:
        raise StackError(f"kerberos.trust_password_file {str(path)!r}: {exc.strerror}") from None
    if not password:
        raise StackError(f"kerberos.trust_password_file {str(path)!r} is empty")
    return password


def _ensure_remote_trust(krb: StackKerberos, lay: Layout, other: str) -> None:
    """This KDC's half of the two-way trust with ``other``, whose KDC is another host's: both
    cross-realm ``krbtgt`` principals in ``krb.realm``'s database, made (once) with the shared
    password; the other KDC makes the same two in its own."""
    home = krb.realm
    missing = [
        n
        for n in (f"krbtgt/{other}@{home}", f"krbtgt/{home}@{other}")
        if not _exists(krb, lay, n, home)
    ]
    if not missing:
        return
    password = _trust_password(krb, other)
    for name in missing:
        _add_with_password(krb, lay, name, password, home)


def add_principal(settings: KitSettings, lay: Layout, principal: str, keytab: Path) -> None:
    """Make ``principal`` (``name[/instance]@REALM``, of ``kerberos.realm`` or one of
    ``kerberos.trusted_realms``) if it does not exist, and write its keytab (mode 0600).

    Raises:
        StackError: the realm is not one the KDC serves, or a Kerberos tool failed.
    """
    krb = settings.kerberos
    if "@" not in principal or _realm_of(principal) not in _served(krb):
        raise StackError(f"{principal}: not a principal of {', '.join(_served(krb))}")
    _ensure_principal(krb, lay, principal)
    _write_keytab(krb, lay, keytab, [principal])


def _realms(krb: StackKerberos) -> list[str]:
    """``kerberos.realm`` and the trusted realms: every realm krb5.conf names."""
    return [krb.realm, *(r for r in krb.trusted_realms if r != krb.realm)]


def _served(krb: StackKerberos) -> list[str]:
    """The realms this KDC serves: :func:`_realms` but those another host's KDC serves
    (``kerberos.realm_kdcs``)."""
    return [krb.realm, *(r for r in _realms(krb)[1:] if r not in krb.realm_kdcs)]


def _database(lay: Layout, krb: StackKerberos, realm: str) -> Path:
    """``var/data/kdc`` for ``kerberos.realm`` (as before trusted realms existed), a directory
    per other realm below it."""
    data = lay.data / "kdc"
    return data if realm == krb.realm else data / realm


def _conf_blocks(krb: StackKerberos, lay: Layout) -> dict[str, str]:
    """The realm-dependent parts of krb5.conf and kdc.conf."""
    realms = _realms(krb)
    here = f"{krb.kdc_host}:{krb.kdc_port}"
    kdcs = "".join(f"  {r} = {{\n    kdc = {krb.realm_kdcs.get(r, here)}\n  }}\n" for r in realms)
    dbs = "".join(
        f"  {r} = {{\n"
        f"    database_name = {_database(lay, krb, r)}/principal\n"
        f"    key_stash_file = {_database(lay, krb, r)}/stash\n"
        f"    acl_file = {lay.data / 'kdc'}/kadm5.acl\n"
        "    max_life = 24h\n"
        "    max_renewable_life = 7d\n"
        "    supported_enctypes = aes256-cts-hmac-sha1-96:normal aes128-cts-hmac-sha1-96:normal\n"
        "  }\n"
        for r in _served(krb)
    )
    # each trusted realm trusts kerberos.realm directly ("." is "no intermediate realm"), and
    # reaches another trusted realm through it (krb5.conf(5), [capaths])
    home = krb.realm
    paths = "".join(
        f"  {r} = {{\n"
        + "".join(f"    {o} = {'.' if home in (r, o) else home}\n" for o in realms if o != r)
        + "  }\n"
        for r in realms
    )
    hosts = {krb.service_host: krb.realm, "127.0.0.1": krb.realm, **krb.domain_realm}
    domains = "".join(f"  {h} = {r}\n" for h, r in hosts.items())
    return {
        "realm_kdcs": kdcs,
        "realm_databases": dbs,
        "capaths": paths if len(realms) > 1 else "",
        "domain_realm": domains,
    }


def prepare_realm(settings: KitSettings, lay: Layout) -> None:
    """Render krb5.conf and kdc.conf, create each realm's database (first start) and the trust
    between them, the principals and their keytabs.

    Raises:
        StackError: a Kerberos tool is missing or failed, or Ferry's principal is of a realm the
            KDC does not serve.
    """
    krb = settings.kerberos
    if krb.client_realm not in _served(krb):
        raise StackError(
            f"kerberos.principal {krb.client_principal}: the local KDC serves "
            f"{', '.join(_served(krb))} only (add its realm to kerberos.trusted_realms)"
        )
    values = dict(
        realm=krb.realm,
        kdc_port=krb.kdc_port,
        service_host=krb.service_host,
        log_file=lay.logs / "kdc-audit.log",
        **_conf_blocks(krb, lay),
    )
    render("krb5.conf.tmpl", krb.krb5_conf, **values)
    render("kdc.conf.tmpl", conf_dir(lay) / "kdc.conf", **values)
    for realm in _served(krb):
        data = _database(lay, krb, realm)
        if (data / "principal").exists():
            continue
        data.mkdir(parents=True, exist_ok=True, mode=0o700)
        (lay.data / "kdc" / "kadm5.acl").write_text("", encoding="utf-8")
        run_once(
            "kdc",
            # the master key is random and kept only in the stash file (-s)
            [_tool("kdb5_util"), "create", "-s", "-r", realm, "-P", secrets.token_hex(24)],
            lay.logs / f"kdc-create-{realm}.log",
            env=_kdc_env(krb, lay),
        )
    for other in _realms(krb)[1:]:
        if other in krb.realm_kdcs:
            _ensure_remote_trust(krb, lay, other)
        else:
            _ensure_trust(krb, lay, other)
    for principal in [*_principals(settings), krb.hive_principal, krb.client_principal]:
        _ensure_principal(krb, lay, principal)
    maxlife = f'modprinc -maxlife "{krb.ticket_lifetime_s} seconds" {krb.client_principal}'
    _kadmin(krb, lay, maxlife, krb.client_realm)
    _write_keytab(krb, lay, hdfs_keytab(lay), _principals(settings))
    _write_keytab(krb, lay, hive_keytab(lay), [krb.hive_principal])
    _write_keytab(krb, lay, krb.keytab, [krb.client_principal])
    if settings.yarn:
        _ensure_principal(krb, lay, krb.yarn_principal)
        _write_keytab(krb, lay, yarn_keytab(lay), [krb.yarn_principal])


@contextlib.contextmanager
def superuser_env(settings: KitSettings, lay: Layout) -> Iterator[dict[str, str]]:
    """The environment of a Hadoop admin tool (``hdfs dfsadmin``) run as the HDFS superuser:
    this process's, and with Kerberos a ticket of the HDFS principal from its keytab (``kinit
    -k``) in a throw-away cache (``KRB5CCNAME``, which Hadoop's login reads), removed after.

    Raises:
        StackError: kinit failed or did not answer within 15 s (its message).
    """
    krb = settings.kerberos
    if not krb.enabled:
        yield dict(os.environ)
        return
    with tempfile.TemporaryDirectory() as tmp:
        env = {**os.environ, "KRB5_CONFIG": str(krb.krb5_conf), "KRB5CCNAME": f"FILE:{tmp}/cc"}
        try:
            proc = subprocess.run(  # noqa: S603 - argv built here
                [_tool("kinit"), "-k", "-t", str(hdfs_keytab(lay)), krb.hdfs_principal],
                capture_output=True,
                text=True,
                timeout=15,
                env=env,
                check=False,
            )
        except subprocess.TimeoutExpired as exc:
            raise StackError(f"kinit {krb.hdfs_principal}: no answer within 15 s") from exc
        if proc.returncode != 0:
            raise StackError(f"kinit {krb.hdfs_principal}: {proc.stderr.strip()[-200:]}")
        yield env


def check(settings: KitSettings, lay: Layout) -> str:
    """Health: a ticket for the HDFS principal from its keytab (``kinit -k``), in a throw-away
    cache (:func:`superuser_env`). Raises :class:`ferry_kit.stack.health.Unhealthy` with kinit's
    message."""
    krb = settings.kerberos
    try:
        with superuser_env(settings, lay):
            pass
    except StackError as exc:
        raise health.Unhealthy(str(exc)) from exc
    return f"realm {', '.join(_served(krb))}"


def kdc(settings: KitSettings, lay: Layout) -> Component:
    """The KDC of realm ``kerberos.realm`` and of ``kerberos.trusted_realms`` (``krb5kdc -n``);
    only when ``kerberos.enabled``."""
    krb = settings.kerberos

    def prepare() -> None:
        prepare_realm(settings, lay)

    realms = [arg for r in _served(krb) for arg in ("-r", r)]
    kdc_argv = [shutil.which("krb5kdc") or "/usr/sbin/krb5kdc", "-n", *realms]
    # krb5kdc takes no free-form arguments, so a shell that waits for it carries the markers the
    # stack finds its processes by (ferry_kit.stack.process.owned_pid); stopping signals the whole
    # process group, the KDC included.
    script = f"{shlex.join(kdc_argv)} & wait $!"
    argv = ["/bin/sh", "-c", script, "ferry-kdc", *markers("kdc", lay.var)]
    return Component(
        "kdc",
        f"{krb.kdc_host}:{krb.kdc_port} ({', '.join(_realms(krb))})",
        lay.launch("kdc", argv, _kdc_env(krb, lay)),
        check=lambda: check(settings, lay),
        ports=(krb.kdc_port,),
        host=krb.kdc_host,
        prepare=prepare,
        group="kdc",
    )
