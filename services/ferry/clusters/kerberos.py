"""Ferry's processes as Kerberos clients (``kerberos.enabled``; docs/security.md, "Kerberos").

MIT Kerberos does the work: :func:`configure_process` points the process at the krb5.conf
(``KRB5_CONFIG``), its own ticket cache (``KRB5CCNAME=FILE:<kerberos.ccache>-<pid>``) and the
service keytab (``KRB5_CLIENT_KTNAME``). With a client keytab, GSSAPI gets the first ticket from
it when the cache is empty and gets a new one when the ticket is past its refresh time (half its
lifetime; MIT krb5 ≥ 1.11, "Client keytab" in krb5's gssapi documentation), so tickets are renewed
before expiry without a ``kinit`` loop. WebHDFS calls authenticate with SPNEGO
(:func:`spnego_auth`: ``requests-kerberos`` over ``pyspnego`` and ``python-gssapi``); Hadoop's own
clients and daemons read the keys of :func:`hadoop_client_conf`.
"""

from __future__ import annotations

import atexit
import contextlib
import logging
import os
import stat
import threading
from typing import TYPE_CHECKING, Any

from ferry.errors import AuthenticationFailed, ConfigError, TransientError

if TYPE_CHECKING:
    from ferry.settings.kerberos import KerberosSettings


class KerberosUnavailable(TransientError):
    """The KDC did not answer a ticket request (retry later)."""

    reason = "kerberos_unavailable"


#: Messages of a GSSAPI failure that another attempt can cure (the KDC is down or slow).
_TRANSIENT_GSS = ("Cannot contact any KDC", "Resource temporarily unavailable", "timed out")


def process_env(krb: KerberosSettings, pid: int | None = None) -> dict[str, str]:
    """The environment variables that make process ``pid`` (default: this one) a Kerberos client
    of ``krb``: ``KRB5_CONFIG``, ``KRB5_CLIENT_KTNAME``, ``KRB5CCNAME`` (a file per process)."""
    return {
        "KRB5_CONFIG": str(krb.krb5_conf),
        "KRB5_CLIENT_KTNAME": str(krb.keytab),
        "KRB5CCNAME": f"FILE:{krb.ccache}-{pid if pid is not None else os.getpid()}",
    }


def check_keytab(krb: KerberosSettings) -> None:
    """Raise :class:`AuthenticationFailed` unless ``krb.keytab`` is a regular file of mode 0600
    (or stricter) and ``krb.krb5_conf`` exists."""
    if not krb.krb5_conf.is_file():
        raise AuthenticationFailed(f"kerberos.krb5_conf {str(krb.krb5_conf)!r} does not exist")
    try:
        st = krb.keytab.stat()
    except OSError as exc:
        raise AuthenticationFailed(
            f"kerberos.keytab {str(krb.keytab)!r} of {krb.client_principal}: {exc.strerror}"
        ) from None
    if not stat.S_ISREG(st.st_mode) or st.st_mode & 0o077:
        raise AuthenticationFailed(
            f"kerberos.keytab {str(krb.keytab)!r} must be a regular file of mode 0600 "
            f"(is {stat.filemode(st.st_mode)})"
        )


def configure_process(krb: KerberosSettings) -> None:
    """Make this process a Kerberos client of ``krb`` (sets :func:`process_env` in
    ``os.environ``; MIT Kerberos reads it when GSSAPI is first used). The ticket cache, a file
    of this process alone, is removed when the process exits (a container's health check runs
    one such process every few seconds).

    Raises:
        AuthenticationFailed: the keytab or krb5.conf is missing, or the keytab is readable by
            others.
    """
    check_keytab(krb)
    env = process_env(krb)
    os.environ.update(env)
    cache = env["KRB5CCNAME"].removeprefix("FILE:")
    if cache not in _caches_to_remove:
        _caches_to_remove.add(cache)
        atexit.register(_remove_cache, cache)


#: Ticket caches this process made (removed at exit).
_caches_to_remove: set[str] = set()


def _remove_cache(path: str) -> None:
    with contextlib.suppress(OSError):
        os.unlink(path)


def ticket_cache(krb: KerberosSettings) -> str:
    """Get a ticket-granting ticket for ``krb.client_principal`` from ``krb.keytab`` into this
    process's ticket cache (``KRB5CCNAME`` of :func:`configure_process`, replaced), as ``kinit -k
    -t`` would (pykrb5: ``krb5_get_init_creds_keytab``, ``krb5_cc_store_cred``); returns the
    cache's name. For a JVM child (beeline) that reads the cache, not the keytab.

    Raises:
        AuthenticationFailed: as :func:`configure_process`; the KDC refused (the message is
            krb5's).
        KerberosUnavailable: the KDC did not answer (transient).
        ConfigError: pykrb5 is not installed (the ``kerberos`` extra).
    """
    try:
        import krb5
    except ImportError:
        raise ConfigError(
            "a Kerberos ticket cache needs pykrb5: pip install -e '.[kerberos]'"
        ) from None
    configure_process(krb)
    name = os.environ["KRB5CCNAME"]
    try:
        ctx = krb5.init_context()
        principal = krb5.parse_name_flags(ctx, krb.client_principal.encode())
        keytab = krb5.kt_resolve(ctx, f"FILE:{krb.keytab}".encode())
        creds = krb5.get_init_creds_keytab(
            ctx, principal, krb5.get_init_creds_opt_alloc(ctx), keytab=keytab
        )
        cache = krb5.cc_resolve(ctx, name.encode())
        krb5.cc_initialize(ctx, cache, principal)
        krb5.cc_store_cred(ctx, cache, creds)
    except krb5.Krb5Error as exc:
        if is_transient_gss(str(exc)):
            raise KerberosUnavailable(f"Kerberos: KDC of {krb.realm}: {exc}") from None
        raise AuthenticationFailed(
            f"Kerberos: no ticket for {krb.client_principal} from {krb.keytab}: {exc}"
        ) from None
    return name


