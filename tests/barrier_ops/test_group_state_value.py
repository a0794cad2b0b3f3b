"""The key group's runtime as its GroupState value (issue 15): the keyed state is serialised once
a batch, shared with the full snapshot, and never stale."""

from __future__ import annotations

import pickle

from barrier_core.schema import KIND_BARRIER, KIND_RECORD, channel_name
from barrier_ops.function import KeyedProcessFunction
from barrier_ops.key_group_state import load_runtime
from barrier_ops.options import OperatorOptions
from barrier_ops.runtime import KeyGroupRuntime
from barrier_ops.testing import script_frame
from state_backends.base import snapshot_path
from state_backends.filesystem import FilesystemStateBackend

CHANNELS = [channel_name("t", p) for p in range(2)]


def record(partition, offset, key, epoch):
    return {"kind": KIND_RECORD, "topic": "t", "partition": partition, "offset": offset,
            "key": key, "value": f"{key}@{offset}", "checkpoint_id": epoch}


def barrier(partition, offset, checkpoint_id):
    return {"kind": KIND_BARRIER, "topic": "t", "partition": partition, "offset": offset,
            "checkpoint_id": checkpoint_id, "channels": CHANNELS}


class CountWithTimer(KeyedProcessFunction):
    """Counts records; each key's processing-time timer 500 ms later marks it ``fired``."""

    def process_records(self, key, records, state):
        count = state.value_state("count")
        count.update((count.value() or 0) + len(records))
        state.timer_service.register_processing_time_timer(
            state.timer_service.current_processing_time() + 500)
        return None

    def on_timer(self, key, ts, state):
        state.value_state("fired").update(ts)
        return None


def group_state_round_trip(rt: KeyGroupRuntime) -> KeyGroupRuntime:
    return load_runtime(pickle.dumps(rt, protocol=4))


def after_first_batch(tmp_path, rows, batch_time_ms):
    """``(opts, fn, runtime)`` of key group 0 after a first batch of ``rows``."""
    backend = FilesystemStateBackend(str(tmp_path), fsync=False)
    opts = OperatorOptions("op", backend, 1, restore_requires_complete=False)
    fn = CountWithTimer()
    rt = KeyGroupRuntime.create(opts, 0)
    rt.process_batch(opts, fn, "key", ["word", "count"], script_frame(rows), batch_time_ms)
    return opts, fn, rt


def test_the_group_state_value_holds_the_full_snapshot_it_just_wrote(tmp_path):
    """A batch that ends with a checkpoint serialises the state once: the GroupState value
    carries the snapshot's own bytes, and loads to the same state."""
    backend = FilesystemStateBackend(str(tmp_path), fsync=False)
    opts = OperatorOptions("op", backend, 1, restore_requires_complete=False)
    rt = KeyGroupRuntime.create(opts, 0)
    batch = ([record(p, o, k, 1) for p in (0, 1) for o, k in enumerate("abca")]
             + [barrier(0, 4, 1), barrier(1, 4, 1)])
    rt.process_batch(opts, CountWithTimer(), "key", ["word", "count"], script_frame(batch), 0)
    value = pickle.dumps(rt, protocol=4)
    snapshot = backend.get(snapshot_path(1, "op", 0))
    assert snapshot in value
    loaded = load_runtime(value)
    assert loaded.store.to_snapshot() == rt.store.to_snapshot()
    assert loaded.store.get(b"a", "count") == 4


def test_state_changed_after_the_last_snapshot_is_not_lost(tmp_path):
    """A processing-time timer fires in a batch whose checkpoint is still aligning (no new
    snapshot): the GroupState value must hold what the timer changed, not the snapshot."""
    first = [record(0, 0, "a", 1), record(1, 0, "b", 1), barrier(0, 1, 1), barrier(1, 1, 1)]
    opts, fn, rt = after_first_batch(tmp_path, first, 1_000)
    rt = group_state_round_trip(rt)
    assert rt.store.get(b"a", "fired") is None
    # batch 2: only channel 0's barrier 2 (alignment waits for channel 1), timers are due
    rt.process_batch(opts, fn, "key", ["word", "count"], script_frame([barrier(0, 1, 2)]), 2_000)
    assert rt.store.get(b"a", "fired") == 1_500
    rt = group_state_round_trip(rt)
    assert rt.store.get(b"a", "fired") == 1_500 and rt.store.get(b"b", "fired") == 1_500
    # records after the barrier in the same batch change the state after its snapshot too
    third = [barrier(1, 1, 2), record(0, 1, "a", 3), record(1, 1, "a", 3)]
    rt.process_batch(opts, fn, "key", ["word", "count"], script_frame(third), 2_100)
    rt = group_state_round_trip(rt)
    assert rt.store.get(b"a", "count") == 3
    snap = load_runtime(pickle.dumps(rt, protocol=4))
    assert snap.store.to_snapshot() == rt.store.to_snapshot()


def test_a_runtime_pickled_with_its_store_object_still_loads(tmp_path, monkeypatch):
    """GroupState values written before the store travelled as snapshot bytes (a query
    upgraded mid-stream) load, and the next batch carries on from them."""
    first = [record(0, 0, "a", 1), record(1, 0, "a", 1), barrier(0, 1, 1), barrier(1, 1, 1)]
    opts, fn, rt = after_first_batch(tmp_path, first, 0)
    with monkeypatch.context() as m:
        m.setattr(KeyGroupRuntime, "__getstate__", lambda self: {
            k: v for k, v in self.__dict__.items() if not k.startswith("_")})
        old = pickle.dumps(rt, protocol=4)
    assert b"store_blob" not in old
    loaded = load_runtime(old)
    assert loaded.store.get(b"a", "count") == 2
    second = [record(0, 1, "a", 2), barrier(0, 2, 2), barrier(1, 1, 2)]
    loaded.process_batch(opts, fn, "key", ["word", "count"], script_frame(second), 0)
    assert group_state_round_trip(loaded).store.get(b"a", "count") == 3
