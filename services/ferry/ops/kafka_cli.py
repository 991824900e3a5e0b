"""``ferry kafka``: the topics and ACLs Ferry needs on its broker (docs/security.md, "Kafka ACLs").

``ferry kafka topics`` creates the plan's topics that are missing (the operator's job where the
services may not create topics); ``ferry kafka acls`` prints, per service, the user and the ACLs
it needs, and with ``--apply`` creates them (run it with an administrator's credentials:
``FERRY_KAFKA__SASL_USERNAME`` and its password).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import typer
from rich.console import Console
from rich.table import Table

if TYPE_CHECKING:
    from ferry.settings import Settings

app = typer.Typer(no_args_is_help=True)


def operator_topics(settings: Settings, lineage: bool) -> tuple[str, ...]:
    """Short names of the topics the operator creates: the plan's, the waiting room's, and
    ``lineage.kafka_topic`` when ``lineage`` (gc and the tracker create their own)."""
    from ferry.core.events import TOPIC_NAMES
    from ferry.core.runtime.waiting import WAITING

    return (*TOPIC_NAMES, WAITING, *((settings.lineage.kafka_topic,) if lineage else ()))


@app.command("topics")
def topics() -> None:
    """Create the plan's topics (and the waiting room's, and the lineage topic when lineage goes
    to Kafka) that do not exist yet; print each one's outcome."""
    from ferry.core.kafka.clients import build_admin
    from ferry.core.kafka.topics import ensure_topics
    from ferry.settings import get_settings

    s = get_settings()
    names = operator_topics(s, s.lineage.transport == "kafka")
    for topic, outcome in sorted(ensure_topics(build_admin(s.kafka), s.kafka, names).items()):
        typer.echo(f"{topic}: {outcome}")


@app.command("acls")
def acls(
    apply: bool = typer.Option(
        False, "--apply", help="Create the ACLs on the broker (needs an administrator's user)."
    ),
) -> None:
    """Print each service's Kafka user and the ACLs it needs (ALLOW, any host); with --apply,
    create them."""
    from ferry.core.kafka.acls import apply as apply_acls
    from ferry.core.kafka.acls import grants, users
    from ferry.core.kafka.clients import build_admin
    from ferry.settings import get_settings

    s = get_settings()
    who = users(s.kafka)
    table = Table("service", "user", "ACL")
    for name, items in grants(s.kafka, s.lineage.kafka_topic).items():
        for i, g in enumerate(items):
            table.add_row(name if i == 0 else "", f"User:{who[name]}" if i == 0 else "", g.line())
    Console(width=160).print(table)
    if apply:
        n = apply_acls(build_admin(s.kafka), s.kafka, s.lineage.kafka_topic)
        typer.echo(f"created {n} ACL binding(s) on {s.kafka.bootstrap_servers}")
