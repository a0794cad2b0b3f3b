"""``CheckpointCoordinator`` with an injected clock: lifecycle, expiry, subsumption, failures,
durable reload between (simulated) short-lived processes, idempotent replays."""

from __future__ import annotations

import json

import pytest

from barrier_coordinator import (AcknowledgeResult, CheckpointException,
                                 CheckpointFailureReason, ManualClock, PendingStatus)
from barrier_coordinator.durable import STATE_PATH, pending_path
from state_backends.base import metadata_path, stats_path
from state_backends.exceptions import StateBackendError
from state_backends.stats import COMPLETED, FAILED, read_stats
from tests.coordinator.helpers import (CheckpointSequenceValidator,
                                       ack_with_snapshot, memory_backend, new_coordinator)

TASKS = ["op:agg:kg:0", "op:agg:kg:1", "sink"]


@pytest.fixture
def backend(request):
    return memory_backend(request)


@pytest.fixture
def clock():
    return ManualClock()


def ack_all(coordinator, backend, n, tasks=TASKS, skip=()):
    results = []
    for t in tasks:
        if t in skip:
            continue
        if t.startswith("op:"):
            kg = int(t.rsplit(":", 1)[1])
            results.append(coordinator.receive_acknowledge(
                n, t, ack_with_snapshot(backend, n, "agg", kg, alignment_ms=5 + kg, sync_ms=1,
                                        async_ms=2 + kg)))
        else:
            results.append(coordinator.receive_acknowledge(n, t))
    return results


def test_complete_writes_metadata_stats_and_notifies(backend, clock):
    validator = CheckpointSequenceValidator(1)
    c = new_coordinator(backend, clock, [validator])
    c.trigger(1, clock.now_ms(), TASKS)
    clock.advance(30)
    assert ack_all(c, backend, 1, skip=["sink"]) == [AcknowledgeResult.SUCCESS] * 2
    assert not backend.exists(metadata_path(1))
    assert c.receive_acknowledge(1, "sink") is AcknowledgeResult.SUCCESS
    validator.assert_all_seen()
    meta = c.store.load(1)
    assert meta.source_offsets == {"t": {"0": 100, "1": 101}}
    stats = read_stats(backend, 1)
    assert (stats.status, stats.end_to_end_duration_ms, stats.alignment_duration_ms,
            stats.async_duration_ms, stats.state_size_bytes) == (COMPLETED, 30, 6, 3, {"agg": 10})
    assert c.pending_checkpoints() == {} and not backend.exists(pending_path(1))
    assert c.latest_completed().checkpoint_id == 1


def test_duplicate_unknown_late_acks_are_outcomes(backend, clock):
    c = new_coordinator(backend, clock, checkpoint_timeout_ms=100, tolerable_failed_checkpoints=1)
    assert c.receive_acknowledge(9, "sink") is AcknowledgeResult.UNKNOWN  # never triggered
    c.trigger(1, clock.now_ms(), TASKS)
    assert c.receive_acknowledge(1, "op:nope:kg:0") is AcknowledgeResult.UNKNOWN
    ack_all(c, backend, 1)
    assert c.receive_acknowledge(1, "sink") is AcknowledgeResult.DUPLICATE  # after completion
    c.trigger(2, clock.now_ms(), TASKS)
    clock.advance(100)
    assert c.receive_acknowledge(2, "sink") is AcknowledgeResult.DISCARDED  # expired first


def test_expiry_by_injected_clock(backend, clock):
    validator = CheckpointSequenceValidator(-1, 2)
    c = new_coordinator(backend, clock, [validator], checkpoint_timeout_ms=1000,
                        tolerable_failed_checkpoints=5)
    c.trigger(1, clock.now_ms(), TASKS)
    ack_all(c, backend, 1, skip=["sink"])
    clock.advance(999)
    assert c.abort_expired_checkpoints() == []
    clock.advance(1)
    c.trigger(2, clock.now_ms(), TASKS)  # expiry is checked on every call
    assert validator.reasons[1] is CheckpointFailureReason.CHECKPOINT_EXPIRED
    assert backend.list("chk-1") == [stats_path(1)]  # its snapshots are discarded
    stats = read_stats(backend, 1)
    assert stats.status == FAILED and "CHECKPOINT_EXPIRED" in stats.failure_reason
    assert "sink" in stats.failure_reason and (stats.num_acknowledged, stats.num_expected) == (2, 3)
    assert c.trigger(1, clock.now_ms(), TASKS) is None  # an aborted id never comes back
    ack_all(c, backend, 2)
    validator.assert_all_seen()


