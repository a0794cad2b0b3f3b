"""Aligned keyed state on the real broker: barrier-kafka source -> keyed count; every
checkpoint's snapshot equals the count computed independently from the Kafka records before that
checkpoint's offsets (read back with kafka-python), in every key group."""

from __future__ import annotations

import json
from collections import Counter

import pytest
from kafka import KafkaConsumer, KafkaProducer, TopicPartition

from barrier_ops.examples.word_count import keyed_count
from barrier_ops.testing import snapshot_values
from state_backends.filesystem import FilesystemStateBackend

MAXP = 8
RECORDS = 3000
KEYS = 37


def produce(bootstrap, topic):
    producer = KafkaProducer(bootstrap_servers=bootstrap, linger_ms=5, acks=1)
    for i in range(RECORDS):
        producer.send(topic, key=b"w%d" % (i * 7 % KEYS), value=b"%d" % i)
    producer.flush(timeout=60)
    producer.close()


def records_by_partition(bootstrap, topic, partitions):
    """``{partition: [key, ...]}`` in offset order: the reference the snapshots are checked
    against."""
    consumer = KafkaConsumer(bootstrap_servers=bootstrap, enable_auto_commit=False)
    tps = [TopicPartition(topic, p) for p in range(partitions)]
    consumer.assign(tps)
    consumer.seek_to_beginning(*tps)
    ends = consumer.end_offsets(tps)
    out = {p: [] for p in range(partitions)}
    while any(consumer.position(tp) < ends[tp] for tp in tps):
        for tp, msgs in consumer.poll(timeout_ms=500).items():
            out[tp.partition].extend(m.key.decode() for m in msgs)
    consumer.close()
    return out


@pytest.mark.parametrize("every_batches", [1, 2])
def test_each_checkpoint_snapshot_equals_the_count_before_its_offsets(
        every_batches, spark, bootstrap, topic_factory, tmp_path):
    topic = topic_factory(3, prefix=f"op_kafka_{every_batches}")
    produce(bootstrap, topic)
    source = (spark.readStream.format("barrier-kafka")
              .option("kafka.bootstrap.servers", bootstrap).option("subscribe", topic)
              .option("startingOffsets", "earliest").option("maxOffsetsPerTrigger", "700")
              .option("execution.checkpointing.interval-batches", str(every_batches)).load())
    counted = keyed_count(source, "key", f"file://{tmp_path / 'state'}", max_parallelism=MAXP)
    name = f"op_kafka_{every_batches}"
    query = (counted.writeStream.format("memory").queryName(name).trigger(availableNow=True)
             .option("checkpointLocation", str(tmp_path / "chk")).start())
    query.awaitTermination(300)
    assert query.exception() is None, query.exception()
    out = spark.sql(f"select * from {name}").toPandas()

    acks = [json.loads(a) for a in out[out.kind == "ack"].ack]
    cuts = {}
    for ack in acks:  # every key group saw checkpoint n's barrier at the same offsets
        cut = {int(p): o for p, o in ack["offsets"][topic].items()}
        assert cuts.setdefault(ack["checkpoint_id"], cut) == cut
    ids = sorted(cuts)
    assert len(ids) >= 2 and ids == list(range(1, len(ids) + 1))
    assert Counter(a["checkpoint_id"] for a in acks) == {n: MAXP for n in ids}

    records = records_by_partition(bootstrap, topic, 3)
    backend = FilesystemStateBackend(str(tmp_path / "state"))
    previous = {p: 0 for p in range(3)}
    for n in ids:
        assert all(cuts[n][p] >= previous[p] for p in range(3)), "offsets went backwards"
        previous = cuts[n]
        reference = Counter(k for p, keys in records.items() for k in keys[:cuts[n][p]])
        assert snapshot_values(backend, n, "keyed-count", MAXP) == reference, f"checkpoint {n}"
    assert sum(cuts[ids[-1]].values()) == RECORDS  # the last checkpoint covers every record
