"""Issue 12, hole 6b: the source's ``checkpoint.storage`` defaulted to none while the sink's
defaults to ``<checkpointLocation>/barrier-checkpoints``. A user who set neither ran the source in
source-only mode: it committed consumer-group offsets when Spark committed a batch, ahead of the
sink's checkpoints, and nothing said so.

Now the sink refuses barriers from a source that does not share its storage: the first batch fails
in ``writer.commit`` with an error naming the option, nothing is committed (no output, no open
transaction, no group offsets), and the same query restarted with the option set delivers every
record exactly once with the group at the end.
"""

from __future__ import annotations

from collections import Counter

import pytest
from kafka import KafkaConsumer, KafkaProducer, TopicPartition

from barrier_ops.examples.running_count import OUTPUT_SCHEMA, RunningCount
from barrier_ops.operator import keyed_process
from barrier_sink.options import normalize_location
from integration_tests.pipeline_support import assert_no_open_transactions
from integration_tests.sink_support import read_committed_topic

RECORDS = 40


def _query(spark, bootstrap, topic, out, group, chk, storage=None):
    src = (spark.readStream.format("barrier-kafka")
           .option("kafka.bootstrap.servers", bootstrap).option("subscribe", topic)
           .option("startingOffsets", "earliest").option("kafka.group.id", group)
           .option("maxOffsetsPerTrigger", "15")
           .option("execution.checkpointing.interval-batches", "1"))
    if storage:
        src = src.option("checkpoint.storage", storage)
    return (src.load().writeStream.format("barrier-kafka")
            .option("kafka.bootstrap.servers", bootstrap).option("topic", out)
            .option("transactionalIdPrefix", group)
            .option("checkpointLocation", chk).start())


def _input_and_output(bootstrap, topic_factory):
    """Two 2-partition topics; the first holds RECORDS records, half on each partition."""
    topic, out = topic_factory(2), topic_factory(2)
    producer = KafkaProducer(bootstrap_servers=bootstrap)
    for i in range(RECORDS):
        producer.send(topic, key=b"k%d" % (i % 7), value=b"v%d" % i, partition=i % 2)
    producer.flush()
    producer.close()
    return topic, out


def _committed_group_offsets(bootstrap, group, topic):
    consumer = KafkaConsumer(bootstrap_servers=bootstrap, group_id=group,
                             enable_auto_commit=False)
    try:
        found = {p: consumer.committed(TopicPartition(topic, p)) for p in (0, 1)}
        return {p: o for p, o in found.items() if o is not None}
    finally:
        consumer.close()


def test_source_without_the_sinks_storage_is_refused_then_restart_is_exactly_once(
        spark, bootstrap, topic_factory, tmp_path):
    topic, out = _input_and_output(bootstrap, topic_factory)
    group, chk = "shared-" + out[-8:], str(tmp_path / "chk")

    query = _query(spark, bootstrap, topic, out, group, chk)
    with pytest.raises(Exception) as failed:
        query.processAllAvailable()
    query.stop()
    message = str(failed.value)
    sink_storage = normalize_location(chk) + "/barrier-checkpoints"
    assert "checkpoint.storage" in message and sink_storage in message
    assert read_committed_topic(bootstrap, out) == []
    assert_no_open_transactions(bootstrap, group)
    assert _committed_group_offsets(bootstrap, group, topic) == {}

    query = _query(spark, bootstrap, topic, out, group, chk, storage=sink_storage)
    try:
        query.processAllAvailable()
    finally:
        query.stop()
    assert Counter(read_committed_topic(bootstrap, out)) == \
        Counter(b"v%d" % i for i in range(RECORDS))
    assert_no_open_transactions(bootstrap, group)
    assert _committed_group_offsets(bootstrap, group, topic) == {0: RECORDS // 2,
                                                                 1: RECORDS // 2}


def test_an_operator_on_another_storage_is_refused_before_anything_commits(
        spark, bootstrap, topic_factory, tmp_path):
    """keyed_process snapshots to its own state_backend; the sink's chk-n/_metadata could not
    point at those snapshots, so the first batch with its acks fails and nothing is committed."""
    topic, out = _input_and_output(bootstrap, topic_factory)
    group, storage = "shared-op-" + out[-8:], str(tmp_path / "storage")
    src = (spark.readStream.format("barrier-kafka")
           .option("kafka.bootstrap.servers", bootstrap).option("subscribe", topic)
           .option("startingOffsets", "earliest").option("kafka.group.id", group)
           .option("checkpoint.storage", storage).load())
    counted = keyed_process(src, "key", RunningCount(), OUTPUT_SCHEMA, operator_id="count",
                            state_backend=str(tmp_path / "operator-storage"), max_parallelism=2)
    query = (counted.writeStream.format("barrier-kafka")
             .option("kafka.bootstrap.servers", bootstrap).option("topic", out)
             .option("transactionalIdPrefix", group).option("checkpoint.storage", storage)
             .option("checkpointLocation", str(tmp_path / "chk")).start())
    with pytest.raises(Exception) as failed:
        query.processAllAvailable()
    query.stop()
    assert "Operator 'count' writes its snapshots to" in str(failed.value)
    assert read_committed_topic(bootstrap, out) == []
    assert_no_open_transactions(bootstrap, group)
    assert _committed_group_offsets(bootstrap, group, topic) == {}

