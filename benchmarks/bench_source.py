"""Throughput of the barrier-kafka source into Spark's ``noop`` sink, against Spark's own Kafka
source on the same topic, in the same run (not a timed test).

    BARRIER_KAFKA_BOOTSTRAP=127.0.0.1:39092 python benchmarks/bench_source.py [--records 2000000]

Steps: create an 8-partition topic, fill it with 100-byte records using Kafka's own
ProducerPerformance tool (fast), then read it completely with ``Trigger.AvailableNow`` and the
same ``maxOffsetsPerTrigger`` for: Spark's Kafka source (``spark-sql-kafka-0-10`` from Maven
Central), barrier-kafka with a checkpoint every batch, and barrier-kafka with checkpoints off.
Each variant runs once to warm up and then ``--repeats`` times; the best run counts.
"""

from __future__ import annotations

import argparse
import os
import shutil
import subprocess
import sys
import tempfile
import time
import uuid

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

# Spark 4.3.0 has no spark-sql-kafka-0-10 on Maven Central; 4.2.0 (the newest) runs on 4.3.0
# (4.0.x does not: SerializedOffset moved). Its dependency spark-token-provider-kafka-0-10 4.2.0
# is missing from the repository this machine reaches, so it is excluded and the 4.0.0 jar
# (binary compatible, downloaded once into the cache) is added instead.
SPARK_KAFKA_PACKAGE = os.environ.get("SPARK_KAFKA_PACKAGE",
                                     "org.apache.spark:spark-sql-kafka-0-10_2.13:4.2.0")
TOKEN_PROVIDER = "org.apache.spark:spark-token-provider-kafka-0-10_2.13"
TOKEN_PROVIDER_VERSION = "4.0.0"


def token_provider_jar() -> str:
    """The spark-token-provider jar, copied once from Maven Central by Maven into the cache."""
    from kafka_harness.jars import cache_root

    folder = cache_root() / "spark-kafka"
    path = folder / f"spark-token-provider-kafka-0-10_2.13-{TOKEN_PROVIDER_VERSION}.jar"
    if not path.exists():
        folder.mkdir(parents=True, exist_ok=True)
        subprocess.run(["mvn", "-q", "-B", "dependency:copy",
                        f"-Dartifact={TOKEN_PROVIDER}:{TOKEN_PROVIDER_VERSION}",
                        f"-DoutputDirectory={folder}"], check=True, timeout=600)
    return str(path)


def spark_with_kafka_connector(app_name: str, **conf):
    """A local Spark session that also has Spark's own Kafka source and sink (the peers)."""
    from kafka_harness.spark import build_spark

    return build_spark(app_name, **conf, **{"spark.jars.packages": SPARK_KAFKA_PACKAGE,
                                             "spark.jars.excludes": TOKEN_PROVIDER,
                                             "spark.jars": token_provider_jar(),
                                             "spark.ui.showConsoleProgress": "false"})


def fill_topic(bootstrap: str, topic: str, partitions: int, records: int) -> None:
    from kafka.admin import KafkaAdminClient, NewTopic

    from kafka_harness.jars import fetch_broker_jars, require_java

    admin = KafkaAdminClient(bootstrap_servers=bootstrap)
    admin.create_topics([NewTopic(topic, partitions, 1)])
    admin.close()
    libs = fetch_broker_jars()
    subprocess.run([require_java(), "-Xmx512m", "-cp", f"{libs}/*",
                    "org.apache.kafka.tools.ProducerPerformance", "--topic", topic,
                    "--num-records", str(records), "--record-size", "100", "--throughput", "-1",
                    "--producer-props", f"bootstrap.servers={bootstrap}", "acks=1",
                    "linger.ms=20", "batch.size=262144"], check=True, capture_output=True)


def run_once(spark, fmt: str, options: dict) -> float:
    chk = tempfile.mkdtemp(prefix="bench-chk-")
    try:
        reader = spark.readStream.format(fmt)
        for k, v in options.items():
            reader = reader.option(k, v)
        t0 = time.perf_counter()
        query = (reader.load().writeStream.format("noop").trigger(availableNow=True)
                 .option("checkpointLocation", chk).start())
        query.awaitTermination()
        elapsed = time.perf_counter() - t0
        if query.exception() is not None:
            raise RuntimeError(str(query.exception()))
        return elapsed
    finally:
        shutil.rmtree(chk, ignore_errors=True)


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--records", type=int, default=2_000_000)
    parser.add_argument("--partitions", type=int, default=8)
    parser.add_argument("--max-offsets-per-trigger", type=int, default=500_000)
    parser.add_argument("--repeats", type=int, default=2)
    args = parser.parse_args()
    bootstrap = os.environ.get("BARRIER_KAFKA_BOOTSTRAP", "127.0.0.1:39092")
    topic = "bench_source_" + uuid.uuid4().hex[:8]
    t0 = time.perf_counter()
    fill_topic(bootstrap, topic, args.partitions, args.records)
    print(f"produced {args.records} x 100 B into {topic} ({args.partitions} partitions) in "
          f"{time.perf_counter() - t0:.1f}s", flush=True)

    spark = spark_with_kafka_connector("bench-source")
    common = {"kafka.bootstrap.servers": bootstrap, "subscribe": topic,
              "startingOffsets": "earliest",
              "maxOffsetsPerTrigger": str(args.max_offsets_per_trigger)}
    variants = [
        ("spark kafka", "kafka", dict(common)),
        ("barrier-kafka, checkpoint every batch", "barrier-kafka",
         dict(common, **{"execution.checkpointing.interval-batches": "1"})),
        ("barrier-kafka, checkpoints off", "barrier-kafka",
         dict(common, **{"execution.checkpointing.interval-batches": "0"})),
    ]
    best = {}
    try:
        for name, fmt, opts in variants:
            run_once(spark, fmt, opts)  # warm-up: JVM JIT, Python workers, Ivy
            times = [run_once(spark, fmt, opts) for _ in range(args.repeats)]
            best[name] = min(times)
            print(f"{name}: {', '.join(f'{t:.2f}s' for t in times)}", flush=True)
    finally:
        spark.stop()
        from kafka.admin import KafkaAdminClient
        admin = KafkaAdminClient(bootstrap_servers=bootstrap)
        admin.delete_topics([topic])
        admin.close()

    n = args.records
    print(f"\n{'variant':<40} {'seconds':>8} {'records/s':>12}")
    for name, seconds in best.items():
        print(f"{name:<40} {seconds:8.2f} {n / seconds:12,.0f}")
    spark_rate = n / best["spark kafka"]
    on = n / best["barrier-kafka, checkpoint every batch"]
    off = n / best["barrier-kafka, checkpoints off"]
    print(f"\nbarrier-kafka (checkpoint every batch) / spark kafka: {on / spark_rate:.2f}x "
          "(goal >= 0.5x)")
    print(f"barrier cost (every batch vs off): {(1 - on / off) * 100:+.1f}% throughput "
          "(goal < 5%)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
