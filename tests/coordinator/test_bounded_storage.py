"""Issue 13: a job runs for months, so the checkpoint storage and the cost of completing a
checkpoint must not grow with the number of checkpoints before it. 400 checkpoints through the
real coordinator (one commit worker per batch, as PySpark runs it) on a filesystem backend, every
fifth one failing (expired): after warm-up the objects on storage and the storage calls per
completion stay flat. On the old main ``chk-<n>/_stats.json`` of every id stayed forever and the
debris pass listed every failed id again at every completion."""

from __future__ import annotations

from collections import Counter

from barrier_coordinator import CheckpointCoordinator, CoordinatorConfig, ManualClock
from state_backends.base import StateBackend
from state_backends.filesystem import FilesystemStateBackend

CHANNELS = ["t:0", "t:1"]
HISTORY = 10


class CountingBackend(StateBackend):
    """A filesystem backend that counts the calls made through it."""

    def __init__(self, root: str) -> None:
        self.inner = FilesystemStateBackend(root, fsync=False)
        self.calls = Counter()

    def put(self, path, data):
        self.calls["put"] += 1
        self.inner.put(path, data)

    def get(self, path):
        self.calls["get"] += 1
        return self.inner.get(path)

    def exists(self, path):
        self.calls["exists"] += 1
        return self.inner.exists(path)

    def list(self, prefix=""):
        self.calls["list"] += 1
        return self.inner.list(prefix)

    def delete_prefix(self, prefix):
        self.calls["delete"] += 1
        self.inner.delete_prefix(prefix)

    def describe(self):
        return self.inner.describe()


def _ack(backend, n):
    handle = backend.write_snapshot(n, "count", 0, b"state-%d" % n)
    return {"operator_id": "count", "key_group": 0, "num_key_groups": 1, "checkpoint_id": n,
            "snapshot": handle.to_json(), "offsets": {"t": {"0": 10 * n, "1": 10 * n}},
            "metrics": {}}


def _barriers(n, ts):
    return [{"checkpoint_id": n, "channel": c, "offset": 10 * n, "channels": CHANNELS,
             "timestamp": ts} for c in CHANNELS]


def test_storage_and_completion_cost_stay_flat(tmp_path):
    backend = CountingBackend(str(tmp_path / "storage"))
    clock = ManualClock(1_000_000)
    config = CoordinatorConfig(checkpoint_timeout_ms=1_000, tolerable_failed_checkpoints=None,
                               num_retained=3, stats_history=HISTORY,
                               operators={"count": 1})
    objects, calls = {}, {}
    for n in range(1, 401):
        before = Counter(backend.calls)
        ts = clock.now_ms()
        if n % 5 == 0:
            # a checkpoint whose operator never acks: it expires in a later batch
            CheckpointCoordinator(backend, config, clock).on_batch(n, _barriers(n, ts), [])
            clock.advance(2_000)
            CheckpointCoordinator(backend, config, clock).on_batch(n, [], [])
        else:
            done = CheckpointCoordinator(backend, config, clock).on_batch(
                n, _barriers(n, ts), [_ack(backend, n)])
            assert done is not None and done.checkpoint_id == n
        clock.advance(100)
        calls[n] = backend.calls - before
        objects[n] = len(backend.inner.list(""))
    # Objects: retained checkpoints + the stats history + bookkeeping, whatever n is.
    assert max(objects[n] for n in range(100, 401)) == max(objects[n] for n in range(300, 401))
    assert objects[400] <= 3 * 3 + HISTORY + 5
    # Storage calls of a completing batch: the same at checkpoint 101 as at 396.
    early = [calls[n] for n in range(101, 111) if n % 5]
    late = [calls[n] for n in range(391, 401) if n % 5]
    assert max(c["list"] for c in late) <= max(c["list"] for c in early) <= 4
    assert max(sum(c.values()) for c in late) <= max(sum(c.values()) for c in early)
    # Stats of the newest HISTORY ids are kept, older ones are gone.
    ids = {int(p.split("/")[0][4:]) for p in backend.inner.list("") if p.startswith("chk-")}
    assert ids == set(range(400 - HISTORY + 1, 401))
