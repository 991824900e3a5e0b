"""The gc sweeps end to end in memory: events on a gc topic, one sweeper per retention class,
copies in every zone on fake clusters and a NAS directory. Each sweep must remove exactly the
copies past their retention and nothing else: not another dataset's, not another prefix's, not a
running attempt's temporary file, not a copy rewritten after its event."""

from __future__ import annotations

import threading
from dataclasses import replace
from pathlib import Path

import pytest
from tests.support.factories import FS_B
from tests.support.gc_helpers import (
    T0,
    Copies,
    FakeTopic,
    after,
    file,
    ms,
    sample,
    sweepers,
)

from ferry.clusters.hdfs.paths import temp_path_for
from ferry.core.events import FileLoaded, failed
from ferry.core.wire.avro import EventCodec
from ferry.gc.metrics import GcMetrics
from ferry.gc.sweeper import Sweeper
from ferry.settings.retention import RetentionSettings

DEFAULTS = RetentionSettings()


class World:
    """One pipeline's copies (prefix ``ferry``), another prefix's (``other``) and the gc topic."""

    def __init__(self, nas: Path, codec: EventCodec, monkeypatch: pytest.MonkeyPatch) -> None:
        self.codec = codec
        self.mine = Copies(nas)
        self.other = Copies(nas.parent / "other-nas", prefix="other")
        self.other.b, self.other.a = self.mine.b, self.mine.a  # the same two clusters
        self.topic = FakeTopic()
        self.topic.install(monkeypatch)
        self.metrics = GcMetrics()
        self.sweepers = sweepers(
            DEFAULTS, self.topic, codec, self.mine.remover(DEFAULTS, self.metrics)
        )

    def loaded(self, m, at, partition: int = 0) -> None:  # type: ignore[no-untyped-def]
        event = self.codec.encode(FileLoaded(m, table="t"))
        self.topic.append(partition, ms(at), event, m.file_id.encode())

    def sweep(self, days: float) -> dict[str, int]:
        stop = threading.Event()
        return {s.label: s.sweep(ms(after(days)), stop) for s in self.sweepers}


@pytest.fixture
def world(tmp_path: Path, codec: EventCodec, monkeypatch: pytest.MonkeyPatch) -> World:
    return World(tmp_path / "nas", codec, monkeypatch)


def test_the_sweep_classes_are_the_distinct_retentions(world: World) -> None:
    assert [s.label for s in world.sweepers] == ["14d", "30d", "90d"]
    assert [s.group for s in world.sweepers] == ["p.gc.14d", "p.gc.30d", "p.gc.90d"]


def test_each_zone_keeps_its_copies_exactly_as_long_as_its_retention(world: World) -> None:
    mine = world.mine
    f1 = mine.lay(file("flights", 1), T0)
    f2 = mine.lay(file("flights", 2), after(10))
    w1 = mine.lay(file("weather", 1), T0, rejects=False)
    world.loaded(f1, after(0.01))
    world.loaded(w1, after(0.01), partition=1)
    world.loaded(f2, after(10.01))
    # Not part of any event: another dataset's copy, and another prefix's copy of the SAME file.
    stray = file("other", 9)
    Copies.put(mine.b, f"/ferry/landing/other/{stray.file_id}/other_9.csv", b"o", T0)
    world.other.lay(file("flights", 1), T0)
    everything = mine.everything()

    assert world.sweep(13.9) == {"14d": 0, "30d": 0, "90d": 0}
    assert mine.everything() == everything

    assert world.sweep(14.02) == {"14d": 2, "30d": 0, "90d": 0}
    gone_14d = {
        f"b:/ferry/landing/flights/{f1.file_id}/flights_1.csv",
        f"b:/ferry/staging/flights/{f1.file_id}/part-0.parquet",
        f"a:/ferry/incoming/flights/{f1.file_id}/part-0.parquet",
        f"b:/ferry/landing/weather/{w1.file_id}/weather_1.csv",
        f"b:/ferry/staging/weather/{w1.file_id}/part-0.parquet",
        f"a:/ferry/incoming/weather/{w1.file_id}/part-0.parquet",
    }
    assert everything - mine.everything() == gone_14d
    # The emptied directories went too; the other prefix's, dataset's and file's stayed.
    assert f"/ferry/landing/flights/{f1.file_id}" not in mine.b.dirs
    assert f"/ferry/staging/flights/{f1.file_id}" not in mine.b.dirs
    assert f"/other/landing/flights/{f1.file_id}" in mine.b.dirs

    assert world.sweep(24.02) == {"14d": 1, "30d": 0, "90d": 0}  # f2, loaded on day 10
    assert world.sweep(30.02) == {"14d": 0, "30d": 2, "90d": 0}
    archived = {
        "nas:.ferry/archive/flights/flights_1.csv",
        "nas:.ferry/archive/weather/weather_1.csv",
    }
    assert archived <= everything - mine.everything()
    assert world.sweep(90.02) == {"14d": 0, "30d": 1, "90d": 2}
    f2_rejects = f"b:/ferry/rejects/flights/{f2.file_id}/part-0.parquet"
    assert f2_rejects in mine.everything()  # loaded on day 10: until day 100
    assert world.sweep(100.02) == {"14d": 0, "30d": 0, "90d": 1}
    assert mine.everything() == {f"b:/ferry/landing/other/{stray.file_id}/other_9.csv"} | {
        p for p in everything if p.startswith(("b:/other/", "a:/other/"))
    }
    assert sample(world.metrics, "ferry_gc_removed_files_total", zone="rejects") == 2
    assert sample(world.metrics, "ferry_gc_removed_bytes_total", zone="rejects") == 6
    assert sample(world.metrics, "ferry_gc_removed_files_total", zone="landing") == 3
    assert sample(world.metrics, "ferry_gc_removed_files_total", zone="archive") == 3


