"""Kafka v2 record-batch bodies and default partitions of a whole column of records (executor).

The sink's per-record path (``RecordAppender.append``) spends most of its time in kafka-python
encoding one record at a time in Python. This module does the same work for a whole Arrow batch
with numpy: the partition of every key (murmur2, as Java's ``BuiltInPartitioner`` and
kafka-python's ``DefaultPartitioner``), the cut of each partition's records into batches of at
most ``batch_size`` bytes, and the encoded records of each batch, byte for byte what
kafka-python's ``DefaultRecordBatchBuilder.append`` writes for the same records with one
timestamp (a test compares the two). The batch header, compression and CRC stay kafka-python's
(:class:`~barrier_sink.record_appender.RecordAppender` hands each body to its builder).

Records here have no headers; every record's attributes and timestamp delta are 0 and its offset
delta is its index in its batch.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import List, Tuple

import numpy as np

#: Bytes of a v2 record batch header (``DefaultRecordBatchBuilder.HEADER_STRUCT.size``).
BATCH_HEADER_SIZE = 61

_M = np.uint32(0x5BD1E995)
_SEED = 0x9747B28C


@dataclass(frozen=True)
class BinaryColumn:
    """A binary column as numpy views: record ``i`` is ``data[starts[i]:starts[i]+lengths[i]]``,
    ``lengths[i] == -1`` for null."""

    data: np.ndarray
    starts: np.ndarray
    lengths: np.ndarray

    @classmethod
    def from_arrow(cls, array) -> "BinaryColumn":
        """From a pyarrow ``binary`` / ``string`` Array, large or not (sliced arrays too)."""
        import pyarrow as pa

        large = pa.types.is_large_binary(array.type) or pa.types.is_large_string(array.type)
        validity, offsets, data = array.buffers()
        n, first = len(array), array.offset
        offs = np.frombuffer(offsets, dtype=np.int64 if large else np.int32)[first:first + n + 1]
        offs = offs.astype(np.int64)
        lengths = np.diff(offs)
        if array.null_count:
            bits = np.unpackbits(np.frombuffer(validity, dtype=np.uint8), bitorder="little")
            lengths[bits[first:first + n] == 0] = -1
        raw = np.frombuffer(data, dtype=np.uint8) if data is not None else np.zeros(0, np.uint8)
        return cls(raw, offs[:-1], lengths)

    def equals(self, value: bytes) -> np.ndarray:
        """Which records are exactly ``value`` (nulls are not)."""
        rows = np.nonzero(self.lengths == len(value))[0]
        if value and len(rows):
            block = _fixed_width(self.data, self.starts[rows], len(value))
            rows = rows[(block == np.frombuffer(value, dtype=np.uint8)).all(axis=1)]
        out = np.zeros(len(self.lengths), dtype=bool)
        out[rows] = True
        return out

    def take(self, order: np.ndarray) -> "BinaryColumn":
        return BinaryColumn(self.data, self.starts[order], self.lengths[order])


def _fixed_width(data: np.ndarray, starts: np.ndarray, length: int) -> np.ndarray:
    """The ``length`` bytes at each of ``starts`` as a (len(starts), length) matrix."""
    return data[starts[:, None] + np.arange(length)]


def murmur2(column: BinaryColumn) -> np.ndarray:
    """Kafka's murmur2 hash (uint32) of every non-null record of ``column``."""
    lengths = column.lengths
    out = np.zeros(len(lengths), dtype=np.uint32)
    for length in np.unique(lengths[lengths >= 0]).tolist():
        rows = np.nonzero(lengths == length)[0]
        out[rows] = _murmur2_fixed(column.data, column.starts[rows], length)
    return out


def _murmur2_fixed(data: np.ndarray, starts: np.ndarray, length: int) -> np.ndarray:
    """murmur2 of ``len(starts)`` keys of ``length`` bytes each, vectorised over the keys."""
    with np.errstate(over="ignore"):
        h = np.full(len(starts), (_SEED ^ length) & 0xFFFFFFFF, dtype=np.uint32)
        if length:
            block = _fixed_width(data, starts, length).astype(np.uint32)
        for i in range(0, length - length % 4, 4):
            k = (block[:, i] | (block[:, i + 1] << 8) | (block[:, i + 2] << 16)
                 | (block[:, i + 3] << 24))
            k *= _M
            k ^= k >> 24
            k *= _M
            h *= _M
            h ^= k
        tail = length & ~3
        extra = length % 4
        if extra >= 3:
            h ^= block[:, tail + 2] << 16
        if extra >= 2:
            h ^= block[:, tail + 1] << 8
        if extra >= 1:
            h ^= block[:, tail]
            h *= _M
        h ^= h >> 13
        h *= _M
        h ^= h >> 15
    return h


