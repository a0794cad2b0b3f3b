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

    def put_deferred(self, path: str, data: bytes) -> None:
        if "/kg-" in path:
            self.gate.wait()
        super().put_deferred(path, data)


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

    def put_deferred(self, path: str, data: bytes) -> None:
        if path.endswith(f"/kg-{self.fail_kg}"):
            raise StateBackendError(f"could not write {path}: disk full")
        super().put_deferred(path, data)
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


class RecordingBackend(FilesystemStateBackend):
    """A local disk (uploads start at the call's end) recording the blobs it stored."""

    def __init__(self, root: str) -> None:
        super().__init__(root, fsync=False)
        self.stored = []

    def put_deferred(self, path: str, data: bytes) -> None:
        super().put_deferred(path, data)
        self.stored.append(path)


class ExplodesOnLastKey(CountPerKey):
    def process_records(self, key, rows, ctx):
        if is_last_key(key):
            raise RuntimeError(f"user function failed on key {LAST_KEY!r}")
        return super().process_records(key, rows, ctx)


def test_a_local_disks_uploads_start_when_the_calls_key_groups_are_done(tmp_path):
    """With a filesystem backend the uploads wait for the end of the call: a call that fails
    before then stores none of its blobs (the key groups before the last took checkpoint 1),
    and one that ends stores them all."""
    assert FilesystemStateBackend.overlap_uploads is False
    _, parts = one_range_batch()
    backend = RecordingBackend(str(tmp_path))
    opts = OperatorOptions("count", backend, MAXP, parallelism=1)
    with pytest.raises(RuntimeError, match=f"key {LAST_KEY!r}"):
        run_range(opts, ExplodesOnLastKey(), "key", ["word", "count"], 0, None, parts, 0)
    assert backend.stored == [] and backend.list("") == []
    out, _ = run_range(opts, CountPerKey(), "key", ["word", "count"], 0, None, parts, 0)
    assert sorted(backend.stored) == sorted(f"chk-1/op-count/kg-{kg}" for kg in range(MAXP))
    assert sorted(a["key_group"] for a in acks_of(out)) == list(range(MAXP))


def test_a_call_that_fails_waits_for_the_uploads_it_started(tmp_path):
    """A retried task writes the same snapshot paths: a blob of the failed attempt must not land
    after the retry's, so the failed call returns only once its uploads have ended."""
    _, parts = one_range_batch()
    release = threading.Event()

    class SlowBackend(FilesystemStateBackend):
        """An object store's uploads: they start as each snapshot is taken."""

        overlap_uploads = True
        stored = []

        def put_deferred(self, path: str, data: bytes) -> None:
            release.wait(10)
            super().put_deferred(path, data)
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


class SyncRecordingBackend(FilesystemStateBackend):
    """Records each ``make_durable`` with the blobs stored before it; ``fail_sync``: the sync
    fails (the disk refuses to sync the folder)."""

    def __init__(self, root: str, fail_sync: bool = False) -> None:
        super().__init__(root, fsync=True)
        self.fail_sync = fail_sync
        self.stored, self.syncs = [], []
        self.lock = threading.Lock()

    def __getstate__(self):
        raise AssertionError("the test's backend is not pickled")

    def put_deferred(self, path: str, data: bytes) -> None:
        super().put_deferred(path, data)
        with self.lock:
            self.stored.append(path)

    def make_durable(self, paths) -> None:
        with self.lock:
            self.syncs.append((sorted(paths), sorted(self.stored)))
        if self.fail_sync:
            raise StateBackendError("could not sync chk-1/op-count: input/output error")
        super().make_durable(paths)


def test_a_calls_snapshots_are_made_durable_together_before_any_acknowledgement(tmp_path):
    """finish() makes every blob of the call durable in one make_durable, after all of them
    were stored, and only then emits acknowledgements: a local disk syncs the snapshots' folder
    once a call, not once a key group."""
    script, parts = one_range_batch()
    backend = SyncRecordingBackend(str(tmp_path))
    opts = OperatorOptions("count", backend, MAXP, parallelism=1)
    out, _ = run_range(opts, CountPerKey(), "key", ["word", "count"], 0, None, parts, 0)
    expected = sorted(f"chk-1/op-count/kg-{kg}" for kg in range(MAXP))
    assert backend.syncs == [(expected, expected)]
    assert sorted(a["key_group"] for a in acks_of(out)) == list(range(MAXP))
    assert snapshot_values(backend, 1, "count", MAXP) == reference_counts(script, 1)


def test_a_snapshot_folder_that_cannot_be_synced_fails_the_call_without_acknowledgements(
        tmp_path):
    """A blob is durable only once its folder is synced: when that fails, the call fails and
    no acknowledgement leaves it (the checkpoint cannot complete on blobs a crash may lose)."""
    _, parts = one_range_batch()
    backend = SyncRecordingBackend(str(tmp_path), fail_sync=True)
    opts = OperatorOptions("count", backend, MAXP, parallelism=1)
    with pytest.raises(StateBackendError, match="could not sync"):
        run_range(opts, CountPerKey(), "key", ["word", "count"], 0, None, parts, 0)
    assert len(backend.syncs) == 1 and len(backend.stored) == MAXP


@pytest.mark.parametrize("switch", ["1", None])
def test_the_operator_snapshot_fault_raises_after_the_blobs_land_and_before_any_ack(
        tmp_path, monkeypatch, switch):
    """``operator_snapshot`` (the exactly-once suites raise and kill there): armed, a range
    call fails once all of its key groups' snapshots are stored and before it emits any
    acknowledgement; the first armed arrival is the first call that took snapshots. Without the
    test switch the same variables do nothing."""
    from barrier_core import faults

    script, parts = one_range_batch()
    backend = FilesystemStateBackend(str(tmp_path / "state"), fsync=False)
    opts = OperatorOptions("count", backend, MAXP, parallelism=1)
    env = faults.fault_env(str(tmp_path / "faults"),
                           fail_at=f"{faults.FaultPoint.OPERATOR_SNAPSHOT.value}:1")
    if switch is None:
        env.pop(faults.SWITCH)
    for name, value in env.items():
        monkeypatch.setenv(name, value)
    if switch is None:
        out, _ = run_range(opts, CountPerKey(), "key", ["word", "count"], 0, None, parts, 0)
        assert len(acks_of(out)) == MAXP
        return
    with pytest.raises(faults.InjectedFailure):
        run_range(opts, CountPerKey(), "key", ["word", "count"], 0, None, parts, 0)
    assert (tmp_path / "faults" / "failed-operator_snapshot").exists()
    # every snapshot of the call was durable when it failed: a retry writes the same paths
    assert snapshot_values(backend, 1, "count", MAXP) == reference_counts(script, 1)
