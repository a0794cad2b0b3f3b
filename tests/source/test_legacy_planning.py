"""Planning without Spark's admission control (PySpark 4.0 and 4.1 call ``latestOffset()`` with no
start and no limit): the reader plans from the newest offset Spark announced, and refuses a batch
Spark runs from another start than the one it planned from."""

import pytest

from barrier_core.exceptions import BarrierKafkaError
from barrier_core.schema import source_schema
from barrier_source.offsets import SourceOffset
from barrier_source.read_limits import ReadMaxRows
from barrier_source.reader import BarrierKafkaStreamReader


class FakeKafka:
    """Topic metadata of one two-partition topic whose ends move when the test says so."""

    def __init__(self, latest):
        self.latest = latest

    def topic_partitions(self, strict):
        return {"t": sorted(self.latest)}

    def list_offsets(self, parts, spec):
        if spec == "earliest":
            return {"t": {p: 0 for p in self.latest}}
        return {"t": dict(self.latest)}

    def close(self):
        pass


def make_reader(latest, **options):
    opts = {"kafka.bootstrap.servers": "127.0.0.1:1", "subscribe": "t",
            "startingOffsets": "earliest"}
    opts.update(options)
    reader = BarrierKafkaStreamReader(opts, source_schema())
    reader._kafka = FakeKafka(latest)
    reader._commit_completed = lambda durable: None  # no group to commit to here
    return reader


def offsets(planned):
    return SourceOffset.from_json(planned).offsets["t"]


def test_a_new_query_plans_from_its_initial_offset_with_the_default_limit():
    reader = make_reader({0: 100, 1: 100}, maxOffsetsPerTrigger="50")
    first = reader.latestOffset()
    assert sum(offsets(first).values()) == 50
    # Spark asks for the initial offset after that call: it gets the one planned from
    reader._kafka.latest = {0: 500, 1: 500}
    initial = reader.initialOffset()
    assert offsets(initial) == {0: 0, 1: 0}
    assert reader.partitions(initial, first)
    second = reader.latestOffset()
    assert sum(offsets(second).values()) == 100
    assert SourceOffset.from_json(second).next_checkpoint_id == 3


def test_the_legacy_form_plans_what_the_admission_controlled_form_plans(monkeypatch):
    monkeypatch.setattr("barrier_source.reader._now_ms", lambda: 1_000_000)  # one trigger time
    legacy = make_reader({0: 70, 1: 30}, maxOffsetsPerTrigger="40")
    modern = make_reader({0: 70, 1: 30}, maxOffsetsPerTrigger="40")
    start = modern.initialOffset()
    planned = modern.latestOffset(start, ReadMaxRows(40))
    assert legacy.latestOffset() == planned


def test_a_restart_plans_from_the_offset_spark_announces():
    """At a restart PySpark < 4.2 calls ``partitions(end, end)`` with the offset log's newest
    entry before asking for the latest offset: that entry is the next batch's start, whatever
    ``startingOffsets`` says."""
    reader = make_reader({0: 100, 1: 100}, startingOffsets="latest")
    announced = SourceOffset({"t": {0: 40, 1: 60}}).to_json()
    assert reader.partitions(announced, announced) == []
    planned = reader.latestOffset()
    parts = {(r.partition, r.from_offset, r.until_offset)
             for r in reader.partitions(announced, planned)}
    assert parts == {(0, 40, 100), (1, 60, 100)}


def test_a_batch_run_from_another_start_than_planned_is_refused_before_reading():
    """Spark asked before announcing where the query stands (the AvailableNow wrapper on
    PySpark < 4.2): the plan was made from the initial offset, but the batch runs from the
    offset log's entry. Its barriers and ids would be wrong: refuse it, naming the setting."""
    reader = make_reader({0: 100, 1: 100})
    planned = reader.latestOffset()
    elsewhere = SourceOffset({"t": {0: 10, 1: 10}}).to_json()
    with pytest.raises(BarrierKafkaError, match="triggerAvailableNowWrapper"):
        reader.partitions(elsewhere, planned)
