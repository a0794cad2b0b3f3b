# Databricks notebook source
# MAGIC %md
# MAGIC # Lingering transactions: find and abort them
# MAGIC
# MAGIC The two-phase-commit Kafka sink keeps each epoch's records in an open Kafka transaction
# MAGIC until its checkpoint completes. If a job dies for good (cancelled, its checkpoints deleted,
# MAGIC never restarted), those transactions stay open until the broker aborts them after
# MAGIC `transaction.timeout.ms` (15 minutes by default for this sink). Meanwhile they **pin the last
# MAGIC stable offset**: `read_committed` consumers of the affected partitions stop advancing, even for
# MAGIC records other producers committed later.
# MAGIC
# MAGIC Every transactional.id of a sink starts with its `transactionalIdPrefix`, so they can be
# MAGIC listed and aborted by prefix, without touching other jobs. This notebook:
# MAGIC
# MAGIC 1. simulates a crashed job that left pre-committed transactions behind (and a second,
# MAGIC    healthy job with an open transaction of its own),
# MAGIC 2. shows a `read_committed` consumer stuck behind them,
# MAGIC 3. lists the lingering transactions of the crashed job's prefix and aborts them,
# MAGIC 4. checks the consumer advances and the other job's transaction is untouched.
# MAGIC
# MAGIC Only abort transactions of a job that will **not** be restarted from its checkpoints: a
# MAGIC restarted job commits its completed checkpoints' transactions again on recovery, and a
# MAGIC transaction you abort is gone (see `docs/operations.md`).
# MAGIC
# MAGIC From a shell: `python -m barrier_sink lingering --bootstrap HOST:PORT --prefix P [--abort]`.

# COMMAND ----------

# MAGIC %pip install barrier-kafka

# COMMAND ----------

import os
import uuid

dbutils.widgets.text("bootstrap_servers",
                     os.environ.get("BARRIER_KAFKA_BOOTSTRAP", "localhost:9092"),
                     "Kafka bootstrap servers")
dbutils.widgets.text("topic_prefix", os.environ.get("BARRIER_KAFKA_TOPIC_PREFIX", "bk-lingering"),
                     "Topic / transactional.id prefix")

BOOTSTRAP = dbutils.widgets.get("bootstrap_servers").strip()
RUN_ID = uuid.uuid4().hex[:8]
PREFIX = dbutils.widgets.get("topic_prefix")
TOPIC = f"{PREFIX}-out-{RUN_ID}"
CRASHED_PREFIX = f"{PREFIX}-crashed-{RUN_ID}"   # the transactionalIdPrefix of the dead job
HEALTHY_PREFIX = f"{PREFIX}-healthy-{RUN_ID}"   # another job writing to the same topic
KAFKA = {"bootstrap_servers": BOOTSTRAP}        # kafka-python settings (add security here)
print(f"topic {TOPIC}\ncrashed job prefix {CRASHED_PREFIX}\nhealthy job prefix {HEALTHY_PREFIX}")

# COMMAND ----------

from kafka.admin import KafkaAdminClient, NewTopic

admin = KafkaAdminClient(bootstrap_servers=BOOTSTRAP)
try:
    admin.create_topics([NewTopic(TOPIC, 2, 1)], timeout_ms=30000)
finally:
    admin.close()

# COMMAND ----------

# MAGIC %md
# MAGIC ## Simulate a crashed job
# MAGIC
# MAGIC The sink's own `TransactionalWriter` opens a transaction per task and epoch
# MAGIC (`<prefix>-b<batch>-p<task>-e<epoch>`), writes and flushes (pre-commit), and here the "job"
# MAGIC dies before the checkpoint commits them. Afterwards a plain producer commits 10 more records
# MAGIC to the same partitions.

# COMMAND ----------

from kafka import KafkaProducer

from barrier_sink.transaction import TransactionalWriter


def pre_commit(transactional_id, partition, n):
    """Open a transaction, write ``n`` records to ``partition``, flush, and walk away."""
    writer = TransactionalWriter(KAFKA, transactional_id, 900_000, batch_id=0,
                                 partition_id=partition, checkpoint_id=1).open()
    for i in range(n):
        writer.send(TOPIC, value=f"{transactional_id}:{i}".encode(), partition=partition)
    handle = writer.pre_commit()
    writer.close_without_finishing()
    return handle


crashed = [pre_commit(f"{CRASHED_PREFIX}-b7-p{p}-e4", p, 5) for p in (0, 1)]
healthy = pre_commit(f"{HEALTHY_PREFIX}-b2-p0-e2", 1, 3)

producer = KafkaProducer(bootstrap_servers=BOOTSTRAP, acks="all")
for i in range(10):
    producer.send(TOPIC, value=f"committed:{i}".encode(), partition=i % 2)
producer.flush()
producer.close()
print(f"left open: {[h.transactional_id for h in crashed + [healthy]]}")

# COMMAND ----------

# MAGIC %md
# MAGIC ## A `read_committed` consumer is stuck
# MAGIC
# MAGIC For a `read_committed` consumer a partition ends at the last stable offset (LSO): the first
# MAGIC offset of the oldest open transaction. The 10 committed records lie after it.

# COMMAND ----------

import time

from kafka import KafkaConsumer, TopicPartition


