"""Throughput of the barrier-kafka source into Spark's ``noop`` sink, against Spark's own Kafka
source on the same topic, in the same run (not a timed test).

    BARRIER_KAFKA_BOOTSTRAP=127.0.0.1:39092 python benchmarks/bench_source.py [--records 2000000]

Steps: create an 8-partition topic, fill it with 100-byte records using Kafka's own
ProducerPerformance tool (fast), then read it completely with ``Trigger.AvailableNow`` and the
same ``maxOffsetsPerTrigger`` for: Spark's Kafka source (``spark-sql-kafka-0-10`` from Maven
Central), barrier-kafka with a checkpoint every batch, barrier-kafka with checkpoints off,
barrier-kafka packing its records for a keyed operator (``packedKeyGroups``), barrier-kafka with
``minRecordsPerPartition`` (a small batch read in fewer tasks), barrier-kafka with
``maxPartitions`` = the session's cores (the setting source-options.md recommends for a topic
with more partitions than cores: one wave of tasks a batch), a PySpark data
source that reads no Kafka at all and yields the same rows, ready-made, in the same batches and
tasks (the ceiling of any Python data source on this Spark, ``--ceiling``), and Kafka's own
``ConsumerPerformance`` tool (the machine's limit). Each variant runs once to warm up, then
``--repeats`` alternated rounds; the table gives best and median records/s and the issue's
ratios. The session has :func:`barrier_kafka.recommended_spark_conf` (on Spark 4.1+ Python
workers over Unix domain sockets; the table's header says which); ``--conf KEY=VALUE`` sets any
Spark setting (``--conf spark.python.unix.domain.socket.enabled=false``: Spark's default TCP
sockets). ``--spark-home compiled`` (the default, as for ``bench_pipeline.py``) starts the session
from :func:`barrier_kafka.compiled_spark_home`, as the README recommends, so the Python workers a
query starts import PySpark as bytecode; ``installed`` from the Spark home as installed. Spark's
own source starts no Python worker and ``ConsumerPerformance`` no Spark: only barrier-kafka and
the ceiling can gain. The library's modules are compiled first, as a pip install has them.
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
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


def add_spark_home_argument(parser) -> None:
    """``--spark-home compiled|installed``: the Spark home the benchmark's session starts from."""
    parser.add_argument("--spark-home", choices=("compiled", "installed"), default="compiled",
                        help="start the session from the compiled Spark home (Python workers "
                             "import PySpark as bytecode, barrier_kafka.compiled_spark_home) or "
                             "the installed one")


def use_spark_home(choice: str) -> None:
    """Point ``SPARK_HOME`` at the ``compiled`` or ``installed`` Spark home before the session
    starts, with the library's bytecode written (as a pip install of the wheel has it)."""
    from barrier_kafka.spark_home import compiled_spark_home, source_home
    from kafka_harness.bytecode import compile_library

    compile_library()
    os.environ["SPARK_HOME"] = str(compiled_spark_home() if choice == "compiled"
                                   else source_home())


def add_conf_argument(parser) -> None:
    """``--conf KEY=VALUE`` (repeatable): a Spark setting for the benchmark's session."""
    parser.add_argument("--conf", action="append", default=[], metavar="KEY=VALUE",
                        help="a Spark setting for the session every variant runs in "
                             "(repeatable); e.g. spark.python.unix.domain.socket.enabled=false "
                             "for Spark's default TCP sockets to the Python workers")


def session_conf(parser, pairs) -> dict:
    """``--conf KEY=VALUE`` arguments as a dict of Spark settings (``parser.error`` for one
    that is not KEY=VALUE)."""
    from kafka_harness.spark import conf_pairs

    try:
        return conf_pairs(pairs)
    except ValueError as exc:
        parser.error(str(exc))


