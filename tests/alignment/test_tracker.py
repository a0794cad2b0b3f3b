"""Unit tests of the BarrierTracker (at-least-once: counts barriers, never blocks)."""

from __future__ import annotations

from barrier_ops.alignment import (Barrier, BarrierTracker, CancellationBarrier,
                                   CheckpointTriggered, EndOfPartition, Records)
from tests.alignment.validators import CheckpointSequenceValidator, roundtrip

AB = ("a:0", "b:0")


def b(cid, ch, channels=AB):
    return Barrier(cid, ch, 10 * cid, 5, channels)


def test_never_holds_back_and_triggers_on_last_barrier():
    v = CheckpointSequenceValidator(1)
    t = BarrierTracker("t")
    v.feed(t.process([b(1, "a:0"), Records("a:0", ["after"])]))
    assert v.released == ["after"] and t.held_back_records == 0 and v.seen == []
    t = roundtrip(t)
    out = t.process([b(1, "b:0")])
    v.feed(out).verify()
    trig = [o for o in out if isinstance(o, CheckpointTriggered)][0]
    assert trig.offsets == {"a:0": 10, "b:0": 10} and trig.held_back_records == 0


def test_duplicate_barrier_is_not_counted():
    v = CheckpointSequenceValidator(1)
    t = BarrierTracker("t")
    v.feed(t.process([b(1, "a:0"), b(1, "a:0")]))
    assert v.seen == []
    v.feed(t.process([b(1, "b:0")])).verify()


def test_skipped_checkpoint_is_subsumed():
    v = CheckpointSequenceValidator(-1, 2)
    t = BarrierTracker("t")
    v.feed(t.process([b(1, "a:0"), b(2, "a:0"), b(2, "b:0")])).verify()
    assert t.pending_checkpoint_ids == []
    v.feed(t.process([b(1, "b:0")]))  # trailing barrier of the subsumed checkpoint
    v.verify()


def test_newer_complete_checkpoint_waits_for_lagging_channel_of_older():
    v = CheckpointSequenceValidator(1, 2)
    t = BarrierTracker("t")
    # b:0 leaves after checkpoint 1 but still owes barrier 1 (and its records)
    v.feed(t.process([b(1, "a:0"), b(2, "a:0", channels=("a:0",))]))
    assert v.seen == []
    v.feed(t.process([Records("b:0", ["late"]), b(1, "b:0")])).verify()


def test_cancellation_aborts_and_trailing_barriers_are_ignored():
    v = CheckpointSequenceValidator(-1, 2)
    t = BarrierTracker("t")
    v.feed(t.process([b(1, "a:0"), CancellationBarrier(1, "b:0"), b(1, "b:0")]))
    v.feed(t.process([b(2, "a:0"), b(2, "b:0")])).verify()


def test_end_of_partition_completes_pending():
    v = CheckpointSequenceValidator(1)
    t = BarrierTracker("t")
    v.feed(t.process([b(1, "a:0"), EndOfPartition("b:0")])).verify()