def test_a_sweep_done_again_removes_nothing_more_and_counts_the_copies_gone(world: World) -> None:
    f1 = world.mine.lay(file("flights", 1), T0)
    world.loaded(f1, after(0.01))
    world.sweep(14.02)
    left = world.mine.everything()
    world.topic.committed.clear()  # as if the offsets were never committed: every record again
    assert world.sweep(14.02) == {"14d": 1, "30d": 0, "90d": 0}
    assert world.mine.everything() == left
    assert sample(world.metrics, "ferry_gc_copies_total", zone="landing", outcome="gone") == 1
    assert sample(world.metrics, "ferry_gc_copies_total", zone="staging", outcome="gone") == 1
    assert sample(world.metrics, "ferry_gc_errors_total", zone="landing") == 0


def test_a_running_attempts_temporary_file_stays_and_a_dead_ones_goes(world: World) -> None:
    mine = world.mine
    f1 = mine.lay(file("flights", 1), T0)
    d = f"/ferry/incoming/flights/{f1.file_id}"
    running = temp_path_for(f"{d}/part-1.parquet")
    dead = temp_path_for(f"{d}/part-2.parquet")
    Copies.put(mine.a, running, b"half", after(14.0))  # a transfer writing right now
    Copies.put(mine.a, dead, b"half", after(12.0))  # one that died two days ago
    world.loaded(f1, after(0.01))
    world.sweep(14.02)
    assert set(mine.a.files) == {running}  # the part and the dead one's file are gone
    assert d in mine.a.dirs  # the directory holding the running one stays
    assert sample(world.metrics, "ferry_gc_orphans_total", zone="incoming") == 1


def test_a_copy_rewritten_after_its_event_is_left_for_the_later_run(world: World) -> None:
    mine = world.mine
    f1 = mine.lay(file("flights", 1), T0)
    staged = f"/ferry/staging/flights/{f1.file_id}/part-0.parquet"
    mine.b.set_mtime(staged, ms(after(12)))  # a replay on day 12 staged the file again
    world.loaded(f1, after(0.01))
    world.sweep(14.02)
    assert staged in mine.b.files
    assert f"/ferry/landing/flights/{f1.file_id}/flights_1.csv" not in mine.b.files
    assert sample(world.metrics, "ferry_gc_copies_total", zone="staging", outcome="rewritten") == 1


def test_a_copy_named_outside_its_zone_is_never_removed(world: World) -> None:
    mine = world.mine
    f1 = mine.lay(file("flights", 1), T0)
    elsewhere = f"/data/important/{f1.file_id}/flights_1.csv"
    Copies.put(mine.b, elsewhere, b"keep", T0)
    wrong_dataset = f"/ferry/staging/weather/{f1.file_id}"
    Copies.put(mine.b, f"{wrong_dataset}/part-0.parquet", b"keep", T0)
    uris = {**f1.uris, "landing": f"{FS_B}{elsewhere}", "staging": f"{FS_B}{wrong_dataset}"}
    world.loaded(replace(f1, uris=uris), after(0.01))
    world.sweep(14.02)
    assert elsewhere in mine.b.files
    assert f"{wrong_dataset}/part-0.parquet" in mine.b.files
    assert sample(world.metrics, "ferry_gc_copies_total", zone="landing", outcome="foreign") == 1
    assert sample(world.metrics, "ferry_gc_copies_total", zone="staging", outcome="foreign") == 1


