"""Unit tests of the BarrierAligner state machine (no Spark)."""

from __future__ import annotations

import pickle

from barrier_ops.alignment import (AbortReason, Barrier, BarrierAligner, CancellationBarrier,
                                   CheckpointAborted, CheckpointTriggered, EndOfPartition,
                                   Records, Released)
from barrier_ops.alignment.states import CollectingBarriers, WaitingForFirstBarrier
from tests.alignment.validators import CheckpointSequenceValidator, roundtrip

AB = ("a:0", "b:0")


class FakeClock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def b(cid, ch, off=None, channels=AB):
    return Barrier(cid, ch, off, 111 * cid, channels)


def released(outputs):
    return [x for o in outputs if isinstance(o, Released) for x in o.payload]


def test_holds_back_records_after_barrier_until_all_channels_delivered():
    a = BarrierAligner("t")
    out = a.process([Records("a:0", ["a1"]), b(1, "a:0", 1), Records("a:0", ["a2"])])
    assert released(out) == ["a1"]
    assert a.blocked_channels == {"a:0"} and a.held_back_records == 1
    assert a.state == CollectingBarriers()
    a = roundtrip(a)  # held-back records survive GroupState
    out = a.process([Records("b:0", ["b1"]), b(1, "b:0", 5)])
    kinds = [type(o).__name__ for o in out]
    assert kinds == ["Released", "CheckpointTriggered", "Released"]
    assert out[0].payload == ["b1"] and out[2].payload == ["a2"]
    trig = out[1]
    assert trig.checkpoint_id == 1 and trig.offsets == {"a:0": 1, "b:0": 5}
    assert trig.held_back_records == 1 and trig.timestamp_ms == 111
    assert a.state == WaitingForFirstBarrier() and not a.blocked_channels


def test_alignment_metrics_use_injected_clock():
    clock = FakeClock()
    a = BarrierAligner("t", clock)
    a.process([b(1, "a:0")])
    clock.now += 250
    out = a.process([b(1, "b:0")])
    assert [o.alignment_ms for o in out if isinstance(o, CheckpointTriggered)] == [250.0]


def test_single_channel_never_blocks():
    v = CheckpointSequenceValidator(1, 2)
    a = BarrierAligner("t")
    one = ("a:0",)
    v.feed(a.process([Records("a:0", [1]), b(1, "a:0", channels=one), Records("a:0", [2]),
                      b(2, "a:0", channels=one), Records("a:0", [3])]))
    v.verify()
    assert v.released == [1, 2, 3] and a.held_back_records == 0


def test_duplicate_barrier_is_ignored():
    v = CheckpointSequenceValidator(1)
    a = BarrierAligner("t")
    v.feed(a.process([b(1, "a:0"), b(1, "a:0"), Records("b:0", ["x"]), b(1, "b:0")]))
    v.verify()
    assert v.released == ["x"]


def test_trailing_barrier_of_done_checkpoint_is_obsolete():
    v = CheckpointSequenceValidator(1, 2)
    a = BarrierAligner("t")
    v.feed(a.process([b(1, "a:0"), b(1, "b:0"), b(1, "b:0"), b(2, "a:0"), b(2, "b:0")]))
    v.verify()


def test_newer_barrier_subsumes_pending_checkpoint():
    v = CheckpointSequenceValidator(-1, 2)
    a = BarrierAligner("t")
    v.feed(a.process([b(1, "a:0"), Records("a:0", ["after1"])]))
    assert v.released == []
    # b:0 skipped barrier 1: its barrier 2 subsumes 1, releases a:0, then aligns 2
    v.feed(a.process([Records("b:0", ["b"]), b(2, "b:0")]))
    assert v.seen == [-1] and v.released == ["b", "after1"]
    assert a.pending_checkpoint_id == 2 and a.blocked_channels == {"b:0"}
    v.feed(a.process([b(2, "a:0")]))
    v.verify()
    aborted = [o for o in a.process([b(1, "a:0")]) if isinstance(o, CheckpointAborted)]
    assert aborted == []  # a trailing barrier of the subsumed checkpoint does nothing


def test_subsumed_abort_reason():
    a = BarrierAligner("t")
    a.process([b(1, "a:0")])
    out = a.process([b(2, "b:0")])
    assert out[0] == CheckpointAborted(1, AbortReason.SUBSUMED)


def test_cancellation_of_pending_checkpoint_releases_and_blocks_later_barriers():
    v = CheckpointSequenceValidator(-1, 2)
    a = BarrierAligner("t")
    v.feed(a.process([b(1, "a:0"), Records("a:0", ["x"])]))
    v.feed(a.process([CancellationBarrier(1, "b:0")]))
    assert v.released == ["x"] and not a.blocked_channels
    v.feed(a.process([b(1, "b:0")]))  # trailing barrier of the cancelled checkpoint
    assert a.state == WaitingForFirstBarrier()
    v.feed(a.process([b(2, "a:0"), b(2, "b:0")]))
    v.verify()


