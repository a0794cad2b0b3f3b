"""Latency of the exactly-once pipeline against the pipeline users run today (issue 15), side by
side in one run: input produced at a steady rate, per input record the time from producing it to
its effect being readable by a ``read_committed`` consumer of the output.

    BARRIER_KAFKA_BOOTSTRAP=127.0.0.1:39092 python benchmarks/bench_latency.py \\
        [--rate 1000] [--seconds 40] [--triggers 1,5] [--rounds 1]

Pipelines are ``benchmarks/bench_pipeline.py``'s (``native``: Spark's Kafka source ->
``groupBy("key").count()`` update mode -> Spark's Kafka sink; ``eo per-key`` / ``eo per-record``:
barrier-kafka source -> keyed count -> two-phase-commit sink, a checkpoint every batch), each on
a fresh 4-partition topic with the same processing-time trigger. Every output value is
``<key>:<count>``, so one rule measures all of them: the n-th input record of a key is visible
once an output ``<key>:<c>`` with ``c >= n`` has been read. The table prints p50 / p95 / max per
pipeline and trigger, and the p50 difference to ``native`` in trigger intervals (the issue's goal:
at most one).
"""

from __future__ import annotations

import argparse
import os
import shutil
import sys
import tempfile
import threading
import time

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from benchmarks.bench_pipeline import VARIANTS, start_variant, variant_names  # noqa: E402
from benchmarks.bench_sink import KEYS, make_topic, produce  # noqa: E402
from benchmarks.bench_source import spark_with_kafka_connector  # noqa: E402
from benchmarks.visibility import committed_reader  # noqa: E402


def read_counts(bootstrap, topic, expected_last: dict, timeout_s, arrivals: dict) -> None:
    """Read ``topic`` with read_committed until every key reached its last count, keeping the
    first time each ``(key, count)`` was read in ``arrivals``."""
    with committed_reader(bootstrap, topic, fetch_max_wait_ms=20) as consumer:
        missing, deadline = dict(expected_last), time.monotonic() + timeout_s
        while missing and time.monotonic() < deadline:
            for msgs in consumer.poll(timeout_ms=50, max_records=50_000).values():
                now = time.monotonic()
                for m in msgs:
                    key, _, count = m.value.decode().rpartition(":")
                    arrivals.setdefault((key, int(count)), now)
                    if missing.get(key) == int(count):
                        del missing[key]


def input_latencies(sent: dict, arrivals: dict) -> list:
    """Seconds from producing each input to the first read output that covers it (sorted);
    inputs never covered are left out (the caller reports how many were seen)."""
    by_key: dict = {}
    for (key, count), t in arrivals.items():
        by_key.setdefault(key, []).append((count, t))
    covered: dict = {}  # key -> [(count, earliest arrival of any count >= it)], ascending
    for key, rows in by_key.items():
        rows.sort()
        best, out = float("inf"), []
        for count, t in reversed(rows):
            best = min(best, t)
            out.append((count, best))
        covered[key] = out[::-1]
    lat = []
    for i, produced in sent.items():  # input i is the (i // KEYS + 1)-th record of key k<i % KEYS>
        rows, n = covered.get(f"k{i % KEYS}", []), i // KEYS + 1
        lo, hi = 0, len(rows)
        while lo < hi:
            mid = (lo + hi) // 2
            if rows[mid][0] < n:
                lo = mid + 1
            else:
                hi = mid
        if lo < len(rows):
            lat.append(rows[lo][1] - produced)
    return sorted(lat)


def wait_for_first_batch(query, timeout_s: float = 180.0) -> None:
    """Inputs are timed from a running query: wait until it has finished a trigger."""
    deadline = time.monotonic() + timeout_s
    while query.lastProgress is None:
        if query.exception() is not None:
            raise query.exception()
        if time.monotonic() > deadline:
            raise RuntimeError(f"the query made no progress in {timeout_s:.0f} s")
        time.sleep(0.2)


def one_run(spark, variant, bootstrap, trigger_s, rate, seconds):
    src, out = make_topic(bootstrap, 4), make_topic(bootstrap, 2)
    work = tempfile.mkdtemp(prefix="bench-latency-")
    query = start_variant(spark, variant, bootstrap, src, out, work, 1_000_000,
                          trigger_s=trigger_s)
    n = int(rate * seconds)
    last = {}
    for i in range(n):
        last[f"k{i % KEYS}"] = i // KEYS + 1
    arrivals: dict = {}
    reader = threading.Thread(target=read_counts,
                              args=(bootstrap, out, last, seconds + 120, arrivals))
    try:
        wait_for_first_batch(query)
        reader.start()
        sent = produce(bootstrap, src, n, rate=rate)
        reader.join()
    finally:
        query.stop()
        shutil.rmtree(work, ignore_errors=True)
    return input_latencies(sent, arrivals), n


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--rate", type=float, default=1000.0, help="input records per second")
    parser.add_argument("--seconds", type=float, default=40.0, help="how long to produce")
    parser.add_argument("--triggers", default="1,5", help="processing-time triggers (s)")
    parser.add_argument("--rounds", type=int, default=1)
    parser.add_argument("--variants", default=",".join(VARIANTS))
    args = parser.parse_args()
    bootstrap = os.environ.get("BARRIER_KAFKA_BOOTSTRAP", "127.0.0.1:39092")
    variants = variant_names(parser, args.variants)

    spark = spark_with_kafka_connector("bench-latency", shuffle_partitions=2)
    rows = []
    for trigger_s in [float(t) for t in args.triggers.split(",")]:
        for _ in range(args.rounds):
            for v in variants:
                lat, n = one_run(spark, v, bootstrap, trigger_s, args.rate, args.seconds)
                rows.append((trigger_s, v, lat, n))
                print(f"trigger {trigger_s:g}s {v}: {len(lat)}/{n} inputs seen", flush=True)
    print(f"\nlatency, produce -> visible to read_committed, {args.rate:.0f} records/s for "
          f"{args.seconds:.0f} s, {KEYS} keys, load {os.getloadavg()[0]:.2f}")
    print(f"{'trigger s':>9} {'pipeline':<15} {'p50 s':>7} {'p95 s':>7} {'max s':>7} "
          f"{'seen':>13} {'p50 - native':>13}")
    native_p50 = {}
    for trigger_s, v, lat, n in rows:
        if not lat:
            print(f"{trigger_s:>9g} {v:<15}   no output")
            continue

        def q(f):
            return lat[min(len(lat) - 1, int(f * len(lat)))]

        if v == "native":
            native_p50.setdefault(trigger_s, q(0.5))
        base = native_p50.get(trigger_s)
        diff = f"{(q(0.5) - base) / trigger_s:>+10.2f} trg" if base is not None else f"{'-':>13}"
        print(f"{trigger_s:>9g} {v:<15} {q(0.5):>7.2f} {q(0.95):>7.2f} {lat[-1]:>7.2f} "
              f"{len(lat):>6}/{n:<6} {diff}")
    spark.stop()
    return 0


if __name__ == "__main__":
    sys.exit(main())