def test_the_archive_takes_only_the_file_with_the_events_size_and_time(world: World) -> None:
    mine = world.mine
    f1 = mine.lay(file("flights", 1), T0)
    archive = mine.nas / ".ferry" / "archive" / "flights"
    # The plain name now holds another file of that name (other bytes, archived later): extract
    # archived f1's under a tagged name.
    (archive / "flights_1.csv").rename(archive / f"flights_1.{f1.file_id[:12]}.csv")
    other = mine.archive(file("flights", 7), "flights_1.csv", after(3))
    world.loaded(f1, after(0.01))
    world.sweep(30.02)
    assert [p.name for p in archive.iterdir()] == ["flights_1.csv"]
    assert other.exists()


def test_a_marker_goes_with_its_archived_file(world: World) -> None:
    mine = world.mine
    w1 = mine.lay(file("weather", 1), T0, rejects=False)
    marker = mine.nas / ".ferry" / "archive" / "weather" / "weather_1.csv.done"
    marker.write_bytes(b"")
    world.loaded(w1, after(0.01))
    world.sweep(30.02)
    assert not marker.exists()
    assert sample(world.metrics, "ferry_gc_removed_files_total", zone="archive") == 2


def test_a_quarantined_files_copies_go_after_the_quarantine_retention(world: World) -> None:
    mine = world.mine
    q = mine.lay(file("flights", 3), T0, rejects=False)
    landed = replace(q, uris={"landing": q.uris["landing"]})  # failed in transform: landed only
    event = failed(stage="transform", reason="header_mismatch", error="x", manifest=landed)
    world.topic.append(0, ms(after(0.01)), world.codec.encode(event), q.file_id.encode())
    world.sweep(13.9)
    assert f"/ferry/landing/flights/{q.file_id}/flights_3.csv" in mine.b.files
    world.sweep(14.02)
    assert f"/ferry/landing/flights/{q.file_id}/flights_3.csv" not in mine.b.files
    # Its staging and incoming were not named by the failure: the quarantine sweep leaves them.
    assert f"/ferry/staging/flights/{q.file_id}/part-0.parquet" in mine.b.files
    assert (mine.nas / ".ferry" / "archive" / "flights" / "flights_3.csv").exists()
    world.sweep(30.02)
    assert not (mine.nas / ".ferry" / "archive" / "flights" / "flights_3.csv").exists()


def test_an_extract_failure_or_an_undecodable_record_removes_nothing(world: World) -> None:
    f1 = world.mine.lay(file("flights", 1), T0)
    everything = world.mine.everything()
    ev = failed(stage="extract", reason="not_utf8", error="x", manifest=f1)
    world.topic.append(0, ms(after(0.01)), world.codec.encode(ev), f1.file_id.encode())
    world.topic.append(0, ms(after(0.02)), b"not-avro")
    assert world.sweep(100) == {"14d": 2, "30d": 2, "90d": 2}
    assert world.mine.everything() == everything


def test_records_that_expired_before_their_sweep_are_counted(world: World) -> None:
    f1 = world.mine.lay(file("flights", 1), T0)
    world.loaded(f1, after(0.01))
    world.loaded(f1, after(0.02))
    world.sweep(1)  # nothing due yet: the 14-day class committed offset 0
    world.topic.low[0] = 1  # the gc service was stopped; the first record expired meanwhile
    world.sweep(14.5)
    assert sample(world.metrics, "ferry_gc_expired_unswept_total", retention="14d") == 1
    assert world.topic.committed["p.gc.14d"] == {0: 2, 1: 0}


def test_a_shorter_retention_is_a_new_class_that_applies_to_files_loaded_before(
    world: World, codec: EventCodec
) -> None:
    mine = world.mine
    f1 = mine.lay(file("flights", 1), T0)
    world.loaded(f1, after(0.01))
    world.sweep(5)  # nothing due at 14 days
    short = DEFAULTS.model_copy(update={"landing": DEFAULTS.landing / 7})  # 2 days
    remover = mine.remover(short, world.metrics)
    kafka = world.sweepers[0].kafka
    two_days = Sweeper(
        short.landing, kafka, short, None, world.topic.name, codec, remover, world.metrics
    )  # type: ignore[arg-type]
    assert two_days.group == "p.gc.2d"
    import threading

    assert two_days.sweep(ms(after(5)), threading.Event()) == 1
    assert f"/ferry/landing/flights/{f1.file_id}/flights_1.csv" not in mine.b.files
    assert f"/ferry/staging/flights/{f1.file_id}/part-0.parquet" in mine.b.files