def session_settings(spark) -> str:
    """The session's settings of :func:`barrier_kafka.recommended_spark_conf`, for a benchmark's
    header: how its Python workers talk to the JVM, and whether it runs stateless streams
    adaptively (as the next query started will, Spark 4.1+)."""
    from barrier_kafka.spark_settings import STATELESS_AQE, UNIX_SOCKETS

    return (f"{UNIX_SOCKETS}={spark.sparkContext.getConf().get(UNIX_SOCKETS, 'false')}; "
            f"{STATELESS_AQE}={spark.conf.get(STATELESS_AQE, 'true')}")


def fill_topic(bootstrap: str, topic: str, partitions: int, records: int,
               batch_bytes: int = 262144) -> None:
    """Create ``topic`` and write ``records`` 100-byte records with ProducerPerformance, in
    producer batches of up to ``batch_bytes`` (1: one record a batch, as a producer with
    ``linger.ms=0`` writes them at a low rate)."""
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
                    "linger.ms=20" if batch_bytes > 1 else "linger.ms=0",
                    f"batch.size={batch_bytes}"], check=True, capture_output=True)


CEILING_FORMAT = "bench-source-ceiling"


def register_ceiling_source(spark) -> None:
    """A streaming Python data source with barrier-kafka's schema that fetches nothing: each task
    turns its range (null keys, 100-byte values, as ProducerPerformance writes them, made with
    numpy) into rows with the source's own :class:`~barrier_source.arrow_rows.RowBuilder`, in the
    same batches and tasks as the Kafka sources. What it reaches is what PySpark's data source
    machinery and Spark's ``noop`` sink allow, before any Kafka fetch or decode."""
    from pyspark.sql.datasource import DataSource, DataSourceStreamReader

    from barrier_core.schema import source_schema
    from barrier_source.read_limits import SupportsTriggerAvailableNow
    from barrier_source.reader import KafkaRangePartition

    class Reader(DataSourceStreamReader, SupportsTriggerAvailableNow):
        def __init__(self, options, schema) -> None:
            self.schema = schema
            self.partitions_n = int(options["partitions"])
            self.per_partition = int(options["records"]) // self.partitions_n
            self.step = int(options["maxOffsetsPerTrigger"]) // self.partitions_n

        def initialOffset(self):
            return {"offset": 0}

        def latestOffset(self, start=None, limit=None):
            at = 0 if start is None else int(start["offset"])
            return {"offset": min(at + self.step, self.per_partition)}

        def partitions(self, start, end):
            return [KafkaRangePartition("ceiling", p, int(start["offset"]), int(end["offset"]),
                                        barriers=(), epochs=(), next_checkpoint_id=1)
                    for p in range(self.partitions_n)]

        def prepareForTriggerAvailableNow(self):
            pass  # the data is fixed: every batch up to the last is available now

        def commit(self, end):
            pass

        def read(self, part):
            import numpy as np
            import pyarrow as pa

            from barrier_source.arrow_rows import RowBuilder
            from barrier_source.record_decode import DecodedRecords

            n = part.until_offset - part.from_offset
            values = pa.Array.from_buffers(
                pa.binary(), n, [None, pa.py_buffer(np.arange(0, 100 * (n + 1), 100,
                                                              dtype=np.int32)),
                                 pa.py_buffer(np.zeros(100 * n, dtype=np.uint8))])
            records = DecodedRecords(
                np.arange(part.from_offset, part.until_offset, dtype=np.int64),
                np.zeros(n, dtype=np.int64), np.zeros(n, dtype=np.int32),
                pa.nulls(n, pa.binary()), values, None)
            yield RowBuilder(self.schema, part, False).records(records)

    class Ceiling(DataSource):
        @classmethod
        def name(cls):
            return CEILING_FORMAT

        def schema(self):
            return source_schema()

        def streamReader(self, schema):
            return Reader(self.options, schema)

    spark.dataSource.register(Ceiling)


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