def test_newer_completion_subsumes_older_pending_but_not_savepoints(backend, clock):
    validator = CheckpointSequenceValidator(3, -1)
    c = new_coordinator(backend, clock, [validator])
    c.trigger(1, clock.now_ms(), TASKS)
    c.trigger(2, clock.now_ms(), TASKS, is_savepoint=True)
    c.trigger(3, clock.now_ms(), TASKS)
    ack_all(c, backend, 1, skip=["sink"])
    ack_all(c, backend, 3)
    validator.assert_all_seen()
    assert validator.reasons[1] is CheckpointFailureReason.CHECKPOINT_SUBSUMED
    assert sorted(c.pending_checkpoints()) == [2]
    assert c.failure_manager.continuous_failures == 0  # subsumption is not a failure
    assert c.receive_acknowledge(1, "sink") is AcknowledgeResult.DISCARDED
    assert c.trigger(1, clock.now_ms(), TASKS) is None


def test_savepoint_survives_retention(backend, clock):
    c = new_coordinator(backend, clock, num_retained=1)
    c.trigger(1, clock.now_ms(), TASKS, is_savepoint=True)
    ack_all(c, backend, 1)
    for n in (2, 3):
        c.trigger(n, clock.now_ms(), TASKS)
        ack_all(c, backend, n)
    assert c.store.completed_ids() == [1, 3]
    assert c.store.load(1).is_savepoint


def test_decline_and_cancel(backend, clock):
    validator = CheckpointSequenceValidator(-1, -2, 3)
    c = new_coordinator(backend, clock, [validator], tolerable_failed_checkpoints=1)
    for n in (1, 2, 3):
        c.trigger(n, clock.now_ms(), TASKS)
    assert c.decline(1, "op:agg:kg:0", "snapshot failed: disk full")
    assert not c.decline(1, "op:agg:kg:0")
    assert c.cancel(2) and not c.cancel(2)
    assert validator.reasons == {1: CheckpointFailureReason.CHECKPOINT_DECLINED,
                                 2: CheckpointFailureReason.CHECKPOINT_CANCELLED}
    assert c.failure_manager.continuous_failures == 1  # cancel does not count
    assert "disk full" in read_stats(backend, 1).failure_reason
    ack_all(c, backend, 3)
    validator.assert_all_seen()
    assert c.failure_manager.continuous_failures == 0


def test_tolerable_failed_checkpoints_then_clear_failure(backend, clock):
    c = new_coordinator(backend, clock, checkpoint_timeout_ms=100, tolerable_failed_checkpoints=2)
    for n in (1, 2):
        c.trigger(n, clock.now_ms(), TASKS)
        clock.advance(100)
        c.abort_expired_checkpoints()
    # A successful checkpoint resets the count.
    c.trigger(3, clock.now_ms(), TASKS)
    ack_all(c, backend, 3)
    assert c.failure_manager.continuous_failures == 0
    for n in (4, 5):
        c.trigger(n, clock.now_ms(), TASKS)
        clock.advance(100)
        c.abort_expired_checkpoints()
    c = new_coordinator(backend, clock, checkpoint_timeout_ms=100, tolerable_failed_checkpoints=2)
    assert c.failure_manager.continuous_failures == 2  # survives the process boundary
    c.trigger(6, clock.now_ms(), TASKS)
    clock.advance(100)
    with pytest.raises(CheckpointException) as info:
        c.abort_expired_checkpoints()
    err = info.value
    assert err.reason is CheckpointFailureReason.TOO_MANY_CHECKPOINT_FAILURES
    assert "Exceeded checkpoint tolerable failure threshold" in str(err)
    assert "3 consecutive checkpoints failed (tolerable: 2" in str(err)
    assert "checkpoint 6: Checkpoint expired" in str(err)
    # A replayed batch re-reporting the same failures does not count them again.
    again = new_coordinator(backend, clock, checkpoint_timeout_ms=100,
                            tolerable_failed_checkpoints=2)
    assert again.trigger(6, clock.now_ms(), TASKS) is None
    assert again.failure_manager.continuous_failures == 0


