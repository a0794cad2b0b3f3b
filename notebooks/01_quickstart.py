# Databricks notebook source
# MAGIC %md
# MAGIC # barrier-kafka quickstart
# MAGIC
# MAGIC Read a Kafka topic with the `barrier-kafka` source and look at the **checkpoint barriers**
# MAGIC it injects into the stream.
# MAGIC
# MAGIC This notebook:
# MAGIC 1. installs and registers the plugin,
# MAGIC 2. creates a fresh topic (random suffix) and produces 200 sample events into it,
# MAGIC 3. reads the topic with `spark.readStream.format("barrier-kafka")` until everything that is
# MAGIC    available now has been read (`Trigger.AvailableNow`), into Parquet files,
# MAGIC 4. shows the record rows and the barrier rows side by side.
# MAGIC
# MAGIC It is finite and can be run again and again: every run uses new topics and a new work folder.
# MAGIC Configuration comes from the widgets above (or environment variables, see the next cell);
# MAGIC nothing secret is written in a cell.

# COMMAND ----------

# MAGIC %pip install barrier-kafka

# COMMAND ----------

# MAGIC %md
# MAGIC ## Configuration
# MAGIC
# MAGIC | widget | environment fallback | meaning |
# MAGIC |---|---|---|
# MAGIC | `bootstrap_servers` | `BARRIER_KAFKA_BOOTSTRAP` | Kafka brokers, `host:port[,host:port]` |
# MAGIC | `work_dir` | `BARRIER_KAFKA_WORK_DIR` | folder for Spark checkpoints and state (on Databricks: a Unity Catalog volume such as `/Volumes/main/default/barrier_kafka`) |
# MAGIC | `topic_prefix` | `BARRIER_KAFKA_TOPIC_PREFIX` | prefix of the topics this notebook creates |
# MAGIC
# MAGIC A broker that needs credentials takes them through `kafka.*` options read from a secret scope
# MAGIC (`dbutils.secrets.get(...)`), never typed into a cell; see `docs/databricks.md`.

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
dbutils.widgets.text("topic_prefix", os.environ.get("BARRIER_KAFKA_TOPIC_PREFIX", "bk-quickstart"),
                     "Topic prefix")

BOOTSTRAP = dbutils.widgets.get("bootstrap_servers").strip()
RUN_ID = uuid.uuid4().hex[:8]
TOPIC = f"{dbutils.widgets.get('topic_prefix')}-events-{RUN_ID}"
WORK_DIR = os.path.join(dbutils.widgets.get("work_dir"), f"01_quickstart-{RUN_ID}")
os.makedirs(WORK_DIR, exist_ok=True)
print(f"bootstrap servers: {BOOTSTRAP}\ninput topic:       {TOPIC}\nwork folder:       {WORK_DIR}")

# COMMAND ----------

# MAGIC %md
# MAGIC ## Register the plugin
# MAGIC
# MAGIC `barrier_kafka.register(spark)` registers the `barrier-kafka` source and the two-phase-commit
# MAGIC sinks (`barrier-kafka`, `barrier-files`) with this SparkSession. It is idempotent.

# COMMAND ----------

import barrier_kafka

barrier_kafka.register(spark)

# COMMAND ----------

# MAGIC %md
# MAGIC ## Produce sample events
# MAGIC
# MAGIC A topic with 2 partitions and 200 events keyed `user-0` .. `user-9`.

# COMMAND ----------

from barrier_demo.sample_events import create_topics, produce_events

NUM_EVENTS = 200
create_topics(BOOTSTRAP, {TOPIC: 2})
produce_events(BOOTSTRAP, TOPIC, 0, NUM_EVENTS, keys=10)  # key user-<i % 10>, {"event": i}
print(f"produced {NUM_EVENTS} events to {TOPIC}")

# COMMAND ----------

# MAGIC %md
# MAGIC ## Read with `barrier-kafka`
# MAGIC
# MAGIC The option names are Spark's Kafka source names (`kafka.bootstrap.servers`, `subscribe`,
# MAGIC `startingOffsets`, `maxOffsetsPerTrigger`, ...) plus Flink's checkpoint settings
# MAGIC (`execution.checkpointing.*`). Here a checkpoint is triggered every micro-batch and each
# MAGIC micro-batch reads at most 60 records, so the 200 events are cut into several checkpoints.
# MAGIC
# MAGIC `Trigger.AvailableNow` reads what is in the topic now and stops: the notebook stays finite.

# COMMAND ----------

events = (spark.readStream.format("barrier-kafka")
          .option("kafka.bootstrap.servers", BOOTSTRAP)
          .option("subscribe", TOPIC)
          .option("startingOffsets", "earliest")
          .option("maxOffsetsPerTrigger", "60")
          .option("execution.checkpointing.interval-batches", "1")
          .load())
events.printSchema()

# COMMAND ----------

ROWS_PATH = os.path.join(WORK_DIR, "rows")
progress = barrier_kafka.run_available_now(
    events.writeStream.format("parquet").option("path", ROWS_PATH)
    .option("checkpointLocation", os.path.join(WORK_DIR, "spark-checkpoint")))
print(f"{len(progress)} micro-batches")

# COMMAND ----------

# MAGIC %md
# MAGIC ## Records and barriers
# MAGIC
# MAGIC Every row has a `kind`:
# MAGIC - `record`: a Kafka record; its `checkpoint_id` is its **epoch**, the first checkpoint whose
# MAGIC   barrier follows it on its partition;
# MAGIC - `barrier`: checkpoint barrier `checkpoint_id` on partition `topic:partition` at `offset`
# MAGIC   (records with a smaller offset belong to that checkpoint). `barrier_channels` lists every
# MAGIC   partition that delivers the same barrier: an operator downstream *aligns* on them.

# COMMAND ----------

rows = spark.read.parquet(ROWS_PATH)
display(rows.groupBy("kind").count().orderBy("kind"))

# COMMAND ----------

barriers = (rows.where("kind = 'barrier'")
            .select("checkpoint_id", "topic", "partition", "offset", "checkpoint_timestamp",
                    "barrier_channels")
            .orderBy("checkpoint_id", "partition"))
display(barriers)

# COMMAND ----------

# Records per epoch: records with checkpoint_id n lie before barrier n on their partition.
display(rows.where("kind = 'record'").groupBy("checkpoint_id", "partition").count()
        .orderBy("checkpoint_id", "partition"))

# COMMAND ----------

# MAGIC %md
# MAGIC ## Check

# COMMAND ----------

counts = {r["kind"]: r["count"] for r in rows.groupBy("kind").count().collect()}
checkpoint_ids = sorted(r["checkpoint_id"] for r in barriers.select("checkpoint_id").distinct()
                        .collect())
assert counts.get("record") == NUM_EVENTS, counts
assert checkpoint_ids == list(range(1, len(checkpoint_ids) + 1)) and len(checkpoint_ids) >= 2, \
    checkpoint_ids
result = {"records": counts.get("record", 0), "barrier_rows": counts.get("barrier", 0),
          "checkpoints": checkpoint_ids, "topic": TOPIC}
print(result)

# COMMAND ----------

# Clean up: the topic (the rows and checkpoints are in the temporary work folder).
from kafka.admin import KafkaAdminClient

admin = KafkaAdminClient(bootstrap_servers=BOOTSTRAP)
try:
    admin.delete_topics([TOPIC], timeout_ms=30000)
finally:
    admin.close()
