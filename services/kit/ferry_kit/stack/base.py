"""What every stack component is built from: the :class:`Component` record, the :class:`Layout` of
the stack's files under ``var_dir``, and the JVM helpers (``java``, the pyspark distribution,
config templates, one-shot set-up commands).
"""

from __future__ import annotations

import os
import shutil
import subprocess
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from string import Template

from ferry_kit.errors import StackError
from ferry_kit.stack.process import Launch

#: Config templates and static config files the components' configuration is rendered from
#: (``deploy/local/conf`` of the source tree, linked into the package as ``stack/conf``).
CONF_SRC = Path(__file__).resolve().parent / "conf"

#: Module options Spark's launcher adds on Java 17 (``JavaModuleOptions``); Hadoop and Hive 2.3 need
#: the same reflective access on 17.
JAVA17_OPENS = [
    "-XX:+IgnoreUnrecognizedVMOptions",
    *(
        f"--add-opens=java.base/{pkg}=ALL-UNNAMED"
        for pkg in (
            "java.lang",
            "java.lang.invoke",
            "java.lang.reflect",
            "java.io",
            "java.net",
            "java.nio",
            "java.util",
            "java.util.concurrent",
            "java.util.concurrent.atomic",
            "jdk.internal.ref",
            "sun.nio.ch",
            "sun.nio.cs",
            "sun.security.action",
            "sun.util.calendar",
        )
    ),
]


@dataclass(frozen=True)
class Component:
    """One server process of the stack.

    ``address`` is what ``ferry stack status`` shows; ``check`` returns a short detail or raises
    :class:`ferry_kit.stack.health.Unhealthy`; ``requires`` names the components that must be
    healthy
    before this one starts; ``ports`` are checked free (TCP, on ``host``) before it starts;
    ``prepare`` renders its config and formats its storage (raises StackError); ``group`` is the
    named group it belongs to (``kafka``, ``hdfs``, ``spark``, ``hive``, ``zookeeper``).
    """

    name: str
    address: str
    launch: Launch
    check: Callable[[], str]
    requires: tuple[str, ...] = ()
    ports: tuple[int, ...] = ()
    host: str = "127.0.0.1"
    prepare: Callable[[], None] = field(default=lambda: None)
    group: str = ""


@dataclass(frozen=True)
class Layout:
    """Where the stack keeps its files under ``var``: logs, pid files, rendered config, server data
    and the Maven-fetched jars; ``java_options`` go into every server JVM it launches
    (``KitSettings.server_java_options``)."""

    var: Path
    java_options: tuple[str, ...] = ()

    @property
    def logs(self) -> Path:
        return self.var / "log"

    @property
    def run(self) -> Path:
        return self.var / "run"

    @property
    def conf(self) -> Path:
        return self.var / "conf"

    @property
    def data(self) -> Path:
        return self.var / "data"

    @property
    def jars(self) -> Path:
        return self.var / "jars"

    def launch(self, name: str, argv: list[str], env: dict[str, str] | None = None) -> Launch:
        """How to run component ``name``: log ``log/<name>.log``, pid file ``run/<name>.pid``;
        when ``argv`` runs ``java``, :attr:`java_options` follow the executable (before the
        component's own options, which win where they set the same flag)."""
        if self.java_options and argv and Path(argv[0]).name == "java":
            argv = [argv[0], *self.java_options, *argv[1:]]
        return Launch(
            name, argv, env or {}, self.logs / f"{name}.log", self.run / f"{name}.pid", self.var
        )


def spark_home() -> Path:
    """``SPARK_HOME`` of the installed pyspark distribution (a full Spark: bin/, jars/)."""
    import pyspark

    return Path(pyspark.__file__).resolve().parent


def java() -> str:
    """The ``java`` executable: ``$JAVA_HOME/bin/java`` or the one on PATH.

    Raises:
        StackError: no java executable found.
    """
    home = os.environ.get("JAVA_HOME")
    exe = str(Path(home) / "bin" / "java") if home else shutil.which("java")
    if not exe or not Path(exe).exists():
        raise StackError("java not found: install a Java 17 JDK or set JAVA_HOME")
    return exe


def render(template: str, dest: Path, **values: object) -> None:
    """Write ``CONF_SRC/template`` to ``dest`` with ``$name`` placeholders substituted.

    Raises:
        StackError: the template is missing or names a value not given.
    """
    try:
        text = Template((CONF_SRC / template).read_text(encoding="utf-8")).substitute(
            {k: str(v) for k, v in values.items()}
        )
    except (KeyError, ValueError, OSError) as exc:
        raise StackError(f"cannot render config template {CONF_SRC / template}: {exc!r}") from exc
    dest.parent.mkdir(parents=True, exist_ok=True)
    dest.write_text(text, encoding="utf-8")


def run_once(
    name: str,
    argv: list[str],
    log: Path,
    timeout_s: float = 180,
    env: dict[str, str] | None = None,
) -> None:
    """Run a one-shot set-up command (storage format), output appended to ``log``, with ``env``
    added to this process's environment.

    Raises:
        StackError: the command timed out (after ``timeout_s`` seconds) or failed; the message
            names its log.
    """
    log.parent.mkdir(parents=True, exist_ok=True)
    with log.open("ab") as fh:
        try:
            proc = subprocess.run(  # noqa: S603 - argv from settings
                argv,
                stdout=fh,
                stderr=subprocess.STDOUT,
                stdin=subprocess.DEVNULL,
                timeout=timeout_s,
                env={**os.environ, **env} if env else None,
            )
        except subprocess.TimeoutExpired as exc:
            raise StackError(
                f"{name}: set-up step timed out after {timeout_s}s; see {log}"
            ) from exc
    if proc.returncode != 0:
        raise StackError(f"{name}: set-up step exited {proc.returncode}; see {log}")