def test_pending_state_survives_short_lived_processes(backend, clock):
    c1 = new_coordinator(backend, clock)
    c1.trigger(1, clock.now_ms(), TASKS)
    ack_all(c1, backend, 1, skip=["sink", "op:agg:kg:1"])
    del c1
    c2 = new_coordinator(backend, clock)  # next commit worker
    p = c2.get_pending(1)
    assert p is not None and p.not_yet_acknowledged() == ["op:agg:kg:1", "sink"]
    assert c2.receive_acknowledge(1, "op:agg:kg:0") is AcknowledgeResult.DUPLICATE
    ack_all(c2, backend, 1, skip=["op:agg:kg:0"])
    c3 = new_coordinator(backend, clock)
    assert c3.last_completed_id == 1 and c3.pending_checkpoints() == {}
    assert json.loads(backend.get(STATE_PATH))["last_completed_id"] == 1


class FailingPuts:
    """Wraps a backend; ``put`` raises for paths matching ``fail_on`` while armed."""

    def __init__(self, inner, fail_on):
        self.inner, self.fail_on, self.armed = inner, fail_on, True

    def __getattr__(self, name):
        return getattr(self.inner, name)

    def put(self, path, data):
        if self.armed and self.fail_on(path):
            raise StateBackendError(f"could not write {self.inner.location(path)}: injected")
        return self.inner.put(path, data)


def test_metadata_write_failure_aborts_and_is_counted(backend, clock):
    from state_backends.base import StateBackend

    flaky = FailingPuts(backend, lambda p: p.endswith("/_metadata"))
    StateBackend.register(FailingPuts)
    validator = CheckpointSequenceValidator(-1)
    c = new_coordinator(flaky, clock, [validator], tolerable_failed_checkpoints=3)
    c.trigger(1, clock.now_ms(), TASKS)
    with pytest.raises(CheckpointException) as info:
        ack_all(c, flaky, 1)
    assert info.value.reason is CheckpointFailureReason.FINALIZE_CHECKPOINT_FAILURE
    assert "chk-1/_metadata" in str(info.value)
    validator.assert_all_seen()
    assert c.store.completed_ids() == [] and c.failure_manager.continuous_failures == 1


def test_crash_after_metadata_before_bookkeeping_is_reconciled(backend, clock):
    from state_backends.base import StateBackend

    StateBackend.register(FailingPuts)
    flaky = FailingPuts(backend, lambda p: p == stats_path(1))
    c = new_coordinator(flaky, clock)
    c.trigger(1, clock.now_ms(), TASKS)
    with pytest.raises(StateBackendError):
        ack_all(c, flaky, 1)  # metadata written, then the "process dies" writing stats
    assert backend.exists(metadata_path(1)) and backend.exists(pending_path(1))
    recovered = new_coordinator(backend, clock)
    assert recovered.last_completed_id == 1 and recovered.pending_checkpoints() == {}
    assert not backend.exists(pending_path(1))
    assert read_stats(backend, 1).status == COMPLETED
    assert recovered.receive_acknowledge(1, "sink") is AcknowledgeResult.DUPLICATE


def test_retrigger_is_idempotent_and_can_add_tasks(backend, clock):
    c = new_coordinator(backend, clock)
    p = c.trigger(1, clock.now_ms(), ["a"])
    assert c.trigger(1, clock.now_ms() + 5, ["a", "b"]) is p
    assert p.expected == {"a", "b"} and p.timestamp_ms == clock.now_ms()
    assert new_coordinator(backend, clock).get_pending(1).expected == {"a", "b"}
    assert p.status is PendingStatus.PENDING


def test_mark_committed_is_durable(backend, clock):
    c = new_coordinator(backend, clock)
    c.mark_committed(3)
    c.mark_committed(2)
    assert new_coordinator(backend, clock).last_committed_id == 3


