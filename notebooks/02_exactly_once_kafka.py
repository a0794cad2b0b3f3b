# Databricks notebook source
# MAGIC %md
# MAGIC # Exactly-once from Kafka to Kafka
# MAGIC
# MAGIC A stateful aggregation with **aligned checkpoint barriers** written to Kafka with the
# MAGIC **two-phase-commit** sink, verified with a `read_committed` consumer.
# MAGIC
# MAGIC ```
# MAGIC input topic --> barrier-kafka source --> keyed running count (barrier_ops.keyed_process)
# MAGIC             --> barrier-kafka 2PC sink --> output topic (Kafka transactions)
# MAGIC ```
# MAGIC
# MAGIC For every input record with key `k` the job emits one output record `"k:<i>"`, where `i` is
# MAGIC `k`'s running count. With exactly-once the output topic holds `k:1 .. k:N_k` for every key,
# MAGIC each exactly once: a lost or duplicated record (input or output) shows at once.
# MAGIC
# MAGIC The notebook runs the job twice on the same checkpoints (produce, run, produce more, restart)
# MAGIC to show that a restarted query continues from its state without duplicating anything. It is
# MAGIC finite (`Trigger.AvailableNow`) and uses fresh topics on every run.

# COMMAND ----------

# MAGIC %pip install barrier-kafka

# COMMAND ----------

import os
import tempfile
import uuid

dbutils.widgets.text("bootstrap_servers",
                     os.environ.get("BARRIER_KAFKA_BOOTSTRAP", "localhost:9092"),
                     "Kafka bootstrap servers")
dbutils.widgets.text("work_dir",
                     os.environ.get("BARRIER_KAFKA_WORK_DIR",
                                    os.path.join(tempfile.gettempdir(), "barrier-kafka-notebooks")),
                     "Work folder (checkpoints, state)")
dbutils.widgets.text("topic_prefix", os.environ.get("BARRIER_KAFKA_TOPIC_PREFIX", "bk-eo-kafka"),
                     "Topic prefix")
dbutils.widgets.text("num_events", "600", "Events per produce round")

BOOTSTRAP = dbutils.widgets.get("bootstrap_servers").strip()
NUM_EVENTS = int(dbutils.widgets.get("num_events"))
RUN_ID = uuid.uuid4().hex[:8]
PREFIX = dbutils.widgets.get("topic_prefix")
INPUT_TOPIC = f"{PREFIX}-events-{RUN_ID}"
OUTPUT_TOPIC = f"{PREFIX}-counts-{RUN_ID}"
GROUP_ID = f"{PREFIX}-group-{RUN_ID}"
TXN_PREFIX = f"{PREFIX}-{RUN_ID}"          # every transactional.id of this job starts with it
WORK_DIR = os.path.join(dbutils.widgets.get("work_dir"), f"02_exactly_once_kafka-{RUN_ID}")
STORAGE = os.path.join(WORK_DIR, "storage")            # state backend: checkpoints + state
SPARK_CHECKPOINT = os.path.join(WORK_DIR, "spark-checkpoint")
os.makedirs(WORK_DIR, exist_ok=True)
print(f"input {INPUT_TOPIC} -> output {OUTPUT_TOPIC}\nstate backend {STORAGE}")

# COMMAND ----------

import barrier_kafka

barrier_kafka.register(spark)

# COMMAND ----------

# MAGIC %md
# MAGIC ## Topics and sample events
# MAGIC
# MAGIC Input: 3 partitions, events keyed `user-0` .. `user-24`. Output: 2 partitions.

# COMMAND ----------

from barrier_demo.sample_events import create_topics, produce_events

create_topics(BOOTSTRAP, {INPUT_TOPIC: 3, OUTPUT_TOPIC: 2})


def produce(first, count):
    """Send events ``first .. first+count-1`` (key ``user-<i % 25>``) to the input topic."""
    produce_events(BOOTSTRAP, INPUT_TOPIC, first, count, keys=25)


produce(0, NUM_EVENTS)
print(f"produced {NUM_EVENTS} events")

# COMMAND ----------

# MAGIC %md
# MAGIC ## The keyed function
# MAGIC
# MAGIC A `KeyedProcessFunction` (Flink's name) gets the records of one key of one checkpoint epoch,
# MAGIC in partition/offset order, and keyed state (`value_state`, `list_state`, `map_state`, timers).
# MAGIC The state is snapshotted per key group to the state backend when the barriers of a checkpoint
# MAGIC have arrived on every input partition (**alignment**).
# MAGIC
# MAGIC This notebook uses the running count shipped in `barrier_ops.examples.running_count`; your
# MAGIC own function looks the same:
# MAGIC
# MAGIC ```python
# MAGIC class RunningCount(KeyedProcessFunction):
# MAGIC     def process_records(self, key, records, state):
# MAGIC         count = state.value_state("count", 0)      # keyed state, snapshotted per key group
# MAGIC         start = count.value()
# MAGIC         count.update(start + len(records))
# MAGIC         k = key.decode()
# MAGIC         return [(k, f"{k}:{start + i}") for i in range(1, len(records) + 1)]
# MAGIC ```

# COMMAND ----------

from barrier_ops import keyed_process
from barrier_ops.examples.running_count import RunningCount

# COMMAND ----------

