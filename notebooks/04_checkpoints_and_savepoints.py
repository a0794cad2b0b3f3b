# Databricks notebook source
# MAGIC %md
# MAGIC # Checkpoints, statistics and savepoints
# MAGIC
# MAGIC The checkpoint coordinator writes every completed checkpoint to the state backend
# MAGIC (`chk-<n>/_metadata`, written last) with its statistics (`chk-<n>/_stats.json`). This
# MAGIC notebook:
# MAGIC
# MAGIC 1. runs a small exactly-once job (Kafka -> keyed running count -> Kafka) to create checkpoints,
# MAGIC 2. lists the completed checkpoints and reads the latest one's metadata,
# MAGIC 3. shows the checkpoint statistics as a DataFrame, as a table and as a plot (PNG),
# MAGIC 4. takes a **savepoint** (a copy of a completed checkpoint that retention never discards),
# MAGIC 5. starts a *new* query from the savepoint (its Kafka offsets and operator state) and checks
# MAGIC    that the running counts continue exactly where the savepoint left them.
# MAGIC
# MAGIC Finite (`Trigger.AvailableNow`), fresh topics and folders on every run.

# COMMAND ----------

# MAGIC %pip install barrier-kafka[plot]

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
                     "Work folder (checkpoints, state, plot)")
dbutils.widgets.text("topic_prefix", os.environ.get("BARRIER_KAFKA_TOPIC_PREFIX", "bk-savepoints"),
                     "Topic prefix")

BOOTSTRAP = dbutils.widgets.get("bootstrap_servers").strip()
RUN_ID = uuid.uuid4().hex[:8]
PREFIX = dbutils.widgets.get("topic_prefix")
INPUT_TOPIC = f"{PREFIX}-events-{RUN_ID}"
WORK_DIR = os.path.join(dbutils.widgets.get("work_dir"), f"04_checkpoints_and_savepoints-{RUN_ID}")
os.makedirs(WORK_DIR, exist_ok=True)
print(f"input {INPUT_TOPIC}\nwork folder {WORK_DIR}")

# COMMAND ----------

import barrier_kafka

barrier_kafka.register(spark)

# COMMAND ----------

from barrier_demo.sample_events import create_topics, produce_events

create_topics(BOOTSTRAP, {INPUT_TOPIC: 2, f"{INPUT_TOPIC}-out-a": 1, f"{INPUT_TOPIC}-out-b": 1})
produce_events(BOOTSTRAP, INPUT_TOPIC, 0, 800, keys=20)

# COMMAND ----------

# MAGIC %md
# MAGIC ## A job that takes checkpoints
# MAGIC
# MAGIC `job(...)` builds the pipeline. Its keyword arguments are what a restore changes:
# MAGIC `starting_offsets` (the savepoint's Kafka offsets) and `restore_from` (the savepoint folder
# MAGIC in the state backend). `state.checkpoints.num-retained` keeps the newest 3 completed
# MAGIC checkpoints; older ones are discarded (their statistics stay).

# COMMAND ----------

from barrier_ops import keyed_process, records_only
from barrier_ops.examples.running_count import RunningCount  # the function of notebook 02


def job(name, storage, output_topic=None, starting_offsets="earliest", restore_from=None):
    """Run Kafka -> running count -> sink until everything available now is processed.

    With ``output_topic``: the exactly-once Kafka sink (2PC, coordinator in ``storage``).
    Without: the in-memory table ``<name>_<RUN_ID>`` (source-only checkpoints, no coordinator).
    """
    reader = (spark.readStream.format("barrier-kafka")
              .option("kafka.bootstrap.servers", BOOTSTRAP)
              .option("subscribe", INPUT_TOPIC)
              .option("startingOffsets", starting_offsets)
              .option("kafka.group.id", f"{PREFIX}-{name}-{RUN_ID}")
              .option("maxOffsetsPerTrigger", "100")
              .option("execution.checkpointing.interval-batches", "1"))
    if output_topic:
        reader = reader.option("checkpoint.storage", storage)
        if restore_from:  # start from the savepoint: its offsets, checkpoint ids after it
            reader = reader.option("execution.savepoint.path", restore_from)
    counted = keyed_process(reader.load(), "key", RunningCount(), "key string, value string",
                            operator_id="running-count", state_backend=storage,
                            max_parallelism=8, restore_from=restore_from)
    if output_topic:
        writer = (counted.writeStream.format("barrier-kafka")
                  .option("kafka.bootstrap.servers", BOOTSTRAP)
                  .option("topic", output_topic)
                  .option("transactionalIdPrefix", f"{PREFIX}-{name}-{RUN_ID}")
                  .option("checkpoint.storage", storage)
                  .option("state.checkpoints.num-retained", "3"))
    else:
        writer = records_only(counted).select("key", "value").writeStream.format("memory")
    barrier_kafka.run_available_now(  # Trigger.AvailableNow on every PySpark
        writer.option("checkpointLocation", os.path.join(WORK_DIR, f"spark-checkpoint-{name}"))
        .queryName(f"{name}_{RUN_ID}"))


