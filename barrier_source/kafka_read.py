"""Executor-side fetch of one partition's offset range ``[from, until)`` as decoded columns.

Runs inside ``read()`` on executors. One fetch client per (configuration) is kept per Python
worker process and reused by the next task (PySpark reuses workers; a worker runs one task at a
time, so a client is never shared by two tasks at once). A client leaves the pool while a task
uses it and returns only when the task read its range completely, so an abandoned iterator
never hands a half-used connection to another task.

Fetches go to the partition leader with raw FetchRequests (v4..v12) through kafka-python's
connection manager and are decoded by :mod:`barrier_source.record_decode`; the next fetch is
sent before the current response is decoded.

A fetch asks for about the bytes the rest of the range needs, at most
``PARTITION_FETCH_MAX_BYTES`` (2 MiB): the client learns a topic's bytes per offset from each
response (:meth:`FetchClient.fetch_bytes`). Fetches asked for 16 MiB before: a 2,500-record range
of a topic with a backlog took 16 MiB from the broker, and 3-4 times as long; a 62,500-record
range took twice as long in one 7 MB response as in four pipelined ones. An estimate that is too
small costs one more round trip (pipelined), never a record: the broker returns the first record
batch whole, whatever the limit (KIP-74).
"""

from __future__ import annotations

import logging
import time
from typing import Any, Dict, Iterator, List, Mapping, Tuple

import numpy as np

from barrier_core.exceptions import BarrierKafkaError, OffsetOutOfRangeError
from barrier_source import record_decode as rd
from barrier_core.kafka_clients import kafka_client

logger = logging.getLogger(__name__)

FETCH_MAX_BYTES = 64 << 20
#: The most one fetch asks of a partition; the next fetch is in flight while this one decodes.
PARTITION_FETCH_MAX_BYTES = 2 << 20
#: The smallest per-partition limit a fetch asks for, and the margin over the estimate.
PARTITION_FETCH_MIN_BYTES = 64 << 10
#: Bytes per offset assumed before a client has seen a response (Kafka's max.partition.fetch.bytes
#: default, 1 MiB, for a 1,000-record range).
DEFAULT_BYTES_PER_OFFSET = 1024.0
FETCH_MAX_WAIT_MS = 500
_OFFSET_OUT_OF_RANGE = 1
_RETRIABLE_CODES = {3, 5, 6, 9, 56, 74, 75, 76}  # unknown tp, leader n/a, not leader, ...

_POOL: Dict[Tuple, List["FetchClient"]] = {}


class FetchClient:
    """A connection (kafka-python consumer used only for its network layer) to one cluster."""

    def __init__(self, consumer_config: Mapping[str, Any]) -> None:
        from kafka import KafkaConsumer

        cfg = dict(consumer_config)
        cfg.update(enable_auto_commit=False, group_id=None)
        self.isolation_level = 1 if str(cfg.get("isolation_level", "")).lower() == \
            "read_committed" else 0
        self._consumer = kafka_client(KafkaConsumer, cfg, "source (executor)")
        self._manager = self._consumer._client._manager
        self._bytes_per_offset: Dict[str, float] = {}  # by topic, from the last response

    def fetch_bytes(self, topic: str, offsets: int) -> int:
        """Per-partition byte limit of a fetch for the next ``offsets`` offsets of a range of
        ``topic``: the bytes per offset its last response had, with a quarter and
        ``PARTITION_FETCH_MIN_BYTES`` to spare, at most ``PARTITION_FETCH_MAX_BYTES``."""
        per_offset = self._bytes_per_offset.get(topic, DEFAULT_BYTES_PER_OFFSET)
        want = offsets * per_offset * 1.25 + PARTITION_FETCH_MIN_BYTES
        return int(min(PARTITION_FETCH_MAX_BYTES, want))

    def learn(self, topic: str, size: int, offsets: int) -> None:
        """Record that record batches of ``topic`` of ``size`` bytes held ``offsets`` offsets."""
        if offsets > 0 and size > 0:
            self._bytes_per_offset[topic] = size / offsets

    def close(self) -> None:
        try:
            self._consumer.close(autocommit=False)
        except Exception:  # noqa: BLE001 - closing must not fail a task
            pass

    def leader(self, topic: str, partition: int, timeout_s: float) -> int:
        from kafka import TopicPartition

        tp = TopicPartition(topic, partition)
        deadline = time.monotonic() + timeout_s
        while True:
            self._consumer.partitions_for_topic(topic)
            node = self._manager.cluster.leader_for_partition(tp)
            if node is not None and node >= 0:
                return node
            if time.monotonic() > deadline:
                raise BarrierKafkaError(f"No leader for {topic}:{partition} within "
                                        f"{timeout_s:.0f}s.")
            self._manager.cluster.request_update()
            time.sleep(0.2)

    def send_fetch(self, node: int, topic: str, partition: int, offset: int,
                   max_bytes: int = PARTITION_FETCH_MAX_BYTES):
        """Send a FetchRequest for at most ``max_bytes`` of the partition (more when its first
        record batch is larger); returns a handle for :meth:`wait`."""
        from kafka.protocol.consumer import FetchRequest

        ft, fp = FetchRequest.FetchTopic, FetchRequest.FetchTopic.FetchPartition
        request = FetchRequest(
            replica_id=-1, max_wait_ms=FETCH_MAX_WAIT_MS, min_bytes=1, max_bytes=FETCH_MAX_BYTES,
            isolation_level=self.isolation_level, session_id=0, session_epoch=-1,
            topics=[ft(topic=topic, partitions=[fp(
                partition=partition, current_leader_epoch=-1, fetch_offset=offset,
                last_fetched_epoch=-1, log_start_offset=-1,
                partition_max_bytes=max_bytes)])],
            forgotten_topics_data=[], rack_id="", min_version=4, max_version=12)
        manager = self._manager

        async def send():
            return await manager.send(request, node_id=node)

        return manager.call_soon(send)

    def wait(self, handle):
        async def result():
            return await handle

        response = self._manager.run(result)
        return response.responses[0].partitions[0]

    def list_offset(self, topic: str, partition: int, spec: int) -> int:
        from kafka import TopicPartition

        tp = TopicPartition(topic, partition)
        if spec == -2:
            return self._consumer.beginning_offsets([tp])[tp]
        return self._consumer.end_offsets([tp])[tp]


