"""Start a new query from a savepoint behind the exactly-once Kafka sink (Flink's ``-s``):
operator state and source offsets come from the savepoint, checkpoint numbering continues after
it, output is committed exactly once and no transaction stays open. A second query pointed at the
first query's checkpoint storage is refused instead of losing data."""

from __future__ import annotations

import os
import uuid
from collections import Counter
from dataclasses import dataclass

import pytest
from kafka import KafkaProducer

from barrier_demo.pipeline import PipelineConfig, run_until_caught_up, start_pipeline
from barrier_demo.verify import read_topic
from barrier_sink.lingering import list_lingering
from integration_tests.pipeline_support import group_offsets
from state_backends.checkpoint_store import CompletedCheckpointStore
from state_backends.registry import backend_from_uri

KEYS = 53


def produce(bootstrap, topic, start, count):
    producer = KafkaProducer(bootstrap_servers=bootstrap, linger_ms=20, acks=1)
    for i in range(start, start + count):
        producer.send(topic, key=b"k%d" % (i % KEYS), value=b"v%d" % i)
    producer.flush(timeout=60)
    producer.close()


def config(bootstrap, topic, output, workdir, restore_from=None):
    return PipelineConfig(bootstrap, topic, output, str(workdir),
                          f"restore-{uuid.uuid4().hex[:6]}", f"restore-{uuid.uuid4().hex[:6]}",
                          max_offsets_per_trigger=1500, restore_from=restore_from)


def test_new_query_from_a_savepoint_behind_the_2pc_sink(spark, bootstrap, topic_factory,
                                                        tmp_path):
    topic = topic_factory(4, prefix="restore_in")
    out_a, out_b = topic_factory(2, prefix="restore_a"), topic_factory(2, prefix="restore_b")
    produce(bootstrap, topic, 0, 4000)
    first = config(bootstrap, topic, out_a, tmp_path / "a")
    run_until_caught_up(spark, first, timeout_s=300)
    store_a = CompletedCheckpointStore(backend_from_uri(first.storage))
    n = store_a.latest_id()
    assert n is not None and n >= 2

    # The restored query gets its own storage; the savepoint is written straight into it.
    os.makedirs(tmp_path / "b")
    second = config(bootstrap, topic, out_b, tmp_path / "b", restore_from="savepoints/sp")
    store_a.create_savepoint("sp", target=backend_from_uri(second.storage))
    produce(bootstrap, topic, 4000, 3000)
    run_until_caught_up(spark, second, timeout_s=300)

    # Keys continue counting where the savepoint left them: k:(a+1) .. k:(a+b), once each.
    before = Counter(v.decode().rpartition(":")[0] for v in read_topic(bootstrap, out_a))
    after = Counter(v.decode() for v in read_topic(bootstrap, out_b))
    assert max(after.values()) == 1, "duplicates in the restored query's committed output"
    added = Counter(f"k{i % KEYS}" for i in range(4000, 7000))
    expected = {f"{k}:{before[k] + j}" for k in added for j in range(1, added[k] + 1)}
    assert set(after) == expected
    assert list_lingering({"bootstrap_servers": bootstrap}, second.transactional_id_prefix) == []
    store_b = CompletedCheckpointStore(backend_from_uri(second.storage))
    restored_ids = store_b.completed_ids()
    assert restored_ids and min(restored_ids) > n, \
        "the restored query must number its checkpoints after the savepoint's"
    restored = group_offsets(bootstrap, second.group_id, topic)
    assert sum(restored.values()) == 7000


@dataclass(frozen=True)
class SharedStorageConfig(PipelineConfig):
    """A pipeline whose checkpoint storage is another query's (its checkpointLocation is not)."""

    shared_storage: str = ""

    @property
    def storage(self) -> str:
        return self.shared_storage


@pytest.mark.parametrize("restore_from,message", [
    ("chk-1", "already holds checkpoints"),    # the source refuses to restore into it
    (None, "belongs to the query whose checkpointLocation"),  # the sink refuses to share it
])
def test_a_second_query_on_the_same_storage_is_refused(restore_from, message, spark, bootstrap,
                                                       topic_factory, tmp_path):
    topic = topic_factory(2, prefix="restore_same")
    produce(bootstrap, topic, 0, 600)
    first = config(bootstrap, topic, topic_factory(1, prefix="same_a"), tmp_path / "a")
    run_until_caught_up(spark, first, timeout_s=300)
    before = read_topic(bootstrap, first.output_topic)
    other = SharedStorageConfig(bootstrap, topic, first.output_topic, str(tmp_path / "b"),
                                first.group_id + "-b", first.transactional_id_prefix + "-b",
                                restore_from=restore_from, shared_storage=first.storage)
    query = start_pipeline(spark, other)
    try:
        with pytest.raises(Exception) as err:
            query.awaitTermination(120)
            raise AssertionError("the query sharing another query's storage kept running")
    finally:
        query.stop()
    assert message in str(err.value)
    # Nothing of the refused query became visible, and the first query's output is intact.
    assert sorted(read_topic(bootstrap, first.output_topic)) == sorted(before)
