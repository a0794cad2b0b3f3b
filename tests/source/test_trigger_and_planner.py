"""Checkpoint trigger decision and batch planning (pure functions, injected time)."""

import json
import time

import pytest

from barrier_source.offsets import SourceOffset
from barrier_source.planner import plan_end_offset, rate_limit
from barrier_source.trigger import CheckpointTrigger, TriggerDecision as D, TriggerState


@pytest.mark.parametrize("trigger, state, now, completed, expected", [
    (CheckpointTrigger(0, 0), TriggerState(), 0, 0, D.DISABLED),
    (CheckpointTrigger(0, 1), TriggerState(), 0, 0, D.TRIGGER),
    (CheckpointTrigger(0, 3), TriggerState(2, 100, 0), 200, 1, D.NOT_DUE),
    (CheckpointTrigger(0, 3), TriggerState(2, 100, 2), 200, 1, D.TRIGGER),
    (CheckpointTrigger(1000, 0), TriggerState(), 5, 0, D.TRIGGER),
    (CheckpointTrigger(1000, 0), TriggerState(2, 1000, 7), 1999, 1, D.NOT_DUE),
    (CheckpointTrigger(1000, 0), TriggerState(2, 1000, 7), 2000, 1, D.TRIGGER),
    (CheckpointTrigger(0, 1, min_pause_ms=500), TriggerState(2, 1000, 0), 1400, 1, D.MIN_PAUSE),
    (CheckpointTrigger(0, 1, min_pause_ms=500), TriggerState(2, 1000, 0), 1500, 1, D.TRIGGER),
    (CheckpointTrigger(0, 1), TriggerState(3, 1000, 0), 2000, 1, D.MAX_CONCURRENT),
    (CheckpointTrigger(0, 1, max_concurrent=2), TriggerState(3, 1000, 0), 2000, 1, D.TRIGGER),
])
def test_trigger_decision(trigger, state, now, completed, expected):
    assert trigger.decide(state, now, completed) is expected


def test_rate_limit_is_proportional_and_never_exceeds_the_limit():
    starts = {"t": {0: 0, 1: 0, 2: 10}}
    latest = {"t": {0: 100, 1: 50, 2: 10}}
    ends = rate_limit(starts, latest, 30)
    assert sum(ends["t"][p] - starts["t"][p] for p in ends["t"]) == 30
    assert ends["t"][0] == 20 and ends["t"][1] == 10 and ends["t"][2] == 10
    assert rate_limit(starts, latest, None) == latest
    assert rate_limit(starts, latest, 1000) == latest
    one = rate_limit({"t": {0: 0, 1: 0}}, {"t": {0: 1, 1: 1}}, 1)
    assert sum(one["t"].values()) == 1


def test_end_placement_seals_in_the_triggering_batch_and_replays_identically():
    prev = SourceOffset({"t": {0: 0, 1: 5}})
    ends = {"t": {0: 10, 1: 5}}
    plan = plan_end_offset(prev, prev.offsets, ends, {}, D.TRIGGER, 1000, "end")
    j = plan.to_json()
    assert j["checkpoint"]["barriers"][0]["positions"] == {"t:0": 10, "t:1": 5}
    assert j["checkpoint"]["barriers"][0]["emit"] == ["t:0", "t:1"]
    assert j["checkpoint"]["sealed"] == {"id": 1, "timestamp": 1000,
                                         "offsets": {"t": {"0": 10, "1": 5}}}
    assert j["checkpoint"]["next_id"] == 2
    again = SourceOffset.from_json(json.loads(json.dumps(j)))
    assert again.to_json() == j and json.dumps(again.to_json()) == json.dumps(j)


def test_timestamp_cut_beyond_the_batch_is_owed_and_emitted_later():
    prev = SourceOffset({"t": {0: 0, 1: 0}})
    plan = plan_end_offset(prev, prev.offsets, {"t": {0: 10, 1: 10}}, {}, D.TRIGGER, 1000,
                           "timestamp", {"t:0": 4, "t:1": 25})
    b = plan.barriers[0]
    assert b.emit == ("t:0",) and b.owed == ("t:1",) and plan.sealed is None
    nxt = plan_end_offset(plan, plan.offsets, {"t": {0: 20, 1: 20}}, {}, D.NOT_DUE, 2000,
                          "timestamp")
    assert nxt.barriers[0].emit == () and nxt.barriers[0].owed == ("t:1",)
    last = plan_end_offset(nxt, nxt.offsets, {"t": {0: 30, 1: 30}}, {}, D.NOT_DUE, 3000,
                           "timestamp")
    assert last.barriers[0].emit == ("t:1",) and last.sealed.checkpoint_id == 1
    assert last.sealed.offsets == {"t": {0: 4, 1: 25}}
    done = plan_end_offset(last, last.offsets, {"t": {0: 40, 1: 40}}, {}, D.NOT_DUE, 4000,
                           "timestamp")
    assert done.barriers == () and done.sealed.checkpoint_id == 1


