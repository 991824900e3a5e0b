"""Clients in child processes, shared by the tests of tests/secure: Hadoop's own (``FsShell``
from the stack's Hadoop jars) on a cluster's client configuration directory, as an edge node runs
it, and Ferry's WebHDFS client with an environment of its own."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

from ferry.clusters.kerberos import configure_process, ticket_cache
from ferry.settings import Settings
from ferry_kit.stack.base import JAVA17_OPENS, Layout, java
from ferry_kit.stack.client_conf import cluster_conf_dir


def fsshell(
    stack: Settings,
    tmp_path: Path,
    *args: str,
    cluster: str = "a",
    env: dict[str, str] | None = None,
    **conf: str,
) -> subprocess.CompletedProcess:
    """Run ``hdfs dfs <args>`` (``FsShell``) on ``cluster``'s client configuration directory with
    ``-D`` keys ``conf`` (``_`` in a name stands for ``.``), WARN and above on stderr, one
    attempt (a refused client fails at once instead of retrying with backoff). Logged in from
    the ticket cache of ``env`` (``KRB5CCNAME``), else from this process's own (Ferry's
    principal, from its keytab)."""
    krb = stack.kerberos
    if env is None:
        configure_process(krb)
        ticket_cache(krb)
        env = dict(os.environ)
    log4j = tmp_path / "log4j.properties"
    log4j.write_text(
        "log4j.rootLogger=WARN, err\n"
        "log4j.appender.err=org.apache.log4j.ConsoleAppender\n"
        "log4j.appender.err.target=System.err\n"
        "log4j.appender.err.layout=org.apache.log4j.PatternLayout\n"
        "log4j.appender.err.layout.ConversionPattern=%p %c{1}: %m%n\n"
    )
    lay = Layout(stack.var_dir)
    argv = [
        java(),
        "-Xmx128m",
        *JAVA17_OPENS,
        f"-Djava.security.krb5.conf={krb.krb5_conf}",
        f"-Dlog4j.configuration={log4j.as_uri()}",
        "-cp",
        f"{cluster_conf_dir(stack, cluster)}:{lay.jars / 'hdfs'}/*",
        "org.apache.hadoop.fs.FsShell",
        "-Dipc.client.connect.max.retries.on.sasl=0",
        "-Ddfs.client.max.block.acquire.failures=0",
        *(f"-D{k.replace('_', '.')}={v}" for k, v in conf.items()),
        *args,
    ]
    return subprocess.run(argv, capture_output=True, text=True, env=env, timeout=180, check=False)


def webhdfs_list_error(stack: Settings, env: dict[str, str]) -> tuple[int, list[str], float]:
    """Run a WebHDFS LISTSTATUS of cluster A in a child process with ``env`` over this one's
    (its Kerberos and TLS settings are its own); a Ferry error is printed as
    ``<type>: <message>``. Returns (exit code, stderr lines, seconds)."""
    code = (
        "from ferry.settings import get_settings\n"
        "from ferry.clusters.hdfs.webhdfs import WebHdfs\n"
        "from ferry.errors import FerryError\n"
        "try:\n"
        "    with WebHdfs.for_cluster('a', get_settings()) as a: a.list('/')\n"
        "except FerryError as exc:\n"
        "    raise SystemExit(f'{type(exc).__name__}: {exc}')\n"
    )
    t0 = time.monotonic()
    out = subprocess.run(
        [sys.executable, "-c", code],
        capture_output=True,
        text=True,
        env={**os.environ, "FERRY_VAR_DIR": str(stack.var_dir), **env},
        timeout=120,
        check=False,
    )
    return out.returncode, out.stderr.strip().splitlines(), time.monotonic() - t0
