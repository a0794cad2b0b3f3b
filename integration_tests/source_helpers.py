"""Helpers for the barrier-kafka source integration tests (test driver process)."""

from __future__ import annotations

import time
import uuid
from typing import Dict, List, Optional

from kafka import KafkaProducer


def produce(bootstrap: str, topic: str, per_partition: Dict[int, int], *, start_index: int = 0,
            timestamp_ms: Optional[int] = None, headers=None, key_prefix: bytes = b"k") -> None:
    """Send ``per_partition[p]`` records to partition p, values ``p-<i>``; waits for acks."""
    producer = KafkaProducer(bootstrap_servers=bootstrap, acks="all", linger_ms=5)
    for p, n in per_partition.items():
        for i in range(start_index, start_index + n):
            producer.send(topic, value=f"{p}-{i}".encode(), key=key_prefix + str(i).encode(),
                          partition=p, timestamp_ms=timestamp_ms, headers=headers)
    producer.flush(timeout=60)
    producer.close()


def run_to_memory(spark, options: dict, checkpoint_dir: str, *, trigger: Optional[dict] = None,
                  name: Optional[str] = None, until_rows: Optional[int] = None,
                  timeout_s: float = 120.0, started=None) -> List:
    """Run the source into a memory table until all available data is processed; return rows
    sorted by (topic, partition, offset, kind) with barriers after records at equal offsets.
    ``started(query)`` is called once the query runs."""
    name = name or "src_" + uuid.uuid4().hex[:8]
    reader = spark.readStream.format("barrier-kafka")
    for k, v in options.items():
        reader = reader.option(k, v)
    writer = (reader.load().writeStream.format("memory").queryName(name)
              .option("checkpointLocation", checkpoint_dir))
    if trigger:
        writer = writer.trigger(**trigger)
    query = writer.start()
    if started is not None:
        started(query)
    try:
        if trigger and trigger.get("availableNow"):
            query.awaitTermination(timeout_s)
        else:
            query.processAllAvailable()
        if until_rows is not None:
            deadline = time.monotonic() + timeout_s
            while spark.table(name).count() < until_rows and time.monotonic() < deadline:
                query.processAllAvailable()
        rows = spark.table(name).collect()
    finally:
        query.stop()
    return rows


def stream_rows(rows) -> List:
    return sorted(rows, key=lambda r: (r.topic, r.partition, r.offset, r.kind == "record"))


def barriers(rows) -> Dict[int, Dict[str, int]]:
    """checkpoint id -> {channel: offset} of the barrier rows."""
    out: Dict[int, Dict[str, int]] = {}
    for r in rows:
        if r.kind == "barrier":
            out.setdefault(r.checkpoint_id, {})[f"{r.topic}:{r.partition}"] = r.offset
    return out


def records(rows) -> List:
    return [r for r in rows if r.kind == "record"]


def wait_for(condition, timeout_s: float = 60.0, interval_s: float = 0.2):
    deadline = time.monotonic() + timeout_s
    while True:
        value = condition()
        if value:
            return value
        if time.monotonic() > deadline:
            raise AssertionError("condition not met within %.0fs" % timeout_s)
        time.sleep(interval_s)


def run_to_files(spark, options: dict, checkpoint_dir: str, out_dir: str,
                 timeout_s: float = 120.0) -> List:
    """Like :func:`run_to_memory` but into a parquet file sink (restartable from the same
    checkpoint, unlike the memory sink); returns every row written so far by all runs."""
    reader = spark.readStream.format("barrier-kafka")
    for k, v in options.items():
        reader = reader.option(k, v)
    query = (reader.load().writeStream.format("parquet").option("path", out_dir)
             .option("checkpointLocation", checkpoint_dir).start())
    try:
        query.processAllAvailable()
    finally:
        query.stop()
    return spark.read.parquet(out_dir).collect()