def consumer_performance(bootstrap: str, topic: str, records: int) -> float:
    """Seconds Kafka's own ``ConsumerPerformance`` tool takes to read ``records`` of ``topic``
    (its own ``nMsg.sec`` figure, so the JVM's start is not counted): the machine's limit."""
    from kafka_harness.jars import fetch_broker_jars, require_java

    libs = fetch_broker_jars()
    done = subprocess.run([require_java(), "-Xmx512m", "-cp", f"{libs}/*",
                           "org.apache.kafka.tools.ConsumerPerformance", "--bootstrap-server",
                           bootstrap, "--topic", topic, "--messages", str(records),
                           "--group", "bench-perf-" + uuid.uuid4().hex[:8], "--timeout", "60000"],
                          check=True, capture_output=True, text=True, timeout=600)
    lines = [ln for ln in done.stdout.splitlines() if "," in ln]
    header = [h.strip() for h in lines[0].split(",")]
    values = [v.strip() for v in lines[-1].split(",")]
    figures = dict(zip(header, values))
    consumed = int(float(figures["data.consumed.in.nMsg"]))
    if consumed < records:
        raise RuntimeError(f"ConsumerPerformance read {consumed} of {records} records")
    return consumed / float(figures["nMsg.sec"])


ON = "barrier-kafka, checkpoint every batch"
OFF = "barrier-kafka, checkpoints off"
PERF = "kafka ConsumerPerformance"
CEILING = "PySpark data source, no Kafka (ceiling)"
#: The source with few records a batch read in fewer tasks (operations.md recommends it).
MIN_RECORDS = 100_000
SMALL_BATCHES = f"barrier-kafka minRecordsPerPartition={MIN_RECORDS}"
#: The source with a topic's ranges packed into one task per core (source-options.md).
ONE_WAVE = "barrier-kafka maxPartitions=cores"
#: The source packing its records for a keyed operator of this many key groups (the library's
#: default max_parallelism): the rows Spark handles are then one per key group and fetch.
PACKED_KEY_GROUPS = 128
PACKED = f"barrier-kafka packedKeyGroups={PACKED_KEY_GROUPS}"


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--records", type=int, default=2_000_000)
    parser.add_argument("--partitions", type=int, default=8)
    parser.add_argument("--max-offsets-per-trigger", type=int, default=500_000)
    parser.add_argument("--repeats", type=int, default=3,
                        help="alternated rounds (A B C D, A B C D, ...) after one warm-up each")
    parser.add_argument("--producer-batch-bytes", type=int, default=262144,
                        help="batch.size of the producer that fills the topic (1: one record a "
                             "record batch, the layout of a producer with linger.ms=0 at a low "
                             "rate)")
    parser.add_argument("--ceiling", action="store_true",
                        help="add a Python data source that reads no Kafka (the ceiling)")
    add_spark_home_argument(parser)
    add_conf_argument(parser)
    args = parser.parse_args()
    bootstrap = os.environ.get("BARRIER_KAFKA_BOOTSTRAP", "127.0.0.1:39092")
    topic = "bench_source_" + uuid.uuid4().hex[:8]
    use_spark_home(args.spark_home)
    t0 = time.perf_counter()
    fill_topic(bootstrap, topic, args.partitions, args.records, args.producer_batch_bytes)
    print(f"produced {args.records} x 100 B into {topic} ({args.partitions} partitions, producer "
          f"batch.size {args.producer_batch_bytes}) in "
          f"{time.perf_counter() - t0:.1f}s", flush=True)

    spark = spark_with_kafka_connector("bench-source", **session_conf(parser, args.conf))
    settings = session_settings(spark)
    cores = spark.sparkContext.defaultParallelism
    common = {"kafka.bootstrap.servers": bootstrap, "subscribe": topic,
              "startingOffsets": "earliest",
              "maxOffsetsPerTrigger": str(args.max_offsets_per_trigger)}
    variants = [
        ("spark kafka", lambda: run_once(spark, "kafka", dict(common))),
        (ON, lambda: run_once(spark, "barrier-kafka", dict(
            common, **{"execution.checkpointing.interval-batches": "1"}))),
        (OFF, lambda: run_once(spark, "barrier-kafka", dict(
            common, **{"execution.checkpointing.interval-batches": "0"}))),
        (PACKED, lambda: run_once(spark, "barrier-kafka", dict(
            common, **{"execution.checkpointing.interval-batches": "1",
                       "packedKeyGroups": str(PACKED_KEY_GROUPS)}))),
        (SMALL_BATCHES, lambda: run_once(spark, "barrier-kafka", dict(
            common, **{"execution.checkpointing.interval-batches": "1",
                       "minRecordsPerPartition": str(MIN_RECORDS)}))),
        (ONE_WAVE, lambda: run_once(spark, "barrier-kafka", dict(
            common, **{"execution.checkpointing.interval-batches": "1",
                       "maxPartitions": str(cores)}))),
        (PERF, lambda: consumer_performance(bootstrap, topic, args.records)),
    ]
    if args.ceiling:
        register_ceiling_source(spark)
        variants.insert(-1, (CEILING, lambda: run_once(spark, CEILING_FORMAT, {
            "partitions": str(args.partitions), "records": str(args.records),
            "maxOffsetsPerTrigger": str(args.max_offsets_per_trigger)})))
    times = {name: [] for name, _ in variants}
    loads = []
    try:
        for _, run in variants:
            run()  # warm-up: JVM JIT, Python workers, Ivy
        for round_no in range(args.repeats):
            loads.append(os.getloadavg()[0])
            for name, run in variants:
                times[name].append(run())
            print(f"round {round_no + 1}: " + ", ".join(f"{name} {t[-1]:.2f}s"
                                                     for name, t in times.items()), flush=True)
    finally:
        spark.stop()
        from kafka.admin import KafkaAdminClient
        admin = KafkaAdminClient(bootstrap_servers=bootstrap)
        admin.delete_topics([topic])
        admin.close()
    print_table(args.records, times, loads,
                f"{args.spark_home} Spark home, {cores} cores, {settings}")
    return 0