def spnego_auth(krb: KerberosSettings) -> Any:
    """A ``requests`` auth that sends SPNEGO (``Authorization: Negotiate``) as
    ``krb.client_principal`` on a thread's first request, without waiting for a 401 (a WebHDFS
    ``CREATE`` body is sent once), then again whenever the NameNode's cookie expired (401); it
    checks the NameNode's mutual-authentication token when one comes back. Thread-safe (one
    GSSAPI state per thread). Calls :func:`configure_process`.

    Raises:
        ConfigError: ``requests-kerberos`` is not installed (``pip install '.[kerberos]'``).
        AuthenticationFailed: as :func:`configure_process`.
    """
    try:
        from requests_kerberos import OPTIONAL, HTTPKerberosAuth
    except ImportError:
        raise ConfigError(
            "kerberos.enabled needs requests-kerberos: pip install -e '.[kerberos]' "
            "(make test-secure installs it)"
        ) from None
    configure_process(krb)
    logging.getLogger("requests_kerberos.kerberos_").addFilter(_drop_unavailable_on_error)
    return _PerThreadAuth(
        lambda: HTTPKerberosAuth(
            mutual_authentication=OPTIONAL, force_preemptive=True, principal=krb.client_principal
        )
    )


def _drop_unavailable_on_error(record: logging.LogRecord) -> bool:
    """requests-kerberos logs ``Mutual authentication unavailable on 404 response`` at ERROR for
    every expected error answer (a status of a path that does not exist yet): such an answer
    carries no mutual-authentication token, and Ferry reports the error itself. Other records
    (a failed check, raised as ``MutualAuthenticationError`` too) pass."""
    return not record.getMessage().startswith("handle_other(): Mutual authentication unavailable")


class _PerThreadAuth:
    """One ``HTTPKerberosAuth`` per thread. Its GSSAPI contexts are kept per host and its
    ``auth_done`` per object, so threads sharing one (extract lands files in parallel) verified
    the NameNode's mutual-authentication token against another thread's context and failed
    (``MutualAuthenticationError``, seen in the secure e2e test); the ``hadoop.auth`` cookie is in
    the shared session either way."""

    def __init__(self, factory: Any) -> None:
        self._factory = factory
        self._local = threading.local()

    def __call__(self, request: Any) -> Any:
        auth = getattr(self._local, "auth", None)
        if auth is None:
            auth = self._local.auth = self._factory()
        return auth(request)


def gss_failure(exc: BaseException) -> str | None:
    """The one-line GSSAPI message of ``exc`` (or an exception in its chain) when it is a
    Kerberos failure of the client side (``requests_kerberos``'s ``KerberosExchangeError``),
    else None."""
    seen: BaseException | None = exc
    while seen is not None:
        if type(seen).__name__ == "KerberosExchangeError":
            return " ".join(str(seen).split())[:300]
        seen = seen.__cause__ or seen.__context__
    return None


def is_transient_gss(message: str) -> bool:
    """Whether a GSSAPI failure message says the KDC could not be reached (worth retrying)."""
    return any(m in message for m in _TRANSIENT_GSS)


def hadoop_client_conf(krb: KerberosSettings) -> dict[str, str]:
    """Hadoop client keys (core-site and hdfs-site) of a Kerberos cluster: empty when Kerberos is
    off; ``kerberos.protection`` as the RPC and data transfer protection; with principals of other
    realms (``kerberos.trusted_realms``, Ferry's own), the ``auth_to_local`` rules that map them
    (a Hadoop client refuses to log in as a principal it cannot map: "No rules applied to …").
    Source: Hadoop's "Hadoop in Secure Mode" (SecureMode.md), core-default.xml and
    hdfs-default.xml."""
    if not krb.enabled:
        return {}
    conf = {
        "hadoop.security.authentication": "kerberos",
        "hadoop.security.authorization": "true",
        "hadoop.rpc.protection": krb.protection,
        "dfs.namenode.kerberos.principal": krb.hdfs_principal,
        "dfs.datanode.kerberos.principal": krb.hdfs_principal,
        "dfs.data.transfer.protection": krb.protection,
        "dfs.block.access.token.enable": "true",
    }
    if krb.privacy:
        # with privacy, SASL data transfer negotiates AES instead of DIGEST-MD5's own 3DES/RC4
        # (HDFS-6606; hdfs-default.xml dfs.encrypt.data.transfer.cipher.suites)
        conf["dfs.encrypt.data.transfer.cipher.suites"] = "AES/CTR/NoPadding"
    if krb.auth_to_local != "DEFAULT":
        conf["hadoop.security.auth_to_local"] = krb.auth_to_local
    return conf