# MAGIC %md
# MAGIC ## The job
# MAGIC
# MAGIC - the source triggers a checkpoint every micro-batch (`execution.checkpointing.interval-batches`)
# MAGIC   and commits a completed checkpoint's offsets to the consumer group `GROUP_ID`;
# MAGIC - `keyed_process` aligns the barriers (exactly-once mode) and snapshots each key group;
# MAGIC - the `barrier-kafka` sink writes each epoch in a Kafka transaction, pre-commits it at the
# MAGIC   barrier and commits it when the checkpoint completes (`notifyCheckpointComplete`).
# MAGIC
# MAGIC - the source packs each fetch's records per key group of the operator
# MAGIC   (`packedKeyGroups`, equal to `keyed_process`'s `max_parallelism`): far fewer rows cross
# MAGIC   Spark's shuffle, and `keyed_process` hands the function the same records.
# MAGIC
# MAGIC The source, the operator and the sink share one state backend (`checkpoint.storage`).

# COMMAND ----------

KEY_GROUPS = 16   # the operator's max_parallelism: fixed for the life of its state


def run_job():
    """Start the job, process everything available now, stop (returns the progress list)."""
    source = (spark.readStream.format("barrier-kafka")
              .option("kafka.bootstrap.servers", BOOTSTRAP)
              .option("subscribe", INPUT_TOPIC)
              .option("startingOffsets", "earliest")
              .option("kafka.group.id", GROUP_ID)
              .option("maxOffsetsPerTrigger", "250")
              .option("execution.checkpointing.interval-batches", "1")
              .option("checkpoint.storage", STORAGE)
              .option("packedKeyGroups", str(KEY_GROUPS))
              .load())
    counted = keyed_process(source, "key", RunningCount(), "key string, value string",
                            operator_id="running-count", state_backend=STORAGE,
                            max_parallelism=KEY_GROUPS)
    writer = (counted.writeStream.format("barrier-kafka")
              .option("kafka.bootstrap.servers", BOOTSTRAP)
              .option("topic", OUTPUT_TOPIC)
              .option("transactionalIdPrefix", TXN_PREFIX)
              .option("checkpoint.storage", STORAGE)
              .option("checkpointLocation", SPARK_CHECKPOINT)
              .queryName(f"eo_kafka_{RUN_ID}"))
    # Trigger.AvailableNow; on PySpark 4.0/4.1, where Spark runs it as one micro-batch for
    # Python sources, run_available_now repeats it until everything available is read.
    return barrier_kafka.run_available_now(writer)


progress = run_job()
print(f"first run: {len(progress)} micro-batches, "
      f"{sum(p['numInputRows'] for p in progress)} input rows (records + barriers)")

# COMMAND ----------

# MAGIC %md
# MAGIC ## Produce more and restart
# MAGIC
# MAGIC The restarted query resumes from Spark's checkpoint and the operator state: the running counts
# MAGIC continue where they stopped.

# COMMAND ----------

produce(NUM_EVENTS, NUM_EVENTS)
progress = run_job()
print(f"second run: {len(progress)} micro-batches")

# COMMAND ----------

# MAGIC %md
# MAGIC ## Verify with a `read_committed` consumer
# MAGIC
# MAGIC A `read_committed` consumer sees only records of committed transactions: what a downstream
# MAGIC consumer of the output topic sees. Expected: `k:1 .. k:N_k` for every key, each once.

# COMMAND ----------

from collections import Counter

from barrier_demo.verify import compare, expected_output, read_topic, summarize

# read_committed, to each partition's last stable offset (an open transaction would hold it back)
got = Counter(read_topic(BOOTSTRAP, OUTPUT_TOPIC))
# k:1 .. k:N_k for every input key k, against what was committed
verification = summarize(compare(expected_output(BOOTSTRAP, INPUT_TOPIC), got))
display(spark.createDataFrame([verification]))

# COMMAND ----------

# The final count per key, from the committed output.
final_counts = spark.createDataFrame(
    [(v.decode().rsplit(":", 1)[0], int(v.decode().rsplit(":", 1)[1])) for v in got],
    "key string, count int").groupBy("key").max("count").withColumnRenamed("max(count)", "count")
display(final_counts.orderBy("key"))

# COMMAND ----------

# MAGIC %md
# MAGIC ## Checkpoints and consumer-group offsets
# MAGIC
# MAGIC Completed checkpoints are folders `chk-<n>` with a `_metadata` file in the state backend; the
# MAGIC source committed the newest completed checkpoint's offsets to the consumer group.

# COMMAND ----------

from state_backends import CompletedCheckpointStore, backend_from_uri
from state_backends.stats import format_stats_table

backend = backend_from_uri(STORAGE)
store = CompletedCheckpointStore(backend)
latest = store.latest()
print(f"completed checkpoints retained: {store.completed_ids()}")
print(f"latest: {latest.checkpoint_id}, source offsets {latest.source_offsets}")
print(format_stats_table(backend))

# COMMAND ----------

from barrier_demo.verify import committed_group_offsets

# What the consumer group shows (lag dashboards read it): the latest checkpoint's offsets.
checkpointed = {str(p): o for p, o in latest.source_offsets[INPUT_TOPIC].items()}
group_offsets = committed_group_offsets(BOOTSTRAP, GROUP_ID, INPUT_TOPIC, checkpointed)
print(f"consumer group {GROUP_ID}: {group_offsets}")

# COMMAND ----------

from barrier_sink import list_lingering

lingering = list_lingering({"bootstrap_servers": BOOTSTRAP}, TXN_PREFIX)
assert verification["input_records"] == 2 * NUM_EVENTS, verification
assert verification["duplicates"] == verification["lost"] == verification["unexpected"] == 0, \
    verification
assert verification["output_records"] == 2 * NUM_EVENTS, verification
assert not lingering, lingering
assert group_offsets == checkpointed, (group_offsets, checkpointed)
result = dict(verification, latest_checkpoint=latest.checkpoint_id,
              open_transactions=len(lingering), group_offsets=group_offsets,
              checkpointed_offsets=checkpointed)
print(result)
