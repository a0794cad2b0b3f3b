"""Whole-column record encoding (barrier_sink.record_batches) against kafka-python's own
per-record builder and partitioner: the same bytes, the same partitions, the same batch cuts."""

from __future__ import annotations

import random

import numpy as np
import pyarrow as pa
import pytest
from kafka.partitioner.default import murmur2 as kafka_murmur2
from kafka.record.default_records import DefaultRecordBatchBuilder

from barrier_sink.record_batches import (BinaryColumn, default_partitions, encode_batches,
                                         murmur2)

TS = 1_700_000_000_123


def _random_records(n, seed, null_values=True):
    rng = random.Random(seed)
    lengths = [0, 1, 2, 3, 4, 5, 7, 8, 12, 13, 60, 63, 64, 65, 200, 8191, 8200]
    keys = [bytes(rng.randrange(256) for _ in range(rng.choice(lengths[:12])))
            for _ in range(n)]
    values = [None if null_values and rng.random() < 0.1
              else bytes(rng.randrange(256) for _ in range(rng.choice(lengths)))
              for _ in range(n)]
    return keys, values


def _kafka_batches(keys, values, batch_size):
    """What kafka-python's builder makes of the records, cut where its append refuses."""
    batches, builder = [], None
    for k, v in zip(keys, values):
        if builder is None or builder.append(builder._num_records, TS, k, v, []) is None:
            builder = DefaultRecordBatchBuilder(2, 0, False, -1, -1, -1, batch_size)
            batches.append(builder)
            assert builder.append(0, TS, k, v, []) is not None
    return [bytes(b._buffer[DefaultRecordBatchBuilder.HEADER_STRUCT.size:]) for b in batches]


@pytest.mark.parametrize("seed", range(4))
def test_murmur2_matches_kafka_pythons_for_every_key_length(seed):
    keys, _ = _random_records(500, seed)
    keys += [b"", b"a", b"ab", b"abc", b"abcd", b"\xff" * 9, b"key-42"]
    column = BinaryColumn.from_arrow(pa.array(keys, pa.binary()))
    assert murmur2(column).tolist() == [kafka_murmur2(k) for k in keys]


def test_default_partitions_match_the_producers_partitioner_on_a_sliced_array():
    keys = [b"key-%d" % i for i in range(3000)]
    array = pa.array([b"x"] * 7 + keys, pa.large_binary()).slice(7)
    parts = [0, 1, 2, 3, 4, 5]
    expected = [parts[(kafka_murmur2(k) & 0x7FFFFFFF) % len(parts)] for k in keys]
    assert default_partitions(BinaryColumn.from_arrow(array), parts).tolist() == expected


@pytest.mark.parametrize("batch_size", [200, 16384, 1 << 20])
@pytest.mark.parametrize("seed", range(3))
def test_encoded_batches_are_byte_for_byte_kafka_pythons(seed, batch_size):
    keys, values = _random_records(400, seed)
    key_col = BinaryColumn.from_arrow(pa.array(keys, pa.binary()))
    value_col = BinaryColumn.from_arrow(pa.array(values, pa.binary()))
    starts, body, byte_starts, sizes = encode_batches(key_col, value_col,
                                                      np.array([len(keys)]), batch_size)
    ours = [bytes(body[byte_starts[b]:byte_starts[b + 1]]) for b in range(len(starts))]
    theirs = _kafka_batches(keys, values, batch_size)
    assert sum(map(len, ours)) == sum(map(len, theirs)) == int(sizes.sum())
    # Each of our batches is a valid kafka-python batch: re-encode its records one by one.
    bounds = list(starts) + [len(keys)]
    for b in range(len(starts)):
        expected = _kafka_batches(keys[bounds[b]:bounds[b + 1]], values[bounds[b]:bounds[b + 1]],
                                  1 << 30)
        assert ours[b] == expected[0]
        assert (DefaultRecordBatchBuilder.HEADER_STRUCT.size + len(ours[b]) <= batch_size
                or bounds[b + 1] - bounds[b] == 1)
    # Our cuts are never looser than the producer's and at most one record per batch tighter.
    assert len(theirs) <= len(ours) <= len(theirs) + max(1, len(theirs))


def test_batches_never_cross_a_group_end_and_null_keys_encode_as_minus_one():
    keys = [None, b"a", None, b"bb"]
    values = [b"v1", None, b"", b"v4"]
    key_col = BinaryColumn.from_arrow(pa.array(keys, pa.binary()))
    value_col = BinaryColumn.from_arrow(pa.array(values, pa.binary()))
    starts, body, byte_starts, _ = encode_batches(key_col, value_col, np.array([1, 3, 4]),
                                                  1 << 20)
    assert starts.tolist() == [0, 1, 3]
    ours = [bytes(body[byte_starts[b]:byte_starts[b + 1]]) for b in range(3)]
    assert ours == (_kafka_batches(keys[:1], values[:1], 1 << 20)
                    + _kafka_batches(keys[1:3], values[1:3], 1 << 20)
                    + _kafka_batches(keys[3:], values[3:], 1 << 20))


@pytest.mark.parametrize("type_", [pa.string(), pa.large_string(), pa.binary()])
def test_a_string_column_with_nulls_compares_to_a_value(type_):
    words = ["pad", "record", None, "barrier", "recor", "record", "", None, "ack", "records"]
    array = pa.array(words, type_).slice(1)
    column = BinaryColumn.from_arrow(array)
    assert column.equals(b"record").tolist() == [w == "record" for w in words[1:]]
    assert column.equals(b"").tolist() == [w == "" for w in words[1:]]
    assert (column.lengths == -1).tolist() == [w is None for w in words[1:]]