def default_partitions(keys: BinaryColumn, partitions: List[int]) -> np.ndarray:
    """The partition the producer's default partitioner picks for every (non-null) key:
    ``partitions[(murmur2(key) & 0x7fffffff) % len(partitions)]`` (``partitions`` sorted)."""
    index = (murmur2(keys) & np.uint32(0x7FFFFFFF)) % np.uint32(len(partitions))
    return np.asarray(partitions, dtype=np.int64)[index.astype(np.int64)]


def _varint_size(zigzag: np.ndarray) -> np.ndarray:
    size = np.ones(len(zigzag), dtype=np.int64)
    for bits in (7, 14, 21, 28, 35):
        size += zigzag >= (1 << bits)
    return size


def _put_varints(out: np.ndarray, pos: np.ndarray, zigzag: np.ndarray, size: np.ndarray) -> None:
    for k in range(int(size.max()) if len(size) else 0):
        rows = size > k
        byte = (zigzag[rows] >> (7 * k)) & 0x7F
        out[pos[rows] + k] = byte | ((size[rows] > k + 1).astype(np.int64) << 7)


def _copy_segments(out: np.ndarray, dst: np.ndarray, column: BinaryColumn) -> None:
    lengths = np.maximum(column.lengths, 0)
    total = int(lengths.sum())
    if not total:
        return
    first = np.cumsum(lengths) - lengths
    pos = np.arange(total, dtype=np.int64)
    out[pos + np.repeat(dst - first, lengths)] = column.data[
        pos + np.repeat(column.starts - first, lengths)]


def _zigzag(values: np.ndarray) -> np.ndarray:
    return np.where(values < 0, -2 * values - 1, 2 * values)


def _record_body_sizes(keys: BinaryColumn, values: BinaryColumn) -> Tuple[np.ndarray, ...]:
    """Per record: zigzag key and value lengths, their varint sizes, and the record's body size
    without its offset delta (attributes, timestamp delta, key, value, header count)."""
    kz, vz = _zigzag(keys.lengths), _zigzag(values.lengths)
    ks, vs = _varint_size(kz), _varint_size(vz)
    base = 3 + ks + np.maximum(keys.lengths, 0) + vs + np.maximum(values.lengths, 0)
    return kz, ks, vz, vs, base


def _cut_batches(bound: np.ndarray, group_ends: np.ndarray, batch_size: int) -> np.ndarray:
    """Start indexes of the batches records of at most ``bound`` bytes fall into: a batch never
    crosses a group end (``group_ends``, exclusive, ascending) and holds at most ``batch_size``
    bytes with its header, except a batch of one record (as the producer's own batches)."""
    cum = np.concatenate(([0], np.cumsum(bound)))
    room = max(1, batch_size - BATCH_HEADER_SIZE)
    starts: List[int] = []
    start = 0
    for end in group_ends.tolist():
        while start < end:
            starts.append(start)
            stop = int(np.searchsorted(cum, cum[start] + room, side="right")) - 1
            start = min(end, max(start + 1, stop))
    return np.asarray(starts, dtype=np.int64)


def encode_batches(keys: BinaryColumn, values: BinaryColumn, group_ends: np.ndarray,
                   batch_size: int) -> Tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """Cut the records into batches (never across a group end, at most ``batch_size`` bytes with
    the header unless a batch holds one record) and encode each record, its offset delta counted
    from its batch's start.

    Returns ``(batch_starts, body, byte_starts, record_sizes)``: batch ``b`` starts at record
    ``batch_starts[b]`` and its records are ``body[byte_starts[b]:byte_starts[b + 1]]``
    (``byte_starts`` has one more entry), and ``record_sizes[i]`` is record ``i``'s size."""
    n = len(keys.lengths)
    kz, ks, vz, vs, base = _record_body_sizes(keys, values)
    body_bound = base + _varint_size(np.array([2 * n], dtype=np.int64))[0]
    batch_starts = _cut_batches(body_bound + _varint_size(2 * body_bound), group_ends,
                                batch_size)
    counts = np.diff(np.append(batch_starts, n))
    delta = np.arange(n, dtype=np.int64) - np.repeat(batch_starts, counts)
    dz = 2 * delta
    ds = _varint_size(dz)
    body_len = base + ds
    lz = 2 * body_len
    ls = _varint_size(lz)
    sizes = ls + body_len
    ends = np.cumsum(sizes)
    start = ends - sizes
    out = np.zeros(int(ends[-1]) if n else 0, dtype=np.uint8)
    _put_varints(out, start, lz, ls)
    pos = start + ls + 2                      # attributes 0, timestamp delta 0
    _put_varints(out, pos, dz, ds)
    pos += ds
    _put_varints(out, pos, kz, ks)
    pos += ks
    _copy_segments(out, pos, keys)
    pos += np.maximum(keys.lengths, 0)
    _put_varints(out, pos, vz, vs)
    _copy_segments(out, pos + vs, values)      # the header count (0) ends the record
    byte_starts = np.append(start[batch_starts], ends[-1] if n else 0)
    return batch_starts, out, byte_starts, sizes
