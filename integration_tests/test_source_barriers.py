"""barrier-kafka source against a real broker: barrier rows sit exactly at the planned offsets,
records carry their epoch, and every record arrives once."""

from __future__ import annotations

import json
import os
import time

import pytest

from barrier_source.offsets import SourceOffset
from integration_tests.source_helpers import barriers, produce, records, run_to_memory


def planned_offsets(checkpoint_dir: str):
    """Every end offset Spark wrote to <checkpointLocation>/offsets/<N>, by batch id."""
    out = {}
    folder = os.path.join(checkpoint_dir, "offsets")
    for name in os.listdir(folder):
        if name.isdigit():
            with open(os.path.join(folder, name)) as f:
                out[int(name)] = SourceOffset.from_json(json.loads(f.read().splitlines()[-1]))
    return dict(sorted(out.items()))


def expected_barriers(plans):
    out = {}
    for plan in plans.values():
        for b in plan.barriers:
            for c in b.emit:
                out.setdefault(b.checkpoint_id, {})[c] = b.positions[c]
    return out


def assert_epochs(rows):
    bars = barriers(rows)
    for r in records(rows):
        c = f"{r.topic}:{r.partition}"
        later = [cid for cid, pos in bars.items() if c in pos and pos[c] > r.offset]
        if later:
            assert r.checkpoint_id == min(later), r


def base(bootstrap, topic, **extra):
    opts = {"kafka.bootstrap.servers": bootstrap, "subscribe": topic,
            "startingOffsets": "earliest"}
    opts.update(extra)
    return opts


def test_barriers_at_batch_ends_in_every_partition(spark, bootstrap, topic_factory, tmp_path):
    topic = topic_factory(3)
    produce(bootstrap, topic, {0: 60, 1: 35, 2: 0})
    chk = str(tmp_path / "chk")
    rows = run_to_memory(spark, base(bootstrap, topic, maxOffsetsPerTrigger="40"), chk)
    recs = records(rows)
    assert sorted((r.partition, r.offset) for r in recs) == sorted(
        [(0, i) for i in range(60)] + [(1, i) for i in range(35)])
    plans = planned_offsets(chk)
    assert len(plans) >= 3
    bars = barriers(rows)
    assert bars == expected_barriers(plans)
    assert sorted(bars) == list(range(1, len(bars) + 1))
    for cid, pos in bars.items():  # every live channel delivers every barrier, empty ones too
        assert set(pos) == {f"{topic}:0", f"{topic}:1", f"{topic}:2"}
        assert pos[f"{topic}:2"] == 0
    assert bars[max(bars)] == {f"{topic}:0": 60, f"{topic}:1": 35, f"{topic}:2": 0}
    chan = [r.barrier_channels for r in rows if r.kind == "barrier"][0]
    assert sorted(chan) == [f"{topic}:0", f"{topic}:1", f"{topic}:2"]
    # Empty on records, never null: a list column null on most rows costs Spark's JVM several
    # times more per row in every step that hands the rows to Python (the 2PC sink).
    assert {repr(r.barrier_channels) for r in recs} == {"[]"}
    assert_epochs(rows)


def _tasks_of_query(spark, run_id):
    """Task counts of the stages of every job a query run ran (Spark's status tracker; a
    streaming query's jobs are in the job group of its run id)."""
    tracker = spark.sparkContext.statusTracker()
    counts = []
    for job in tracker.getJobIdsForGroup(run_id):
        for stage in tracker.getJobInfo(job).stageIds:
            info = tracker.getStageInfo(stage)
            if info is not None:
                counts.append(info.numTasks)
    return counts


@pytest.mark.parametrize("packing", [{"maxPartitions": "2"},
                                     {"minRecordsPerPartition": "20"}])