STORAGE_A = os.path.join(WORK_DIR, "storage-a")
job("a", STORAGE_A, output_topic=f"{INPUT_TOPIC}-out-a")

# COMMAND ----------

# MAGIC %md
# MAGIC ## Completed checkpoints
# MAGIC
# MAGIC `CompletedCheckpointStore` lists, loads, retains and discards checkpoints of a backend.
# MAGIC The same from a shell: `python -m state_backends list <uri>`.

# COMMAND ----------

from state_backends import CompletedCheckpointStore, backend_from_uri

backend_a = backend_from_uri(STORAGE_A)        # a path, file://, s3://bucket/prefix or memory://
store_a = CompletedCheckpointStore(backend_a)
completed = store_a.completed_ids()
latest = store_a.restore()                     # RestorePoint of the latest completed checkpoint
print(f"completed checkpoints (retained): {completed}")
print(f"latest: chk-{latest.checkpoint_id} at {latest.location}")
print(f"  Kafka offsets: {latest.source_offsets}")
print(f"  operator snapshots: {len(latest.metadata.operators)} key groups")
print(f"  sink transactions committed by it: {len(latest.metadata.sink_transactions)}")

# COMMAND ----------

# MAGIC %md
# MAGIC ## Statistics: DataFrame, table and plot
# MAGIC
# MAGIC One row per checkpoint (completed and failed, also those retention discarded): trigger time,
# MAGIC end-to-end duration, alignment, sync/async snapshot time, state size, committed offsets.

# COMMAND ----------

from state_backends.stats import format_stats_table, plot_stats, stats_dataframe

stats = stats_dataframe(spark, backend_a)
stats.createOrReplaceTempView("checkpoint_stats")
display(stats.select("checkpoint_id", "status", "end_to_end_duration_ms", "alignment_duration_ms",
                     "sync_duration_ms", "async_duration_ms", "state_size_bytes",
                     "num_acknowledged", "num_expected"))

# COMMAND ----------

display(spark.sql("""
    SELECT count(*) AS checkpoints,
           sum(CASE WHEN status = 'COMPLETED' THEN 1 ELSE 0 END) AS completed,
           percentile_approx(end_to_end_duration_ms, 0.5) AS median_e2e_ms,
           max(end_to_end_duration_ms) AS max_e2e_ms,
           max(state_size_bytes) AS max_state_bytes
    FROM checkpoint_stats"""))

# COMMAND ----------

print(format_stats_table(backend_a))

# COMMAND ----------

import base64

PLOT = plot_stats(backend_a, os.path.join(WORK_DIR, "checkpoints.png"))
with open(PLOT, "rb") as f:
    png = f.read()
assert png.startswith(b"\x89PNG"), "not a PNG"
# On Databricks displayHTML renders the image inline; elsewhere print where it is.
show_html = globals().get("displayHTML")
if show_html is not None:
    show_html(f'<img src="data:image/png;base64,{base64.b64encode(png).decode()}"/>')
else:
    print(f"checkpoint plot written to {PLOT} ({len(png)} bytes)")

# COMMAND ----------

# MAGIC %md
# MAGIC ## Take a savepoint
# MAGIC
# MAGIC `create_savepoint(name, checkpoint_id=None)` copies a completed checkpoint (default: the
# MAGIC latest) to `savepoints/<name>/` in the same backend. Savepoints are never discarded by
# MAGIC retention; they are what you keep before an upgrade or a change of parallelism.
# MAGIC
# MAGIC We take it of the *oldest retained* checkpoint so that the restored query has input left
# MAGIC to re-process.

# COMMAND ----------

SAVEPOINT = "before-upgrade"
savepoint = store_a.create_savepoint(SAVEPOINT, checkpoint_id=completed[0])
print(f"savepoint {SAVEPOINT!r} of chk-{savepoint.checkpoint_id}; savepoints now: "
      f"{store_a.savepoints()}")
print(f"offsets: {savepoint.source_offsets}")

# COMMAND ----------

