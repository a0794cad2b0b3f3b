"""The headline figure (issue 15): the exactly-once pipeline against the at-least-once one users
run today, side by side in one run, on the same input topic and trigger.

    BARRIER_KAFKA_BOOTSTRAP=127.0.0.1:39092 python benchmarks/bench_pipeline.py \
        [--records 200000] [--keys 997,100000] [--batches 10000,50000,200000] [--rounds 2]

Pipelines (each starts from the earliest offset of the same 4-partition topic, with
``maxOffsetsPerTrigger`` = batch size and 2 shuffle partitions; the barrier-kafka source packs
the four partitions' ranges into as many tasks as the session has cores, ``maxPartitions``,
unless ``--max-partitions`` says otherwise):

* ``native``: Spark's Kafka source -> ``groupBy("key").count()`` (update mode, Spark's state
  store) -> Spark's Kafka sink (at-least-once); one row per key and batch.
* ``eo per-key``: barrier-kafka source -> aligned keyed count emitting one row per key and batch
  -> two-phase-commit Kafka sink.
* ``eo per-record``: barrier-kafka source -> keyed running count emitting one row per record
  (``RunningCount``, the demo's operator) -> two-phase-commit Kafka sink.
* ``--spark-home compiled`` (the default) starts the session from
  :func:`barrier_kafka.compiled_spark_home`, as docs/operations.md recommends, so PySpark's
  Python workers import PySpark as bytecode; ``installed`` from the Spark home as installed.
  Spark's own pipeline starts no Python worker: only the exactly-once ones can gain.
* the library's modules are compiled first (:mod:`kafka_harness.bytecode`), as a pip install of
  the wheel has them, whatever ``PYTHONDONTWRITEBYTECODE`` says.
* with ``--variants``, also ``... lean`` (the input narrowed to the columns read) and ``...
  arrow`` (``keyed_process(..., records_format="arrow")``: each key's records as a pyarrow
  RecordBatch, same functions).

Every output value is ``<key>:<count>``. A run ends when the final count of every key is
visible to a ``read_committed`` consumer of the output (for the 2PC sink: when the checkpoint
holding the last input completed and its transactions committed). That moment is taken from
the topic's last stable offsets, polled every 20 ms during the run
(:mod:`benchmarks.visibility`), and the output is read only after the run: reading it during the
run would charge a pipeline that emits a row per record for its checker's CPU on the same two
cores. Throughput = input records / seconds from query start to that moment. After one uncounted
warm-up round, variants alternate within each round (A B C A B C ...); the table prints the best
and the median per variant and the ratio of medians to ``native``, for the whole run and, as
``after start``, for the same runs counted from their first trigger: a query's start is a fixed
cost per query (for a Python data source PySpark starts a fresh planner Python process before
the first trigger, about 1.3 s here against 0.1 s for Spark's own source), which a
200,000-record run weighs far more than a query that runs for days. As ``steady``, the ratio of
the batches after the first alone (:func:`median_ratio`): the throughput of a query past its
start and its first batch (a run of one batch has none).
The session is built as the tests build theirs (:func:`kafka_harness.spark.build_spark`): with
:func:`barrier_kafka.recommended_spark_conf`, so on Spark 4.1+ its Python workers talk to the JVM
over Unix domain sockets and its stateless streams do not run adaptively; ``--conf KEY=VALUE``
sets any Spark setting, and the header of the tables says which ran (``--conf
spark.python.unix.domain.socket.enabled=false``: Spark's default TCP sockets; the ``adaptive``
variants start one query with adaptive execution of stateless streams on). Four more tables
split the last round: one batch's wall time by phase (:func:`attribute`), the whole run into
query start, first batch, other batches and the wait until visible (:func:`run_split`), the CPU
seconds each kind of process spent from the query's start to its last batch's end
(:mod:`benchmarks.process_cpu`: the Spark JVM, with the share of its JIT compiler threads,
PySpark's Python task workers, its driver-side Python workers, the broker, this process), and
one batch's Spark job by stage with the Python time PySpark reports inside each, from Spark's
event log (:mod:`benchmarks.stage_times`).
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import sys
import tempfile
import time
import uuid
from typing import List, Optional

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from barrier_kafka.spark_settings import UNIX_SOCKETS  # noqa: E402
from barrier_ops.function import KeyedProcessFunction  # noqa: E402
from benchmarks.bench_sink import make_topic  # noqa: E402
from benchmarks.bench_source import (add_conf_argument, add_spark_home_argument,  # noqa: E402
                                     session_settings, session_conf, spark_with_kafka_connector,
                                     use_spark_home)
from benchmarks import process_cpu  # noqa: E402
from benchmarks.stage_times import (COLUMNS as STAGE_COLUMNS, PYTHON_TIME,  # noqa: E402
                                    EventLogTail, cell, event_log_conf, median_ms,
                                    stage_times)
from benchmarks.visibility import StableOffsetLog, final_count_offsets  # noqa: E402

VARIANTS = ("native", "eo per-key", "eo per-record")
#: ``--variants`` may add these: the same pipelines with the input narrowed to the columns the
#: operator and the function read (``LEAN_COLUMNS``), as a user can do. Spark's
#: ``groupBy().count()`` drops unread columns by itself; ``applyInPandasWithState`` cannot know
#: what the function reads, so every input column crosses the shuffle and both Arrow hops.
LEAN_VARIANTS = ("eo per-key lean", "eo per-record lean")
#: ``--variants`` may add these too: the same pipelines with ``records_format="arrow"`` (each
#: key's records reach the function as a pyarrow RecordBatch; both functions only take its
#: length, so the function is the same).
ARROW_VARIANTS = ("eo per-key arrow", "eo per-record arrow")
#: ... and these: Arrow records with ``keyed_process(..., parallelism=P)``, Spark calling the
#: operator once per range of key groups (P: ``--parallelism``, else the shuffle partitions).
RANGE_VARIANTS = ("eo per-key arrow ranges", "eo per-record arrow ranges")
#: ... and these: the ranges pipelines with the source packing its records per key group of the
#: operator (source option ``packedKeyGroups`` = ``--max-parallelism``).
PACKED_VARIANTS = ("eo per-key arrow ranges packed", "eo per-record arrow ranges packed")
#: ... and these: the default and the recommended pipelines with each key group's state kept
#: between batches in the operator's state backend instead of Spark's state store
#: (``keyed_process(..., runtime_store="backend")``: stateless ``applyInPandas``).
RUNTIME_VARIANTS = ("eo per-key runtimes", "eo per-record runtimes",
                    "eo per-key arrow ranges packed runtimes",
                    "eo per-record arrow ranges packed runtimes")
#: ... and these: the recommended pipelines with their state in the backend, started with Spark
#: 4.1+'s adaptive execution of stateless streams on, as in a session built without
#: ``barrier_kafka.recommended_spark_conf()`` (each batch's shuffle a Spark job of its own).
ADAPTIVE_VARIANTS = tuple(v + " adaptive" for v in RUNTIME_VARIANTS[2:])
EXTRA_VARIANTS = (LEAN_VARIANTS + ARROW_VARIANTS + RANGE_VARIANTS + PACKED_VARIANTS
                  + RUNTIME_VARIANTS + ADAPTIVE_VARIANTS)
#: The shuffle partitions of every pipeline (Spark's session setting).
SHUFFLE_PARTITIONS = 2
LEAN_COLUMNS = ("key", "topic", "partition", "offset", "timestamp", "kind", "checkpoint_id",
                "checkpoint_timestamp", "barrier_channels")


class LatestCount(KeyedProcessFunction):
    """Keyed count emitting one row per key and batch (``<key>:<count>``), as ``groupBy().count()``
    does in update mode (executor)."""

    def process_records(self, key, records, state):
        count = state.value_state("count", 0)
        total = count.value() + len(records)
        count.update(total)
        k = bytes(key).decode() if isinstance(key, (bytes, bytearray)) else str(key)
        return [(k, f"{k}:{total}")]


def produce(bootstrap: str, topic: str, records: int, keys: int) -> None:
    from kafka import KafkaProducer

    producer = KafkaProducer(bootstrap_servers=bootstrap, linger_ms=20, acks=1,
                             batch_size=512 * 1024)
    for i in range(records):
        producer.send(topic, key=b"k%d" % (i % keys), value=b"v%07d" % i)
    producer.flush()
    producer.close()


def final_counts(records: int, keys: int) -> dict:
    return {f"k{k}": records // keys + (1 if k < records % keys else 0)
            for k in range(min(keys, records))}


def _with_trigger(writer, trigger_s):
    return writer if trigger_s is None else writer.trigger(processingTime=f"{trigger_s} seconds")


def start_native(spark, bootstrap, src, out, work, batch, trigger_s=None):
    counts = (spark.readStream.format("kafka").option("kafka.bootstrap.servers", bootstrap)
              .option("subscribe", src).option("startingOffsets", "earliest")
              .option("maxOffsetsPerTrigger", str(batch)).load()
              .groupBy("key").count())
    rows = counts.selectExpr("key", "concat(cast(key as string), ':', cast(count as string)) "
                                    "as value")
    return _with_trigger(rows.writeStream.format("kafka").outputMode("update")
                         .option("kafka.bootstrap.servers", bootstrap).option("topic", out)
                         .option("checkpointLocation", os.path.join(work, "chk")),
                         trigger_s).start()


def start_exactly_once(spark, bootstrap, src, out, work, batch, per_key: bool, trigger_s=None,
                       lean: bool = False, max_parallelism: int = 16,
                       max_partitions: int = 0, records_format: str = "pandas",
                       parallelism=None, packed: bool = False,
                       runtime_store: str = "spark"):
    from barrier_ops.examples.running_count import OUTPUT_SCHEMA, RunningCount
    from barrier_ops.operator import keyed_process

    storage = os.path.join(work, "storage")
    df = (spark.readStream.format("barrier-kafka").option("kafka.bootstrap.servers", bootstrap)
          .option("subscribe", src).option("startingOffsets", "earliest")
          .option("maxOffsetsPerTrigger", str(batch))
          .option("execution.checkpointing.interval-batches", "1")
          .option("checkpoint.storage", storage))
    if max_partitions:
        df = df.option("maxPartitions", str(max_partitions))
    if packed:
        df = df.option("packedKeyGroups", str(max_parallelism))
    df = df.load()
    if lean:
        df = df.select(*LEAN_COLUMNS)
    fn = LatestCount() if per_key else RunningCount()
    counted = keyed_process(df, "key", fn, OUTPUT_SCHEMA, operator_id="count",
                            state_backend=storage, max_parallelism=max_parallelism,
                            records_format=records_format, parallelism=parallelism,
                            runtime_store=runtime_store)
    return _with_trigger(counted.writeStream.format("barrier-kafka")
                         .option("kafka.bootstrap.servers", bootstrap).option("topic", out)
                         .option("checkpoint.storage", storage)
                         .option("transactionalIdPrefix", "bench-" + uuid.uuid4().hex[:8])
                         .option("checkpointLocation", os.path.join(work, "chk")),
                         trigger_s).start()


def required_bootstrap(parser) -> str:
    """``BARRIER_KAFKA_BOOTSTRAP``, or ``parser.error`` (exit 2) saying how to get a broker."""
    bootstrap = os.environ.get("BARRIER_KAFKA_BOOTSTRAP")
    if not bootstrap:
        parser.error("set BARRIER_KAFKA_BOOTSTRAP (python -m kafka_harness broker prints it)")
    return bootstrap


def variant_names(parser, text: str) -> List[str]:
    """The pipelines a comma-separated ``--variants`` names, in order; ``parser.error`` (exit 2,
    naming the valid names) for a name that is neither in :data:`VARIANTS` nor in
    :data:`EXTRA_VARIANTS`."""
    variants = [v.strip() for v in text.split(",") if v.strip()]
    unknown = [v for v in variants if v not in VARIANTS + EXTRA_VARIANTS]
    if unknown:
        parser.error(f"unknown variants {unknown}; choose from {VARIANTS + EXTRA_VARIANTS}")
    return variants


def start_variant(spark, variant, bootstrap, src, out, work, batch, max_parallelism=16,
                  max_partitions=0, parallelism=None, trigger_s=None):
    """Start the pipeline named ``variant`` (one of :data:`VARIANTS` or :data:`EXTRA_VARIANTS`)
    from ``src`` to ``out``: ``native`` is :func:`start_native`; the words of an ``eo ...`` name
    choose :func:`start_exactly_once`'s settings (``per-key``, ``lean``, ``arrow``, ``ranges``
    in ``parallelism`` ranges, else the shuffle partitions, ``packed``, ``runtimes``: the
    runtimes in the state backend, ``adaptive``: the query started with stateless streams run
    adaptively, :func:`adaptive_stateless_streams`)."""
    if variant == "native":
        return start_native(spark, bootstrap, src, out, work, batch, trigger_s)
    words = variant.split()
    if "adaptive" in words:
        with adaptive_stateless_streams(spark):
            return start_variant(spark, " ".join(w for w in words if w != "adaptive"),
                                 bootstrap, src, out, work, batch, max_parallelism,
                                 max_partitions, parallelism, trigger_s)
    ranges = "ranges" in words
    return start_exactly_once(spark, bootstrap, src, out, work, batch,
                              per_key=variant.startswith("eo per-key"), trigger_s=trigger_s,
                              lean="lean" in words, max_parallelism=max_parallelism,
                              max_partitions=max_partitions,
                              records_format="arrow" if "arrow" in words else "pandas",
                              parallelism=(parallelism or SHUFFLE_PARTITIONS) if ranges
                              else None, packed="packed" in words,
                              runtime_store="backend" if "runtimes" in words else "spark")


def adaptive_stateless_streams(spark):
    """Within: queries started run stateless streams adaptively (Spark 4.1+'s default, which
    :func:`barrier_kafka.recommended_spark_conf` turns off); the session's own value is back
    for the next one (:func:`kafka_harness.spark.sql_conf`)."""
    from barrier_kafka.spark_settings import STATELESS_AQE
    from kafka_harness.spark import sql_conf

    return sql_conf(spark, STATELESS_AQE, "true")


ATTRIBUTION = ("batch", "spark", "planning", "stage 1+sched", "operator", "state upd",
               "state commit", "snapshot", "upload", "open txn", "send", "flush", "driver",
               "EndTxn", "new producers")


def attribute(progress, storage) -> dict:
    """Median ms per phase of the run's batches (those with input):

    * ``batch``: Spark's triggerExecution; ``spark``: its part outside addBatch (offsets,
      planning, WAL and commit logs); ``planning``: of that, Spark's queryPlanning (analysing,
      optimising and planning the batch's query on the driver; for ``applyInPandasWithState``
      it holds one state encoder resolved by a whole analyzer run for each copy of Spark's
      operator node that planning makes, see docs/operations.md);
    * from the sink's batch records (the slowest sink task of each batch): ``operator`` = the
      task waiting for its input (shuffle read and the keyed operator, snapshots included);
      ``open txn``, ``send``, ``flush`` (pre-commit); ``driver`` = the driver's batch record and
      checkpoint completion; ``EndTxn`` = its commit of the checkpoint's transactions;
    * ``stage 1+sched`` = addBatch minus the slowest sink task, driver and EndTxn: the source
      read and shuffle write stage, task scheduling, and the driver's work after the commit
      (offsets for the group, pruning, the sweep of unrecorded transactions);
    * ``new producers``: producers the slowest task created (0: its worker's parked producer
      took the transaction over);
    * ``snapshot`` and ``upload``: the operators' snapshot time, serialising (sync) and storing
      (async, concurrent for the key groups of one call), from the checkpoint statistics;
    * ``state upd`` and ``state commit``: Spark's own stateful operator, from the progress's
      ``stateOperators`` (``allUpdatesTimeMs``, ``commitTimeMs``), per task (summed over the
      shuffle partitions, divided by their number). For ``groupBy().count()`` that is the
      aggregation and its state store; for ``applyInPandasWithState`` the update time holds the
      keyed operator's Python run too (it is part of ``operator``), and the commit is the state
      store's delta file, which both pipelines write every batch.
    """
    import glob
    import json

    by_progress = {p["batchId"]: p for p in progress if p.get("numInputRows", 0) > 0}
    by_batch = {b: p["durationMs"] for b, p in by_progress.items()}
    records = {}
    if storage:
        for path in glob.glob(os.path.join(storage, "sink", "batch-*.json")):
            with open(path) as f:
                rec = json.load(f)
            records[rec["batch_id"]] = rec
    rows = []
    for b, d in by_batch.items():
        row = {"batch": d.get("triggerExecution"),
               "spark": d.get("triggerExecution", 0) - d.get("addBatch", 0),
               "planning": d.get("queryPlanning")}
        row.update(state_store_ms(by_progress[b]))
        rec = records.get(b)
        if rec and rec.get("timings"):
            t, endtxn = rec["timings"], rec.get("commit_transactions_ms", 0.0)
            driver = rec.get("driver_before_commit_ms", 0.0)
            row.update({"operator": t.get("input_wait_ms"), "open txn": t.get("open_ms"),
                        "send": t.get("write_ms"), "flush": t.get("pre_commit_ms"),
                        "driver": driver, "EndTxn": endtxn,
                        "new producers": t.get("created_producers"),
                        "stage 1+sched": (d.get("addBatch", 0) - t.get("task_ms", 0) - endtxn
                                          - driver)})
        rows.append(row)
    out = {k: median_ms(r.get(k) for r in rows) for k in ATTRIBUTION}
    sync, upload = [], []
    for path in glob.glob(os.path.join(storage or "", "chk-*", "_stats.json")):
        with open(path) as f:
            stats = json.load(f)
        sync.append(stats.get("sync_duration_ms"))
        upload.append(stats.get("async_duration_ms"))
    out["snapshot"], out["upload"] = median_ms(sync), median_ms(upload)
    out["batches"] = len(rows)
    return out


def state_store_ms(progress) -> dict:
    """Per-task ms of Spark's stateful operators in one batch's progress (``state upd``,
    ``state commit``), or nothing when the batch reported no stateful operator."""
    ops = progress.get("stateOperators") or []
    if not ops:
        return {}
    per_task = {"state upd": 0.0, "state commit": 0.0}
    for op in ops:
        tasks = max(1, op.get("numShufflePartitions") or 1)
        per_task["state upd"] += op.get("allUpdatesTimeMs", 0) / tasks
        per_task["state commit"] += op.get("commitTimeMs", 0) / tasks
    return per_task


def run_split(progress, started_s: float, visible_s: float) -> dict:
    """Where a whole run's wall time goes, in seconds: ``start`` = from ``writeStream.start()`` to
    the first batch's trigger (query initialisation: for a Python data source PySpark starts its
    planner worker here), ``first`` = the first batch with input (Python workers, producers and
    clients created), ``rest`` = the other batches with input, ``tail`` = from the last one's end
    until every final count was visible (``started_s``, ``visible_s``: wall-clock seconds)."""
    from datetime import datetime, timezone

    def at(p) -> float:
        stamp = datetime.strptime(p["timestamp"].rstrip("Z"), "%Y-%m-%dT%H:%M:%S.%f")
        return stamp.replace(tzinfo=timezone.utc).timestamp()

    ran = [p for p in progress if p.get("numInputRows", 0) > 0]
    if not ran:
        return {}
    last_end = at(ran[-1]) + ran[-1]["durationMs"].get("triggerExecution", 0) / 1000
    return {"start": at(progress[0]) - started_s,
            "first": ran[0]["durationMs"].get("triggerExecution", 0) / 1000,
            "rest": sum(p["durationMs"].get("triggerExecution", 0) for p in ran[1:]) / 1000,
            "tail": visible_s - last_end}


def median_ratio(native: Optional[List[float]], runs: List[float]) -> float:
    """Native's median seconds divided by the variant's, for the same part of their runs: a
    throughput ratio, since both pipelines read the same records in the same batches
    (``maxOffsetsPerTrigger``). The table's three ratios: whole runs, runs from the first
    trigger, and ``steady``, the batches after the first (``run_split``'s ``rest``: what a
    query that runs for days sees, without its start and its first batch, PySpark's planner
    process, Python workers and clients created). NaN when there is no native run or a part
    took no time (the batches after the first of a run of one batch)."""
    if not native or not runs:
        return float("nan")
    base, mine = statistics.median(native), statistics.median(runs)
    return base / mine if base > 0 and mine > 0 else float("nan")


def cell_ratio(value: float) -> str:
    """A ratio table cell: ``1.02x``, or ``-`` for NaN."""
    return "-" if value != value else f"{value:.2f}x"


def one_run(spark, variant, bootstrap, src, records, keys, batch, max_parallelism=16,
            max_partitions=0, parallelism=None, event_log=None):
    out = make_topic(bootstrap, 2)
    work = tempfile.mkdtemp(prefix="bench-pipe-")
    stable = StableOffsetLog(bootstrap, out).start()
    try:
        return _measured_run(spark, variant, bootstrap, src, out, work, stable, records, keys,
                             batch, max_parallelism, max_partitions, parallelism, event_log)
    finally:
        stable.stop()
        shutil.rmtree(work, ignore_errors=True)


def _measured_run(spark, variant, bootstrap, src, out, work, stable, records, keys, batch,
                  max_parallelism, max_partitions, parallelism, event_log=None):
    """One run from ``writeStream.start()`` until the final count of every key was visible to a
    ``read_committed`` consumer (:mod:`benchmarks.visibility`: the moment the stable offsets
    passed the last of them, not the moment this process finished reading them)."""
    cpu0 = process_cpu.take()
    wall0 = time.time()
    query = start_variant(spark, variant, bootstrap, src, out, work, batch, max_parallelism,
                          max_partitions, parallelism)
    try:
        query.processAllAvailable()  # every input record read and its batch done
        cpu1 = process_cpu.take()
        cpu = process_cpu.spent(cpu0, cpu1)
        cpu[process_cpu.JIT] = process_cpu.jit_spent(cpu0, cpu1)   # a part of 'spark jvm'
        last = final_count_offsets(bootstrap, out, final_counts(records, keys), 1800)
        visible = stable.visible_at(last) if last is not None else None
        progress = query.recentProgress
    finally:
        query.stop()
    if last is None:
        raise RuntimeError(f"{variant}: the final count of some key never became visible")
    if visible is None:
        raise RuntimeError(f"{variant}: the stable offsets never passed {last} while polled")
    storage = None if variant == "native" else os.path.join(work, "storage")
    phases = attribute(progress, storage)
    phases["run"] = run_split(progress, wall0, visible)
    phases["cpu"] = cpu
    if event_log is not None:   # benchmarks.stage_times.EventLogTail: this run's part of the log
        with_input = [p["batchId"] for p in progress if p.get("numInputRows", 0) > 0]
        phases["stages"] = stage_times(event_log.read(), str(query.id), with_input)
    return visible - wall0, phases


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--records", type=int, default=200_000)
    parser.add_argument("--keys", default="997", help="comma-separated key counts")
    parser.add_argument("--batches", default="50000", help="comma-separated batch sizes")
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--warmup", type=int, default=1,
                        help="uncounted rounds before the first measured one (JIT, Python "
                             "workers, connections)")
    parser.add_argument("--max-parallelism", type=int, default=16,
                        help="key groups of the exactly-once pipelines' operator (the library's "
                             "default is 128; every key group costs a fixed amount per batch)")
    parser.add_argument("--parallelism", type=int, default=0,
                        help="the operator's parallelism in the '... ranges' variants (ranges "
                             "of key groups Spark calls it for; 0: the shuffle partitions, "
                             f"{SHUFFLE_PARTITIONS})")
    parser.add_argument("--max-partitions", type=int, default=-1,
                        help="the barrier-kafka source's maxPartitions (tasks reading a batch); "
                             "-1: the session's cores (defaultParallelism), 0: unset (one task "
                             "per Kafka partition, as Spark's own source)")
    add_spark_home_argument(parser)
    parser.add_argument("--variants", default=",".join(VARIANTS),
                        help=f"comma-separated, of {VARIANTS + EXTRA_VARIANTS}")
    add_conf_argument(parser)
    args = parser.parse_args()
    bootstrap = os.environ.get("BARRIER_KAFKA_BOOTSTRAP", "127.0.0.1:39092")
    variants = variant_names(parser, args.variants)

    use_spark_home(args.spark_home)
    event_dir = tempfile.mkdtemp(prefix="bench-events-")
    spark = spark_with_kafka_connector("bench-pipeline", shuffle_partitions=SHUFFLE_PARTITIONS,
                                       **event_log_conf(event_dir),
                                       **session_conf(parser, args.conf))
    settings = session_settings(spark)
    event_log = EventLogTail(event_dir)
    max_partitions = (spark.sparkContext.defaultParallelism if args.max_partitions < 0
                      else args.max_partitions)
    table, attribution = [], {}
    warmup = args.warmup  # rounds before the first configuration only
    for keys in [int(k) for k in args.keys.split(",")]:
        src = make_topic(bootstrap, 4)
        produce(bootstrap, src, args.records, keys)
        for batch in [int(b) for b in args.batches.split(",")]:
            times = {v: [] for v in variants}
            running = {v: [] for v in variants}  # seconds after the first trigger
            steady = {v: [] for v in variants}   # seconds of the batches after the first
            for round_no in range(warmup + args.rounds):
                for v in variants:
                    seconds, phases = one_run(spark, v, bootstrap, src, args.records, keys,
                                              batch, args.max_parallelism, max_partitions,
                                              args.parallelism or None, event_log)
                    if round_no < warmup:
                        print(f"keys {keys} batch {batch} {v}: {seconds:.1f}s (warm-up)",
                              flush=True)
                        continue
                    times[v].append(seconds)
                    running[v].append(seconds - phases["run"].get("start", float("nan")))
                    steady[v].append(phases["run"].get("rest", float("nan")))
                    attribution[(keys, batch, v)] = phases  # the last round's
                    print(f"keys {keys} batch {batch} {v}: {seconds:.1f}s", flush=True)
            warmup = 0
            for v in variants:
                best, med = min(times[v]), statistics.median(times[v])
                table.append((keys, batch, v, args.records / best, args.records / med,
                              median_ratio(times.get("native"), times[v]),
                              median_ratio(running.get("native"), running[v]),
                              median_ratio(steady.get("native"), steady[v])))
    print(f"\n{args.records} records, 4 input partitions, read_committed until every key's "
          f"final count is visible; {args.rounds} alternated rounds after "
          f"{args.warmup} warm-up round(s); "
          f"{args.max_parallelism} key groups ('ranges': in "
          f"{args.parallelism or SHUFFLE_PARTITIONS}); "
          "barrier-kafka maxPartitions "
          f"{max_partitions or 'unset'}; "
          f"{args.spark_home} Spark home; "
          f"{settings}; "
          + "".join(f"{pair}; " for pair in args.conf if not pair.startswith(UNIX_SOCKETS))
          + f"load average {os.getloadavg()[0]:.1f}")
    print("'vs native' compares whole runs (query start to the last count visible); "
          "'after start' the same runs from their first trigger on (see run_split), "
          "'steady' their batches after the first ('-': a run of one batch; see median_ratio)")
    print(f"{'keys':>7} {'batch':>7} {'pipeline':<26} {'best rec/s':>11} {'median rec/s':>13} "
          f"{'vs native':>10} {'after start':>12} {'steady':>8}")
    for keys, batch, v, best, med, ratio, running_ratio, steady_x in table:
        print(f"{keys:>7} {batch:>7} {v:<26} {best:>11,.0f} {med:>13,.0f} "
              f"{cell_ratio(ratio):>10} {cell_ratio(running_ratio):>12} "
              f"{cell_ratio(steady_x):>8}")
    print("\nwhere one batch's wall time goes, median ms over the last round's batches "
          "(see attribute(); '-' = not reported by that pipeline)")
    print(f"{'keys':>7} {'batch':>7} {'pipeline':<18} {'n':>4} "
          + " ".join(f"{k:>{max(8, len(k))}}" for k in ATTRIBUTION))
    for (keys, batch, v), phases in attribution.items():
        cells = " ".join(f"{cell(phases[k]):>{max(8, len(k))}}"
                         for k in ATTRIBUTION)
        print(f"{keys:>7} {batch:>7} {v:<18} {phases['batches']:>4} {cells}")
    print("\nwhere the last round's whole run goes, s (see run_split(): query start to the first "
          "trigger, the first batch, the other batches, their end to visible)")
    print(f"{'keys':>7} {'batch':>7} {'pipeline':<26} {'run':>6} {'start':>6} {'first':>6} "
          f"{'rest':>6} {'tail':>6}")
    for (keys, batch, v), phases in attribution.items():
        split = phases["run"]
        total = sum(split.values()) if split else float("nan")
        print(f"{keys:>7} {batch:>7} {v:<26} {total:>6.2f} "
              + " ".join(f"{split.get(k, float('nan')):>6.2f}"
                         for k in ("start", "first", "rest", "tail")))
    print("\nwhere the last round's CPU goes, s from query start to the last batch's end, by "
          "process (see benchmarks/process_cpu.py; 'cores' = all of them over the run's wall "
          "time, of the machine's " f"{os.cpu_count()}; 'of it jit': the Spark JVM's JIT "
          "compiler threads, part of 'spark jvm')")
    print(f"{'keys':>7} {'batch':>7} {'pipeline':<26} "
          + " ".join(f"{k:>13}" for k in process_cpu.KINDS[:1] + ("of it jit",)
                     + process_cpu.KINDS[1:]) + f" {'total':>6} {'cores':>6}")
    for (keys, batch, v), phases in attribution.items():
        cpu, split = phases["cpu"], phases["run"]
        total = sum(cpu[k] for k in process_cpu.KINDS)
        wall = sum(split[k] for k in ("start", "first", "rest")) if split else float("nan")
        figures = [cpu[k] for k in process_cpu.KINDS]
        figures.insert(1, cpu[process_cpu.JIT])
        print(f"{keys:>7} {batch:>7} {v:<26} "
              + " ".join(f"{x:>13.2f}" for x in figures)
              + f" {total:>6.2f} {total / wall:>6.2f}")
    print("\nwhere one batch's Spark job goes, median ms over the last round's batches, from "
          "Spark's event log (see benchmarks/stage_times.py; 'python': the slowest task's "
          f"'{PYTHON_TIME}', '-' where PySpark reports none)")
    print(f"{'keys':>7} {'batch':>7} {'pipeline':<26} {'n':>4} "
          + " ".join(f"{k:>13}" for k in STAGE_COLUMNS))
    for (keys, batch, v), phases in attribution.items():
        stages = phases.get("stages", {})
        cells = " ".join(f"{cell(stages.get(k, float('nan'))):>13}" for k in STAGE_COLUMNS)
        print(f"{keys:>7} {batch:>7} {v:<26} {stages.get('batches', 0):>4} {cells}")
    spark.stop()
    shutil.rmtree(event_dir, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
