"""Build the source's Arrow record batches (records and barrier rows) on executors.

The Arrow schema is exactly :func:`barrier_core.schema.spark_arrow_schema` of the source schema,
which PySpark checks with ``Schema.equals`` for every RecordBatch ``read()`` yields.
"""

from __future__ import annotations

from typing import Tuple

import numpy as np
import pyarrow as pa

from barrier_source.record_decode import DecodedRecords
from barrier_core.schema import KIND_BARRIER, KIND_RECORD, spark_arrow_schema

_TS_TYPE = pa.timestamp("us", tz="UTC")


class RowBuilder:
    """Turns decoded records of one Kafka partition into RecordBatches of the source schema."""

    def __init__(self, schema, partition, include_headers: bool) -> None:
        self.arrow_schema = spark_arrow_schema(schema)
        self.topic = partition.topic
        self.partition = partition.partition
        self.include_headers = include_headers
        epochs = list(partition.epochs)
        self._epoch_positions = np.asarray([e[0] for e in epochs], dtype=np.int64)
        self._epoch_ids = np.asarray([e[1] for e in epochs] + [partition.next_checkpoint_id],
                                     dtype=np.int64)
        self._headers_type = self.arrow_schema.field("headers").type if include_headers else None
        self._channels_type = self.arrow_schema.field("barrier_channels").type

    def _constant_string(self, value: str, n: int) -> pa.Array:
        return pa.array([value], pa.string()).take(pa.array(np.zeros(n, dtype=np.int32)))

    def _no_channels(self, n: int) -> pa.Array:
        """``barrier_channels`` of ``n`` records: empty lists, not nulls. Spark's JVM writes a
        list column that is null on most rows at a cost per row several times that of empty
        lists (Arrow's ``ListVector`` walks back to its last non-null value), in every step that
        hands these rows to Python (the sink, ``applyInPandasWithState``)."""
        return pa.ListArray.from_arrays(pa.array(np.zeros(n + 1, dtype=np.int32)),
                                        pa.array([], self._channels_type.value_type),
                                        type=self._channels_type)

    def records(self, chunk: DecodedRecords) -> pa.RecordBatch:
        n = len(chunk)
        epoch = self._epoch_ids[np.searchsorted(self._epoch_positions, chunk.offsets,
                                                side="right")]
        timestamps = pa.Array.from_buffers(
            _TS_TYPE, n, [None, pa.py_buffer(np.ascontiguousarray(chunk.timestamps_ms * 1000))])
        columns = [chunk.keys, chunk.values, self._constant_string(self.topic, n),
                   pa.array(np.full(n, self.partition, dtype=np.int32)),
                   pa.array(chunk.offsets, pa.int64()), timestamps,
                   pa.array(chunk.timestamp_types.astype(np.int32))]
        if self.include_headers:
            columns.append(pa.array(
                [None if h is None else [{"key": k, "value": v} for k, v in h]
                 for h in chunk.headers], self._headers_type))
        columns += [self._constant_string(KIND_RECORD, n), pa.array(epoch, pa.int64()),
                    pa.nulls(n, pa.int64()), self._no_channels(n)]
        return pa.RecordBatch.from_arrays(columns, schema=self.arrow_schema)

    def barrier(self, barrier: Tuple) -> pa.RecordBatch:
        """One barrier row: ``(checkpoint_id, timestamp_ms, position, channels)``."""
        cid, ts_ms, position, channels = barrier
        columns = [pa.nulls(1, pa.binary()), pa.nulls(1, pa.binary()),
                   pa.array([self.topic], pa.string()),
                   pa.array([self.partition], pa.int32()), pa.array([position], pa.int64()),
                   pa.array([ts_ms * 1000], pa.int64()).view(_TS_TYPE),
                   pa.nulls(1, pa.int32())]
        if self.include_headers:
            columns.append(pa.nulls(1, self._headers_type))
        columns += [pa.array([KIND_BARRIER], pa.string()), pa.array([cid], pa.int64()),
                    pa.array([ts_ms], pa.int64()), pa.array([list(channels)], self._channels_type)]
        return pa.RecordBatch.from_arrays(columns, schema=self.arrow_schema)