def test_cut_is_clamped_to_the_batch_start_and_new_channels_join_next_checkpoint():
    prev = SourceOffset({"t": {0: 8}})
    plan = plan_end_offset(prev, {"t": {0: 8, 1: 0}}, {"t": {0: 9, 1: 3}}, {"t": {1: 0}},
                           D.TRIGGER, 10, "timestamp", {"t:0": 2, "t:1": 1})
    assert plan.barriers[0].positions == {"t:0": 8, "t:1": 1}
    assert plan.new_partitions == {"t": {1: 0}}


def test_plain_spark_kafka_offsets_are_accepted_as_start():
    assert SourceOffset.from_json({"t": {"0": 3}}).offsets == {"t": {0: 3}}


def test_a_vanished_channel_gets_its_owed_barrier_as_end_of_partition():
    """Issue 12, 6c: a partition deleted while it still owed checkpoint 1's barrier (timestamp
    placement held back by maxOffsetsPerTrigger). The other channel's aligners already hold
    barrier 1: it must still come on the vanished channel, without records, so alignment and
    the checkpoint complete instead of waiting for the checkpoint timeout."""
    import pyarrow as pa

    from barrier_source.reader import BarrierKafkaStreamReader
    from barrier_core.schema import source_schema

    prev = SourceOffset({"t": {0: 0}, "gone": {0: 0}})
    plan = plan_end_offset(prev, prev.offsets, {"t": {0: 10}, "gone": {0: 10}}, {}, D.TRIGGER,
                           1000, "timestamp", {"t:0": 4, "gone:0": 25})
    assert plan.barriers[0].owed == ("gone:0",) and plan.sealed is None
    nxt = plan_end_offset(plan, {"t": {0: 10}}, {"t": {0: 20}}, {}, D.NOT_DUE, 2000,
                          "timestamp")
    assert nxt.barriers[0].emit == ("gone:0",) and nxt.barriers[0].owed == ()
    assert nxt.sealed is not None and nxt.sealed.checkpoint_id == 1

    # No broker listens on port 1: reading the vanished range must not need Kafka.
    reader = BarrierKafkaStreamReader({"kafka.bootstrap.servers": "127.0.0.1:1",
                                       "subscribePattern": ".*"}, source_schema())
    ranges = {f"{r.topic}:{r.partition}": r
              for r in reader.partitions(plan.to_json(), nxt.to_json())}
    ended = ranges["gone:0"]
    assert ended.from_offset == ended.until_offset == 25
    assert [b[0] for b in ended.barriers] == [1]
    assert ranges["t:0"].barriers == () and ranges["t:0"].until_offset == 20
    rows = pa.Table.from_batches(list(reader.read(ended))).to_pylist()
    assert [(r["kind"], r["topic"], r["partition"], r["offset"], r["checkpoint_id"],
             r["barrier_channels"]) for r in rows] == [
        ("barrier", "gone", 0, 25, 1, ["gone:0", "t:0"])]


def test_owed_barriers_are_admitted_before_the_proportional_share():
    """A partition that owes a barrier gets its records up to the barrier first, so a busier
    partition cannot starve it (the checkpoint and the aligners waiting for it would stall)."""
    starts, latest = {"t": {0: 0, 1: 0}}, {"t": {0: 1000, 1: 300}}
    assert rate_limit(starts, latest, 60)["t"] == {0: 46, 1: 14}  # proportional alone
    assert rate_limit(starts, latest, 60, owed={"t:1": 300})["t"] == {0: 0, 1: 60}
    near = rate_limit({"t": {0: 0, 1: 280}}, latest, 60, owed={"t:1": 300})["t"]
    assert near[1] >= 300 and sum(near.values()) - 280 == 60
    # an owed barrier behind the start (already read) takes nothing
    assert rate_limit(starts, latest, 60, owed={"t:1": 0})["t"] == {0: 46, 1: 14}


def test_each_reader_records_the_start_of_its_query_run(tmp_path):
    """The coordinator measures a pending checkpoint's timeout from the later of its trigger and
    the current run's start (barrier_core.query_run); the source's reader records that start
    when Spark creates it, once per run of the query, without contacting Kafka."""
    from barrier_core.query_run import read_run_start
    from barrier_core.schema import source_schema
    from barrier_source.reader import BarrierKafkaStreamReader
    from state_backends.registry import backend_from_uri

    storage = str(tmp_path / "storage")
    options = {"kafka.bootstrap.servers": "127.0.0.1:1", "subscribe": "t",
               "checkpoint.storage": storage}
    before = int(time.time() * 1000)
    BarrierKafkaStreamReader(options, source_schema())
    first = read_run_start(backend_from_uri(storage))
    assert first >= before
    while int(time.time() * 1000) == first:  # the next run starts in a later millisecond
        pass
    BarrierKafkaStreamReader(options, source_schema())
    assert read_run_start(backend_from_uri(storage)) > first