def _pool_key(config: Mapping[str, Any]) -> Tuple:
    return tuple(sorted((k, repr(v)) for k, v in config.items()))


def borrow_client(config: Mapping[str, Any]) -> FetchClient:
    free = _POOL.get(_pool_key(config))
    if free:
        return free.pop()
    return FetchClient(config)


def return_client(config: Mapping[str, Any], client: FetchClient) -> None:
    _POOL.setdefault(_pool_key(config), []).append(client)


def _data_loss(message: str, fail_on_data_loss: bool) -> None:
    if fail_on_data_loss:
        raise OffsetOutOfRangeError(
            f"{message} Some data may have been lost (retention, a deleted topic or partition). "
            "Set failOnDataLoss=false to skip the gap with a warning.")
    logger.warning("barrier-kafka: %s Skipping the gap (failOnDataLoss=false).", message)


def fetch_range(config: Mapping[str, Any], topic: str, partition: int, start: int, until: int,
                *, fail_on_data_loss: bool, poll_timeout_ms: int,
                with_headers: bool) -> Iterator[rd.DecodedRecords]:
    """Yield the records of ``topic:partition`` with ``start <= offset < until`` in order.

    Raises
    ------
    OffsetOutOfRangeError
        Part of the range is gone from Kafka and ``fail_on_data_loss`` is true.
    """
    if start >= until:
        return  # nothing to read (a barrier-only range, or a vanished partition's barrier)
    client = borrow_client(config)
    clean = False
    try:
        yield from _fetch_range(client, topic, partition, start, until, fail_on_data_loss,
                                poll_timeout_ms, with_headers)
        clean = True
    finally:
        if clean:
            return_client(config, client)
        else:
            client.close()


