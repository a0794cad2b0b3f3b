"""``PendingCheckpoint`` on its own: enum outcomes, aborts, finalize, JSON round trip."""

from __future__ import annotations

import pytest

from barrier_coordinator import (AcknowledgeResult, CheckpointFailureReason,
                                 IllegalTransitionError, PendingCheckpoint, PendingStatus,
                                 TaskAcknowledgement)
from state_backends.base import SnapshotHandle

TASKS = ["op:agg:kg:0", "op:agg:kg:1", "sink"]


def handle(n, kg, size=4):
    return SnapshotHandle(n, "agg", kg, f"chk-{n}/op-agg/kg-{kg}", size)


def test_ack_outcomes():
    p = PendingCheckpoint(1, 1000, TASKS)
    assert p.acknowledge("op:agg:kg:0", TaskAcknowledgement((handle(1, 0),))) is \
        AcknowledgeResult.SUCCESS
    assert p.acknowledge("op:agg:kg:0") is AcknowledgeResult.DUPLICATE
    assert p.acknowledge("op:other:kg:0") is AcknowledgeResult.UNKNOWN
    assert not p.is_fully_acknowledged()
    assert p.not_yet_acknowledged() == ["op:agg:kg:1", "sink"]
    p.abort_expired()
    assert p.acknowledge("op:agg:kg:1") is AcknowledgeResult.DISCARDED
    assert p.failure_reason is CheckpointFailureReason.CHECKPOINT_EXPIRED
    assert "op:agg:kg:1" in p.failure_detail


def test_finalize_collects_handles_offsets_and_transactions():
    p = PendingCheckpoint(2, 500, TASKS, source_offsets={"t": {0: 1}})
    p.acknowledge("op:agg:kg:1", TaskAcknowledgement((handle(2, 1, 7),), {"t": {"1": 20}}))
    p.acknowledge("op:agg:kg:0", TaskAcknowledgement((handle(2, 0, 5),), {"t": {"0": 10}}))
    p.acknowledge("sink", TaskAcknowledgement(sink_transactions=({"tx": "a"}, {"tx": "a"})))
    assert p.is_fully_acknowledged()
    done = p.finalize(900, completion_batch=4)
    assert p.status is PendingStatus.COMPLETED and p.is_discarded
    assert [h.key_group for h in done.operators] == [0, 1]
    assert done.offsets == {"t": {"0": 10, "1": 20}}
    assert done.sink_transactions == ({"tx": "a"},)
    assert (done.duration_ms, done.state_size_bytes, done.completion_batch) == (400, 12, 4)
    with pytest.raises(IllegalTransitionError):
        p.abort_expired()


def test_finalize_needs_all_acks_and_failed_persist_keeps_it_pending():
    p = PendingCheckpoint(3, 0, ["a"])
    with pytest.raises(IllegalTransitionError, match="missing acks"):
        p.finalize(1)
    p.acknowledge("a")

    def failing(_completed):
        raise OSError("disk full")

    with pytest.raises(OSError):
        p.finalize(1, persist=failing)
    assert p.status is PendingStatus.PENDING
    p.abort(CheckpointFailureReason.FINALIZE_CHECKPOINT_FAILURE, "disk full")
    assert p.status is PendingStatus.ABORTED


def test_savepoint_cannot_be_subsumed():
    sp = PendingCheckpoint(4, 0, ["a"], is_savepoint=True)
    assert not sp.can_be_subsumed()
    with pytest.raises(IllegalTransitionError):
        sp.abort_subsumed(5)


def test_snapshot_of_another_checkpoint_is_a_bug():
    p = PendingCheckpoint(5, 0, ["a"])
    with pytest.raises(ValueError, match="snapshot of checkpoint 4"):
        p.acknowledge("a", TaskAcknowledgement((handle(4, 0),)))


def test_json_round_trip():
    p = PendingCheckpoint(6, 123, TASKS, source_offsets={"t": {"0": 3}})
    p.acknowledge("op:agg:kg:0", TaskAcknowledgement((handle(6, 0),), {"t": {"0": 9}},
                                                     {"alignment_ms": 4}, ({"tx": 1},)))
    q = PendingCheckpoint.from_json(p.to_json())
    assert q.to_json() == p.to_json()
    assert q.acknowledge("op:agg:kg:0") is AcknowledgeResult.DUPLICATE
    p.abort_declined("sink", "boom")
    r = PendingCheckpoint.from_json(p.to_json())
    assert r.status is PendingStatus.ABORTED
    assert r.failure_reason is CheckpointFailureReason.CHECKPOINT_DECLINED


def test_bad_construction():
    with pytest.raises(ValueError):
        PendingCheckpoint(0, 0, ["a"])
    with pytest.raises(ValueError):
        PendingCheckpoint(1, 0, [])
