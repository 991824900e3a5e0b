"""Replay planning (pure): offset, per-partition targets (timestamps) and file ids."""

from __future__ import annotations

from datetime import datetime

import pytest

from ferry.core.kafka.admin import input_topic
from ferry.errors import ConfigError
from ferry.ops.replay import (
    Move,
    PartitionOffsets,
    Target,
    plan_for_files,
    plan_to_offset,
    plan_to_offsets,
)
from ferry.settings import Settings

STATES = [
    PartitionOffsets(partition=1, committed=7, low=2, high=10),
    PartitionOffsets(partition=0, committed=None, low=0, high=5),
    PartitionOffsets(partition=2, committed=4, low=0, high=4),
]


def test_to_offset_clamps_into_each_partition_range() -> None:
    moves = plan_to_offset(STATES, 3)
    assert moves == [
        Move(0, None, 3, 0, 5),
        Move(1, 7, 3, 2, 10),
        Move(2, 4, 3, 0, 4),
    ]
    assert [m.replayed for m in moves] == [0, 4, 1]  # partition 0 never read: nothing re-read
    assert [m.pending for m in moves] == [2, 7, 1]
    assert plan_to_offset(STATES, 0)[1].new == 2  # below low → low
    assert plan_to_offset(STATES, 99)[0].new == 5  # past high → high


def test_to_offset_rejects_negative() -> None:
    with pytest.raises(ValueError, match="offset must be"):
        plan_to_offset(STATES, -1)


def test_to_offsets_none_or_negative_means_end_and_missing_partitions_are_left_out() -> None:
    moves = plan_to_offsets(STATES, {0: 1, 1: -1, 2: None})
    assert [(m.partition, m.new) for m in moves] == [(0, 1), (1, 10), (2, 4)]
    assert [m.changes for m in moves] == [True, True, False]
    assert [(m.partition, m.new) for m in plan_to_offsets(STATES, {1: 5})] == [(1, 5)]


def test_for_files_moves_to_the_earliest_file_event_per_partition() -> None:
    moves = plan_for_files(STATES, {"b": (1, 5), "a": (1, 3), "c": (2, 1)})
    assert moves == [
        Move(1, 7, 3, 2, 10, ("a", "b")),
        Move(2, 4, 1, 0, 4, ("c",)),
    ]
    assert [m.replayed for m in moves] == [4, 3]


def test_for_files_never_moves_a_group_forward() -> None:
    # file at offset 8 in partition 1 is not read yet (committed 7): stay at 7
    [move] = plan_for_files(STATES, {"late": (1, 8)})
    assert (move.new, move.changes, move.replayed) == (7, False, 0)
    # a group with nothing committed reads from low already
    [move0] = plan_for_files(STATES, {"x": (0, 4)})
    assert (move0.current, move0.new) == (None, 0)


def test_target_needs_exactly_one_choice_and_a_zoned_timestamp() -> None:
    with pytest.raises(ValueError, match="exactly one"):
        Target()
    with pytest.raises(ValueError, match="exactly one"):
        Target(offset=1, earliest=True)
    with pytest.raises(ValueError, match="time zone"):
        Target(timestamp=datetime(2024, 3, 1, 8, 0))
    assert Target(files=("a", "b")).describe() == "2 file(s)"


def test_stage_input_topics() -> None:
    s = Settings()
    assert input_topic(s, "transform") == "ferry.extracted"
    assert input_topic(s, "transfer") == "ferry.transformed"
    assert input_topic(s, "load") == "ferry.transferred"
    with pytest.raises(ConfigError, match="NAS"):
        input_topic(s, "extract")
    with pytest.raises(ConfigError, match="unknown stage"):
        input_topic(s, "nope")
