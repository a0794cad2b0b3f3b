"""The keyed operator's cost per key group and micro-batch, in-process (no Spark, not a test).

    python benchmarks/bench_key_group.py [--batches 60] [--sizes 78x8,625x62,3125x62]
    python benchmarks/bench_key_group.py --sizes "" --ranges 156x8x64,625x62x8 \
        --ranges-format arrow,pandas --backend memory

``applyInPandasWithState`` calls the operator once per key group and batch
(:func:`barrier_ops.key_group_state.run_batch`). This replays that call with a frame shaped like
the one PySpark hands it in ``bench_pipeline.py`` (the source's columns plus ``__kg``: records of
four input partitions, then a barrier per partition, a checkpoint every batch), the runtime's
pickled state carried from batch to batch as ``GroupState`` carries it, and snapshots written to
a filesystem backend in a temporary folder. A size ``RxK`` is R records of K keys a key group:
78x8 is a 10,000-record batch of 997 keys spread over 128 key groups (the default
``max_parallelism``), 625x62 the same over 16. ``RxKxS``: each batch's K keys are the next K of S
keys, so the key group's state grows to S keys (after S/K batches; choose ``--warmup`` to match)
while a batch touches K of them: 625x625x6250 is a 10,000-record batch of 10,000 distinct keys out
of 100,000, over 16 key groups. The table gives the median and best ms per call
after ``--warmup`` calls, for one output row per key (``LatestCount``) and per record
(``RunningCount``), packed as the operator packs them in a session whose time zone is UTC, with
each key's records as a pandas frame and as an Arrow record batch (``records_format``).
PySpark's own work per group (Arrow to pandas, the state row, the output's conversion) is not
included.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import tempfile
import time
from typing import Optional

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

import numpy as np  # noqa: E402
import pandas as pd  # noqa: E402

EPOCH_MS = 1767225600000
PARTITIONS = 4


def key_group_frame(batch: int, records: int, keys: int,
                    state_keys: Optional[int] = None) -> pd.DataFrame:
    """One key group's rows of micro-batch ``batch``: ``records`` records of ``keys`` keys
    spread over four input partitions, then each partition's barrier of checkpoint
    ``batch + 1`` (dtypes as PySpark's Arrow-to-pandas conversion gives them). With
    ``state_keys`` the keys are the batch's turn of ``state_keys`` keys, not the same every
    batch."""
    offsets = batch * records + np.arange(records)
    channels = json.dumps([f"t:{p}" for p in range(PARTITIONS)])
    first = batch * keys if state_keys else 0
    span = state_keys or keys
    rows = pd.DataFrame({
        "key": pd.Series([b"k%d" % ((first + i % keys) % span) for i in range(records)],
                         dtype=object),
        "value": pd.Series([b"v%07d" % i for i in offsets], dtype=object),
        "topic": ["t"] * records,
        "partition": (np.arange(records) % PARTITIONS).astype("int32"),
        "offset": offsets.astype("int64"),
        "timestamp": pd.to_datetime(EPOCH_MS + offsets, unit="ms"),
        "timestampType": np.zeros(records, "int32"),
        "kind": ["record"] * records,
        "checkpoint_id": np.full(records, batch + 1, "int64"),
        "checkpoint_timestamp": np.full(records, np.nan),
        "barrier_channels": [None] * records,
        "__kg": np.full(records, 3, "int32")})
    barriers = pd.DataFrame({
        "key": [None] * PARTITIONS, "value": [None] * PARTITIONS, "topic": ["t"] * PARTITIONS,
        "partition": np.arange(PARTITIONS, dtype="int32"),
        "offset": np.full(PARTITIONS, (batch + 1) * records, "int64"),
        "timestamp": pd.to_datetime([EPOCH_MS] * PARTITIONS, unit="ms"),
        "timestampType": np.zeros(PARTITIONS, "int32"), "kind": ["barrier"] * PARTITIONS,
        "checkpoint_id": np.full(PARTITIONS, batch + 1, "int64"),
        "checkpoint_timestamp": np.full(PARTITIONS, float(EPOCH_MS)),
        "barrier_channels": [channels] * PARTITIONS, "__kg": np.full(PARTITIONS, 3, "int32")})
    return pd.concat([rows, barriers], ignore_index=True)


def measure(records: int, keys: int, per_key: bool, batches: int, warmup: int,
            records_format: str = "pandas", state_keys: Optional[int] = None):
    """Median and best ms of ``run_batch`` for one key group over ``batches`` batches."""
    from barrier_ops.key_group_state import run_batch

    frames = [key_group_frame(b, records, keys, state_keys) for b in range(batches)]
    return _timed(run_batch, 3, per_key, frames, warmup, max_parallelism=16,
                  records_format=records_format)


def _timed(run, group: int, per_key: bool, frames, warmup: int, backend: str = "file",
           **options):
    """Median and best ms of ``run`` (``run_batch`` or ``run_range``) on each frame in turn for
    group ``group``, counting per key or per record, its state value carried from call to call
    as ``GroupState`` carries it and snapshots written to a temporary folder (``backend``
    "file") or kept inline (``"memory"``: no file I/O, the operator's CPU alone); and the last
    call's output rows. ``options``: the operator's (:class:`OperatorOptions`)."""
    from barrier_core.schema import source_schema
    from barrier_ops.arrow_records import arrow_record_types
    from barrier_ops.examples.running_count import RunningCount
    from barrier_ops.function import as_keyed_function
    from barrier_ops.options import RECORDS_ARROW, OperatorOptions
    from benchmarks.bench_pipeline import LatestCount

    fn = as_keyed_function(LatestCount() if per_key else RunningCount(), None)
    types = (arrow_record_types(source_schema())
             if options.get("records_format") == RECORDS_ARROW else None)
    blob, times, rows = None, [], 0
    with tempfile.TemporaryDirectory(prefix="bench-kg-") as snapshots:
        uri = "file://" + snapshots if backend == "file" else "memory://bench-key-group"
        opts = OperatorOptions("count", uri, **options)
        for frame in frames:
            started = time.perf_counter()
            out, blob = run(opts, fn, "key", ["key", "value"], group, blob, [frame], 0, 32,
                            "UTC", types)
            times.append((time.perf_counter() - started) * 1000)
            rows = len(out)
    kept = times[warmup:]
    return statistics.median(kept), min(kept), rows


def range_frame(batch: int, records: int, keys: int, key_groups: int) -> pd.DataFrame:
    """The rows of one range of ``key_groups`` key groups (``keyed_process(parallelism=...)``):
    each key group's :func:`key_group_frame` with its own keys, interleaved as the shuffle
    delivers them (a fixed permutation), with the ``__kgr`` column of range 0."""
    frames = []
    for kg in range(key_groups):
        f = key_group_frame(batch, records, keys)
        f["key"] = [None if k is None else b"g%d:%s" % (kg, k) for k in f["key"]]
        f["__kg"] = np.full(len(f), kg, "int32")
        frames.append(f)
    pdf = pd.concat(frames, ignore_index=True)
    order = np.random.default_rng(batch).permutation(len(pdf))
    pdf = pdf.take(order).reset_index(drop=True)
    pdf["__kgr"] = np.zeros(len(pdf), "int32")
    return pdf


def measure_range(records: int, keys: int, key_groups: int, per_key: bool, batches: int,
                  warmup: int, records_format: str = "arrow", backend: str = "file"):
    """Median and best ms of ``run_range`` for one range of ``key_groups`` key groups (output
    packed), each key group ``records`` records of ``keys`` keys a batch."""
    from barrier_ops.key_group_state import run_range

    frames = [range_frame(b, records, keys, key_groups) for b in range(batches)]
    return _timed(run_range, 0, per_key, frames, warmup, backend,
                  max_parallelism=2 * key_groups, records_format=records_format, parallelism=2)


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--batches", type=int, default=60)
    parser.add_argument("--warmup", type=int, default=10)
    parser.add_argument("--sizes", default="78x8,625x62,3125x62",
                        help="comma-separated RECORDSxKEYS[xSTATE] of one key group's batch "
                             "(STATE: the keys its state holds, default KEYS)")
    parser.add_argument("--ranges", default="",
                        help="comma-separated RECORDSxKEYSxGROUPS: also time run_range over "
                             "GROUPS key groups of RECORDSxKEYS each (parallelism 2), e.g. "
                             "625x62x8 for a 10,000-record batch of 997 keys")
    parser.add_argument("--ranges-format", default="arrow",
                        help="comma-separated records formats of the ranges: arrow, pandas")
    parser.add_argument("--backend", choices=("file", "memory"), default="file",
                        help="file: snapshots written and synced to a temporary folder; "
                             "memory: kept inline (no file I/O)")
    args = parser.parse_args()
    if args.batches <= args.warmup:
        parser.error("--batches must be larger than --warmup")
    if args.ranges:
        formats = args.ranges_format.split(",")
        unknown = set(formats) - {"arrow", "pandas"}
        if unknown:
            parser.error(f"--ranges-format: unknown {sorted(unknown)}; choose arrow, pandas")
        print(f"one range of key groups in-process (run_range, output packed, snapshots "
              f"{'in files' if args.backend == 'file' else 'inline'}), "
              f"{args.batches - args.warmup} calls after {args.warmup}; load average "
              f"{os.getloadavg()[0]:.1f}")
        print(f"{'records':>8} {'keys':>6} {'groups':>7} {'output':<11} {'records as':<10} "
              f"{'median ms':>10} {'best ms':>8} {'out rows':>9}")
        for size in args.ranges.split(","):
            records, keys, groups = (int(x) for x in size.split("x"))
            for per_key in (True, False):
                for fmt in formats:
                    med, best, rows = measure_range(records, keys, groups, per_key,
                                                    args.batches, args.warmup, fmt,
                                                    args.backend)
                    print(f"{records:>8} {keys:>6} {groups:>7} "
                          f"{'per key' if per_key else 'per record':<11} {fmt:<10} "
                          f"{med:>10.2f} {best:>8.2f} {rows:>9}")
        if not args.sizes:
            return 0
    print(f"one key group's micro-batch in-process (run_batch), {args.batches - args.warmup} "
          f"calls after {args.warmup}; load average {os.getloadavg()[0]:.1f}")
    print(f"{'records':>8} {'keys':>6} {'state':>7} {'output':<11} {'records as':<10} "
          f"{'median ms':>10} {'best ms':>8} {'out rows':>9}")
    for size in args.sizes.split(","):
        parts = [int(x) for x in size.split("x")]
        if len(parts) not in (2, 3):
            parser.error(f"size {size!r}: expected RECORDSxKEYS or RECORDSxKEYSxSTATE")
        records, keys = parts[:2]
        state_keys = parts[2] if len(parts) == 3 else None
        for per_key in (True, False):
            for fmt in ("pandas", "arrow"):
                med, best, rows = measure(records, keys, per_key, args.batches, args.warmup,
                                          fmt, state_keys)
                print(f"{records:>8} {keys:>6} {state_keys or keys:>7} "
                      f"{'per key' if per_key else 'per record':<11} "
                      f"{fmt:<10} {med:>10.2f} {best:>8.2f} {rows:>9}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
