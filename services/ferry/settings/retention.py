"""The ``retention`` section, and the one list of the zones Ferry writes (:data:`ZONES`).

Every intermediate copy Ferry makes has a retention: how long after its file was loaded (or, for
a quarantined file, after its failure) the ``gc`` service removes it. The rule behind the
defaults: a replay of an event still in Kafka must find its input. An input event is at most
``kafka.retention_ms`` old (14 days) and its file was loaded after it was written, so keeping
landing, staging and incoming for ``kafka.retention_ms`` after the load (14 days) is enough;
rejects are kept longer (90 days, people come back for them), and the NAS archive (30 days)
outlives the HDFS copies so that a file whose copies expired can still be re-dropped from it.
docs/operations.md, "Retention", gives the sizing and what the sweep logs.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from datetime import timedelta
from typing import Annotated, Any, Literal

from pydantic import AfterValidator, BeforeValidator, Field

from ferry.settings.base import Frozen

#: ``"14d"``, ``"12h"``, ``"30m"``, ``"45s"`` (a number and one unit letter).
_SHORT = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*([dhms])\s*$")
_UNIT_S = {"d": 86400.0, "h": 3600.0, "m": 60.0, "s": 1.0}

#: Retention values meaning "delete as soon as the file is loaded" and "never delete".
UNTIL_LOADED = "until_loaded"
KEEP = "keep"


def parse_retention(value: Any) -> Any:
    """A retention as given: ``"until_loaded"`` → 0 s (removed at the first sweep after the
    load), ``"keep"`` or ``None`` → ``None`` (never removed), ``"14d"``/``"12h"``/``"30m"``/
    ``"45s"`` → that :class:`~datetime.timedelta`; anything else goes on to pydantic's own
    timedelta parsing (seconds as a number, ISO 8601 ``P14D``, ``[DD ]HH:MM:SS``)."""
    if value is None:
        return None
    if isinstance(value, str):
        text = value.strip().lower()
        if text == UNTIL_LOADED:
            return timedelta(0)
        if text == KEEP:
            return None
        m = _SHORT.match(text)
        if m:
            return timedelta(seconds=float(m.group(1)) * _UNIT_S[m.group(2)])
    return value


def _not_negative(value: timedelta | None) -> timedelta | None:
    if value is not None and value < timedelta(0):
        raise ValueError(f"a retention cannot be negative: {value}")
    return value


#: A retention setting: a duration (``None``: kept for ever). See :func:`parse_retention`.
Retention = Annotated[
    timedelta | None, BeforeValidator(parse_retention), AfterValidator(_not_negative)
]
#: A duration given the same ways (``10m``, ``1d``, ``P1D``, seconds), never ``keep``.
Duration = Annotated[timedelta, BeforeValidator(parse_retention)]


@dataclass(frozen=True)
class Zone:
    """One place Ferry writes copies of a file.

    ``store``: the cluster (``"b"``, ``"a"``) or ``"nas"``; ``uri_role``: the manifest's URI role
    naming a file's copy there (HDFS zones); ``path_setting``: the ``paths`` field holding the
    zone's root (HDFS zones), or the directory under ``<nas_dir>/.ferry/`` (NAS zones).
    """

    name: str
    store: Literal["a", "b", "nas"]
    uri_role: str | None
    path_setting: str
    what: str

    @property
    def on_hdfs(self) -> bool:
        return self.store != "nas"


#: Every zone Ferry writes, in pipeline order: THE list (the settings below, the gc service, the
#: soak benchmark and the docs read it).
ZONES: tuple[Zone, ...] = (
    Zone("landing", "b", "landing", "landing_path", "NAS files as landed on HDFS B"),
    Zone("staging", "b", "staging", "staging_path", "valid rows as Parquet on HDFS B"),
    Zone("rejects", "b", "rejects", "rejects_path", "rejected rows with reasons on HDFS B"),
    Zone("incoming", "a", "incoming", "incoming_path", "staged Parquet transferred to HDFS A"),
    Zone("archive", "nas", None, "archive", "NAS files extracted (<nas>/.ferry/archive/)"),
    Zone("empty", "nas", None, "empty", "empty NAS files (<nas>/.ferry/empty/)"),
    Zone("failed", "nas", None, "failed", "NAS files extract could not take (.ferry/failed/)"),
)

#: The zones holding copies of one file that later stages read (the HDFS zones), by name.
HDFS_ZONES: tuple[Zone, ...] = tuple(z for z in ZONES if z.on_hdfs)


def zone(name: str) -> Zone:
    """The zone called ``name``. Raises KeyError."""
    return next(z for z in ZONES if z.name == name)


class RetentionSettings(Frozen):
    """How long each zone keeps a file's copy, and how the ``gc`` service sweeps.
    Env: ``FERRY_RETENTION__<FIELD>`` (e.g. ``FERRY_RETENTION__LANDING=7d``).

    A retention is ``until_loaded`` (removed at the first sweep after the load), a duration
    (``14d``, ``12h``, ``30m``, ``45s``, ISO 8601 ``P14D`` or seconds) counted from the file's
    ``FileLoaded`` (its Kafka timestamp), or ``keep`` (never removed).
    """

    landing: Retention = Field(
        default=timedelta(days=14),
        description=(
            "Landing copies on HDFS B, after the load. 14 days = kafka.retention_ms: a replay of "
            "any extracted event Kafka still holds finds its landing copy (the event is older "
            "than the load). Shorter saves space; a replay of an older event is then quarantined "
            "input_expired."
        ),
    )
    staging: Retention = Field(
        default=timedelta(days=14),
        description="Staged Parquet on HDFS B, after the load (14 days: as landing).",
    )
    rejects: Retention = Field(
        default=timedelta(days=90),
        description=(
            "Rejected rows on HDFS B, after the load: 90 days, longer than data (people come "
            "back to rejects at month or quarter end); never read by a replay."
        ),
    )
    incoming: Retention = Field(
        default=timedelta(days=14),
        description="Transferred Parquet on HDFS A, after the load (14 days: as landing).",
    )
    archive: Retention = Field(
        default=timedelta(days=30),
        description=(
            "NAS files under <nas>/.ferry/archive/, after the load (or the failure of a "
            "quarantined file): 30 days, longer than the HDFS copies, so a file whose copies "
            "expired can still be re-dropped from the archive."
        ),
    )
    empty: Retention = Field(
        default=timedelta(days=30),
        description="Empty NAS files under <nas>/.ferry/empty/, after they were moved there.",
    )
    failed: Retention = Field(
        default=timedelta(days=90),
        description=(
            "NAS files extract could not take, under <nas>/.ferry/failed/, after they were moved "
            "there (90 days: someone has to look at them)."
        ),
    )
    quarantined: Retention = Field(
        default=timedelta(days=14),
        description=(
            "HDFS copies (landing, staging, rejects, incoming) of a file quarantined by "
            "transform, transfer or load, after its FileFailed: 14 days = kafka.retention_ms, "
            "as long as `ferry quarantine release` can find the failure. A file released and "
            "loaded later gets the loaded retentions from its new FileLoaded."
        ),
    )
    orphans: Duration = Field(
        default=timedelta(days=1),
        description=(
            "Temporary files and directories of attempts that died (a SIGKILL mid-write leaves "
            "*.ferry-tmp-* files and Spark's _tmp/<batch> directories) are removed once this old; "
            "younger ones may belong to a running attempt and are never touched."
        ),
    )
    interval_s: float = Field(
        default=60.0,
        gt=0,
        description="Seconds between two sweeps of the loaded and failed events that are due.",
    )
    nas_interval_s: float = Field(
        default=600.0,
        gt=0,
        description=(
            "Seconds between two listings of <nas>/.ferry/empty/ and .ferry/failed/ and of the "
            "_tmp directories of staging and rejects (the only places the sweep lists)."
        ),
    )
    parallel_files: int = Field(
        default=8,
        ge=1,
        le=64,
        description=(
            "Files whose due copies a sweep removes at once (threads; each removal waits on "
            "NameNode round trips). One at a time, the hour-long soak's sweeps fell behind "
            "10,000 files an hour; WebHDFS sessions keep 32 connections per host."
        ),
    )
    grace: Duration = Field(
        default=timedelta(days=7),
        description=(
            "The gc topic (<prefix>.gc) keeps its records this much longer than the longest "
            "retention: the gc service may be down this long without a copy being left behind."
        ),
    )
    clock_skew_s: float = Field(
        default=60.0,
        ge=0,
        description=(
            "A copy written more than this after its FileLoaded (NameNode clock against the "
            "loading host's) was rewritten by a later run of the file: it is left for that "
            "run's own FileLoaded, s."
        ),
    )
    metrics_host: str = Field(
        default="127.0.0.1", description="Address the gc service's /metrics server binds."
    )
    metrics_port: int | None = Field(
        default=16067,
        description="Port of the gc service's Prometheus /metrics; 0: any free port (logged); "
        "none: no server.",
    )

    def of(self, name: str) -> timedelta | None:
        """The retention of zone ``name`` (or ``quarantined``). Raises AttributeError."""
        value: timedelta | None = getattr(self, name)
        return value