def positions():
    """Per partition: log end offset, last stable offset and committed records readable now."""
    parts = [TopicPartition(TOPIC, p) for p in (0, 1)]
    ends = KafkaConsumer(bootstrap_servers=BOOTSTRAP).end_offsets(parts)
    consumer = KafkaConsumer(bootstrap_servers=BOOTSTRAP, isolation_level="read_committed",
                             enable_auto_commit=False)
    try:
        lso = consumer.end_offsets(parts)
        consumer.assign(parts)
        consumer.seek_to_beginning(*parts)
        seen, deadline = [], time.monotonic() + 5
        while time.monotonic() < deadline and any(consumer.position(tp) < lso[tp] for tp in parts):
            for tp, msgs in consumer.poll(timeout_ms=300).items():
                seen.extend((tp.partition, m.value) for m in msgs)
        return [{"partition": tp.partition, "log_end_offset": ends[tp],
                 "last_stable_offset": lso[tp],
                 "readable_committed": sum(1 for p, v in seen
                                           if p == tp.partition and v.startswith(b"committed"))}
                for tp in parts], [v for _, v in seen]
    finally:
        consumer.close()


before, seen_before = positions()
display(spark.createDataFrame(before, "partition int, log_end_offset long, "
                                      "last_stable_offset long, readable_committed long"))
print(f"read_committed sees {len(seen_before)} of the 10 committed records")

# COMMAND ----------

# MAGIC %md
# MAGIC ## List the lingering transactions of the crashed job
# MAGIC
# MAGIC `list_lingering(kafka_config, prefix)` asks the brokers for open transactions whose
# MAGIC transactional.id has the sink's form `<prefix>-b<batch>-p<task>-e<epoch>`
# MAGIC (`ListTransactions` + `DescribeTransactions`); a job whose prefix merely starts with
# MAGIC this one (`<prefix>-eu`) is never matched.

# COMMAND ----------

from dataclasses import asdict

from barrier_sink import abort_lingering, list_lingering

lingering = list_lingering(KAFKA, CRASHED_PREFIX)
display(spark.createDataFrame(
    [dict(asdict(t), partitions=",".join(t.partitions)) for t in lingering],
    "transactional_id string, producer_id long, producer_epoch int, state string, "
    "age_ms long, partitions string"))

# COMMAND ----------

# The command-line tool prints the same listing.
from barrier_sink.__main__ import main as barrier_sink_cli

barrier_sink_cli(["lingering", "--bootstrap", BOOTSTRAP, "--prefix", CRASHED_PREFIX])

# COMMAND ----------

# MAGIC %md
# MAGIC ## Abort them
# MAGIC
# MAGIC `abort_lingering(kafka_config, prefix, keep=None)` fences each transactional.id (a new
# MAGIC producer epoch, so a zombie task still holding it can no longer write) and aborts its open
# MAGIC transaction. `keep` lists ids to leave alone.

# COMMAND ----------

aborted = abort_lingering(KAFKA, CRASHED_PREFIX)
print(f"aborted: {aborted}")
after_list = list_lingering(KAFKA, CRASHED_PREFIX)
healthy_open = list_lingering(KAFKA, HEALTHY_PREFIX)
print(f"still open with the crashed prefix: {len(after_list)}; "
      f"healthy job's open transactions: {[t.transactional_id for t in healthy_open]}")

# COMMAND ----------

# MAGIC %md
# MAGIC ## The consumer advances
# MAGIC
# MAGIC Partition 0 had only the crashed job's transaction: its LSO moves to the log end and the
# MAGIC committed records behind it become readable. Partition 1 also holds the healthy job's open
# MAGIC transaction, so it stays pinned until that job commits (here: until we clean it up).

# COMMAND ----------

after, seen_after = positions()
display(spark.createDataFrame(after, "partition int, log_end_offset long, "
                                     "last_stable_offset long, readable_committed long"))
print(f"read_committed sees {sum(1 for v in seen_after if v.startswith(b'committed'))} "
      f"committed records, {sum(1 for v in seen_after if v.startswith(CRASHED_PREFIX.encode()))} "
      "from the aborted transactions")

# COMMAND ----------

# Clean up: end the "healthy" job's transaction as well, then everything is readable.
abort_lingering(KAFKA, HEALTHY_PREFIX)
final, seen_final = positions()
p0_before, p0_after = before[0], after[0]
assert {t.transactional_id for t in lingering} == {h.transactional_id for h in crashed}
assert sorted(aborted) == sorted(h.transactional_id for h in crashed)
assert after_list == [] and [t.transactional_id for t in healthy_open] == [healthy.transactional_id]
assert p0_before["last_stable_offset"] < p0_before["log_end_offset"]
assert p0_after["last_stable_offset"] == p0_after["log_end_offset"]
assert after[1]["last_stable_offset"] < after[1]["log_end_offset"]
assert all(r["last_stable_offset"] == r["log_end_offset"] for r in final)
assert not any(v.startswith(CRASHED_PREFIX.encode()) for v in seen_final)
result = {"lingering_found": len(lingering), "aborted": len(aborted),
          "left_open_after_abort": len(after_list), "other_prefix_untouched": len(healthy_open),
          "committed_readable_before": sum(1 for v in seen_before if v.startswith(b"committed")),
          "committed_readable_after": sum(1 for v in seen_final if v.startswith(b"committed"))}
print(result)

# COMMAND ----------

admin = KafkaAdminClient(bootstrap_servers=BOOTSTRAP)
try:
    admin.delete_topics([TOPIC], timeout_ms=30000)
finally:
    admin.close()