def test_a_quarantined_file_released_and_carried_on_keeps_its_copies_for_its_new_run(
    world: World,
) -> None:
    mine = world.mine
    q = mine.lay(file("flights", 3), T0, rejects=False)
    landed = replace(q, uris={"landing": q.uris["landing"]})
    event = failed(stage="transform", reason="spark_job_failed", error="x", manifest=landed)
    world.topic.append(0, ms(after(0.01)), world.codec.encode(event), q.file_id.encode())
    # Released on day 10: transform staged it again, so its landing copy is the new run's.
    mine.b.set_mtime(f"/ferry/staging/flights/{q.file_id}/part-0.parquet", ms(after(10)))
    world.sweep(14.02)
    assert f"/ferry/landing/flights/{q.file_id}/flights_3.csv" in mine.b.files
    assert sample(world.metrics, "ferry_gc_copies_total", zone="landing", outcome="rewritten") == 1


class _Client:
    """A broker client that answers while the fake broker does (``world.topic``)."""

    def __init__(self, n: int) -> None:
        self.n = n
        self.closed = False

    def close(self) -> None:
        self.closed = True


def test_a_class_whose_broker_calls_fail_three_sweeps_in_a_row_asks_through_a_new_client(
    world: World, codec: EventCodec, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The client a sweep asked through is replaced after RENEW_AFTER failed sweeps (a wedged
    client answered errors for minutes after the broker was back), and the new one is used."""
    import ferry.gc.sweeper as m
    from ferry.errors import TransientError

    made: list[_Client] = []

    def renew() -> _Client:
        made.append(_Client(len(made) + 1))
        return made[-1]

    asked: list[int] = []  # which client each metadata call went through
    wedged = {0}  # clients that answer errors only

    def partitions_of(client: _Client, kafka: object, topic: str) -> list[int]:
        asked.append(client.n)
        if client.n in wedged:
            raise TransientError(f"metadata of topic {topic}: Local: Broker transport failure")
        return [0, 1]

    monkeypatch.setattr(m, "partitions_of", partitions_of)
    mine = world.mine
    f1 = mine.lay(file("flights", 1), T0)
    world.loaded(f1, after(0.01))
    first = _Client(0)
    s = world.sweepers[0]
    sweeper = Sweeper(
        s.klass,
        s.kafka,
        DEFAULTS,
        first,
        world.topic.name,
        codec,
        s._remover,
        world.metrics,  # type: ignore[arg-type]
        renew=renew,  # type: ignore[arg-type]
    )
    stop = threading.Event()
    for turn in range(1, m.RENEW_AFTER):
        with pytest.raises(TransientError):
            sweeper.sweep(ms(after(15)), stop)
        assert (sweeper.broker_failures, sweeper.renewals, first.closed) == (turn, 0, False)
    with pytest.raises(TransientError):
        sweeper.sweep(ms(after(15)), stop)
    assert (sweeper.broker_failures, sweeper.renewals, first.closed) == (0, 1, True)
    assert sample(world.metrics, "ferry_gc_client_renewals_total", retention="14d") == 1
    assert sweeper.sweep(ms(after(15)), stop) == 1  # the new client answers
    assert asked == [0, 0, 0, 1]
    assert [c.n for c in made] == [1] and not made[0].closed
    assert f"/ferry/landing/flights/{f1.file_id}/flights_1.csv" not in mine.b.files


def test_a_sweep_that_reaches_the_broker_resets_the_count_and_none_never_renews(
    world: World, codec: EventCodec, monkeypatch: pytest.MonkeyPatch
) -> None:
    import ferry.gc.sweeper as m
    from ferry.errors import TransientError

    down = {"broker": True}

    def partitions_of(client: object, kafka: object, topic: str) -> list[int]:
        if down["broker"]:
            raise TransientError("metadata: Local: Broker transport failure")
        return [0, 1]

    monkeypatch.setattr(m, "partitions_of", partitions_of)
    sweeper = world.sweepers[0]  # renew=None, as tests that hand in their client
    stop = threading.Event()
    for _ in range(m.RENEW_AFTER - 1):
        with pytest.raises(TransientError):
            sweeper.sweep(ms(after(1)), stop)
    down["broker"] = False
    assert sweeper.sweep(ms(after(1)), stop) == 0
    assert sweeper.broker_failures == 0
    down["broker"] = True
    for _ in range(2 * m.RENEW_AFTER):
        with pytest.raises(TransientError):
            sweeper.sweep(ms(after(1)), stop)
    assert (sweeper.broker_failures, sweeper.renewals) == (2 * m.RENEW_AFTER, 0)
