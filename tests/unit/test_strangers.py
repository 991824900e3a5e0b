"""Strangers' bytes on a stage's topic (case C24): the codec's reason for each kind, and what
:func:`~ferry.core.runtime.processing.process_batch` makes of them between real events: each set
aside once with its exact reason, coordinates and raw bytes, keyed by its coordinates (never by
its own key, which may be a real file's id), and every real event handled."""

from __future__ import annotations

import random
import threading
from typing import Any

import pytest
from tests.support.factories import numbered
from tests.support.strangers import Stranger, strangers

from ferry.core.events import FileExtracted, FileFailed, FileManifest, FileTransformed
from ferry.core.runtime.processing import process_batch
from ferry.core.runtime.stage import Record, Stage
from ferry.core.wire.avro import EventCodec
from ferry.errors import SerializationError
from ferry.settings import Settings, get_settings

TOPIC = "unit.extracted"


def settings() -> Settings:
    base = get_settings()
    return base.model_copy(update={"kafka": base.kafka.model_copy(update={"topic_prefix": "unit"})})


def manifest(n: int) -> FileManifest:
    return numbered("flights", n, f"f{n}.csv", size_bytes=100 + n)


REAL = [FileExtracted(manifest(n)) for n in range(3)]
OTHER = manifest(9)


def done(ev: FileExtracted) -> FileTransformed:
    return FileTransformed(ev.manifest.advance(rows_out=1, updated_at=ev.manifest.updated_at))


def all_strangers(codec: EventCodec) -> list[Stranger]:
    return strangers(codec, REAL[0].manifest, OTHER)


def test_the_codec_names_each_stranger_with_its_reason(codec: EventCodec) -> None:
    for s in all_strangers(codec):
        if s.value is None or s.reason == "unexpected_event":
            continue  # a tombstone never reaches the codec; those two decode (wrong type)
        with pytest.raises(SerializationError) as info:
            codec.decode(s.value)
        assert info.value.reason == s.reason, s.name
        text = f"SerializationError: {info.value}"
        if s.name == "truncated":
            assert text.startswith(s.error), text
        else:
            assert text == s.error, s.name


def test_cut_and_flipped_events_raise_only_serialization_errors(codec: EventCodec) -> None:
    """Every prefix of two real events, and 3,000 seeded byte flips of them: decoded, or a
    SerializationError ``undecodable``/``unknown_schema``; never another exception (which would
    stop the runner instead of setting the record aside)."""
    rng = random.Random(23)
    reasons: set[str] = set()
    for ev in (REAL[0], FileTransformed(REAL[1].manifest.advance(rows_in=5, rows_out=4))):
        data = codec.encode(ev)
        cases = [data[:i] for i in range(len(data))]
        for _ in range(1500):
            b = bytearray(data)
            for _ in range(rng.randint(1, 4)):
                b[rng.randrange(len(b))] = rng.randrange(256)
            cases.append(bytes(b))
        for case in cases:
            try:
                codec.decode(case)
            except SerializationError as exc:
                reasons.add(exc.reason)
    assert reasons == {"undecodable", "unknown_schema"}


def interleaved(codec: EventCodec) -> tuple[list[Record], list[Stranger]]:
    """real 0, every stranger each followed by a real event (cycling), then real 2 under a binary
    key (a key of another shape: handled, the value names the file)."""
    out: list[Record] = []
    ss = all_strangers(codec)
    for s in ss:
        out.append(Record(TOPIC, 0, len(out), s.key, s.value))
        ev = REAL[len(out) % 2]
        out.append(Record(TOPIC, 0, len(out), ev.file_id.encode(), codec.encode(ev)))
    out.append(Record(TOPIC, 0, len(out), b"\x80\x81", codec.encode(REAL[2])))
    return out, ss


@pytest.mark.parametrize("batch_size", [1, 8])
def test_strangers_are_set_aside_and_every_real_event_is_handled(
    codec: EventCodec, batch_size: int
) -> None:
    records, ss = interleaved(codec)
    calls: list[str] = []

    def one(ev: FileExtracted, deps: Any) -> list[Any]:
        calls.append(ev.file_id)
        return [done(ev)]

    def many(evs: Any, deps: Any) -> list[Any]:
        calls.extend(ev.file_id for ev in evs)
        return [[done(ev)] for ev in evs]

    stage = Stage("transform", {FileExtracted: many if batch_size > 1 else one}, batch_size)
    outs: list[Any] = []
    for i in range(0, len(records), batch_size):
        got = process_batch(
            records[i : i + batch_size], stage, None, codec, settings(), threading.Event()
        )
        assert got is not None
        outs += got
    real: list[FileExtracted] = []
    for r in records:
        if r.offset % 2 == 1 or r is records[-1]:
            ev = codec.decode(r.value or b"")
            assert isinstance(ev, FileExtracted)
            real.append(ev)
    assert sorted(calls) == sorted(ev.file_id for ev in real)
    transformed = [(o.key, codec.decode(o.value)) for o in outs if o.topic == "unit.transformed"]
    assert sorted(transformed, key=lambda kv: kv[0]) == sorted(
        [(ev.file_id.encode(), done(ev)) for ev in real], key=lambda kv: kv[0]
    )
    assert len(real) == 10
    failed: list[tuple[bytes, FileFailed]] = []
    for o in outs:
        if o.topic == "unit.failed":
            f = codec.decode(o.value)
            assert isinstance(f, FileFailed)
            failed.append((o.key, f))
    assert len(failed) == len(ss)
    by_offset = {f.source_offset: (k, f) for k, f in failed}
    for n, s in enumerate(ss):
        offset = 2 * n
        key, f = by_offset[offset]
        want_key = OTHER.file_id if s.name == "wrong_type" else f"{TOPIC}-0-{offset}"
        assert key == want_key.encode(), s.name
        assert (f.stage, f.reason, f.attempt) == ("transform", s.reason, 1), s.name
        assert (f.source_topic, f.source_partition) == (TOPIC, 0)
        where = f"{TOPIC}[0]@{offset}: "
        if s.name == "truncated":
            assert f.error.startswith(where + s.error), f.error
        else:
            assert f.error == where + s.error, s.name
        if s.raw:
            assert (f.raw_key, f.raw_value, f.manifest) == (s.key, s.value, None), s.name
        else:
            assert (f.raw_key, f.raw_value, f.manifest) == (None, None, OTHER), s.name
