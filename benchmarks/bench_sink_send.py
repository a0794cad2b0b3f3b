"""Executor cost per record of writing into a sink transaction (issue 15): ``KafkaProducer.send()``
against the sink's :class:`~barrier_sink.record_appender.RecordAppender`, record by record and in
whole record batches from Arrow columns (``append_columns``, what the sink's Arrow writer uses),
side by side in one run.

Each round writes ``--records`` keyed records (``--keys`` distinct keys, values like the keyed
count's ``<key>:<count>``) into one transaction on a 4-partition topic, then flushes (the
pre-commit) and aborts it from the driver side (not timed). The two ways alternate (A B A B);
the table prints microseconds per record for handing records over and for handing over plus the
flush, best and median over the rounds, and the ratios of medians. The columns way starts from
Arrow arrays (as the sink gets them), the other two from Python bytes.

    BARRIER_KAFKA_BOOTSTRAP=<broker> python benchmarks/bench_sink_send.py [--records 50000]
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import time
import uuid

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

WAYS = ("KafkaProducer.send", "RecordAppender", "append_columns")


def one_round(config, topic, keys, values, way):
    from barrier_sink.transaction import TransactionalWriter

    writer = TransactionalWriter(config, "bench-send-" + uuid.uuid4().hex[:8], 60_000, 0, 0,
                                 1).open()
    if way == WAYS[2]:
        import pyarrow as pa

        key_array, value_array = pa.array(keys, pa.binary()), pa.array(values, pa.binary())
        started = time.perf_counter()
        assert writer.send_columns(topic, key_array, value_array)
        return _finish(config, writer, len(keys), started)
    if way == WAYS[0]:
        producer, failures = writer._producer, writer._failures

        def send(topic, value, key):
            producer.send(topic, value=value, key=key).add_errback(failures.append)
            writer._records += 1
    else:
        send = writer.send
    started = time.perf_counter()
    for key, value in zip(keys, values):
        send(topic, value, key=key)
    return _finish(config, writer, len(keys), started)


def _finish(config, writer, n, started):
    from barrier_sink.transaction import abort_handle

    handed = time.perf_counter()
    handle = writer.pre_commit()
    flushed = time.perf_counter()
    writer.close_without_finishing()
    abort_handle(config, handle)
    assert handle.records == n
    return (handed - started) / n * 1e6, (flushed - started) / n * 1e6


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--records", type=int, default=50_000)
    parser.add_argument("--keys", type=int, default=997)
    parser.add_argument("--rounds", type=int, default=5)
    args = parser.parse_args()

    from kafka.admin import KafkaAdminClient

    from kafka_harness.broker import env_or_own_broker
    from kafka_harness.topics import create_topic

    bootstrap, broker = env_or_own_broker("bench-send-")
    try:
        admin = KafkaAdminClient(bootstrap_servers=bootstrap)
        topic = create_topic(admin, "bench_send_" + uuid.uuid4().hex[:8], 4)
        admin.close()
        config = {"bootstrap_servers": bootstrap}
        keys = [b"k%d" % (i % args.keys) for i in range(args.records)]
        values = [b"k%d:%d" % (i % args.keys, i // args.keys + 1) for i in range(args.records)]
        one_round(config, topic, keys[:1000], values[:1000], WAYS[1])  # warm up
        hand, total = {w: [] for w in WAYS}, {w: [] for w in WAYS}
        for _ in range(args.rounds):
            for way in WAYS:
                h, t = one_round(config, topic, keys, values, way)
                hand[way].append(h)
                total[way].append(t)
    finally:
        if broker is not None:
            broker.stop()
    print(f"\n{args.records} keyed records ({args.keys} keys) per transaction, 4 partitions, "
          f"{args.rounds} alternated rounds, load {os.getloadavg()[0]:.2f}")
    print(f"{'way':<20} {'hand over us/rec':>17} {'median':>8} {'+ flush us/rec':>15} "
          f"{'median':>8}")
    for way in WAYS:
        print(f"{way:<20} {min(hand[way]):>17.1f} {statistics.median(hand[way]):>8.1f} "
              f"{min(total[way]):>15.1f} {statistics.median(total[way]):>8.1f}")
    for way in WAYS[1:]:
        print(f"send() / {way}, medians with flush: "
              f"{statistics.median(total[WAYS[0]]) / statistics.median(total[way]):.2f}x")
    return 0


if __name__ == "__main__":
    sys.exit(main())
