"""Records of one transaction appended straight to the producer's record accumulator (executor).

``KafkaProducer.send()`` spends about 20 us of Python per record (kafka-python 3.0, measured in
``benchmarks/bench_sink_send.py``) on work that is the same for every record of a transaction:
header and serializer checks, the metadata lookup of the topic, the partitioner, the size
estimate, a debug log line whose arguments are formatted anyway, and registering the partition
in the transaction. :class:`RecordAppender` does that work once per topic, key and partition of
the transaction and appends each record to the accumulator, as ``send()`` does in the end:
about half the time per record.

Guarantees
----------
1. The same partition as the producer's default partitioner: murmur2 of the key bytes, positive,
   modulo the topic's partition count, as Java's ``DefaultPartitioner`` / ``BuiltInPartitioner``.
2. The same records (key, value, headers, the producer's timestamp) in the same order per
   partition, and every partition is added to the transaction before its first record.
3. Every record's failure reaches ``on_failure`` (the caller refuses to pre-commit after one).
4. Whatever the fast path does not cover goes through ``send()`` unchanged: records with
   neither key nor partition (the producer's sticky partitioning), a custom partitioner or
   serializer, and records near ``max_request_size`` (``send()``'s size check and error).

:meth:`RecordAppender.append_columns` goes further for a whole Arrow batch of keyed records
without headers: the partitions, batch cuts and encoded records come from numpy
(:mod:`barrier_sink.record_batches`), and each batch enters the accumulator whole, with one
callback instead of a future per record. Guarantees 1-3 hold for it too; a refused batch reports
its first record's error (the records of a batch succeed or fail together). When the broker
splits such a batch (MESSAGE_TOO_LARGE), every record of it gets its future then, so the halves
report their failures as the producer's own batches do.
"""

from __future__ import annotations

import logging
import time
from typing import Callable, Dict, List, Optional, Tuple

import numpy as np

from barrier_sink.record_batches import BinaryColumn, default_partitions, encode_batches

logger = logging.getLogger(__name__)

#: Keys whose partition is remembered per transaction before the memory is cleared.
_KEY_CACHE_LIMIT = 65_536
#: Record bytes (key + value + headers) below which the size check of ``send()`` cannot fail.
_SIZE_CHECK_MARGIN = 4096