# MAGIC %md
# MAGIC ## Restore a new query from the savepoint
# MAGIC
# MAGIC A restore is a **new** query (new Spark checkpoint location, own `checkpoint.storage`), as
# MAGIC Flink's `-s <savepoint>`:
# MAGIC - the savepoint is copied into the new storage (`copy_savepoint`; any backend: a path, S3),
# MAGIC - the source starts from it (`execution.savepoint.path`): the savepoint's offsets, and
# MAGIC   checkpoint ids continuing after the savepoint's,
# MAGIC - each key group's state is loaded from it (`keyed_process(restore_from=...)`); the query may
# MAGIC   use a different number of shuffle partitions, but `operator_id` and `max_parallelism` must
# MAGIC   stay the same,
# MAGIC - output goes through the exactly-once Kafka sink again. A query pointed at the old query's
# MAGIC   storage would be refused: one storage belongs to one query.

# COMMAND ----------

STORAGE_B = os.path.join(WORK_DIR, "storage-b")
backend_b = backend_from_uri(STORAGE_B)
store_a.copy_savepoint(SAVEPOINT, backend_b)
restored = CompletedCheckpointStore(backend_b).restore(savepoint=SAVEPOINT)
print(f"restoring from {restored.location} (checkpoint {restored.checkpoint_id})")

job("restored", STORAGE_B, output_topic=f"{INPUT_TOPIC}-out-b",
    restore_from=f"savepoints/{SAVEPOINT}")
print("restored checkpoints completed:", CompletedCheckpointStore(backend_b).completed_ids())

# COMMAND ----------

# MAGIC %md
# MAGIC ## Check the restored query
# MAGIC
# MAGIC Records after the savepoint's offsets are counted on top of the savepoint's state: for key `k`
# MAGIC the restored job emits `k:c+1 .. k:N_k`, where `c` is `k`'s count at the savepoint.

# COMMAND ----------

from collections import Counter

from kafka import KafkaConsumer, TopicPartition

from barrier_demo.verify import read_topic

from barrier_sink.lingering import list_lingering


def read_all(topic, isolation="read_committed", keys=False, timeout_s=60):
    """Every value (or key) of ``topic``, read to each partition's end (for read_committed: the
    last stable offset, which an open transaction would hold back)."""
    return read_topic(BOOTSTRAP, topic, isolation, timeout_s, values=not keys)


def max_count(values):
    out = {}
    for v in values:
        k, n = v.decode().rsplit(":", 1)
        out[k] = max(out.get(k, 0), int(n))
    return out


input_counts = Counter(k.decode() for k in read_all(INPUT_TOPIC, "read_uncommitted", keys=True))
out_a = read_all(f"{INPUT_TOPIC}-out-a")
out_b = read_all(f"{INPUT_TOPIC}-out-b")  # read_committed: the restored query's committed output
restored_from = sum(sum(p.values()) for p in restored.source_offsets.values())

# c per key = the key's records before the savepoint's offsets
consumer = KafkaConsumer(bootstrap_servers=BOOTSTRAP, enable_auto_commit=False)
parts = [TopicPartition(INPUT_TOPIC, p) for p in sorted(consumer.partitions_for_topic(INPUT_TOPIC))]
consumer.assign(parts)
consumer.seek_to_beginning(*parts)
cut = {int(p): o for p, o in restored.source_offsets[INPUT_TOPIC].items()}
at_savepoint = Counter()
while any(consumer.position(tp) < cut.get(tp.partition, 0) for tp in parts):
    for tp, msgs in consumer.poll(timeout_ms=500).items():
        at_savepoint.update(m.key.decode() for m in msgs if m.offset < cut.get(tp.partition, 0))
consumer.close()
expected_b = {f"{k}:{i}".encode() for k, n in input_counts.items()
              for i in range(at_savepoint[k] + 1, n + 1)}
check = {
    "input_records": sum(input_counts.values()),
    "output_a": len(out_a),
    "output_restored": len(out_b),
    "savepoint_checkpoint": restored.checkpoint_id,
    "records_before_savepoint": restored_from,
    "duplicates_restored": sum(n - 1 for n in Counter(out_b).values() if n > 1),
    "final_counts_match": max_count(out_b) == dict(input_counts) == max_count(out_a),
    "open_transactions_restored": len(list_lingering({"bootstrap_servers": BOOTSTRAP},
                                                     f"{PREFIX}-restored-{RUN_ID}")),
}
display(spark.createDataFrame([check]))

# COMMAND ----------

assert check["output_a"] == check["input_records"] == 800, check
assert check["output_restored"] == check["input_records"] - restored_from, check
assert check["duplicates_restored"] == 0 and check["final_counts_match"], check
assert check["open_transactions_restored"] == 0, check
assert set(out_b) == expected_b, "restored output is not k:c+1 .. k:N_k"
result = dict(check, checkpoints_a=completed,
              savepoints=store_a.savepoints(), plot_bytes=len(png),
              stats_rows=stats.count())
print(result)