def test_a_checkpoint_cut_off_by_a_restart_gets_a_full_timeout_in_the_new_run(backend, clock):
    """A pending checkpoint's timeout runs from its trigger or from the start of the current
    query run, whichever is later (Flink aborts the checkpoints a failover cuts off without
    counting them; here their barriers live in the replayed data, so the restarted run can still
    complete them). Old main: the restarted query's first commit expired checkpoint 1 and, with
    no tolerated failures, failed the query on every restart that took longer than the timeout."""
    from barrier_core.query_run import record_run_start

    record_run_start(backend, clock.now_ms())
    c = new_coordinator(backend, clock, checkpoint_timeout_ms=1000, tolerable_failed_checkpoints=0)
    c.trigger(1, clock.now_ms(), TASKS)
    ack_all(c, backend, 1, skip=["sink"])
    clock.advance(5000)  # the query is down for five timeouts
    record_run_start(backend, clock.now_ms())  # the restarted source
    c = new_coordinator(backend, clock, checkpoint_timeout_ms=1000, tolerable_failed_checkpoints=0)
    assert c.abort_expired_checkpoints() == []
    assert c.trigger(1, clock.now_ms() - 5000, TASKS) is not None  # the replayed batch
    clock.advance(999)
    assert c.receive_acknowledge(1, "sink") is AcknowledgeResult.SUCCESS
    assert c.last_completed_id == 1 and c.failure_manager.continuous_failures == 0
    # The new run's own clock still applies: a checkpoint stuck in it expires and counts.
    c.trigger(2, clock.now_ms(), TASKS)
    clock.advance(1000)
    with pytest.raises(CheckpointException) as info:
        c.abort_expired_checkpoints()
    assert info.value.reason is CheckpointFailureReason.TOO_MANY_CHECKPOINT_FAILURES


def test_without_a_recorded_run_start_the_trigger_time_counts(backend, clock):
    c = new_coordinator(backend, clock, checkpoint_timeout_ms=1000, tolerable_failed_checkpoints=5)
    c.trigger(1, clock.now_ms(), TASKS)
    clock.advance(1000)
    assert c.abort_expired_checkpoints() == [1]


def test_an_aborted_checkpoint_keeps_the_snapshots_a_later_delta_chains_on(tmp_path, clock):
    """Key group 0 writes a delta for checkpoint 2, which is declined by key group 1; its next
    snapshot (checkpoint 3) chains on that delta. Aborting 2 must not delete it, and retention of
    checkpoint 1 must keep the full snapshot both deltas apply to."""
    from barrier_coordinator.pending import TaskAcknowledgement
    from state_backends.filesystem import FilesystemStateBackend

    backend = FilesystemStateBackend(str(tmp_path), fsync=False)
    c = new_coordinator(backend, clock, tolerable_failed_checkpoints=1)
    c.trigger(1, clock.now_ms(), TASKS)
    ack_all(c, backend, 1)
    c.trigger(2, clock.now_ms(), TASKS)
    full0 = c.store.load(1).operator_handles()["agg"][0]
    d2 = backend.write_snapshot(2, "agg", 0, b"delta-2", full0.parts)
    c.receive_acknowledge(2, "op:agg:kg:0", TaskAcknowledgement((d2,), {"t": {"0": 200}}, {}))
    backend.write_snapshot(2, "agg", 1, b"half-written")
    assert c.decline(2, "op:agg:kg:1", "snapshot failed")
    assert backend.exists(d2.path)
    c.trigger(3, clock.now_ms(), TASKS)
    d3 = backend.write_snapshot(3, "agg", 0, b"delta-3", d2.parts)
    c.receive_acknowledge(3, "op:agg:kg:0", TaskAcknowledgement((d3,), {"t": {"0": 300}}, {}))
    ack_all(c, backend, 3, skip=["op:agg:kg:0"])
    assert c.store.completed_ids() == [3]
    h = c.store.load(3).operator_handles()["agg"][0]  # verifies every part is stored
    assert backend.read_snapshot_parts(h) == [backend.get(full0.path), b"delta-2", b"delta-3"]
    assert not backend.exists("chk-2/op-agg/kg-1") and not backend.exists("chk-1/op-agg/kg-1")
