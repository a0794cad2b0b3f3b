"""Test helpers shipped with the package (importable by executors).

``barrier-scripted``: a deterministic streaming source with the barrier-kafka schema, for sink and
operator tests that must not depend on Kafka reads. Batch k holds, for every partition p, the
records at offsets ``[k*r, (k+1)*r)`` with value ``"<topic>-<p>-<offset>"``; after every
``checkpoint_every`` batches the batch ends with barrier ``k // checkpoint_every + 1`` on every
partition. Records carry their epoch in ``checkpoint_id``. Options: ``partitions`` (2),
``records_per_batch`` (10), ``batches`` (5), ``checkpoint_every`` (1), ``topic`` ("scripted").
"""

from __future__ import annotations

import datetime as _dt
from typing import Iterator, List, Tuple

from pyspark.sql.datasource import (DataSource, DataSourceStreamReader, InputPartition)

from barrier_source.schema import channel_name, source_schema


class _Part(InputPartition):
    def __init__(self, partition: int, first_batch: int, last_batch: int) -> None:
        self.partition, self.first_batch, self.last_batch = partition, first_batch, last_batch


class ScriptedReader(DataSourceStreamReader):
    """Runs on the driver (offsets) and executors (read)."""

    def __init__(self, options) -> None:
        self.partitions_n = int(options.get("partitions", 2))
        self.r = int(options.get("records_per_batch", 10))
        self.batches = int(options.get("batches", 5))
        self.every = int(options.get("checkpoint_every", 1))
        self.topic = options.get("topic", "scripted")

    def initialOffset(self):
        return {"batch": 0}

    def latestOffset(self, start, limit):
        """One scripted batch per trigger (driver)."""
        return {"batch": min(int(start["batch"]) + 1, self.batches)}

    def partitions(self, start, end):
        return [_Part(p, start["batch"], end["batch"]) for p in range(self.partitions_n)]

    def rows_of(self, partition: int, batch: int) -> List[Tuple]:
        ts = _dt.datetime(2026, 1, 1)
        channels = [channel_name(self.topic, p) for p in range(self.partitions_n)]
        epoch = batch // self.every + 1
        rows = [(None, f"{self.topic}-{partition}-{o}".encode(), self.topic, partition, o, ts, 0,
                 "record", epoch, None, None)
                for o in range(batch * self.r, (batch + 1) * self.r)]
        if (batch + 1) % self.every == 0:
            rows.append((None, None, self.topic, partition, (batch + 1) * self.r, ts, 0,
                         "barrier", epoch, 1767225600000 + batch, channels))
        return rows

    def read(self, part: _Part) -> Iterator[Tuple]:
        for b in range(part.first_batch, part.last_batch):
            yield from self.rows_of(part.partition, b)

    def commit(self, end) -> None:
        pass


class ScriptedDataSource(DataSource):
    @classmethod
    def name(cls) -> str:
        return "barrier-scripted"

    def schema(self):
        return source_schema()

    def streamReader(self, schema):
        return ScriptedReader(self.options)
