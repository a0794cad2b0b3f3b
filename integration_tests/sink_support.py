"""Helpers for the sink tests: scripted inputs whose last barrier seals every record, and
read_committed readers of a whole topic."""

from __future__ import annotations

import time
from typing import Dict, List, Optional

from kafka import KafkaConsumer, TopicPartition

from barrier_demo.verify import read_topic
from barrier_ops.testing import make_script
from barrier_core.schema import KIND_BARRIER, channel_name


def sealed_script(seed: int, partitions: int = 2, records: int = 100, checkpoints: int = 3,
                  batches: int = 4, topic: str = "in") -> dict:
    """``make_script`` plus a final checkpoint whose barrier follows every record, so that
    every record belongs to a checkpoint that completes."""
    script = make_script(seed, topic, partitions, records, checkpoints, batches)
    last = checkpoints + 1
    channels = [channel_name(topic, p) for p in range(partitions)]
    for p in range(partitions):
        script["batches"][-1].append({"kind": KIND_BARRIER, "topic": topic, "partition": p,
                                      "offset": records, "checkpoint_id": last,
                                      "channels": channels})
    script["cuts"][last] = {c: records for c in channels}
    now_ms = int(time.time() * 1000)  # trigger times: checkpoints expire relative to them
    for batch in script["batches"]:
        for row in batch:
            if row["kind"] == KIND_BARRIER:
                row["timestamp"] = now_ms + row["checkpoint_id"]
    return script


def read_committed_topic(bootstrap: str, topic: str, timeout_s: float = 30.0) -> List[bytes]:
    """Every committed value of ``topic`` (all partitions), read until the position reached the
    last stable offset on each partition. Raises ``TimeoutError`` if that takes longer than
    ``timeout_s``: never returns part of the topic."""
    return read_topic(bootstrap, topic, "read_committed", timeout_s=timeout_s)


def end_offsets(bootstrap: str, topic: str) -> Dict[int, int]:
    consumer = KafkaConsumer(bootstrap_servers=bootstrap)
    parts = [TopicPartition(topic, p) for p in sorted(consumer.partitions_for_topic(topic) or [])]
    ends = {tp.partition: o for tp, o in consumer.end_offsets(parts).items()}
    consumer.close()
    return ends


def script_stream(spark, script_path: str, chk: str, storage: Optional[str] = None):
    """A ``barrier-ops-script`` stream recording its settings in ``storage`` (default: the sinks'
    default storage of checkpoint location ``chk``)."""
    from barrier_sink.options import normalize_location

    storage = storage or normalize_location(chk) + "/barrier-checkpoints"
    return (spark.readStream.format("barrier-ops-script").option("path", script_path)
            .option("checkpoint.storage", storage).load())


def run_script_to_sink(spark, script_path: str, sink_format: str, chk: str, **options) -> None:
    """Stream a ``barrier-ops-script`` file into ``sink_format`` until all of it is processed
    (the script source shares the sink's checkpoint storage, as the barrier-kafka source must)."""
    writer = (script_stream(spark, script_path, chk, options.get("checkpoint.storage"))
              .writeStream.format(sink_format).option("checkpointLocation", chk))
    for k, v in options.items():
        writer = writer.option(k, v)
    query = writer.start()
    try:
        query.processAllAvailable()
    finally:
        query.stop()


def as_shipped_to_tasks(writer):
    """The writer as Spark's tasks get it: pickled on the driver before the batch (the Kafka
    sink snapshots its pooled transactional ids in use then) and unpickled on the executor."""
    import pickle

    return pickle.loads(pickle.dumps(writer))
