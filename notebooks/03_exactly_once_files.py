# Databricks notebook source
# MAGIC %md
# MAGIC # Exactly-once from Kafka to Parquet files
# MAGIC
# MAGIC The same keyed running count as `02_exactly_once_kafka`, written with the two-phase-commit
# MAGIC **file sink** `barrier-files`:
# MAGIC
# MAGIC - each task writes its rows of one checkpoint epoch to a *staged* Parquet file under
# MAGIC   `<path>/_staging/` (invisible to readers: `_`-prefixed folders are skipped),
# MAGIC - when the checkpoint completes the driver publishes the staged files under their final names
# MAGIC   and writes the manifest `<path>/_manifests/chk-<n>.json` listing them.
# MAGIC
# MAGIC A reader never sees a partial or duplicated file. Works on a local/mounted path, `file://`, a
# MAGIC Unity Catalog volume or `s3://bucket/prefix` (with the `s3.*` options).
# MAGIC
# MAGIC Finite (`Trigger.AvailableNow`), fresh topic and output folder on every run.

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
                     "Work folder (checkpoints, state, output files)")
dbutils.widgets.text("topic_prefix", os.environ.get("BARRIER_KAFKA_TOPIC_PREFIX", "bk-eo-files"),
                     "Topic prefix")
dbutils.widgets.text("num_events", "600", "Events per produce round")

BOOTSTRAP = dbutils.widgets.get("bootstrap_servers").strip()
NUM_EVENTS = int(dbutils.widgets.get("num_events"))
RUN_ID = uuid.uuid4().hex[:8]
PREFIX = dbutils.widgets.get("topic_prefix")
INPUT_TOPIC = f"{PREFIX}-events-{RUN_ID}"
GROUP_ID = f"{PREFIX}-group-{RUN_ID}"
WORK_DIR = os.path.join(dbutils.widgets.get("work_dir"), f"03_exactly_once_files-{RUN_ID}")
STORAGE = os.path.join(WORK_DIR, "storage")
SPARK_CHECKPOINT = os.path.join(WORK_DIR, "spark-checkpoint")
OUTPUT_PATH = os.path.join(WORK_DIR, "output")
os.makedirs(WORK_DIR, exist_ok=True)
print(f"input {INPUT_TOPIC} -> files in {OUTPUT_PATH}\nstate backend {STORAGE}")

# COMMAND ----------

import barrier_kafka

barrier_kafka.register(spark)

# COMMAND ----------

from barrier_demo.sample_events import create_topics, produce_events

create_topics(BOOTSTRAP, {INPUT_TOPIC: 3})


def produce(first, count):
    """Send events ``first .. first+count-1`` (key ``user-<i % 25>``) to the input topic."""
    produce_events(BOOTSTRAP, INPUT_TOPIC, first, count, keys=25)


produce(0, NUM_EVENTS)
print(f"produced {NUM_EVENTS} events")

# COMMAND ----------

from barrier_ops import keyed_process
from barrier_ops.examples.running_count import RunningCount  # the function of notebook 02

# COMMAND ----------

# MAGIC %md
# MAGIC ## The job
# MAGIC
# MAGIC Same source and operator as the Kafka notebook; the sink is `barrier-files` with a `path`.

# COMMAND ----------

def run_job():
    source = (spark.readStream.format("barrier-kafka")
              .option("kafka.bootstrap.servers", BOOTSTRAP)
              .option("subscribe", INPUT_TOPIC)
              .option("startingOffsets", "earliest")
              .option("kafka.group.id", GROUP_ID)
              .option("maxOffsetsPerTrigger", "250")
              .option("execution.checkpointing.interval-batches", "1")
              .option("checkpoint.storage", STORAGE)
              .load())
    counted = keyed_process(source, "key", RunningCount(with_count=True),
                            "key string, value string, count long",
                            operator_id="running-count", state_backend=STORAGE,
                            max_parallelism=16)
    writer = (counted.writeStream.format("barrier-files")
              .option("path", OUTPUT_PATH)
              .option("checkpoint.storage", STORAGE)
              .option("checkpointLocation", SPARK_CHECKPOINT)
              .queryName(f"eo_files_{RUN_ID}"))
    return barrier_kafka.run_available_now(writer)  # Trigger.AvailableNow on every PySpark


progress = run_job()
print(f"first run: {len(progress)} micro-batches")
produce(NUM_EVENTS, NUM_EVENTS)
progress = run_job()
print(f"second run (restarted on the same checkpoints): {len(progress)} micro-batches")

# COMMAND ----------

# MAGIC %md
# MAGIC ## What was published
# MAGIC
# MAGIC `barrier_sink.file_sink.published_files(path)` lists the files of every completed checkpoint
# MAGIC from the manifests. Reading exactly those files is what a downstream job should do (on a
# MAGIC local path `spark.read.parquet(path)` gives the same rows: staged files are under `_staging`).

# COMMAND ----------

from barrier_sink.file_sink import published_files

files = published_files(OUTPUT_PATH)
manifests = sorted(f for f in os.listdir(os.path.join(OUTPUT_PATH, "_manifests")))
print(f"{len(files)} published files, manifests: {manifests}")
output = spark.read.parquet(*files)
output.printSchema()
display(output.groupBy("key").max("count").orderBy("key"))

# COMMAND ----------

# MAGIC %md
# MAGIC ## Verify
# MAGIC
# MAGIC Every key `k` with `N_k` input records must have the values `k:1 .. k:N_k`, each once.

# COMMAND ----------

from collections import Counter

from barrier_demo.verify import compare, expected_output, summarize

# what Spark read from the published files, against k:1 .. k:N_k for every input key k
got = Counter(r["value"].encode() for r in output.select("value").collect())
verification = dict(summarize(compare(expected_output(BOOTSTRAP, INPUT_TOPIC), got)),
                    published_files=len(files))
display(spark.createDataFrame([verification]))

# COMMAND ----------

staged_left = [f for _, _, names in os.walk(os.path.join(OUTPUT_PATH, "_staging")) for f in names]
assert verification["input_records"] == 2 * NUM_EVENTS, verification
assert verification["duplicates"] == verification["lost"] == verification["unexpected"] == 0, \
    verification
assert verification["output_records"] == 2 * NUM_EVENTS, verification
result = dict(verification, staged_files_left=len(staged_left),
              plain_parquet_rows=spark.read.parquet(OUTPUT_PATH).count())
print(result)
