"""An executor's range read decodes only the record batches that overlap its range, and takes
from the broker about the bytes the range holds.

A fetch returned up to 16 MiB of a partition, so a small range (a 10k-record micro-batch over four
partitions reads 2,500 records each) used to decode every batch of the fetch and keep the range:
on a topic with a backlog, ten times the records it needed (``bench_pipeline --batches 10000``
spent more time decoding than Spark's whole batch). Decoding only the overlap fixed that; the
transfer of the 16 MiB remained (about three quarters of a 2,500-record range read's time), until
a fetch asked for the bytes the rest of its range needs. Checked on a real broker, with a range
that ends on a transaction marker (an offset with no record) so the read must not wait for it,
and with records far larger than the size a client learned.
"""

from __future__ import annotations

import uuid

from barrier_source import kafka_read
from barrier_source import record_decode as rd

BATCH_RECORDS = 50  # at most this many records per producer batch (batch size below)
SLACK = 64 << 10  # what a fetch may take beyond its estimate


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


class _Fetched:
    """Counts the record bytes the broker sent while the test reads."""

    def __init__(self, monkeypatch) -> None:
        self.bytes = 0
        wait = kafka_read.FetchClient.wait

        def counting_wait(client, handle):
            data = wait(client, handle)
            self.bytes += len(data.records or b"")
            return data

        monkeypatch.setattr(kafka_read.FetchClient, "wait", counting_wait)


class _Decoded:
    """Counts the records decoded and the batch headers parsed while the test reads."""

    def __init__(self, monkeypatch) -> None:
        self.records = 0
        self.headers = 0
        decode, table = rd.decode_plain, rd.batch_table

        def counting_decode(*args):
            out = decode(*args)
            self.records += len(out)
            return out

        def counting_table(buf, *args):
            out = table(buf, *args)
            self.headers += len(out)
            return out

        monkeypatch.setattr(rd, "decode_plain", counting_decode)
        monkeypatch.setattr(rd, "batch_table", counting_table)


def test_a_small_range_decodes_only_the_batches_it_overlaps(bootstrap, topic_factory,
                                                           monkeypatch):
    topic = topic_factory(1)
    _produce(bootstrap, topic, 20_000)
    decoded = _Decoded(monkeypatch)
    got = _read(bootstrap, topic, 1_000, 1_100)
    assert got == [(o, _value(o)) for o in range(1_000, 1_100)]
    # the range plus at most one partial batch at each end (old code: the whole 20,000)
    assert 100 <= decoded.records <= 100 + 2 * BATCH_RECORDS, decoded.records
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


def test_a_small_range_takes_about_its_own_bytes_from_the_broker(bootstrap, topic_factory,
                                                                 monkeypatch):
    topic = topic_factory(1)
    _produce(bootstrap, topic, 20_000)  # about 1.7 MB
    first = _Fetched(monkeypatch)
    assert len(_read(bootstrap, topic, 0, 100)) == 100
    # a new topic, whose records' size no client knows: 1 KiB an offset (before: every byte)
    assert first.bytes <= 100 * 1024 * 1.25 + SLACK, first.bytes
    then = _Fetched(monkeypatch)
    got = _read(bootstrap, topic, 5_000, 7_500)
    assert got == [(o, _value(o)) for o in range(5_000, 7_500)]
    range_bytes = 2_500 * 90  # records of about 85 bytes in batches of 50
    assert then.bytes <= 1.3 * range_bytes + SLACK, then.bytes


def test_records_far_larger_than_the_learned_size_are_read_completely(bootstrap,
                                                                      topic_factory):
    from kafka import KafkaProducer

    topic = topic_factory(1, configs={"max.message.bytes": str(8 << 20)})
    _produce(bootstrap, topic, 200)  # offsets 0-199, ~85 bytes each
    producer = KafkaProducer(bootstrap_servers=bootstrap, linger_ms=0, acks=1,
                             max_request_size=8 << 20)
    # offsets 200-205, one batch each; the last two larger than a fetch asks for at most
    big = [bytes([65 + i]) * 400_000 for i in range(4)] + [b"y" * (3 << 20), b"z" * (5 << 20)]
    for value in big:
        producer.send(topic, value=value, partition=0).get(timeout=30)
    producer.close()
    assert len(_read(bootstrap, topic, 0, 150)) == 150  # the client learns ~85 bytes an offset
    got = _read(bootstrap, topic, 150, 206)
    assert got == [(o, _value(o)) for o in range(150, 200)] + [
        (200 + i, v) for i, v in enumerate(big)]


def test_plain_compressed_committed_and_aborted_batches_read_as_sent(bootstrap, topic_factory):
    """One partition mixing every kind of batch a range read meets (one-record batches, gzip
    batches, committed and aborted transactions with their markers): ``read_committed`` gets
    what kafka-python's consumer gets, ``read_uncommitted`` every record sent, and a range from
    inside the partition its part of either."""
    from kafka import KafkaConsumer, KafkaProducer, TopicPartition

    topic = topic_factory(1)
    plain = KafkaProducer(bootstrap_servers=bootstrap, linger_ms=0, acks=1)
    gzip = KafkaProducer(bootstrap_servers=bootstrap, linger_ms=50, acks=1,
                         compression_type="gzip")
    txn = KafkaProducer(bootstrap_servers=bootstrap,
                        transactional_id=f"mixed-{uuid.uuid4().hex[:8]}")
    txn.init_transactions()
    sent, committed = [], []
    for round_no in range(4):
        for i in range(30):  # one-record batches
            value = b"p%d-%d" % (round_no, i)
            plain.send(topic, value=value, partition=0).get(timeout=30)
            sent.append(value)
        for i in range(40):
            value = b"g%d-%d" % (round_no, i) * 5
            gzip.send(topic, value=value, partition=0)
            sent.append(value)
        gzip.flush()
        committed.extend(sent[-70:])
        for commit in (True, False):
            txn.begin_transaction()
            values = [b"t%d-%s-%d" % (round_no, b"c" if commit else b"a", i) for i in range(20)]
            for value in values:
                txn.send(topic, value=value, partition=0)
            txn.flush()  # in the log before the abort (an abort drops what is not sent yet)
            sent.extend(values)
            if commit:
                txn.commit_transaction()
                committed.extend(values)
            else:
                txn.abort_transaction()
    for producer in (plain, gzip, txn):
        producer.close()

    consumer = KafkaConsumer(bootstrap_servers=bootstrap, isolation_level="read_committed",
                             auto_offset_reset="earliest", enable_auto_commit=False,
                             consumer_timeout_ms=5_000)
    tp = TopicPartition(topic, 0)
    consumer.assign([tp])
    visible = [(m.offset, m.value) for m in consumer]
    until = consumer.end_offsets([tp])[tp]
    consumer.close()
    assert [v for _, v in visible] == committed
    assert _read(bootstrap, topic, 0, until, isolation_level="read_committed") == visible
    everything = _read(bootstrap, topic, 0, until, isolation_level="read_uncommitted")
    assert [v for _, v in everything] == sent
    for records in (visible, everything):
        level = "read_committed" if records is visible else "read_uncommitted"
        inner = [(o, v) for o, v in records if 100 <= o < until - 50]
        assert _read(bootstrap, topic, 100, until - 50, isolation_level=level) == inner