def print_table(n: int, times: dict, loads: list, setting: str = "") -> None:
    """Best and median records/s per variant, and the issue's ratios on both."""
    rate = {name: (n / min(t), n / statistics.median(t)) for name, t in times.items()}
    print(f"\n{n:,} records, {len(loads)} alternated rounds, "
          + (f"{setting}, " if setting else "")
          + f"load average {min(loads):.1f}-{max(loads):.1f}")
    print("| variant | best rec/s | median rec/s |")
    print("|---|---|---|")
    for name, (best, median) in rate.items():
        print(f"| {name} | {best:,.0f} | {median:,.0f} |")
    print("\n| ratio (goal) | best | median |")
    print("|---|---|---|")
    for label, a, b in (("barrier-kafka / spark kafka (>= 1.0x)", ON, "spark kafka"),
                        ("barrier-kafka / ConsumerPerformance (>= 0.5x)", ON, PERF),
                        ("packed / spark kafka", PACKED, "spark kafka"),
                        ("packed / ConsumerPerformance", PACKED, PERF),
                        ("minRecordsPerPartition / spark kafka", SMALL_BATCHES, "spark kafka"),
                        ("minRecordsPerPartition / ConsumerPerformance", SMALL_BATCHES, PERF),
                        ("maxPartitions=cores / spark kafka", ONE_WAVE, "spark kafka"),
                        ("maxPartitions=cores / ConsumerPerformance", ONE_WAVE, PERF)):
        print(f"| {label} | {rate[a][0] / rate[b][0]:.2f}x | {rate[a][1] / rate[b][1]:.2f}x |")
    if CEILING in rate:
        for label, a in (("ceiling / spark kafka", "spark kafka"), ("ceiling / ConsumerPerformance",
                                                                     PERF)):
            print(f"| {label} | {rate[CEILING][0] / rate[a][0]:.2f}x | "
                  f"{rate[CEILING][1] / rate[a][1]:.2f}x |")
    cost = [(1 - rate[ON][i] / rate[OFF][i]) * 100 for i in (0, 1)]
    print(f"| barrier cost, every batch vs off (< 2%) | {cost[0]:+.1f}% | {cost[1]:+.1f}% |")


if __name__ == "__main__":
    sys.exit(main())
