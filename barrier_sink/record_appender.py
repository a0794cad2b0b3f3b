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
"""

from __future__ import annotations

import logging
from typing import Callable, Dict, List, Optional, Tuple

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
