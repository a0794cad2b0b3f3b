"""``maxPartitions``: a batch's Kafka ranges packed into at most N input partitions (tasks), every
range exactly once, about equal records per task, the same packing for the same ranges."""

import random

import pytest

from barrier_core.exceptions import InvalidOptionError
from barrier_core.schema import source_schema
from barrier_source.range_groups import KafkaRangeGroup, pack_ranges
from barrier_source.reader import BarrierKafkaStreamReader, KafkaRangePartition
from tests.source.test_legacy_planning import make_reader


def _range(p, records, barriers=0):
    return KafkaRangePartition("t", p, 1000, 1000 + records,
                               tuple((i + 1, 0, 1000 + records, ("t:0",)) for i in range(barriers)),
                               (), 1)


def _members(packed):
    out = []
    for part in packed:
        out.append(list(part.ranges) if isinstance(part, KafkaRangeGroup) else [part])
    return out


def _weight(r):
    return r.until_offset - r.from_offset + len(r.barriers)


@pytest.mark.parametrize("seed", range(40))
def test_every_range_once_in_at_most_n_tasks_and_balanced(seed):
    rng = random.Random(seed)
    ranges = [_range(p, rng.choice([0, 1, 7, 2500, rng.randrange(10_000)]), rng.randrange(2))
              for p in range(rng.randrange(1, 40))]
    ranges = [r for r in ranges if _weight(r)]  # partitions() drops empty ranges
    if not ranges:
        return
    n = rng.randrange(1, 12)
    packed = pack_ranges(ranges, n)
    groups = _members(packed)
    assert len(packed) == min(n, len(ranges))
    assert sorted(r.partition for g in groups for r in g) == [r.partition for r in ranges]
    for g in groups:  # a task reads its ranges in channel order
        assert [r.partition for r in g] == sorted(r.partition for r in g)
    # largest first into the lightest task: no task exceeds the mean by more than one range
    loads = [sum(map(_weight, g)) for g in groups]
    biggest = max(map(_weight, ranges))
    assert max(loads) <= sum(loads) / len(loads) + biggest
    assert _members(pack_ranges(list(ranges), n)) == groups  # deterministic


def test_fewer_ranges_than_tasks_keep_one_task_a_range():
    ranges = [_range(0, 10), _range(1, 20)]
    assert pack_ranges(ranges, 2) == ranges
    assert pack_ranges(ranges, 8) == ranges


def test_equal_ranges_split_evenly_and_a_lone_range_is_not_wrapped():
    ranges = [_range(p, 2500) for p in range(4)]
    assert [[r.partition for r in g] for g in _members(pack_ranges(ranges, 2))] == [[0, 2], [1, 3]]
    packed = pack_ranges([_range(0, 9000), _range(1, 10), _range(2, 10)], 2)
    assert isinstance(packed[0], KafkaRangePartition) and packed[0].partition == 0
    assert [r.partition for r in packed[1].ranges] == [1, 2]


def test_a_bad_bound_is_refused():
    with pytest.raises(ValueError, match="max_partitions"):
        pack_ranges([_range(0, 1)], 0)
    for bad, why in (("0", ">= 1"), ("two", "integer")):
        with pytest.raises(InvalidOptionError, match=f"maxPartitions.*{why}"):
            BarrierKafkaStreamReader({"kafka.bootstrap.servers": "127.0.0.1:1",
                                      "subscribe": "t", "maxPartitions": bad}, source_schema())


def test_the_reader_plans_the_same_ranges_in_fewer_tasks():
    latest = {p: 100 * (p + 1) for p in range(5)}
    plain, packed = make_reader(dict(latest)), make_reader(dict(latest), maxPartitions="2")
    start = plain.initialOffset()
    assert packed.initialOffset() == start
    end = plain.latestOffset()  # the packing depends on the planned ranges only
    one_each = plain.partitions(start, end)
    tasks = packed.partitions(start, end)
    assert len(one_each) == 5 and len(tasks) == 2
    flat = [(r.partition, r.from_offset, r.until_offset, r.barriers, r.epochs)
            for g in _members(tasks) for r in g]
    assert sorted(flat) == sorted((r.partition, r.from_offset, r.until_offset, r.barriers,
                                   r.epochs) for r in one_each)
    assert all(r.barriers for r in one_each)  # checkpoint 1 rides in every range


def test_a_task_reads_its_ranges_one_after_another(monkeypatch):
    reader = make_reader({0: 10})
    monkeypatch.setattr(BarrierKafkaStreamReader, "_read_range",
                        lambda self, r: iter([(r.partition, "a"), (r.partition, "b")]))
    got = list(reader.read(KafkaRangeGroup((_range(3, 1), _range(1, 1)))))
    assert got == [(3, "a"), (3, "b"), (1, "a"), (1, "b")]
    assert list(reader.read(_range(2, 1))) == [(2, "a"), (2, "b")]


@pytest.mark.parametrize("records, ranges, cap, tasks", [
    (10_000, 4, None, 1),      # a small batch: one task reads every range
    (50_000, 4, None, 1),
    (200_000, 4, None, 2),     # 100,000 records a task
    (500_000, 8, None, 5),
    (5_000_000, 8, None, 8),   # never more tasks than ranges
    (500_000, 8, 3, 3),        # maxPartitions still caps the tasks
])
def test_min_records_per_partition_packs_a_small_batch_into_fewer_tasks(records, ranges, cap,
                                                                        tasks):
    latest = {p: records // ranges for p in range(ranges)}
    options = {"minRecordsPerPartition": "100000", "maxOffsetsPerTrigger": str(records)}
    if cap:
        options["maxPartitions"] = str(cap)
    reader = make_reader(dict(latest), **options)
    start = reader.initialOffset()
    end = reader.latestOffset()
    packed = reader.partitions(start, end)
    assert len(packed) == tasks
    flat = sorted((r.partition, r.from_offset, r.until_offset) for g in _members(packed)
                  for r in g)
    one_each = make_reader(dict(latest)).partitions(start, end)
    assert flat == sorted((r.partition, r.from_offset, r.until_offset) for r in one_each)
    assert len(one_each) == ranges


def test_a_bad_min_records_per_partition_is_refused():
    for bad, why in (("0", ">= 1"), ("many", "integer")):
        with pytest.raises(InvalidOptionError, match=f"minRecordsPerPartition.*{why}"):
            BarrierKafkaStreamReader({"kafka.bootstrap.servers": "127.0.0.1:1", "subscribe": "t",
                                      "minRecordsPerPartition": bad}, source_schema())
