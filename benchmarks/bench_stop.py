"""``query.stop()`` in the middle of a batch (issue 15, stop 62): how long the stop takes and
whether any transaction of the exactly-once sink is left open after it.

Each stop runs a fresh query of ``bench_pipeline``'s "eo per-key arrow ranges packed" variant
(the settings docs/operations.md recommends) at a 1-second trigger on new topics, with input
produced all along (200 records every 0.2 s). After ``--warm`` batches it waits a random
0-1 s, then for a batch to be running, a random 0-0.3 s more, and calls ``query.stop()``. It
lists the sink's ``Ongoing`` transactions when ``stop()`` returns and ``--settle`` seconds
later: a cancelled task's Python worker can open a transaction after Spark's abort, which
then holds every ``read_committed`` reader of its partitions until the query's next start or
``kafka.transaction.timeout.ms``.

    BARRIER_KAFKA_BOOTSTRAP=<broker> python benchmarks/bench_stop.py --stops 30
    python benchmarks/bench_stop.py --stops 30      # starts its own broker
"""

from __future__ import annotations

import argparse
import os
import random
import statistics
import sys
import tempfile
import threading
import time

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from benchmarks.bench_pipeline import start_variant  # noqa: E402
from benchmarks.bench_sink import make_topic, produce  # noqa: E402

VARIANT = "eo per-key arrow ranges packed"


def open_bench_transactions(bootstrap: str) -> set:
    """``Ongoing`` transactions of every bench_pipeline sink (prefix ``bench-``)."""
    from barrier_sink.lingering import list_lingering

    return {t.transactional_id for t in list_lingering({"bootstrap_servers": bootstrap},
                                                       "bench-")}


def one_stop(spark, bootstrap: str, rng: random.Random, warm: int, settle_s: float) -> dict:
    src, out = make_topic(bootstrap, 4), make_topic(bootstrap, 2)
    done = threading.Event()

    def keep_producing():
        i = 0
        while not done.is_set():
            produce(bootstrap, src, 200, start_index=i)
            i += 200
            done.wait(0.2)

    producer = threading.Thread(target=keep_producing, daemon=True)
    producer.start()
    before = open_bench_transactions(bootstrap)
    try:
        q = start_variant(spark, VARIANT, bootstrap, src, out, tempfile.mkdtemp(), 10_000, 16,
                          2, None, trigger_s=1)
        while len(q.recentProgress) < warm:
            if not q.isActive:
                raise RuntimeError(f"the query failed before its stop: {q.exception()}")
            time.sleep(0.05)
        time.sleep(rng.uniform(0, 1))
        while not q.status["isTriggerActive"]:
            time.sleep(0.01)
        time.sleep(rng.uniform(0, 0.3))
        started = time.monotonic()
        q.stop()
        took = time.monotonic() - started
    finally:
        done.set()
        producer.join()
    at_return = sorted(open_bench_transactions(bootstrap) - before)
    time.sleep(settle_s)
    return {"stop_s": took, "at_return": at_return,
            "settled": sorted(open_bench_transactions(bootstrap) - before)}


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--stops", type=int, default=20)
    parser.add_argument("--warm", type=int, default=4, help="batches before the stop")
    parser.add_argument("--settle", type=float, default=3.0,
                        help="seconds after stop() returns before the second listing")
    parser.add_argument("--seed", type=int, default=62)
    args = parser.parse_args()
    from benchmarks.bench_source import spark_with_kafka_connector, use_spark_home

    from kafka_harness.broker import env_or_own_broker

    bootstrap, broker = env_or_own_broker()
    use_spark_home("compiled")
    spark = spark_with_kafka_connector("bench-stop", shuffle_partitions=2)
    rng = random.Random(args.seed)
    rows = []
    try:
        for i in range(args.stops):
            r = one_stop(spark, bootstrap, rng, args.warm, args.settle)
            rows.append(r)
            print(f"stop {i}: {r['stop_s']:.2f} s, open at return {r['at_return']}, "
                  f"{args.settle:g} s later {r['settled']}", flush=True)
    finally:
        spark.stop()
        if broker is not None:
            broker.stop()
    took = sorted(r["stop_s"] for r in rows)
    print(f"\nquery.stop() during a running 1-second batch, {args.stops} stops, "
          f"load {os.getloadavg()[0]:.2f}")
    print(f"{'stops':>5} {'stop() p50 s':>12} {'stop() max s':>12} {'stops leaving open':>18} "
          f"{'transactions left':>17}")
    left = [r for r in rows if r["settled"]]
    print(f"{len(rows):>5} {statistics.median(took):>12.2f} {took[-1]:>12.2f} "
          f"{len(left):>18} {sum(len(r['settled']) for r in rows):>17}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
