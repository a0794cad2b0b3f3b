"""Issue 12, hole 3: records after the newest barrier wait in pre-committed transactions; barriers
used to come only with new data, so an idle spell longer than ``transaction.timeout.ms`` let the
broker abort them, and the next commit failed on every restart (their output lost).

A dedicated broker with a short ``transaction.max.timeout.ms`` (20 s) and a fast abort sweep
runs the pipeline: a first batch seals checkpoint 1, a second batch is not due (a checkpoint every
3 batches), then the source stays idle for longer than the transaction timeout, then new data
comes. The idle source must seal the waiting records with a barrier-only batch in time: every
record exactly once in ``read_committed`` output, no open transaction, group offsets at the end.
"""

from __future__ import annotations

import time
import uuid
from collections import Counter

import pytest
from kafka import KafkaProducer
from kafka.admin import KafkaAdminClient

from barrier_ops.examples.running_count import OUTPUT_SCHEMA, RunningCount
from barrier_ops.operator import keyed_process
from barrier_sink.lingering import list_lingering
from integration_tests.sink_support import read_committed_topic
from kafka_harness.broker import KafkaBroker
from kafka_harness.topics import create_topic

TXN_TIMEOUT_MS = 20_000


@pytest.fixture(scope="module")
def short_timeout_broker(tmp_path_factory):
    broker = KafkaBroker(
        data_dir=str(tmp_path_factory.mktemp("short-txn-broker")),
        extra_properties={"transaction.max.timeout.ms": TXN_TIMEOUT_MS,
                          "transaction.abort.timed.out.transaction.cleanup.interval.ms": 1000},
    ).start()
    yield broker
    broker.stop()


def _produce(bootstrap, topic, keys, start, count):
    producer = KafkaProducer(bootstrap_servers=bootstrap, linger_ms=5)
    for i in range(start, start + count):
        producer.send(topic, key=b"k%d" % (i % keys), value=b"v%d" % i)
    producer.flush()
    producer.close()


def _counting_query(spark, bootstrap, topic, out, prefix, storage, checkpoint_dir,
                    source_options, sink_options, available_now=False):
    """barrier-kafka source -> keyed running count -> 2PC Kafka sink, started."""
    src = (spark.readStream.format("barrier-kafka")
           .option("kafka.bootstrap.servers", bootstrap).option("subscribe", topic)
           .option("startingOffsets", "earliest").option("checkpoint.storage", storage)
           .options(**source_options).load())
    counted = keyed_process(src, "key", RunningCount(), OUTPUT_SCHEMA,
                            operator_id="count-" + prefix, state_backend=storage,
                            max_parallelism=4)
    writer = (counted.writeStream.format("barrier-kafka")
              .option("kafka.bootstrap.servers", bootstrap).option("topic", out)
              .option("transactionalIdPrefix", prefix).option("checkpoint.storage", storage)
              .option("checkpointLocation", checkpoint_dir).options(**sink_options))
    if available_now:
        writer = writer.trigger(availableNow=True)
    return writer.start()


def test_idle_source_seals_open_transactions_before_they_time_out(spark, short_timeout_broker,
                                                                   tmp_path):
    bootstrap = short_timeout_broker.bootstrap
    admin = KafkaAdminClient(bootstrap_servers=bootstrap)
    suffix = uuid.uuid4().hex[:6]
    topic = create_topic(admin, f"idle_in_{suffix}", 2)
    out = create_topic(admin, f"idle_out_{suffix}", 2)
    admin.close()
    prefix, storage = f"idle-{suffix}", str(tmp_path / "storage")
    keys = 13
    query = _counting_query(
        spark, bootstrap, topic, out, prefix, storage, str(tmp_path / "chk"),
        {"execution.checkpointing.interval-batches": "3",
         # 5 s: the check below that batch 1's records still wait must run before the seal;
         # with 3 s it once ran after it on a loaded machine (5 s + the 12 s checkpoint timeout
         # + the 3 s restart budget fit the 20 s transaction timeout, as the sink checks).
         "execution.checkpointing.idle-seal-after": "5s"},
        {"kafka.transaction.timeout.ms": str(TXN_TIMEOUT_MS),
         "execution.checkpointing.timeout": "12000",
         "execution.checkpointing.tolerable-failed-checkpoints": "3",
         "restart.budget.ms": "3000"})
    try:
        _produce(bootstrap, topic, keys, 0, 300)
        query.processAllAvailable()  # batch 0: checkpoint 1 at its end
        _produce(bootstrap, topic, keys, 300, 300)
        query.processAllAvailable()  # batch 1: not due, its records wait in open transactions
        idle_from = time.monotonic()
        assert list_lingering({"bootstrap_servers": bootstrap}, prefix), \
            "the second batch's records must wait in pre-committed transactions"
        # The fault: stay idle for longer than the transaction timeout (plus the broker's abort
        # sweep). Meanwhile the idle seal must have committed them.
        deadline = idle_from + (TXN_TIMEOUT_MS + 5_000) / 1000
        while list_lingering({"bootstrap_servers": bootstrap}, prefix):
            assert query.exception() is None, query.exception()
            assert time.monotonic() < deadline, "open transactions outlived the idle spell"
            query.awaitTermination(0.5)
        sealed_after = time.monotonic() - idle_from
        assert sealed_after < TXN_TIMEOUT_MS / 1000, \
            f"sealed only after {sealed_after:.1f}s, past the transaction timeout"
        query.awaitTermination(max(0.0, deadline - time.monotonic()))  # rest of the idle spell
        assert query.exception() is None
        _produce(bootstrap, topic, keys, 600, 300)
        query.processAllAvailable()
        while list_lingering({"bootstrap_servers": bootstrap}, prefix):  # last records sealed
            assert query.exception() is None, query.exception()
            assert time.monotonic() < deadline + 60, "the last records were never sealed"
            query.awaitTermination(0.5)
    finally:
        query.stop()
    got = Counter(v.decode() for v in read_committed_topic(bootstrap, out))
    expected = Counter(f"k{k}:{i}" for k in range(keys)
                       for i in range(1, 1 + sum(1 for n in range(900) if n % keys == k)))
    assert got == expected  # every record exactly once: nothing aborted by the timeout


def test_available_now_run_with_a_time_interval_ends_with_everything_committed(
        spark, bootstrap, topic_factory, tmp_path):
    """A scheduled Trigger.AvailableNow run with a time-based interval: the batches after the
    last time-triggered barrier used to stay in open transactions when the run stopped (pinning
    readers until a later run, or lost after the transaction timeout). The run must seal them
    with a barrier-only batch before it stops."""
    topic, out = topic_factory(2, prefix="an_in"), topic_factory(2, prefix="an_out")
    prefix, storage, keys = "an-" + uuid.uuid4().hex[:6], str(tmp_path / "storage"), 7
    _produce(bootstrap, topic, keys, 0, 700)
    query = _counting_query(
        spark, bootstrap, topic, out, prefix, storage, str(tmp_path / "chk"),
        {"maxOffsetsPerTrigger": "100",
         "execution.checkpointing.interval": "2m"},  # only the first batch triggers
        {"restart.budget.ms": "60000"}, available_now=True)
    assert query.awaitTermination(300), "the AvailableNow run did not stop"
    assert query.exception() is None
    assert list_lingering({"bootstrap_servers": bootstrap}, prefix) == []
    got = Counter(v.decode() for v in read_committed_topic(bootstrap, out))
    expected = Counter(f"k{k}:{i}" for k in range(keys) for i in range(1, 101))
    assert got == expected