def test_packing_options_read_ranges_in_fewer_tasks(spark, bootstrap, topic_factory, tmp_path,
                                                     packing):
    """maxPartitions=2, or minRecordsPerPartition=20 with 40-record batches, on five partitions:
    each batch runs at most two read tasks, and the rows are what one task per partition gives:
    every record once, barrier n at the batch end of every channel (empty ones too), every
    record in its epoch."""
    topic = topic_factory(5)
    produce(bootstrap, topic, {0: 60, 1: 35, 2: 0, 3: 41, 4: 7})
    channels = {f"{topic}:{p}" for p in range(5)}
    runs = []
    chk = str(tmp_path / "chk")
    rows = run_to_memory(spark, base(bootstrap, topic, maxOffsetsPerTrigger="40", **packing), chk,
                         started=lambda q: runs.append(str(q.runId)))
    tasks = _tasks_of_query(spark, runs[0])
    assert len(tasks) >= 4 and max(tasks) <= 2, tasks
    assert sorted((r.partition, r.offset) for r in records(rows)) == sorted(
        [(0, i) for i in range(60)] + [(1, i) for i in range(35)] + [(3, i) for i in range(41)]
        + [(4, i) for i in range(7)])
    plans = planned_offsets(chk)
    assert len(plans) >= 4
    bars = barriers(rows)
    assert bars == expected_barriers(plans)
    assert sorted(bars) == list(range(1, len(bars) + 1))
    assert all(set(pos) == channels for pos in bars.values())
    assert bars[max(bars)] == {f"{topic}:0": 60, f"{topic}:1": 35, f"{topic}:2": 0,
                               f"{topic}:3": 41, f"{topic}:4": 7}
    assert_epochs(rows)


def test_every_n_batches_and_checkpoints_off(spark, bootstrap, topic_factory, tmp_path):
    topic = topic_factory(1)
    produce(bootstrap, topic, {0: 50})
    rows = run_to_memory(spark, base(bootstrap, topic, maxOffsetsPerTrigger="10", **{
        "execution.checkpointing.interval-batches": "2"}), str(tmp_path / "a"))
    assert barriers(rows) == {1: {f"{topic}:0": 10}, 2: {f"{topic}:0": 30},
                              3: {f"{topic}:0": 50}}
    assert_epochs(rows)
    off = run_to_memory(spark, base(bootstrap, topic, maxOffsetsPerTrigger="10", **{
        "execution.checkpointing.interval-batches": "0"}), str(tmp_path / "b"))
    assert barriers(off) == {} and len(records(off)) == 50


def test_interval_in_time_triggers_only_when_due(spark, bootstrap, topic_factory, tmp_path):
    topic = topic_factory(1)
    produce(bootstrap, topic, {0: 30})
    rows = run_to_memory(spark, base(bootstrap, topic, maxOffsetsPerTrigger="10", **{
        "execution.checkpointing.interval": "1h"}), str(tmp_path / "a"))
    assert barriers(rows) == {1: {f"{topic}:0": 10}}  # first batch triggers, then not due
    assert {r.checkpoint_id for r in records(rows) if r.offset >= 10} == {2}


def test_timestamp_cut_falls_mid_batch(spark, bootstrap, topic_factory, tmp_path):
    topic = topic_factory(2)
    now = int(time.time() * 1000)
    produce(bootstrap, topic, {0: 10, 1: 7}, timestamp_ms=now - 3_600_000)
    produce(bootstrap, topic, {0: 5}, start_index=10, timestamp_ms=now + 3_600_000)
    chk = str(tmp_path / "chk")
    rows = run_to_memory(spark, base(bootstrap, topic, **{
        "execution.checkpointing.barrier-placement": "timestamp"}), chk)
    # trigger time ~ now: partition 0 is cut before its first future record (offset 10, mid
    # batch); partition 1 has none, so its cut is its log end
    assert barriers(rows) == {1: {f"{topic}:0": 10, f"{topic}:1": 7}}
    assert barriers(rows) == expected_barriers(planned_offsets(chk))
    assert {r.checkpoint_id for r in records(rows) if r.partition == 0 and r.offset >= 10} == {2}
    assert {r.checkpoint_id for r in records(rows) if r.offset < 10 and r.partition == 0} == {1}


def test_timestamp_cut_beyond_a_rate_limited_batch_arrives_later(spark, bootstrap,
                                                                  topic_factory, tmp_path):
    topic = topic_factory(2)
    now = int(time.time() * 1000)
    produce(bootstrap, topic, {0: 40, 1: 40}, timestamp_ms=now - 3_600_000)
    chk = str(tmp_path / "chk")
    rows = run_to_memory(spark, base(bootstrap, topic, maxOffsetsPerTrigger="20", **{
        "execution.checkpointing.barrier-placement": "timestamp",
        "execution.checkpointing.max-concurrent-checkpoints": "1"}), chk)
    bars = barriers(rows)
    assert bars[1] == {f"{topic}:0": 40, f"{topic}:1": 40}  # cut at log end, batches later
    plans = planned_offsets(chk)
    first = plans[min(plans)]
    assert first.barriers[0].owed  # owed after the first (rate-limited) batch
    assert bars == expected_barriers(plans)
    assert_epochs(rows)
