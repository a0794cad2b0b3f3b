"""``on_batch``: folding protocol-shaped commit messages (barriers, ack JSON, sink handles)
into checkpoints, including replays of the same batch."""

from __future__ import annotations

import json

import pytest

from barrier_coordinator import ManualClock
from barrier_coordinator.batch import SINK_BARRIER_TASK, operator_task_id, sink_task_id
from tests.coordinator.helpers import (CheckpointSequenceValidator, memory_backend,
                                       new_coordinator)

CHANNELS = ["t:0", "t:1"]


@pytest.fixture
def backend(request):
    return memory_backend(request)


@pytest.fixture
def clock():
    return ManualClock()


def barrier(n, channel, offset, ts):
    return {"checkpoint_id": n, "channel": channel, "offset": offset, "channels": CHANNELS,
            "timestamp": ts}


def ack_json(backend, n, kg, num_key_groups=2, op="agg"):
    handle = backend.write_snapshot(n, op, kg, f"{op}-{n}-{kg}".encode())
    return json.dumps({"operator_id": op, "key_group": kg, "num_key_groups": num_key_groups,
                       "checkpoint_id": n, "snapshot": handle.to_json(),
                       "offsets": {"t": {"0": 10 * n, "1": 11 * n}},
                       "metrics": {"alignment_ms": 7, "held_back_records": 3, "sync_ms": 1,
                                   "async_ms": 2, "state_bytes": 6}})


def test_checkpoint_completes_across_batches_and_replay_is_idempotent(backend, clock):
    validator = CheckpointSequenceValidator(1)
    ts = clock.now_ms()
    c = new_coordinator(backend, clock, [validator])
    # Batch 0: records of epoch 1 pre-committed before checkpoint 1 exists anywhere.
    assert c.on_batch(0, [], [], [{"transactional_id": "tx-a", "checkpoint_id": 1}]) is None
    # Batch 1: key group 0 aligned; the sink saw barrier 1 on t:0 only.
    c = new_coordinator(backend, clock, [validator])
    assert c.on_batch(1, [barrier(1, "t:0", 10, ts)], [ack_json(backend, 1, 0)]) is None
    pending = c.get_pending(1)
    assert pending.expected == {operator_task_id("agg", 0), operator_task_id("agg", 1),
                                SINK_BARRIER_TASK, sink_task_id("t:0"), sink_task_id("t:1")}
    assert pending.sink_transactions == [{"transactional_id": "tx-a", "checkpoint_id": 1}]
    # Batch 2: the rest arrives; checkpoint 1 completes in a fresh process.
    c = new_coordinator(backend, clock, [validator])
    handles = [{"transactional_id": "tx-b", "checkpoint_id": 1},
               {"transactional_id": "tx-c", "checkpoint_id": 2}]
    done = c.on_batch(2, [barrier(1, "t:1", 11, ts)], [ack_json(backend, 1, 1)], handles)
    assert done.checkpoint_id == 1 and done.completion_batch == 2
    assert done.offsets == {"t": {"0": 10, "1": 11}}
    assert [h["transactional_id"] for h in done.sink_transactions] == ["tx-a", "tx-b"]
    assert [h.key_group for h in done.operators] == [0, 1]
    validator.assert_all_seen()
    # Spark replays batch 2 after a crash: nothing completes twice, the caller is told again.
    c = new_coordinator(backend, clock, [validator])
    again = c.on_batch(2, [barrier(1, "t:1", 11, ts)], [ack_json(backend, 1, 1)], handles)
    assert again.checkpoint_id == 1 and again.completion_batch == 2
    validator.assert_all_seen()
    c.mark_committed(1)
    # A later batch with nothing new has nothing to notify.
    assert new_coordinator(backend, clock).on_batch(3, [], []) is None
    # The early handle of epoch 2 waits for checkpoint 2.
    c = new_coordinator(backend, clock)
    c.on_batch(4, [barrier(2, "t:0", 20, ts + 5)], [])
    assert c.get_pending(2).sink_transactions == [{"transactional_id": "tx-c",
                                                   "checkpoint_id": 2}]