def test_cancellation_before_first_barrier_and_newer_cancellation():
    v = CheckpointSequenceValidator(-1, -2, -3)
    a = BarrierAligner("t")
    v.feed(a.process([CancellationBarrier(1, "a:0"), b(1, "b:0")]))
    assert not a.is_aligning()
    v.feed(a.process([b(2, "a:0"), CancellationBarrier(3, "b:0")]))
    v.verify()
    assert out_reason(a) is None


def out_reason(a):
    return a.pending_checkpoint_id


def test_end_of_partition_counts_as_aligned():
    v = CheckpointSequenceValidator(1, 2)
    a = BarrierAligner("t")
    v.feed(a.process([b(1, "a:0"), Records("a:0", ["held"])]))
    v.feed(a.process([Records("b:0", ["last"]), EndOfPartition("b:0")]))
    assert v.seen == [1] and v.released == ["last", "held"]
    v.feed(a.process([b(2, "a:0")]))  # b:0 is closed: a:0 alone aligns 2
    v.verify()


def test_channel_set_shrinks_and_grows_with_barrier_channels():
    v = CheckpointSequenceValidator(1, 2, 3)
    a = BarrierAligner("t")
    v.feed(a.process([Records("a:0", ["a-e1"], 1), b(1, "a:0")]))
    # c:0 joins at checkpoint 2 (b:0 leaves): its records carry epoch 2 and must not reach
    # snapshot 1 although c:0 has no barrier to block it
    v.feed(a.process([Records("c:0", ["c-e2"], 2), Records("a:0", ["a-e2"], 2)]))
    assert v.released == ["a-e1"] and a.held_back_records == 2
    v.feed(a.process([b(1, "b:0")]))
    assert v.seen == [1] and sorted(v.released) == ["a-e1", "a-e2", "c-e2"]
    two = ("a:0", "c:0")
    v.feed(a.process([b(2, "c:0", channels=two), Records("c:0", ["c-e3"], 3), b(2, "a:0", channels=two)]))
    assert v.seen == [1, 2] and "c-e3" in v.released
    v.feed(a.process([b(3, "a:0", channels=two), b(3, "c:0", channels=two)]))
    v.verify()


def test_new_channel_barrier_waits_instead_of_subsuming():
    v = CheckpointSequenceValidator(1, 2)
    a = BarrierAligner("t")
    v.feed(a.process([b(1, "a:0", channels=("a:0", "b:0"))]))
    # c:0 only takes part from checkpoint 2: its barrier 2 must not subsume 1
    v.feed(a.process([b(2, "c:0", channels=("a:0", "b:0", "c:0"))]))
    assert v.seen == [] and a.pending_checkpoint_id == 1
    v.feed(a.process([b(1, "b:0", channels=("a:0", "b:0"))]))
    assert v.seen == [1]
    v.feed(a.process([b(2, "a:0", channels=("a:0", "b:0", "c:0")),
                      b(2, "b:0", channels=("a:0", "b:0", "c:0"))]))
    v.verify()


def test_barriers_of_several_checkpoints_queued_on_one_channel():
    v = CheckpointSequenceValidator(1, 2, 3)
    a = BarrierAligner("t")
    v.feed(a.process([b(1, "a:0"), Records("a:0", ["a2"]), b(2, "a:0"), Records("a:0", ["a3"]),
                      b(3, "a:0"), Records("a:0", ["a4"])]))
    assert a.held_back_records == 3 and v.seen == []
    v.feed(a.process([b(1, "b:0"), Records("b:0", ["b2"]), b(2, "b:0"), b(3, "b:0")]))
    v.verify()
    assert sorted(v.released[:2]) == ["a2", "b2"] and v.released[2:] == ["a3", "a4"]


def test_pickle_keeps_state_and_queues():
    a = BarrierAligner("t")
    a.process([b(1, "a:0"), Records("a:0", [1, 2, 3])])
    c = pickle.loads(pickle.dumps(a))
    assert c.pending_checkpoint_id == 1 and c.held_back_records == 3
    assert c.state == CollectingBarriers()


def test_held_back_counts_only_blocked_channels():
    a = BarrierAligner("t")
    a.process([b(1, "a:0"), Records("a:0", [1, 2], 2)])
    out = a.process([b(1, "b:0"), Records("b:0", [3, 4, 5], 2)])
    trig = [o for o in out if isinstance(o, CheckpointTriggered)][0]
    assert trig.held_back_records == 2  # b:0's records behind its own last barrier were not held
