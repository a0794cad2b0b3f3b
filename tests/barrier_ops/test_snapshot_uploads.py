"""Issue 15: the key groups of one operator call upload their snapshots concurrently, and a key
group's acknowledgement leaves the operator only once its snapshot is durable."""

from __future__ import annotations

import json
import threading

import pytest

from barrier_ops.examples.word_count import CountPerKey
from barrier_ops.key_group_state import RANGE_COLUMN, run_range
from barrier_ops.keygroups import key_group_of
from barrier_ops.options import OperatorOptions
from barrier_ops.testing import make_script, reference_counts, snapshot_values
from state_backends.exceptions import StateBackendError
from state_backends.filesystem import FilesystemStateBackend
from tests.barrier_ops.test_key_group_ranges import MAXP, key_group_frames


def one_range_batch():
    """One batch of a script whose records fall in every key group, with checkpoint 1 in it,
    as the frames of one range covering all ``MAXP`` key groups."""
    script = make_script(3, partitions=2, records=80, checkpoints=1, batches=1,
                         keys="abcdefghijklmnopqrstuvwxyz")
    frames = key_group_frames(script["batches"][0])
    assert len(frames) == MAXP
    return script, [f.assign(**{RANGE_COLUMN: -1}) for f in frames.values()]


class GatedBackend(FilesystemStateBackend):
    """Puts of snapshots wait until ``together`` of them are in flight at once: a call that
    wrote them one after another would break the barrier (after its timeout)."""

    def __init__(self, root: str, together: int) -> None:
        super().__init__(root, fsync=False)
        self.gate = threading.Barrier(together, timeout=10)

    def __getstate__(self):
        raise AssertionError("the test's backend is not pickled")

    def put(self, path: str, data: bytes) -> None:
        if "/kg-" in path:
            self.gate.wait()
        super().put(path, data)


def acks_of(out):
    return [json.loads(a) for a in out.loc[out["kind"] == "ack", "ack"]]


def test_the_key_groups_of_a_call_upload_their_snapshots_together(tmp_path):
    script, parts = one_range_batch()
    backend = GatedBackend(str(tmp_path), together=MAXP)
    opts = OperatorOptions("count", backend, MAXP, parallelism=1)
    out, _ = run_range(opts, CountPerKey(), "key", ["word", "count"], 0, None, parts, 0)
    acks = acks_of(out)
    assert sorted(a["key_group"] for a in acks) == list(range(MAXP))
    assert snapshot_values(backend, 1, "count", MAXP) == reference_counts(script, 1)
    for a in acks:   # Flink's split: serialising (sync) and storing (async)
        assert a["metrics"]["sync_ms"] >= 0 and a["metrics"]["async_ms"] >= 0
    # the acknowledgements come last, after every key group's barrier
    kinds = list(out["kind"])
    assert kinds[-MAXP:] == ["ack"] * MAXP and "ack" not in kinds[:-MAXP]


class FailingBackend(FilesystemStateBackend):
    """The snapshot of key group ``fail_kg`` cannot be stored; the others record when their
    put ended."""

    def __init__(self, root: str, fail_kg: int) -> None:
        super().__init__(root, fsync=False)
        self.fail_kg = fail_kg
        self.stored = []

    def put(self, path: str, data: bytes) -> None:
        if path.endswith(f"/kg-{self.fail_kg}"):
            raise StateBackendError(f"could not write {path}: disk full")
        super().put(path, data)
        self.stored.append(path)


def test_a_failed_upload_fails_the_call_and_emits_no_acknowledgement(tmp_path):
    _, parts = one_range_batch()
    backend = FailingBackend(str(tmp_path), fail_kg=3)
    opts = OperatorOptions("count", backend, MAXP, parallelism=1)
    with pytest.raises(StateBackendError, match="kg-3: disk full"):
        run_range(opts, CountPerKey(), "key", ["word", "count"], 0, None, parts, 0)
    # every other upload had ended before the error left the call
    assert len(backend.stored) == MAXP - 1


#: A key of the last key group: the key groups before it have taken their snapshots when the
#: function first sees it.
LAST_KEY = next(k for k in "abcdefghijklmnopqrstuvwxyz" if key_group_of(k, MAXP) == MAXP - 1)


def is_last_key(key) -> bool:
    return (key.decode() if isinstance(key, bytes) else key) == LAST_KEY


def test_a_call_that_fails_waits_for_the_uploads_it_started(tmp_path):
    """A retried task writes the same snapshot paths: a blob of the failed attempt must not land
    after the retry's, so the failed call returns only once its uploads have ended."""
    _, parts = one_range_batch()
    release = threading.Event()

    class SlowBackend(FilesystemStateBackend):
        stored = []

        def put(self, path: str, data: bytes) -> None:
            release.wait(10)
            super().put(path, data)
            self.stored.append(path)

    backend = SlowBackend(str(tmp_path), fsync=False)

    class ReleasesThenExplodes(CountPerKey):
        def process_records(self, key, rows, ctx):
            if is_last_key(key):
                release.set()
                raise RuntimeError(f"user function failed on key {LAST_KEY!r}")
            return super().process_records(key, rows, ctx)

    opts = OperatorOptions("count", backend, MAXP, parallelism=1)
    with pytest.raises(RuntimeError, match=f"key {LAST_KEY!r}"):
        run_range(opts, ReleasesThenExplodes(), "key", ["word", "count"], 0, None, parts, 0)
    # every key group before the last took checkpoint 1, and each of those uploads (held until
    # the failure) had ended when the error left the call: none can land after it
    assert sorted(backend.stored) == [f"chk-1/op-count/kg-{kg}" for kg in range(MAXP - 1)]