def test_operator_acks_alone_never_complete(backend, clock):
    c = new_coordinator(backend, clock)
    assert c.on_batch(0, [], [ack_json(backend, 1, 0), ack_json(backend, 1, 1)]) is None
    assert c.get_pending(1).not_yet_acknowledged() == [SINK_BARRIER_TASK]
    done = c.on_batch(1, [barrier(1, ch, 5, clock.now_ms()) for ch in CHANNELS], [])
    assert done.checkpoint_id == 1


def test_declared_operators_are_expected_before_they_ack(backend, clock):
    c = new_coordinator(backend, clock, operators={"join": 1})
    assert c.on_batch(0, [barrier(1, ch, 5, clock.now_ms()) for ch in CHANNELS], []) is None
    assert c.get_pending(1).not_yet_acknowledged() == [operator_task_id("join", 0)]
    done = c.on_batch(1, [], [ack_json(backend, 1, 0, num_key_groups=1, op="join")])
    assert done.checkpoint_id == 1


def test_learned_operators_are_expected_in_later_checkpoints(backend, clock):
    c = new_coordinator(backend, clock)
    c.on_batch(0, [barrier(1, ch, 5, clock.now_ms()) for ch in CHANNELS],
               [ack_json(backend, 1, k) for k in range(2)])
    assert c.last_completed_id == 1
    c = new_coordinator(backend, clock)
    # Not yet marked committed: the caller is told again (crash between complete and commit).
    assert c.on_batch(1, [barrier(2, ch, 9, clock.now_ms()) for ch in CHANNELS],
                      []).checkpoint_id == 1
    c.mark_committed(1)
    assert c.on_batch(2, [barrier(2, ch, 9, clock.now_ms()) for ch in CHANNELS], []) is None
    assert c.get_pending(2).not_yet_acknowledged() == [operator_task_id("agg", 0),
                                                       operator_task_id("agg", 1)]


def test_barrier_of_a_timed_out_checkpoint_is_ignored_on_replay(backend, clock):
    c = new_coordinator(backend, clock, checkpoint_timeout_ms=50, tolerable_failed_checkpoints=1)
    c.on_batch(0, [barrier(1, "t:0", 5, clock.now_ms())], [])
    clock.advance(60)
    c = new_coordinator(backend, clock, checkpoint_timeout_ms=50, tolerable_failed_checkpoints=1)
    c.on_batch(1, [barrier(1, "t:1", 5, clock.now_ms() - 60)], [])
    assert c.get_pending(1) is None and 1 in c.state.aborted
    assert c.failure_manager.continuous_failures == 1


def test_operator_channels_are_not_kafka_offsets(backend, clock):
    """Behind an operator the sink sees barriers on ``op:<id>:<k>`` channels; only the acks'
    Kafka offsets become the checkpoint's source offsets."""
    op_channels = ["op:agg:0", "op:agg:1"]
    ack = json.loads(ack_json(backend, 1, 0, num_key_groups=2))
    ack["offsets"]["op:upstream:0"] = {"0": 99}  # a chained operator's input cut
    ack["checkpoint_timestamp"] = clock.now_ms() - 10
    c = new_coordinator(backend, clock)
    c.on_batch(0, [], [json.dumps(ack), ack_json(backend, 1, 1)])
    assert c.get_pending(1).timestamp_ms == clock.now_ms() - 10
    done = c.on_batch(1, [{"checkpoint_id": 1, "channel": ch, "offset": 7 + i,
                           "channels": op_channels, "timestamp": clock.now_ms()}
                          for i, ch in enumerate(op_channels)], [])
    assert done.checkpoint_id == 1
    assert done.offsets == {"t": {"0": 10, "1": 11}}
