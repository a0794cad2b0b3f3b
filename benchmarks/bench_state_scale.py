"""Benchmark: what a checkpoint writes when few keys change, full vs incremental snapshots.

One keyed operator holds ``--keys`` keys (a running count each) in ``--key-groups`` key groups.
Each checkpoint first updates ``--touched`` of the keys (drawn at random, the same draws for both
modes), then every key group snapshots through the operator's own code
(:mod:`barrier_ops.snapshots`) into a filesystem state backend, and the checkpoint's metadata is
written with retention (``CompletedCheckpointStore.add``, one retained), as the coordinator does.
The two modes run alternately (``--rounds`` rounds of ``--checkpoints`` checkpoints each):

* ``full``: ``keyed_process(..., incremental_checkpoints=False)`` (the default);
* ``incremental``: ``incremental_checkpoints=True``: deltas of the touched keys, chained on the
  last full snapshot.

Printed per mode (medians over checkpoints after the first, which is full in both): bytes written
per checkpoint and their share of the whole state, seconds per checkpoint (snapshot + metadata +
retention), and a restore of the last checkpoint (read and fold every key group) with its time,
bytes read, and whether the restored state equals the live one.

    python benchmarks/bench_state_scale.py --keys 1000000 --touched 0.01 --checkpoints 30
"""

from __future__ import annotations

import argparse
import os
import random
import shutil
import statistics
import sys
import tempfile
import time
from typing import Dict, List

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from barrier_ops.snapshots import (IncrementalSnapshots, encode_full, fold,  # noqa: E402
                                   snapshot_parts)
from barrier_ops.state import KeyedStateStore  # noqa: E402
from state_backends.checkpoint_store import CompletedCheckpointStore  # noqa: E402
from state_backends.filesystem import FilesystemStateBackend  # noqa: E402
from state_backends.metadata import CheckpointMetadata  # noqa: E402

OP = "bench"


def build_state(keys: int, key_groups: int) -> List[KeyedStateStore]:
    stores = [KeyedStateStore() for _ in range(key_groups)]
    for k in range(keys):
        stores[k % key_groups].put(f"key-{k}", "count", 1)
    return stores


def run_mode(incremental: bool, stores: List[KeyedStateStore], draws: List[List[int]],
             root: str, key_groups: int) -> Dict[str, object]:
    backend = FilesystemStateBackend(root, fsync=False)
    store = CompletedCheckpointStore(backend, num_retained=1)
    tracking = [IncrementalSnapshots() for _ in range(key_groups)] if incremental else None
    written, seconds = [], []
    for n, touched in enumerate(draws, start=1):
        for k in touched:
            kg = k % key_groups
            key = f"key-{k}"
            stores[kg].put(key, "count", stores[kg].get(key, "count", 0) + 1)
            if tracking is not None:
                tracking[kg].touch(key)
        started = time.perf_counter()
        handles = []
        for kg, kg_store in enumerate(stores):
            header = {"operator_id": OP, "key_group": kg, "max_parallelism": key_groups,
                      "checkpoint_id": n, "output_seq": 0}
            if tracking is None:
                blob, chain = encode_full(header, kg_store), ()
            else:
                blob, chain = tracking[kg].encode(header, kg_store)
            handle = backend.write_snapshot(n, OP, kg, blob, chain)
            if tracking is not None:
                tracking[kg].written(handle)
            handles.append(handle)
        store.add(CheckpointMetadata(n, n, n, {}, tuple(handles)))
        seconds.append(time.perf_counter() - started)
        written.append(sum(h.size_bytes for h in handles))
    last = store.load(len(draws))
    metadata_bytes = len(backend.get(f"chk-{len(draws)}/_metadata"))
    started = time.perf_counter()
    exact, read = True, 0
    for kg in range(key_groups):
        blobs, path = snapshot_parts(backend, f"chk-{len(draws)}", OP, kg, True)
        read += sum(len(b) for b in blobs)
        _, restored = fold(blobs, path, OP, key_groups)
        exact &= restored.data == stores[kg].data
    restore_s = time.perf_counter() - started
    stored = sum(os.path.getsize(os.path.join(d, f)) for d, _, files in os.walk(root)
                 for f in files)
    return {"written": written, "seconds": seconds, "restore_s": restore_s, "read": read,
            "exact": exact, "full": sum(len(encode_full({}, s)) for s in stores),
            "stored": stored, "parts": max(len(h.parts) for h in last.operators),
            "metadata": metadata_bytes}


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--keys", type=int, default=1_000_000)
    parser.add_argument("--touched", type=float, default=0.01,
                        help="share of the keys updated before each checkpoint (default 0.01)")
    parser.add_argument("--checkpoints", type=int, default=30)
    parser.add_argument("--key-groups", type=int, default=128)
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--seed", type=int, default=7)
    parser.add_argument("--dir", default=None, help="scratch directory (default: a temp dir)")
    args = parser.parse_args(argv)

    rng = random.Random(args.seed)
    per_checkpoint = max(1, int(args.keys * args.touched))
    draws = [rng.sample(range(args.keys), per_checkpoint) for _ in range(args.checkpoints)]
    scratch = tempfile.mkdtemp(prefix="bench-state-scale-", dir=args.dir)
    results: Dict[str, List[dict]] = {"full": [], "incremental": []}
    try:
        for r in range(args.rounds):
            order = ["full", "incremental"] if r % 2 == 0 else ["incremental", "full"]
            for mode in order:
                stores = build_state(args.keys, args.key_groups)
                root = os.path.join(scratch, f"{mode}-{r}")
                results[mode].append(run_mode(mode == "incremental", stores, draws, root,
                                              args.key_groups))
                shutil.rmtree(root, ignore_errors=True)
    finally:
        shutil.rmtree(scratch, ignore_errors=True)

    print(f"\n{args.keys:,} keys in {args.key_groups} key groups, {per_checkpoint:,} keys "
          f"({args.touched:.1%}) updated before each of {args.checkpoints} checkpoints, "
          f"{args.rounds} alternated rounds; load average {os.getloadavg()[0]:.2f}")
    print("| mode | bytes written / checkpoint (median) | share of state | s / checkpoint "
          "(median) | restore s | restore reads | parts per key group | stored at the end | "
          "last _metadata | restored state exact |")
    print("|---|---|---|---|---|---|---|---|---|---|")
    for mode, runs in results.items():
        written = [w for run in runs for w in run["written"][1:]]
        secs = [s for run in runs for s in run["seconds"][1:]]
        full = statistics.median(run["full"] for run in runs)
        print(f"| {mode} | {statistics.median(written) / 1e6:.2f} MB | "
              f"{statistics.median(written) / full:.1%} (mean "
              f"{statistics.mean(written) / full:.1%}) | {statistics.median(secs):.3f} | "
              f"{statistics.median(run['restore_s'] for run in runs):.2f} | "
              f"{statistics.median(run['read'] for run in runs) / 1e6:.1f} MB | "
              f"{max(run['parts'] for run in runs)} | "
              f"{statistics.median(run['stored'] for run in runs) / 1e6:.1f} MB | "
              f"{max(run['metadata'] for run in runs) / 1e3:.1f} kB | "
              f"{'yes' if all(run['exact'] for run in runs) else 'NO'} |")
    print(f"\ncommand: python benchmarks/bench_state_scale.py --keys {args.keys} --touched "
          f"{args.touched} --checkpoints {args.checkpoints} --key-groups {args.key_groups} "
          f"--rounds {args.rounds}")
    return 0 if all(run["exact"] for runs in results.values() for run in runs) else 1


if __name__ == "__main__":
    sys.exit(main())
