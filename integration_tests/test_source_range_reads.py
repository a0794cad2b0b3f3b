"""An executor's range read decodes only the record batches that overlap its range.

A fetch returns up to 16 MiB of a partition, so a small range (a 10k-record micro-batch over four
partitions reads 2,500 records each) used to decode every batch of the fetch and keep the range:
on a topic with a backlog, ten times the records it needed (``bench_pipeline --batches 10000``
spent more time decoding than Spark's whole batch). Checked on a real broker, with a range that
ends on a transaction marker (an offset with no record) so the read must not wait for it.
"""

from __future__ import annotations

import uuid

from barrier_source import kafka_read
from barrier_source import record_decode as rd

BATCH_RECORDS = 50  # at most this many records per producer batch (batch size below)


def _produce(bootstrap: str, topic: str, count: int) -> None:
    from kafka import KafkaProducer

    producer = KafkaProducer(bootstrap_servers=bootstrap, linger_ms=1000,
                             batch_size=BATCH_RECORDS * 80, acks=1)
    for i in range(count):
        producer.send(topic, value=_value(i), partition=0)
    producer.flush()
    producer.close()


def _value(i: int) -> bytes:
    return (b"r%07d" % i).ljust(72, b".")  # 80-odd bytes a record: <= 50 records per batch


def _read(bootstrap, topic, start, until, **config):
    chunks = kafka_read.fetch_range(dict(bootstrap_servers=bootstrap, **config), topic, 0, start,
                                    until, fail_on_data_loss=True, poll_timeout_ms=10_000,
                                    with_headers=False)
    return [(int(o), v) for c in chunks for o, v in zip(c.offsets, c.values.to_pylist())]


class _Decoded:
    """Counts the records decoded and the batch headers parsed while the test reads."""

    def __init__(self, monkeypatch) -> None:
        self.records = 0
        self.headers = 0
        decode, iterate = rd.decode_segments, rd.iter_batches

        def counting_decode(segments, with_headers):
            out = decode(segments, with_headers)
            self.records += len(out)
            return out

        def counting_iter(buf, *args):
            out = iterate(buf, *args)
            self.headers += len(out)
            return out

        monkeypatch.setattr(rd, "decode_segments", counting_decode)
        monkeypatch.setattr(rd, "iter_batches", counting_iter)


def test_a_small_range_decodes_only_the_batches_it_overlaps(bootstrap, topic_factory,
                                                           monkeypatch):
    topic = topic_factory(1)
    _produce(bootstrap, topic, 20_000)
    decoded = _Decoded(monkeypatch)
    got = _read(bootstrap, topic, 1_000, 1_100)
    assert got == [(o, _value(o)) for o in range(1_000, 1_100)]
    # the range plus at most one partial batch at each end (old code: the whole 20,000)
    assert decoded.records <= 100 + 2 * BATCH_RECORDS, decoded.records
    assert decoded.headers <= 100 // BATCH_RECORDS + 3, decoded.headers


def test_a_range_ending_on_a_transaction_marker_reads_to_its_end(bootstrap, topic_factory):
    from kafka import KafkaProducer

    topic = topic_factory(1)
    producer = KafkaProducer(bootstrap_servers=bootstrap,
                             transactional_id=f"range-{uuid.uuid4().hex[:8]}")
    producer.init_transactions()
    for txn in range(3):  # offsets 0-9, marker 10, 11-20, marker 21, 22-31, marker 32
        producer.begin_transaction()
        for i in range(10):
            producer.send(topic, value=b"t%d-%d" % (txn, i), partition=0)
        producer.commit_transaction()
    producer.close()
    committed = {"isolation_level": "read_committed"}
    assert [o for o, _ in _read(bootstrap, topic, 5, 11, **committed)] == list(range(5, 10))
    assert [o for o, _ in _read(bootstrap, topic, 11, 22, **committed)] == list(range(11, 21))
    assert [v for _, v in _read(bootstrap, topic, 0, 33, **committed)] == [
        b"t%d-%d" % (t, i) for t in range(3) for i in range(10)]
