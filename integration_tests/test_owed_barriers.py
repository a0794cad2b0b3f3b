"""Issue 12, found while building an end-to-end expiry test: with timestamp barrier placement
and ``maxOffsetsPerTrigger``, a checkpoint's barrier is owed on a partition until the source
reads up to it. When another partition keeps receiving records, Spark-style proportional
admission gives the busy partition an ever larger share and the owing one crawls: on the old
main checkpoint 1 was still owed after 157 batches, no later checkpoint could trigger
(max-concurrent 1), the aligned operator held every record of the busy partition back, and
nothing reached the output while the input kept flowing. Owed barriers are now admitted first.

While one partition receives records faster than the query reads, the checkpoint owed on the
other must still complete within a few batches (on the old main it did not within 60 s);
afterwards every record is in the ``read_committed`` output exactly once, nothing is left open
and the group is at the end. (Later checkpoints wait for the busy partition to catch up: a
timestamp cut lies at the log end of a partition that is behind, see docs/concepts.md.)
"""

from __future__ import annotations

import threading
import time
import uuid
from collections import Counter

from kafka import KafkaProducer

from barrier_ops.examples.running_count import OUTPUT_SCHEMA, RunningCount
from barrier_ops.operator import keyed_process
from barrier_sink.options import normalize_location
from integration_tests.pipeline_support import assert_no_open_transactions
from integration_tests.sink_support import end_offsets, read_committed_topic
from integration_tests.source_helpers import wait_for
from state_backends.filesystem import FilesystemStateBackend
from state_backends.stats import COMPLETED, load_all_stats

def _completed(storage):
    return [s.checkpoint_id for s in load_all_stats(FilesystemStateBackend(storage))
            if s.status == COMPLETED]


def test_a_busy_partition_does_not_starve_an_owed_barrier(spark, bootstrap, topic_factory,
                                                              tmp_path):
    topic, out = topic_factory(2), topic_factory(2)
    storage = normalize_location(str(tmp_path / "storage"))
    group = "expiry-" + uuid.uuid4().hex[:8]
    producer = KafkaProducer(bootstrap_servers=bootstrap, linger_ms=5)
    sent = Counter()

    def send(partition, n):
        for _ in range(n):
            i = sum(sent.values())
            producer.send(topic, key=b"k%d" % (i % 11), value=b"v%d" % i, partition=partition)
            sent[partition] += 1

    send(0, 200)
    send(1, 200)
    producer.flush()
    src = (spark.readStream.format("barrier-kafka")
           .option("kafka.bootstrap.servers", bootstrap).option("subscribe", topic)
           .option("startingOffsets", "earliest").option("kafka.group.id", group)
           .option("maxOffsetsPerTrigger", "100")
           .option("execution.checkpointing.interval", "500")
           .option("execution.checkpointing.barrier-placement", "timestamp")
           .option("checkpoint.storage", storage).load())
    counted = keyed_process(src, "key", RunningCount(), OUTPUT_SCHEMA, operator_id="expiry",
                            state_backend=storage, max_parallelism=2)
    query = (counted.writeStream.format("barrier-kafka")
             .option("kafka.bootstrap.servers", bootstrap).option("topic", out)
             .option("transactionalIdPrefix", group).option("checkpoint.storage", storage)
             .option("web.checkpoints.history", "100000")
             .option("checkpointLocation", str(tmp_path / "chk")).start())
    stop = threading.Event()

    def keep_partition_0_busy():
        while not stop.is_set():
            send(0, 20)
            producer.flush()
            time.sleep(0.1)

    feeder = threading.Thread(target=keep_partition_0_busy, daemon=True)
    feeder.start()
    try:
        deadline = time.monotonic() + 60
        while not _completed(storage):  # while partition 0 stays busy
            assert query.exception() is None, query.exception()
            assert time.monotonic() < deadline, \
                "checkpoint 1 did not complete in 60 s while partition 0 stayed busy"
            time.sleep(0.5)
        assert feeder.is_alive()
        stop.set()
        feeder.join()
        producer.flush()
        query.processAllAvailable()
        # processAllAvailable returns once the source has read everything; the records after
        # the last barrier are committed by the checkpoint that seals them (idle-seal-after),
        # which completes when the group reaches the end
        ends = end_offsets(bootstrap, topic)

        def tail_committed():
            assert query.exception() is None, query.exception()
            return _group_offsets(bootstrap, group, topic) == ends

        wait_for(tail_committed, timeout_s=60)
    finally:
        stop.set()
        query.stop()
        producer.close()
    # Every input record's running count shows up exactly once: the values are
    # "<key>:<count>" for count 1..n per key.
    per_key = Counter(b"k%d" % (i % 11) for i in range(sum(sent.values())))
    expected = Counter(b"%s:%d" % (k, c) for k, n in per_key.items() for c in range(1, n + 1))
    assert Counter(read_committed_topic(bootstrap, out)) == expected
    assert_no_open_transactions(bootstrap, group)
    ends = end_offsets(bootstrap, topic)
    consumer_group = _group_offsets(bootstrap, group, topic)
    assert consumer_group == ends


def _group_offsets(bootstrap, group, topic):
    from kafka import KafkaConsumer, TopicPartition

    consumer = KafkaConsumer(bootstrap_servers=bootstrap, group_id=group,
                             enable_auto_commit=False)
    try:
        return {p: consumer.committed(TopicPartition(topic, p)) for p in (0, 1)}
    finally:
        consumer.close()
