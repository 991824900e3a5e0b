"""The one registry of Ferry's services: name, module, input and output events, consumer group.

Every other place that needs the list of services reads it here: ``ferry run`` (which starts a
service), the kit's supervisord programs and test process groups (which start ``ferry run
<name>`` through :func:`service_argv`), the replay and quarantine commands (a stage's input
topic), consumer lag and the tracker's pages (the stages in pipeline order).

A service module exposes ``main`` (``main = service_main(build)``, see
:mod:`ferry.core.runtime.service`); the registry names it by module path, so importing the
registry imports no service.
"""

from __future__ import annotations

import importlib
import sys
from dataclasses import dataclass

from ferry.core.events import (
    Event,
    FileExtracted,
    FileLoaded,
    FileTransferred,
    FileTransformed,
)
from ferry.errors import ConfigError

#: An event type a stage consumes: a manifest and nothing else, so ``cls(manifest=m)`` builds one.
StageInput = type[FileExtracted] | type[FileTransformed] | type[FileTransferred]


@dataclass(frozen=True)
class Service:
    """One service.

    ``input``: the event type it consumes (its topic is ``settings.kafka.topic(input.TOPIC)``,
    its consumer group ``<topic_prefix>.<name>``); ``None`` for extract, which reads the NAS, for
    the tracker, which reads every topic, and for gc, which reads the outcomes (loaded, failed).
    ``output``: the event type it produces on success (``None``: the tracker and gc produce no
    file event). ``scalable``: several instances may share its consumer group (extract polls one
    NAS directory, the tracker keeps local state and one HTTP port, gc reads every partition of
    its topics: they run once).
    """

    name: str
    module: str
    input: StageInput | None
    output: type[Event] | None
    scalable: bool

    @property
    def is_stage(self) -> bool:
        """A pipeline stage (extract, transform, transfer, load), not the tracker."""
        return self.output is not None


#: Every service: the stages in pipeline order, then the tracker and the gc service (retention:
#: :mod:`ferry.gc.service`). ``ferry up`` starts them tracker first.
SERVICES: tuple[Service, ...] = (
    Service("extract", "ferry.stages.extract.service", None, FileExtracted, scalable=False),
    Service("transform", "ferry.stages.transform.service", FileExtracted, FileTransformed, True),
    Service("transfer", "ferry.stages.transfer.service", FileTransformed, FileTransferred, True),
    Service("load", "ferry.stages.load.service", FileTransferred, FileLoaded, scalable=True),
    Service("tracker", "ferry.tracker.app", None, None, scalable=False),
    Service("gc", "ferry.gc.service", None, None, scalable=False),
)

#: The four pipeline stages' names, in order.
STAGES: tuple[str, ...] = tuple(s.name for s in SERVICES if s.is_stage)

#: Stages that consume a topic (every stage but extract), in pipeline order.
CONSUMING_STAGES: tuple[str, ...] = tuple(s.name for s in SERVICES if s.is_stage and s.input)

_BY_NAME = {s.name: s for s in SERVICES}


def service(name: str) -> Service:
    """The service called ``name``.

    Raises:
        ConfigError: no such service (the message lists them).
    """
    try:
        return _BY_NAME[name]
    except KeyError:
        raise ConfigError(f"unknown service {name!r}; choose one of {list(_BY_NAME)}") from None


def consumer_of(topic: str) -> str | None:
    """The stage consuming the events of short topic name ``topic`` (``extracted`` →
    ``transform``), or ``None`` (no stage consumes it): the stage a parked input event waits in
    (:mod:`ferry.core.runtime.waiting`)."""
    return next((s.name for s in SERVICES if s.input is not None and topic == s.input.TOPIC), None)


def service_argv(name: str, python: str = sys.executable) -> list[str]:
    """The command line that starts service ``name``: ``<python> -m ferry run <name>``, the same
    as the ``ferry run <name>`` console command.

    Raises:
        ConfigError: no such service.
    """
    return [python, "-m", "ferry", "run", service(name).name]


def run(name: str) -> None:
    """Run service ``name`` in this process until SIGTERM/SIGINT (its module's ``main``).

    ``ferry run`` names the service in the process's settings first (``kafka.service``), so its
    Kafka clients log in as its entry in ``kafka.service_users`` when there is one.

    Raises:
        ConfigError: no such service; whatever the service raises.
    """
    importlib.import_module(service(name).module).main()