class RecordAppender:
    """Appends one transaction's records to ``producer``'s accumulator (executor)."""

    def __init__(self, producer, on_failure: Callable[[BaseException], None]) -> None:
        from kafka.partitioner.default import DefaultPartitioner, murmur2

        self._producer = producer
        self._on_failure = on_failure
        self._murmur2 = murmur2
        config = producer.config
        self._fast = (type(config.get("partitioner")) is DefaultPartitioner
                      and config.get("key_serializer") is None
                      and config.get("value_serializer") is None)
        self._small = max(0, int(config.get("max_request_size", 0)) - _SIZE_CHECK_MARGIN)
        self._partitions: Dict[str, List[int]] = {}
        self._by_key: Dict[Tuple[str, bytes], int] = {}
        self._registered: Dict[Tuple[str, int], object] = {}
        self._whole_batches = self._fast and _accumulator_accepts_batches(producer)

    def append(self, topic: str, value: Optional[bytes], key: Optional[bytes] = None,
               headers: Optional[list] = None, partition: Optional[int] = None) -> None:
        size = (len(value) if value is not None else 0) + (len(key) if key is not None else 0)
        if headers:
            size += sum(len(k) + len(v) for k, v in headers)
        if (not self._fast or (key is None and partition is None) or size >= self._small
                or value is None and key is None):
            self._producer.send(topic, value=value, key=key, headers=headers,
                                partition=partition).add_errback(self._on_failure)
            return
        if partition is None:
            partition = self._by_key.get((topic, key))
            if partition is None:
                partition = self._key_partition(topic, key)
        tp = self._registered.get((topic, partition))
        if tp is None:
            tp = self._register(topic, partition)
        future, batch_full, new_batch = self._producer._accumulator.append(
            tp, None, key, value, headers or [])[:3]
        future.add_errback(self._on_failure)
        if batch_full or new_batch:
            self._producer._sender.wakeup()

    def append_columns(self, topic: str, keys, values, partitions=None) -> bool:
        """Append a run of records given as Arrow ``binary`` arrays (and optional ``partitions``,
        an int array) in whole batches; return False, appending nothing, where the run needs the
        per-record path: a null key without a partition, a record near ``max_request_size``, a
        custom partitioner or serializer (executor)."""
        if not self._whole_batches or not len(values):
            return False
        key_col, value_col = BinaryColumn.from_arrow(keys), BinaryColumn.from_arrow(values)
        sizes = np.maximum(key_col.lengths, 0) + np.maximum(value_col.lengths, 0)
        if (int(sizes.max()) >= self._small
                or ((key_col.lengths < 0) & (value_col.lengths < 0)).any()):
            return False
        if partitions is not None and partitions.null_count == 0:
            chosen = partitions.to_numpy(zero_copy_only=False).astype(np.int64)
        elif partitions is None or partitions.null_count == len(partitions):
            if key_col.lengths.min() < 0:
                return False
            chosen = default_partitions(key_col, self._topic_partitions(topic))
        else:
            return False
        for partition in np.unique(chosen).tolist():
            if (topic, partition) not in self._registered:
                self._register(topic, partition)
        order = np.argsort(chosen, kind="stable")
        chosen = chosen[order]
        key_col, value_col = key_col.take(order), value_col.take(order)
        group_ends = np.append(np.nonzero(np.diff(chosen))[0] + 1, len(chosen))
        batch_starts, body, byte_starts, record_sizes = encode_batches(
            key_col, value_col, group_ends, int(self._producer.config["batch_size"]))
        self._enqueue(topic, chosen, body, batch_starts, byte_starts, record_sizes)
        return True

    def _enqueue(self, topic, chosen, body, batch_starts, byte_starts, record_sizes) -> None:
        """Hand each encoded batch to the accumulator, in order per partition (executor)."""
        from kafka.producer.producer_batch import ProducerBatch
        from kafka.record.memory_records import MemoryRecordsBuilder

        producer = self._producer
        accumulator, config = producer._accumulator, producer.config
        timestamp = int(time.time() * 1000)
        counts = np.diff(np.append(batch_starts, len(chosen))).tolist()
        largest = np.maximum.reduceat(record_sizes, batch_starts).tolist()
        partitions = chosen[batch_starts].tolist()
        byte_bounds = byte_starts.tolist()
        accumulator._appends_in_progress.increment()
        try:
            for b, (count, partition) in enumerate(zip(counts, partitions)):
                records = MemoryRecordsBuilder(2, accumulator.config["compression_attrs"],
                                               config["batch_size"])
                builder = records._builder
                builder._buffer += body[byte_bounds[b]:byte_bounds[b + 1]].data
                builder._first_timestamp = builder._max_timestamp = timestamp
                builder._last_offset = count - 1
                builder._num_records = count
                records._next_offset = count
                tp = self._registered[(topic, partition)]
                batch = ProducerBatch(tp, records)
                batch.max_record_size = largest[b]
                batch._record_futures = _FuturesOnSplit(batch, count, timestamp,
                                                        self._on_failure)
                batch.produce_future.add_callback(self._batch_done)
                batch.produce_future.add_errback(self._on_failure)
                with accumulator._tp_lock(tp):
                    if accumulator._closed:
                        from kafka.errors import IllegalStateError

                        raise IllegalStateError("RecordAccumulator is closed")
                    accumulator._batches[tp].append(batch)
                    accumulator._incomplete.add(batch)
        finally:
            accumulator._appends_in_progress.decrement()
        producer._sender.wakeup()

    def _batch_done(self, result) -> None:
        """The producer's I/O thread completed a whole batch: ``result`` is
        ``(base_offset, log_append_time, record_exceptions_fn)``, the last None on success."""
        if result[2] is not None:
            self._on_failure(result[2](0))

    def _topic_partitions(self, topic: str) -> List[int]:
        parts = self._partitions.get(topic)
        if parts is None:
            producer = self._producer
            if producer._metadata.partitions_for_topic(topic) is None:
                producer._wait_on_metadata(topic, producer.config["max_block_ms"])
            parts = self._partitions[topic] = sorted(producer._metadata.partitions_for_topic(topic))
        return parts

    def _key_partition(self, topic: str, key: bytes) -> int:
        parts = self._topic_partitions(topic)
        partition = parts[(self._murmur2(key) & 0x7FFFFFFF) % len(parts)]
        if len(self._by_key) >= _KEY_CACHE_LIMIT:
            self._by_key.clear()
        self._by_key[(topic, key)] = partition
        return partition

    def _register(self, topic: str, partition: int):
        from kafka.structs import TopicPartition

        if partition < 0 or partition not in self._topic_partitions(topic):
            raise ValueError(f"Unrecognized partition {partition} for topic {topic}")
        tp = TopicPartition(topic, partition)
        manager = self._producer._transaction_manager
        if manager is not None and manager.is_transactional():
            manager.maybe_add_partition_to_transaction(tp)  # raises if the transaction failed
        self._registered[(topic, partition)] = tp
        return tp


class _FuturesOnSplit:
    """A whole batch's ``_record_futures``: kafka-python reads them only when it splits a batch
    the broker refused as too large, and rebinds each to the half its record went to. Each of
    the batch's own records gets its future then, reporting to ``on_failure``; records the
    producer appends to the batch later (``send()``) bring their own futures (executor)."""

    def __init__(self, batch, count: int, timestamp: int, on_failure) -> None:
        self._batch, self._count = batch, count
        self._timestamp, self._on_failure = timestamp, on_failure
        self._appended: list = []

    def append(self, future) -> None:
        self._appended.append(future)

    def __len__(self) -> int:
        return self._count + len(self._appended)

    def __getitem__(self, index: int):
        from kafka.producer.future import FutureRecordMetadata

        if not 0 <= index < len(self):
            raise IndexError(index)
        if index >= self._count:
            return self._appended[index - self._count]
        future = FutureRecordMetadata(self._batch.produce_future, index, self._timestamp,
                                      None, -1, -1, -1)
        return future.add_errback(self._on_failure)


def _accumulator_accepts_batches(producer) -> bool:
    """Whether this kafka-python has the accumulator and builder internals whole batches need
    (3.0.x); otherwise every record takes the per-record path."""
    try:
        from kafka.record.default_records import DefaultRecordBatchBuilder
    except ImportError:
        return False
    accumulator = getattr(producer, "_accumulator", None)
    slots = set(getattr(DefaultRecordBatchBuilder, "__slots__", ()))
    return (accumulator is not None
            and accumulator.config.get("message_version") == 2
            and DefaultRecordBatchBuilder.HEADER_STRUCT.size == 61
            and all(hasattr(accumulator, a) for a in ("_tp_lock", "_batches", "_incomplete",
                                                      "_appends_in_progress", "_closed"))
            and {"_buffer", "_first_timestamp", "_max_timestamp", "_last_offset",
                 "_num_records"} <= slots)
