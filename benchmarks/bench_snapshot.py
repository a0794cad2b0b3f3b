"""Benchmark: snapshot write throughput of the filesystem and S3 state backends.

Writes ``--mb`` MB of state (split into ``--key-groups`` snapshot blobs, as one operator's key
groups would be) through ``StateBackend.write_snapshot`` and compares, in the same run, with

* filesystem: ``shutil.copyfile`` of the same bytes (already in files) to another directory;
* S3: a plain ``boto3`` ``put_object`` of the same bytes to the same server.

The filesystem backend is measured twice: as shipped (``fsync`` of file and directory: durable
checkpoints) and with ``fsync=False`` (what the plain copy does), so the cost of durability is
visible. S3 runs against a local moto server started here unless ``--s3-endpoint`` is given.
Each figure is the median of ``--repeats`` runs; the order of the contenders alternates.

    python benchmarks/bench_snapshot.py --mb 100 --key-groups 16 --repeats 3
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import sys
import tempfile
import time
import uuid
from typing import Callable, Dict, List

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from state_backends.filesystem import FilesystemStateBackend  # noqa: E402
from state_backends.registry import backend_from_uri  # noqa: E402


def timed(fn: Callable[[], None]) -> float:
    start = time.perf_counter()
    fn()
    return time.perf_counter() - start


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--mb", type=int, default=100, help="MB of state per run (default 100)")
    parser.add_argument("--key-groups", type=int, default=16)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--dir", default=None, help="scratch directory (default: a temp dir)")
    parser.add_argument("--s3-endpoint", default=None, help="use this S3 server instead of moto")
    parser.add_argument("--no-s3", action="store_true")
    args = parser.parse_args(argv)

    total = args.mb * 1_000_000
    per_kg = total // args.key_groups
    blobs = [os.urandom(per_kg) for _ in range(args.key_groups)]
    size_mb = per_kg * args.key_groups / 1e6
    scratch = tempfile.mkdtemp(prefix="bench-snapshot-", dir=args.dir)
    results: Dict[str, List[float]] = {}

    def record(name: str, seconds: float) -> None:
        results.setdefault(name, []).append(size_mb / seconds)

    # ---------------------------------------------------------------- filesystem
    src = os.path.join(scratch, "src")
    os.makedirs(src)
    for k, blob in enumerate(blobs):
        with open(os.path.join(src, f"kg-{k}"), "wb") as f:
            f.write(blob)

    def fs_backend(fsync: bool, n: int) -> None:
        backend = FilesystemStateBackend(os.path.join(scratch, f"fs-{fsync}"), fsync=fsync)
        for k, blob in enumerate(blobs):
            backend.write_snapshot(n, "bench", k, blob)

    def fs_copy(n: int) -> None:
        dst = os.path.join(scratch, "copy", f"chk-{n}")
        os.makedirs(dst)
        for k in range(len(blobs)):
            shutil.copyfile(os.path.join(src, f"kg-{k}"), os.path.join(dst, f"kg-{k}"))

    fs_contenders = [("filesystem backend (fsync)", lambda n: fs_backend(True, n)),
                     ("filesystem backend (no fsync)", lambda n: fs_backend(False, n)),
                     ("shutil.copyfile", fs_copy)]
    for r in range(args.repeats):
        order = fs_contenders if r % 2 == 0 else list(reversed(fs_contenders))
        for name, fn in order:
            record(name, timed(lambda: fn(r + 1)))
        for d in ("fs-True", "fs-False", "copy"):
            shutil.rmtree(os.path.join(scratch, d), ignore_errors=True)

    # ---------------------------------------------------------------- S3
    server = None
    if not args.no_s3:
        import boto3

        if args.s3_endpoint:
            kwargs = {"endpoint_url": args.s3_endpoint}
        else:
            from kafka_harness.s3 import S3Server

            server = S3Server().start()
            kwargs = server.client_kwargs()
        client = boto3.client("s3", **kwargs)
        bucket = "bench-" + uuid.uuid4().hex[:8]
        client.create_bucket(Bucket=bucket)
        options = {"s3.endpoint": kwargs["endpoint_url"]}
        if "aws_access_key_id" in kwargs:
            options.update({"s3.access.key": kwargs["aws_access_key_id"],
                            "s3.secret.key": kwargs["aws_secret_access_key"],
                            "s3.region": kwargs["region_name"]})
        backend = backend_from_uri(f"s3://{bucket}/backend", options)
        backend.put("warmup", b"x")  # open the lazy client outside the timing
        client.put_object(Bucket=bucket, Key="warmup", Body=b"x")

        def s3_backend(n: int) -> None:
            for k, blob in enumerate(blobs):
                backend.write_snapshot(n, "bench", k, blob)

        def s3_plain(n: int) -> None:
            for k, blob in enumerate(blobs):
                client.put_object(Bucket=bucket, Key=f"plain/chk-{n}/kg-{k}", Body=blob)

        s3_contenders = [("S3 backend", s3_backend), ("boto3 put_object", s3_plain)]
        try:
            for r in range(args.repeats):
                order = s3_contenders if r % 2 == 0 else list(reversed(s3_contenders))
                for name, fn in order:
                    record(name, timed(lambda: fn(r + 1)))
                backend.delete_prefix(f"chk-{r + 1}")
                for k in range(len(blobs)):
                    client.delete_object(Bucket=bucket, Key=f"plain/chk-{r + 1}/kg-{k}")
        finally:
            if server is not None:
                server.stop()
    shutil.rmtree(scratch, ignore_errors=True)

    # ---------------------------------------------------------------- report
    med = {k: statistics.median(v) for k, v in results.items()}
    baselines = {"filesystem backend (fsync)": "shutil.copyfile",
                 "filesystem backend (no fsync)": "shutil.copyfile",
                 "shutil.copyfile": "shutil.copyfile",
                 "S3 backend": "boto3 put_object", "boto3 put_object": "boto3 put_object"}
    print(f"snapshot write throughput: {size_mb:.0f} MB in {args.key_groups} key groups "
          f"({per_kg / 1e6:.2f} MB each), median of {args.repeats} runs, {os.cpu_count()} CPUs")
    print(f"{'writer':32} {'MB/s':>9} {'runs MB/s':>26} {'vs baseline':>12}")
    for name, value in med.items():
        runs = ", ".join(f"{x:.0f}" for x in results[name])
        ratio = value / med[baselines[name]]
        print(f"{name:32} {value:9.1f} {runs:>26} {ratio:11.2f}x")
    return 0


if __name__ == "__main__":
    sys.exit(main())