def _fetch_range(client: FetchClient, topic: str, partition: int, start: int, until: int,
                 fail_on_data_loss: bool, poll_timeout_ms: int,
                 with_headers: bool) -> Iterator[rd.DecodedRecords]:
    where = f"{topic}:{partition}"
    node = client.leader(topic, partition, poll_timeout_ms / 1000)
    asked = {}  # the pending fetch's byte limit

    def send(at: int, max_bytes: int = 0):
        asked["max_bytes"] = max_bytes or client.fetch_bytes(topic, until - at)
        return client.send_fetch(node, topic, partition, at, asked["max_bytes"])

    offset = start
    pending = send(offset) if offset < until else None
    last_progress = time.monotonic()
    aborted_pids: set = set()
    while offset < until:
        data = client.wait(pending)
        pending = None
        if data.error_code == _OFFSET_OUT_OF_RANGE:
            earliest = client.list_offset(topic, partition, -2)
            latest = client.list_offset(topic, partition, -1)
            if offset < earliest:
                _data_loss(f"{where}: offsets {offset}..{earliest - 1} are no longer available "
                           f"(earliest is {earliest}).", fail_on_data_loss)
                offset = earliest
            else:
                _data_loss(f"{where}: offset {offset} is beyond the log end {latest}; the "
                           "partition was truncated or recreated.", fail_on_data_loss)
                return
            if offset >= until:
                return
            pending = send(offset)
            continue
        if data.error_code in _RETRIABLE_CODES:
            time.sleep(0.1)
            node = client.leader(topic, partition, poll_timeout_ms / 1000)
            pending = send(offset)
            continue
        if data.error_code != 0:
            raise BarrierKafkaError(f"Fetching {where} at offset {offset} failed with Kafka error "
                                    f"code {data.error_code}.")
        buf = data.records or b""
        table = rd.batch_table(buf, until) if buf else None
        if not table:
            limit = data.last_stable_offset if client.isolation_level == 1 else \
                data.high_watermark
            if 0 <= limit <= offset and time.monotonic() - last_progress > poll_timeout_ms / 1000:
                _data_loss(f"{where}: records {offset}..{until - 1} were planned but Kafka's log "
                           f"ends at {limit}.", fail_on_data_loss)
                return
            if buf and len(buf) >= rd.HEADER_SIZE:
                if asked["max_bytes"] < FETCH_MAX_BYTES:  # part of a batch only: ask for more
                    pending = send(offset, FETCH_MAX_BYTES)
                    continue
                raise BarrierKafkaError(f"{where}: a record batch at offset {offset} is larger "
                                        f"than the fetch limit {FETCH_MAX_BYTES} bytes.")
            pending = send(offset)
            continue
        last_progress = time.monotonic()
        next_offset = int(table.last_offsets[-1]) + 1
        client.learn(topic, int(table.positions[-1] + table.sizes[-1] - table.positions[0]),
                     next_offset - int(table.base_offsets[0]))
        if next_offset < until:
            pending = send(next_offset)
        # the batches that overlap the range (a fetch may start inside one and end past it)
        rows = np.nonzero((table.last_offsets >= offset) & (table.base_offsets < until))[0]
        if len(rows) and table.is_plain()[rows].all():
            records = rd.decode_plain(buf, table, rows, with_headers)
        else:
            aborted = sorted(data.aborted_transactions or [], key=lambda a: a.first_offset) \
                if client.isolation_level == 1 else []
            segments = _segments(buf, table.entries(rows), client.isolation_level == 1, aborted,
                                 aborted_pids)
            records = rd.decode_segments(segments, with_headers) if segments else None
        if records is not None:
            lo = int(np.searchsorted(records.offsets, offset, side="left"))
            hi = int(np.searchsorted(records.offsets, until, side="left"))
            if hi > lo:
                yield records.slice(lo, hi) if (lo, hi) != (0, len(records)) else records
        offset = next_offset
    if pending is not None:
        client.wait(pending)


def _segments(buf: bytes, batches, read_committed: bool, aborted: list,
              aborted_pids: set) -> list:
    """(records buffer, first record position, header) of the ``batches`` whose records a
    reader sees: no control batch, and in ``read_committed`` no batch of an aborted transaction
    (``aborted``: the response's aborted transactions, by first offset; ``aborted_pids``: the
    producers inside one, carried from fetch to fetch). Compressed batches are decompressed."""
    out = []
    for hdr, pos in batches:
        if read_committed and hdr.is_transactional:
            while aborted and aborted[0].first_offset <= hdr.last_offset:
                aborted_pids.add(aborted.pop(0).producer_id)
            if hdr.is_control:
                if _is_abort_marker(buf, pos, hdr):
                    aborted_pids.discard(hdr.producer_id)
                continue
            if hdr.producer_id in aborted_pids:
                continue
        if hdr.is_control:
            continue
        out.append((*rd.decompress_batch(buf, pos, hdr), hdr))
    return out


def _is_abort_marker(buf: bytes, pos: int, hdr: rd.BatchHeader) -> bool:
    """Control record key: version int16, type int16 (0 = abort, 1 = commit)."""
    seg, first = rd.decompress_batch(buf, pos, hdr)
    decoded = rd.decode_segments([(seg, first, hdr)], False)
    key = decoded.keys[0].as_py() if len(decoded) else None
    return bool(key) and len(key) >= 4 and int.from_bytes(key[2:4], "big") == 0
