"""One stack component in the foreground, for containers (docker-compose.yml, docs/compose.md).

``ferry stack run-one <component>`` builds the same :class:`ferry_kit.stack.base.Component` the
local stack starts (:func:`ferry_kit.stack.components.build_components`: config rendered from
settings, storage formatted on first start), then replaces itself with the component's JVM,
whose output goes to the container's stdout. Settings come from the environment as always
(``FERRY_*``), so each container names its own host (``FERRY_CLUSTERS__A__HOST=namenode-a``
…) and the others' addresses.

``python -m ferry_kit.stack.container check <component>`` (and ``ferry stack check``) runs the
component's health check once: exit 0 and the detail on stdout when healthy, exit 1 and the reason
otherwise — a compose ``healthcheck`` that imports only the settings and the stack code.
"""

from __future__ import annotations

import os
import sys

from ferry_kit.errors import StackError
from ferry_kit.settings import KitSettings, get_kit_settings
from ferry_kit.stack.base import Component
from ferry_kit.stack.client_conf import write_own_client_conf
from ferry_kit.stack.components import build_components
from ferry_kit.stack.health import Unhealthy
from ferry_kit.stack.process import server_environ


def component(settings: KitSettings, name: str) -> Component:
    """The stack component called ``name`` (e.g. ``hdfs-a-namenode``), built from ``settings``.

    Raises:
        StackError: no component has that name (the message lists them), or no ``java``.
    """
    by_name = {c.name: c for c in build_components(settings)}
    if name not in by_name:
        raise StackError(f"no stack component {name!r}; components: {list(by_name)}")
    return by_name[name]


def run_one(name: str, settings: KitSettings | None = None) -> None:
    """Prepare component ``name`` (config, storage format), write what it tells its clients
    (:func:`ferry_kit.stack.client_conf.write_own_client_conf`: a NameNode's or the metastore's
    client configuration directory) and exec its JVM in this process.

    Never returns on success: the process becomes the JVM (its pid 1 in a container, so
    ``docker stop`` signals the server itself).

    Raises:
        StackError: unknown component, a set-up step failed, or the JVM cannot be executed.
    """
    settings = settings or get_kit_settings()
    comp = component(settings, name)
    comp.prepare()
    write_own_client_conf(settings, name)
    launch = comp.launch
    launch.cwd.mkdir(parents=True, exist_ok=True)
    os.chdir(launch.cwd)
    sys.stdout.flush()
    try:
        os.execvpe(launch.argv[0], launch.argv, {**server_environ(), **launch.env})  # noqa: S606
    except OSError as exc:
        raise StackError(f"cannot exec {name} ({launch.argv[0]}): {exc}") from exc


def check(name: str, settings: KitSettings | None = None) -> tuple[bool, str]:
    """Run component ``name``'s health check once: ``(healthy, detail or reason)``.

    Raises:
        StackError: unknown component or no ``java``.
    """
    comp = component(settings or get_kit_settings(), name)
    try:
        return True, comp.check()
    except Unhealthy as exc:
        return False, str(exc)


def main(argv: list[str] | None = None) -> int:
    """``python -m ferry_kit.stack.container check|run-one <component>``; exit 0 healthy/started,
    1 unhealthy, 2 on usage or set-up errors."""
    args = sys.argv[1:] if argv is None else argv
    if len(args) != 2 or args[0] not in ("check", "run-one"):
        print("usage: python -m ferry_kit.stack.container check|run-one COMPONENT", file=sys.stderr)
        return 2
    try:
        if args[0] == "run-one":
            run_one(args[1])
        ok, detail = check(args[1])
    except StackError as exc:
        print(f"{args[1]}: {exc}", file=sys.stderr)
        return 2
    print(f"{args[1]}: {detail}")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
