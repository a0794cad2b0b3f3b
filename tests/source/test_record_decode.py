"""The fetch decoder (:mod:`barrier_source.record_decode`) against kafka-python's own record
reader, on buffers built with kafka-python's record batch builder: many small batches, record
sizes that change inside a batch (every few records, or at every record), null keys and values,
headers, compressed batches next to plain ones. No broker: the buffers are what a fetch returns.
"""

from __future__ import annotations

import random

import numpy as np
import pytest

from barrier_source import record_decode as rd


def _batch(base_offset: int, records, compression: int = 0) -> bytes:
    from kafka.record.default_records import DefaultRecordBatchBuilder

    builder = DefaultRecordBatchBuilder(magic=2, compression_type=compression,
                                        is_transactional=False, producer_id=-1,
                                        producer_epoch=-1, base_sequence=-1,
                                        batch_size=1 << 30)
    for delta, (ts, key, value, headers) in enumerate(records):
        assert builder.append(delta, timestamp=ts, key=key, value=value, headers=headers)
    buf = bytearray(builder.build())
    buf[0:8] = base_offset.to_bytes(8, "big", signed=True)  # not covered by the CRC
    return bytes(buf)


def _expected(buf: bytes):
    from kafka.record import MemoryRecords

    out = []
    records = MemoryRecords(buf)
    while records.has_next():
        for r in records.next_batch():
            out.append((r.offset, r.timestamp, r.key, r.value,
                        [(k, bytes(v) if v is not None else None) for k, v in r.headers]))
    return out


def _decoded(buf: bytes, with_headers: bool, plain: bool = False):
    """Decoded by batch (``decode_segments``, any batch) or, with ``plain``, straight from the
    batch table (``decode_plain``, the range read's path for uncompressed batches)."""
    if plain:
        table = rd.batch_table(buf)
        assert table.is_plain().all()
        got = rd.decode_plain(buf, table, np.arange(len(table)), with_headers)
    else:
        segments = [(*rd.decompress_batch(buf, pos, hdr), hdr)
                    for hdr, pos in rd.iter_batches(buf)]
        got = rd.decode_segments(segments, with_headers)
    headers = got.headers if with_headers else [[]] * len(got)
    return [(int(o), int(t), k, v, h or [])
            for o, t, k, v, h in zip(got.offsets, got.timestamps_ms, got.keys.to_pylist(),
                                     got.values.to_pylist(), headers)]


def _record(rng: random.Random, ts: int, size: int, headers: bool):
    key = None if rng.random() < 0.2 else b"k%d" % rng.randrange(10 ** rng.randrange(1, 6))
    value = None if rng.random() < 0.05 else bytes(rng.randrange(256) for _ in range(size))
    hs = [("h%d" % i, b"v" * rng.randrange(3)) for i in range(rng.randrange(3))] if headers \
        else []
    return ts, key, value, hs


@pytest.mark.parametrize("layout", ["uniform", "changes every few records", "every record",
                                    "one record a batch"])
def test_many_batches_decode_as_kafka_python_reads_them(layout):
    rng = random.Random(layout)
    buf, offset, ts = b"", 1_000, 1_700_000_000_000
    for b in range(60):
        n = 1 if layout == "one record a batch" else rng.randrange(1, 300)
        records = []
        for i in range(n):
            size = {"uniform": 100, "changes every few records": 100 + 40 * (i // 7),
                    "every record": rng.randrange(0, 400)}.get(layout, rng.randrange(0, 2000))
            ts += rng.choice([0, 1, 1000, 200_000])  # timestamp deltas of 1 to 3 varint bytes
            records.append(_record(rng, ts, size, headers=False))
        buf += _batch(offset, records)
        offset += n + rng.choice([0, 0, 5])  # gaps, as compaction or markers leave them
    expected = _expected(buf)
    assert _decoded(buf, with_headers=False) == expected
    assert _decoded(buf, with_headers=False, plain=True) == expected


def test_the_batch_table_stops_at_the_batch_that_reaches_the_range_end_and_skips_a_cut_batch():
    buf = b"".join(_batch(base, [(5, b"k", b"v" * 30, [])] * 10) for base in (0, 10, 20, 30))
    table = rd.batch_table(buf[:-7])  # the last batch cut by the fetch size limit
    assert table.base_offsets.tolist() == [0, 10, 20]
    assert table.last_offsets.tolist() == [9, 19, 29]
    assert table.record_counts.tolist() == [10, 10, 10]
    assert rd.batch_table(buf, until=15).base_offsets.tolist() == [0, 10]
    assert rd.batch_table(buf, until=20).base_offsets.tolist() == [0, 10]
    assert [h.base_offset for h, _ in rd.iter_batches(buf, 21)] == [0, 10, 20]


def test_headers_and_compressed_batches_next_to_plain_ones():
    from kafka.record.default_records import DefaultRecordBatch

    rng = random.Random(7)
    buf, offset = b"", 0
    for b in range(12):
        compression = (0, DefaultRecordBatch.CODEC_GZIP)[b % 2]
        records = [_record(rng, 1_000 + i, rng.randrange(0, 300), headers=True)
                   for i in range(rng.randrange(1, 50))]
        buf += _batch(offset, records, compression)
        offset += len(records)
    assert _decoded(buf, with_headers=True) == _expected(buf)
