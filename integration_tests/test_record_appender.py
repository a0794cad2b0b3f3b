"""The sink's record appender (issue 15: half the Python time per record of ``send()``) puts
every record exactly where ``KafkaProducer.send()`` puts it: the same partition, bytes, headers
and order, against the real broker."""

from __future__ import annotations

import time
import uuid

import pytest
from kafka import KafkaConsumer, KafkaProducer, TopicPartition

from barrier_sink.record_appender import RecordAppender
from barrier_sink.transaction import EndResult, TransactionalWriter, commit_handle


def _records():
    out = []
    for i in range(3000):
        key = b"key-%d" % (i % 211) if i % 7 else None  # some without key: send()'s path
        headers = [("h", b"%d" % i)] if i % 5 == 0 else None
        partition = 2 if i % 11 == 0 else None  # explicit partitions
        out.append((key, b"value-%d" % i + (b"x" * 70_000 if i == 1234 else b""), headers,
                    partition))
    return out


def _contents(bootstrap, topic, partitions, timeout_s=60.0):
    """Every committed record per partition, read until each position reached the last stable
    offset; raises rather than return part of the topic."""
    consumer = KafkaConsumer(bootstrap_servers=bootstrap, isolation_level="read_committed",
                             enable_auto_commit=False)
    try:
        tps = [TopicPartition(topic, p) for p in range(partitions)]
        consumer.assign(tps)
        consumer.seek_to_beginning(*tps)
        got = {p: [] for p in range(partitions)}
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            for tp, msgs in consumer.poll(timeout_ms=300).items():
                got[tp.partition] += [(m.key, m.value, [(k, v) for k, v in m.headers] or None)
                                      for m in msgs]
            ends = consumer.end_offsets(tps)
            if all(consumer.position(tp) >= ends[tp] for tp in tps):
                return got
        raise TimeoutError(f"{topic} was not read to its end within {timeout_s:.0f} s")
    finally:
        consumer.close()


def test_appended_records_land_where_send_puts_them(bootstrap, topic_factory):
    records = _records()
    ours, theirs = topic_factory(5), topic_factory(5)
    conf = {"bootstrap_servers": bootstrap, "max_request_size": 60_000}
    writer = TransactionalWriter(conf, "appender-" + uuid.uuid4().hex, 60_000, 0, 0, 1).open()
    plain = KafkaProducer(bootstrap_servers=bootstrap, max_request_size=200_000)
    for key, value, headers, partition in records:
        if len(value) > 60_000:
            # over this writer's max_request_size: send()'s own size check refuses it
            with pytest.raises(Exception, match="max_request_size"):
                writer.send(ours, value, key=key, headers=headers, partition=partition)
            continue
        writer.send(ours, value, key=key, headers=headers, partition=partition)
        if key is not None or partition is not None:
            plain.send(theirs, value=value, key=key, headers=headers or [], partition=partition)
    with pytest.raises(ValueError, match="Unrecognized partition 9"):
        writer.send(ours, b"v", key=b"k", partition=9)
    handle = writer.pre_commit()
    writer.close_without_finishing()
    plain.flush()
    plain.close()
    assert commit_handle({"bootstrap_servers": bootstrap}, handle) is EndResult.COMMITTED
    got, expected = _contents(bootstrap, ours, 5), _contents(bootstrap, theirs, 5)
    # keyed and explicitly partitioned records: same partition, same order, same bytes
    placed = {v for k, v, h, p in records if k is not None or p is not None}
    assert {p: [r for r in rows if r[1] in placed] for p, rows in got.items()} == expected
    assert sum(map(len, expected.values())) == len(placed) - 1  # all but the oversized one
    # records without key (and without partition) went through send(): all there, once
    unkeyed = sorted(r[1] for rows in got.values() for r in rows if r[0] is None)
    assert unkeyed == sorted(v for k, v, h, p in records if k is None and len(v) < 60_000)
    assert handle.records == sum(1 for _, v, _, _ in records if len(v) < 60_000)


def test_custom_partitioners_and_serializers_keep_send():
    class Producer:
        config = {"partitioner": object(), "key_serializer": None, "value_serializer": None,
                  "max_request_size": 1 << 20}

    assert RecordAppender(Producer(), lambda e: None)._fast is False
