"""What building a pipeline's plan costs on the driver, before ``writeStream.start()``: the
exactly-once pipeline's source and keyed operator against Spark's own Kafka source and
``groupBy("key").count()``, alternated in one session (issue 15: a query's start).

    python benchmarks/bench_plan.py [--rounds 7] [--warmup 2]

No broker is needed: a plan reads no topic. For each variant the table prints the median and best
wall time of building the streaming DataFrame (``load()`` and the operator's transformations,
Spark's analysis of each included), and the calls the Python driver made into the JVM (py4j
round trips) for the last build; ``time vs native`` divides the medians (above 1: slower).
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from benchmarks.bench_pipeline import LatestCount  # noqa: E402
from benchmarks.bench_source import spark_with_kafka_connector  # noqa: E402

BOOTSTRAP = "127.0.0.1:9"   # never contacted: building a plan reads no topic


def native_plan(spark, storage: str):
    return (spark.readStream.format("kafka").option("kafka.bootstrap.servers", BOOTSTRAP)
            .option("subscribe", "plan").load().groupBy("key").count()
            .selectExpr("key", "concat(cast(key as string), ':', cast(count as string)) AS value"))


def exactly_once_plan(spark, storage: str):
    from barrier_ops.examples.running_count import OUTPUT_SCHEMA
    from barrier_ops.operator import keyed_process

    df = (spark.readStream.format("barrier-kafka").option("kafka.bootstrap.servers", BOOTSTRAP)
          .option("subscribe", "plan").option("checkpoint.storage", storage).load())
    return keyed_process(df, "key", LatestCount(), OUTPUT_SCHEMA, operator_id="count",
                         state_backend=storage, max_parallelism=16, records_format="arrow",
                         parallelism=2)


VARIANTS = {"native": native_plan, "eo keyed_process": exactly_once_plan}


class JvmCalls:
    """Counts the driver's py4j round trips while installed (benchmark process only)."""

    def __init__(self) -> None:
        from py4j.clientserver import JavaClient

        self.count = 0
        self._cls, self._original = JavaClient, JavaClient.send_command

        def counted(client, *args, **kwargs):
            self.count += 1
            return self._original(client, *args, **kwargs)

        JavaClient.send_command = counted

    def close(self) -> None:
        self._cls.send_command = self._original


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--rounds", type=int, default=7)
    parser.add_argument("--warmup", type=int, default=2)
    args = parser.parse_args()
    spark = spark_with_kafka_connector("bench-plan")
    import barrier_kafka

    barrier_kafka.register(spark)
    times = {name: [] for name in VARIANTS}
    calls = {}
    calls_counter = JvmCalls()
    try:
        with tempfile.TemporaryDirectory(prefix="bench-plan-") as work:
            for rnd in range(args.warmup + args.rounds):
                for name, build in VARIANTS.items():   # alternated: A B A B ...
                    storage = os.path.join(work, f"{name.split()[0]}-{rnd}")
                    calls_counter.count = 0
                    started = time.perf_counter()
                    build(spark, storage)
                    elapsed = time.perf_counter() - started
                    calls[name] = calls_counter.count
                    if rnd >= args.warmup:
                        times[name].append(elapsed * 1000)
    finally:
        calls_counter.close()
        spark.stop()
    base = statistics.median(times["native"])
    print(f"building the plan, {args.rounds} alternated rounds after {args.warmup} warm-up; "
          f"load average {os.getloadavg()[0]:.1f}")
    print(f"{'pipeline':<20} {'median ms':>10} {'best ms':>9} {'JVM calls':>10} "
          f"{'time vs native':>15}")
    for name, values in times.items():
        median = statistics.median(values)
        print(f"{name:<20} {median:>10.1f} {min(values):>9.1f} {calls[name]:>10} "
              f"{median / base:>14.2f}x")
    return 0


if __name__ == "__main__":
    sys.exit(main())
