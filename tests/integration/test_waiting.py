"""The waiting room on the real broker: a compacted topic; parked input events of a stage go back
to its input topic, byte for byte, once their dataset is ready, and only then; another stage's
are left alone; a released file is released once."""

from __future__ import annotations

import pytest
from confluent_kafka import KafkaException
from confluent_kafka.admin import ConfigResource
from tests.support.factories import numbered
from tests.support.kafka_io import produce, read_all

from ferry.core.events import FileExtracted, FileTransferred
from ferry.core.kafka.clients import build_admin
from ferry.core.kafka.topics import ensure_topics
from ferry.core.runtime.waiting import WAITING, WaitingRoom
from ferry.core.wire.avro import default_codec
from ferry.settings import Settings
from ferry_kit.testing.waiting import wait_for

pytestmark = [pytest.mark.integration, pytest.mark.stack("kafka")]


def test_parked_files_go_back_when_their_dataset_is_ready(ks: Settings) -> None:
    codec = default_codec(ks.paths.schemas_dir)
    ensure_topics(build_admin(ks.kafka), ks.kafka)
    room = WaitingRoom(ks, "transform", codec)
    admin = build_admin(ks.kafka)
    res = ConfigResource("topic", ks.kafka.topic(WAITING))

    def policy() -> str | None:
        try:
            return admin.describe_configs([res])[res].result(timeout=10)["cleanup.policy"].value
        except KafkaException:  # the new topic's metadata not everywhere yet
            return None

    assert wait_for(policy, "the waiting topic's configuration", 30) == "compact"

    orders = FileExtracted(numbered("orders", 1))
    weather = FileExtracted(numbered("weather", 2))
    for_load = FileTransferred(numbered("orders", 3))
    parked = {ev.file_id: codec.encode(ev) for ev in (orders, weather, for_load)}
    for fid, value in parked.items():
        produce(ks, WAITING, fid.encode(), value)

    assert room.release(lambda name: name == "nosuch") == 0
    assert read_all(ks, "extracted") == []
    assert room.release(lambda name: name == "orders") == 1
    assert read_all(ks, "extracted") == [(orders.file_id.encode(), parked[orders.file_id])]
    assert read_all(ks, "waiting")[-1] == (orders.file_id.encode(), b"")  # left the room

    assert room.release(lambda name: True) == 1  # weather; orders only once; load's not ours
    assert read_all(ks, "extracted")[1:] == [(weather.file_id.encode(), parked[weather.file_id])]
    assert WaitingRoom(ks, "load", codec).release(lambda name: True) == 1
    assert read_all(ks, "transferred") == [(for_load.file_id.encode(), parked[for_load.file_id])]
