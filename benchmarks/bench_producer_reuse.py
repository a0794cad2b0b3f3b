"""Executor cost of one sink transaction with and without producer reuse (issue 13).

One transaction as a sink task makes it: open a transactional producer (``init_transactions``),
send ``--records`` records, flush (pre-commit), let go of the producer. Without reuse every
transaction builds a new KafkaProducer and closes it (the behaviour before
:mod:`barrier_sink.producer_reuse`); with reuse the worker's parked producer takes the next
transaction over. The transactions are aborted from the driver side afterwards (not timed). The
two modes alternate (A B A B); the table shows the median and p90 per transaction of each round
and the ratio of the best medians.

    BARRIER_KAFKA_BOOTSTRAP=<broker> python benchmarks/bench_producer_reuse.py
    python benchmarks/bench_producer_reuse.py --transactions 200 --rounds 3   # own broker
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import time
import uuid

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def one_round(config, topic, transactions, records, reuse):
    from barrier_sink import producer_reuse
    from barrier_sink.transaction import TransactionalWriter, abort_handle

    producer_reuse.MAX_IDLE = 2 if reuse else 0
    prefix, times = "bench-reuse-" + uuid.uuid4().hex[:6], []
    for i in range(transactions):
        started = time.perf_counter()
        writer = TransactionalWriter(config, f"{prefix}-p{i % 2}-a0-s0", 60_000, i, i % 2,
                                     i + 1).open()
        for _ in range(records):
            writer.send(topic, b"x" * 100)
        handle = writer.pre_commit()
        writer.close_without_finishing()
        times.append((time.perf_counter() - started) * 1000)
        abort_handle(config, handle)
    times.sort()
    return statistics.median(times), times[int(len(times) * 0.9) - 1]


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--transactions", type=int, default=100)
    parser.add_argument("--records", type=int, default=10)
    parser.add_argument("--rounds", type=int, default=2)
    args = parser.parse_args()

    from kafka.admin import KafkaAdminClient

    from kafka_harness.broker import env_or_own_broker
    from kafka_harness.topics import create_topic

    bootstrap, broker = env_or_own_broker()
    try:
        admin = KafkaAdminClient(bootstrap_servers=bootstrap)
        topic = create_topic(admin, "bench_reuse_" + uuid.uuid4().hex[:6], 2)
        admin.close()
        config = {"bootstrap_servers": bootstrap}
        print(f"{args.transactions} transactions of {args.records} records per round, "
              f"load {os.getloadavg()[0]:.2f}")
        print(f"{'round':>5} {'mode':>16} {'median ms':>10} {'p90 ms':>8}")
        best = {}
        for r in range(1, args.rounds + 1):
            for reuse in (False, True):
                mode = "reused producer" if reuse else "new producer"
                median, p90 = one_round(config, topic, args.transactions, args.records, reuse)
                best[mode] = min(best.get(mode, median), median)
                print(f"{r:>5} {mode:>16} {median:>10.1f} {p90:>8.1f}", flush=True)
        print(f"best median: new {best['new producer']:.1f} ms, reused "
              f"{best['reused producer']:.1f} ms: "
              f"{best['new producer'] / best['reused producer']:.2f}x faster per transaction")
    finally:
        if broker is not None:
            broker.stop()
    return 0


if __name__ == "__main__":
    sys.exit(main())
