"""One operator call over a range of key groups, snapshots uploaded together or one by one,
as each is taken or at the call's end (in-process, no Spark; not a test).

    python benchmarks/bench_snapshot_uploads.py [--key-groups 8,32] [--batches 30] [--rounds 3]
    python benchmarks/bench_snapshot_uploads.py --key-groups 64 --records 781 --no-s3

With ``keyed_process(..., parallelism=P)`` Spark calls the operator once per range of key groups
(:func:`barrier_ops.key_group_state.run_range`); every key group in it takes a snapshot at each
checkpoint. This replays such calls (each key group 78 records of 8 keys, a checkpoint every
batch, one row per key, state carried from call to call) with the snapshots going to a local
folder (fsync, as shipped) and to S3 (a moto server started here), and compares the uploads as
shipped (concurrent, :mod:`barrier_ops.snapshot_uploads`) with the same calls writing one
snapshot after another (one upload thread: what the operator did before), and uploads that start
as each snapshot is taken with uploads that start once the call's key groups are done (the
backend's ``overlap_uploads``: as taken on S3, at the end on a local folder). Contenders alternate
within each round; the table gives the median ms per call over all rounds, ``*`` marking what
ships.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
import time
import uuid

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

import pandas as pd  # noqa: E402

from benchmarks.bench_key_group import key_group_frame  # noqa: E402


def range_frames(batch: int, key_groups: int, records: int = 78):
    """The rows of one call: ``key_groups`` key groups' batch of ``records`` records each
    (barriers included), each tagged with its key group, the range column set."""
    from barrier_ops.key_group_state import KEY_GROUP_COLUMN, RANGE_COLUMN

    frames = []
    for kg in range(key_groups):
        f = key_group_frame(batch, records, 8)
        f["key"] = [None if k is None else b"%d-" % kg + k for k in f["key"]]
        f[KEY_GROUP_COLUMN] = kg
        f[RANGE_COLUMN] = 0
        frames.append(f)
    return [pd.concat(frames, ignore_index=True)]


def set_upload_threads(n: int) -> None:
    """Replace the worker's upload pool by one of ``n`` threads (1: one upload at a time)."""
    from barrier_ops import snapshot_uploads

    if snapshot_uploads._pool is not None:
        snapshot_uploads._pool.shutdown(wait=True)
    snapshot_uploads._pool = None
    snapshot_uploads.UPLOAD_THREADS = n


def set_overlap(backend_cls, overlap: bool) -> None:
    """Make ``backend_cls``'s uploads start as each snapshot is taken (True) or at the call's
    end (False)."""
    backend_cls.overlap_uploads = overlap


def run_calls(backend_uri: str, options: dict, key_groups: int, batches: int,
              records: int = 78) -> list:
    """ms per call of ``batches`` calls of one range of ``key_groups`` key groups."""
    from barrier_ops.function import as_keyed_function
    from barrier_ops.key_group_state import run_range
    from barrier_ops.options import OperatorOptions
    from benchmarks.bench_pipeline import LatestCount

    opts = OperatorOptions("count", backend_uri, key_groups, parallelism=1,
                           state_backend_options=options)
    fn = as_keyed_function(LatestCount(), None)
    frames = [range_frames(b, key_groups, records) for b in range(batches)]
    blob, times = None, []
    for f in frames:
        started = time.perf_counter()
        _out, blob = run_range(opts, fn, "key", ["key", "value"], 0, blob, f, 0, 32, "UTC")
        times.append((time.perf_counter() - started) * 1000)
    return times[2:]   # the first calls open the backend and its client


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--key-groups", default="8,32", help="comma-separated key groups a call")
    parser.add_argument("--batches", type=int, default=30)
    parser.add_argument("--records", type=int, default=78, help="records a key group and call")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--no-s3", action="store_true")
    args = parser.parse_args()

    from barrier_ops import snapshot_uploads
    from state_backends.filesystem import FilesystemStateBackend
    from state_backends.s3 import S3StateBackend

    shipped = snapshot_uploads.UPLOAD_THREADS
    s3_server = None
    stores = []
    with tempfile.TemporaryDirectory(prefix="bench-uploads-") as scratch:
        stores.append(("folder", lambda: "file://" + os.path.join(scratch, uuid.uuid4().hex),
                       {}, FilesystemStateBackend))
        if not args.no_s3:
            import boto3

            from kafka_harness.s3 import S3Server

            s3_server = S3Server().start()
            boto3.client("s3", **s3_server.client_kwargs()).create_bucket(Bucket="bench-uploads")
            s3_options = {"s3.endpoint": s3_server.endpoint_url,
                          "s3.access.key": s3_server.access_key,
                          "s3.secret.key": s3_server.secret_key, "s3.region": s3_server.region}
            stores.append(("S3 (moto)", lambda: f"s3://bench-uploads/{uuid.uuid4().hex}",
                           s3_options, S3StateBackend))
        try:
            print(f"one operator call over a range of key groups (run_range), {args.batches - 2} "
                  f"calls x {args.rounds} rounds; load average {os.getloadavg()[0]:.1f}")
            print(f"{'storage':<10} {'key groups':>10} {'one by one ms':>14} "
                  f"{'together, at end ms':>20} {'together, as taken ms':>22} {'end/taken':>9}")
            for name, uri, options, backend_cls in stores:
                overlap = backend_cls.overlap_uploads
                contenders = (("one by one", 1, overlap), ("at end", shipped, False),
                              ("as taken", shipped, True))
                for kgs in [int(k) for k in args.key_groups.split(",")]:
                    times = {c[0]: [] for c in contenders}
                    try:
                        for _ in range(args.rounds):
                            for label, threads, starts_as_taken in contenders:
                                set_upload_threads(threads)
                                set_overlap(backend_cls, starts_as_taken)
                                times[label] += run_calls(uri(), options, kgs, args.batches,
                                                          args.records)
                    finally:
                        set_overlap(backend_cls, overlap)
                    ms = {label: statistics.median(t) for label, t in times.items()}
                    mark = {"at end": "" if overlap else "*", "as taken": "*" if overlap else ""}
                    print(f"{name:<10} {kgs:>10} {ms['one by one']:>14.1f} "
                          f"{ms['at end']:>19.1f}{mark['at end'] or ' '} "
                          f"{ms['as taken']:>21.1f}{mark['as taken'] or ' '} "
                          f"{ms['as taken'] / ms['at end']:>8.2f}x")
        finally:
            set_upload_threads(shipped)
            if s3_server is not None:
                s3_server.stop()
    return 0


if __name__ == "__main__":
    sys.exit(main())
