"""Decoding a fetch's records: the source's decoder against kafka-python's own record reader, on
buffers of 50,000 100-byte records in record batches of 2,500, 100, 10 and 1 record(s) (not a
timed test; no broker, no Spark).

    python benchmarks/bench_decode.py [--records 50000] [--baseline OLD_record_decode.py]

The decoder runs as a range read runs it on uncompressed batches
(:func:`barrier_source.record_decode.batch_table`, then ``decode_plain``); kafka-python's reader
(``MemoryRecords``, one Python object per record) is what the source would otherwise use.
``--baseline`` loads another version of ``barrier_source/record_decode.py`` (for instance
``git show 3b9d4b5:barrier_source/record_decode.py > old_decode.py``) and adds its per-batch path
(``iter_batches``, ``decode_segments``) as a column. Each figure is the best of ``--repeats``.
"""

from __future__ import annotations

import argparse
import importlib.util
import os
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

import numpy as np  # noqa: E402

from barrier_source import record_decode as rd  # noqa: E402

BATCH_SIZES = (2500, 100, 10, 1)


def fetch_buffer(records: int, per_batch: int, value_bytes: int = 100) -> bytes:
    """``records`` records in batches of ``per_batch``, back to back, as a fetch returns them."""
    from kafka.record.default_records import DefaultRecordBatchBuilder

    builder = DefaultRecordBatchBuilder(magic=2, compression_type=0, is_transactional=False,
                                        producer_id=-1, producer_epoch=-1, base_sequence=-1,
                                        batch_size=1 << 30)
    for i in range(per_batch):
        builder.append(i, timestamp=1_700_000_000_000 + i, key=b"key%05d" % (i % 997),
                       value=b"x" * value_bytes, headers=[])
    one = bytes(builder.build())
    out = bytearray()
    for k in range(records // per_batch):
        batch = bytearray(one)
        batch[0:8] = (k * per_batch).to_bytes(8, "big")  # base offset (outside the CRC)
        out += batch
    return bytes(out)


def decode_plain(buf: bytes) -> int:
    table = rd.batch_table(buf)
    return len(rd.decode_plain(buf, table, np.arange(len(table)), False))


def decode_by_batch(module, buf: bytes) -> int:
    segments = [(*module.decompress_batch(buf, pos, hdr), hdr)
                for hdr, pos in module.iter_batches(buf)]
    return len(module.decode_segments(segments, False))


def kafka_python(buf: bytes) -> int:
    from kafka.record import MemoryRecords

    n, records = 0, MemoryRecords(buf)
    while records.has_next():
        for record in records.next_batch():
            n += record.value is not None
    return n


def best_seconds(fn, buf: bytes, records: int, repeats: int) -> float:
    times = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        got = fn(buf)
        times.append(time.perf_counter() - t0)
        if got != records:
            raise RuntimeError(f"decoded {got} of {records} records")
    return min(times)


def load_baseline(path: str):
    spec = importlib.util.spec_from_file_location("baseline_record_decode", path)
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # dataclasses look their module up
    spec.loader.exec_module(module)
    return module


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--records", type=int, default=50_000)
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--baseline", help="another record_decode.py to compare with")
    args = parser.parse_args()
    baseline = load_baseline(args.baseline) if args.baseline else None
    print(f"{args.records:,} records of 100 bytes, best of {args.repeats}, "
          f"load average {os.getloadavg()[0]:.1f}")
    header = "| records a batch | decoder rec/s | kafka-python rec/s | decoder / kafka-python |"
    if baseline:
        header += " baseline rec/s | decoder / baseline |"
    print(header)
    print("|" + "---|" * (header.count("|") - 1))
    for per_batch in BATCH_SIZES:
        buf = fetch_buffer(args.records, per_batch)
        ours = args.records / best_seconds(decode_plain, buf, args.records, args.repeats)
        peer = args.records / best_seconds(kafka_python, buf, args.records, 1)
        row = f"| {per_batch:,} | {ours:,.0f} | {peer:,.0f} | {ours / peer:.1f}x |"
        if baseline:
            old = args.records / best_seconds(lambda b: decode_by_batch(baseline, b), buf,
                                              args.records, args.repeats)
            row += f" {old:,.0f} | {ours / old:.1f}x |"
        print(row, flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
