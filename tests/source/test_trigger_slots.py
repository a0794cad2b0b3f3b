"""Issue 12, hole 2: an expired, declined or cancelled checkpoint frees its max-concurrent slot.

Before, the source counted every id after the last *completed* checkpoint as pending, so with the
default max-concurrent 1 one expired checkpoint stopped every later trigger: batches kept
pre-committing transactions that no checkpoint would ever commit."""

from __future__ import annotations

from barrier_coordinator import CheckpointCoordinator, CoordinatorConfig, ManualClock
from barrier_coordinator.durable import checkpoint_progress
from barrier_source.trigger import CheckpointTrigger, TriggerDecision, TriggerState
from state_backends.filesystem import FilesystemStateBackend


def _barrier(n: int, ts: int) -> dict:
    return {"checkpoint_id": n, "channel": "t:0", "offset": 10 * n, "channels": ["t:0"],
            "timestamp": ts}


def _ack(n: int) -> dict:
    return {"operator_id": "op", "key_group": 0, "num_key_groups": 1, "checkpoint_id": n,
            "snapshot": None, "offsets": {"t": {"0": 10 * n}}, "metrics": {}}


def test_expired_checkpoint_frees_the_trigger_slot(tmp_path):
    backend = FilesystemStateBackend(str(tmp_path / "storage"))
    clock = ManualClock()
    config = CoordinatorConfig(checkpoint_timeout_ms=1_000, tolerable_failed_checkpoints=5,
                               operators={"op": 1})

    def commit_worker():  # every writer.commit builds its coordinator from storage
        return CheckpointCoordinator(backend, config, clock)

    now = clock.now_ms()
    assert commit_worker().on_batch(0, [_barrier(1, now)], [_ack(1)]).checkpoint_id == 1
    commit_worker().mark_committed(1)  # the sink committed checkpoint 1's transactions
    # Checkpoint 2's barrier reaches the sink, its operator ack never comes.
    assert commit_worker().on_batch(1, [_barrier(2, now)], []) is None
    trigger = CheckpointTrigger(interval_ms=0, interval_batches=1, max_concurrent=1)
    state = TriggerState(next_checkpoint_id=3, last_trigger_ms=now, batches_since_trigger=0)
    done, aborted = checkpoint_progress(backend)
    assert (done, aborted) == (1, frozenset())
    assert trigger.decide(state, now, done, aborted) is TriggerDecision.MAX_CONCURRENT
    # Past the timeout a batch that mentions no checkpoint at all expires checkpoint 2 ...
    clock.advance(1_001)
    assert commit_worker().on_batch(2, [], []) is None
    assert 2 in commit_worker().state.aborted
    # ... and the source's next trigger goes ahead.
    done, aborted = checkpoint_progress(backend)
    assert (done, aborted) == (1, frozenset({2}))
    assert trigger.decide(state, clock.now_ms(), done, aborted) is TriggerDecision.TRIGGER
    # Checkpoint 3 completes normally after the expired one.
    ts = clock.now_ms()
    assert commit_worker().on_batch(3, [_barrier(3, ts)], [_ack(3)]).checkpoint_id == 3
    assert checkpoint_progress(backend) == (3, frozenset())


def test_decide_counts_only_checkpoints_still_pending():
    trigger = CheckpointTrigger(interval_ms=0, interval_batches=1, max_concurrent=2)
    state = TriggerState(next_checkpoint_id=6, last_trigger_ms=0, batches_since_trigger=0)
    assert trigger.decide(state, 10, 2) is TriggerDecision.MAX_CONCURRENT  # 3, 4, 5 pending
    assert trigger.decide(state, 10, 2, frozenset({3})) is TriggerDecision.MAX_CONCURRENT
    assert trigger.decide(state, 10, 2, frozenset({3, 5})) is TriggerDecision.TRIGGER


def test_due_makes_an_idle_seal_trigger_but_respects_the_slot_and_pause():
    trigger = CheckpointTrigger(interval_ms=0, interval_batches=3, min_pause_ms=100,
                                max_concurrent=1)
    state = TriggerState(next_checkpoint_id=2, last_trigger_ms=1000, batches_since_trigger=1)
    assert trigger.decide(state, 2000, 1) is TriggerDecision.NOT_DUE
    assert trigger.decide(state, 2000, 1, due=True) is TriggerDecision.TRIGGER
    assert trigger.decide(state, 1050, 1, due=True) is TriggerDecision.MIN_PAUSE
    assert trigger.decide(state, 2000, 0, due=True) is TriggerDecision.MAX_CONCURRENT
