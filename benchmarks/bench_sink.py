"""End-to-end throughput and output latency of the exactly-once Kafka-to-Kafka pipeline, against
the same pipeline ending in Spark's own (at-least-once) Kafka sink, in the same run.

    BARRIER_KAFKA_BOOTSTRAP=127.0.0.1:39092 python benchmarks/bench_sink.py [--records 200000]
        [--rounds 2] [--latency-seconds 40 | 0 to skip latency]

Pipeline (both variants): barrier-kafka source -> aligned keyed running count
(``barrier_demo.pipeline``) -> sink. Variant A: the two-phase-commit ``barrier-kafka`` sink
(output visible to ``read_committed`` when its checkpoint completes). Variant B: Spark's
``kafka`` sink (spark-sql-kafka-0-10 from Maven Central) writing the same record rows.
Throughput: input records / seconds until all output is visible to a read_committed consumer,
one uncounted warm-up run of each variant, then ``--rounds`` alternated rounds (A B A B); the
table prints best and median.
Latency: input produced at a steady rate; per output record, the time from producing its input
to the output being readable with read_committed, per trigger interval (checkpoint every batch).
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import sys
import tempfile
import threading
import time
import uuid

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from benchmarks.bench_source import spark_with_kafka_connector  # noqa: E402
from benchmarks.visibility import committed_reader  # noqa: E402

KEYS = 997


def make_topic(bootstrap, partitions):
    from kafka.admin import KafkaAdminClient

    from kafka_harness.topics import create_topic

    admin = KafkaAdminClient(bootstrap_servers=bootstrap)
    name = create_topic(admin, "bench_sink_" + uuid.uuid4().hex[:8], partitions)
    admin.close()
    return name


def produce(bootstrap, topic, records, rate=None, start_index=0):
    """Keyed records ``i`` with key ``k<i % KEYS>``; returns {i: produce time}."""
    from kafka import KafkaProducer

    producer = KafkaProducer(bootstrap_servers=bootstrap, linger_ms=5, acks=1,
                             batch_size=256 * 1024)
    sent = {}
    t0 = time.monotonic()
    for i in range(start_index, start_index + records):
        if rate:
            due = t0 + (i - start_index) / rate
            delay = due - time.monotonic()
            if delay > 0:
                time.sleep(delay)
        producer.send(topic, key=b"k%d" % (i % KEYS), value=b"v%07d" % i)
        sent[i] = time.monotonic()
    producer.flush()
    producer.close()
    return sent


def count_visible(bootstrap, topic, expected, timeout_s, arrivals=None):
    """Consume with read_committed until ``expected`` records arrived; records arrival times."""
    with committed_reader(bootstrap, topic) as consumer:
        got, deadline = 0, time.monotonic() + timeout_s
        while got < expected and time.monotonic() < deadline:
            for msgs in consumer.poll(timeout_ms=100, max_records=50_000).values():
                now = time.monotonic()
                got += len(msgs)
                if arrivals is not None:
                    for m in msgs:
                        arrivals[m.value] = now
    return got


def start(spark, variant, bootstrap, src_topic, out_topic, workdir, trigger_s=None):
    from barrier_demo.pipeline import PipelineConfig, start_pipeline

    cfg = PipelineConfig(bootstrap, src_topic, out_topic, workdir, "bench-" + uuid.uuid4().hex[:6],
                         "bench-" + uuid.uuid4().hex[:6], max_offsets_per_trigger=50_000)
    return start_pipeline(spark, cfg, sink=variant, trigger_s=trigger_s)


def throughput(spark, variant, bootstrap, src, records):
    out = make_topic(bootstrap, 2)
    work = tempfile.mkdtemp(prefix="bench-sink-")
    t0 = time.monotonic()
    query = start(spark, variant, bootstrap, src, out, work)
    try:
        got = count_visible(bootstrap, out, records, timeout_s=900)
    finally:
        query.stop()
        shutil.rmtree(work, ignore_errors=True)
    elapsed = time.monotonic() - t0
    if got < records:
        raise RuntimeError(f"{variant}: only {got}/{records} outputs visible")
    return elapsed


def latency(spark, variant, bootstrap, trigger_s, rate, seconds):
    src, out = make_topic(bootstrap, 4), make_topic(bootstrap, 2)
    work = tempfile.mkdtemp(prefix="bench-lat-")
    query = start(spark, variant, bootstrap, src, out, work, trigger_s=trigger_s)
    arrivals = {}
    n = int(rate * seconds)
    reader = threading.Thread(target=count_visible, args=(bootstrap, out, n, seconds + 120,
                                                          arrivals))
    reader.start()
    sent = produce(bootstrap, src, n, rate=rate)
    reader.join()
    query.stop()
    shutil.rmtree(work, ignore_errors=True)
    per_key = {}
    lat = []
    for i in range(n):  # input i is the (i // KEYS + 1)-th record of key k<i % KEYS>
        value = f"k{i % KEYS}:{i // KEYS + 1}".encode()
        if value in arrivals:
            lat.append(arrivals[value] - sent[i])
    del per_key
    lat.sort()
    return lat, n


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--records", type=int, default=200_000)
    parser.add_argument("--rate", type=float, default=1000.0, help="records/s for latency")
    parser.add_argument("--latency-seconds", type=float, default=40.0, help="0: skip latency")
    parser.add_argument("--rounds", type=int, default=2, help="alternated throughput rounds")
    parser.add_argument("--triggers", default="2,5", help="trigger intervals (s) for latency")
    args = parser.parse_args()
    bootstrap = os.environ.get("BARRIER_KAFKA_BOOTSTRAP", "127.0.0.1:39092")

    spark = spark_with_kafka_connector("bench-sink", shuffle_partitions=2)
    src = make_topic(bootstrap, 4)
    t0 = time.monotonic()
    produce(bootstrap, src, args.records)
    print(f"produced {args.records} keyed records in {time.monotonic() - t0:.1f}s", flush=True)
    variants = ("spark-kafka", "barrier-kafka")
    rates = {v: [] for v in variants}
    for round_ in range(args.rounds + 1):  # round 0 warms up the JVM and the Python workers
        for variant in variants:
            seconds = throughput(spark, variant, bootstrap, src, args.records)
            print(f"{variant}{' (warm-up)' if round_ == 0 else ''}: {seconds:.1f}s", flush=True)
            if round_:
                rates[variant].append(args.records / seconds)
    print(f"\n{args.records} records, {args.rounds} alternated rounds after a warm-up, "
          f"load {os.getloadavg()[0]:.2f}")
    print(f"{'sink (same pipeline)':<28} {'best rec/s':>10} {'median':>10}")
    for variant in variants:
        print(f"{variant:<28} {max(rates[variant]):10,.0f} "
              f"{statistics.median(rates[variant]):10,.0f}")
    print(f"exactly-once / at-least-once throughput, medians: "
          f"{statistics.median(rates[variants[1]]) / statistics.median(rates[variants[0]]):.2f}x")
    if args.latency_seconds <= 0:
        spark.stop()
        return 0

    print(f"\nlatency, produce -> visible (read_committed), {args.rate:.0f} records/s input")
    print(f"{'sink':<16} {'trigger s':>9} {'p50 s':>7} {'p95 s':>7} {'max s':>7} {'seen':>9}")
    for trigger_s in [float(t) for t in args.triggers.split(",")]:
        for variant in ("spark-kafka", "barrier-kafka"):
            lat, n = latency(spark, variant, bootstrap, trigger_s, args.rate,
                             args.latency_seconds)
            if not lat:
                print(f"{variant:<16} {trigger_s:9.0f}   no output")
                continue
            p = lambda q: lat[min(len(lat) - 1, int(q * len(lat)))]  # noqa: E731
            print(f"{variant:<16} {trigger_s:9.0f} {p(0.5):7.2f} {p(0.95):7.2f} {lat[-1]:7.2f} "
                  f"{len(lat):>5}/{n}", flush=True)
    spark.stop()
    return 0


if __name__ == "__main__":
    sys.exit(main())
