"""Incremental snapshots (``incremental_checkpoints=True``) without Spark: the folded parts of every
checkpoint equal the full snapshot of the same run, deltas carry only the touched keys, retention
keeps the parts a retained checkpoint chains on, and restores (in place, from a savepoint in
another storage, from an incomplete checkpoint) continue exactly."""

from __future__ import annotations

import pickle

import pandas as pd
import pytest

from barrier_core.ack import Acknowledgement
from barrier_ops.exceptions import RestoreError
from barrier_ops.function import KeyedProcessFunction
from barrier_ops.keygroups import key_group_of
from barrier_ops.options import OperatorOptions
from barrier_ops.runtime import KeyGroupRuntime
from barrier_ops.snapshots import MAX_DELTAS, IncrementalSnapshots, encode_full
from barrier_ops.state import KeyedStateStore
from barrier_ops.testing import make_script, read_snapshot_state, script_frame
from state_backends.base import SnapshotHandle
from state_backends.checkpoint_store import CompletedCheckpointStore
from state_backends.filesystem import FilesystemStateBackend
from state_backends.memory import MemoryStateBackend
from state_backends.metadata import CheckpointMetadata

MAXP = 3
OP = "inc"


class Everything(KeyedProcessFunction):
    """Value, list and map state, event-time timers, and clear_all (deleted keys)."""

    def process_records(self, key, records, state):
        count = state.value_state("count", 0)
        count.update(count.value() + len(records))
        state.list_state("values").add_all(records["value"].tolist())
        state.map_state("sizes").put(len(records), int(records["offset"].max()))
        last = int(records["timestamp"].max().value // 1_000_000)
        state.timer_service.register_event_time_timer(last + 3)
        return [(key, count.value())]

    def on_timer(self, key, ts, state):
        n = state.value_state("count", 0).value()
        if n % 3 == 0:
            state.clear_all()
        return [(key, -n)]


def run(script, backend, incremental, restore_from=None, complete=None, start_batch=0):
    """Every batch through every key group (GroupState pickled between batches); ``complete``:
    a CompletedCheckpointStore that gets each checkpoint's metadata once all key groups
    acknowledged it. Returns the output frame."""
    opts = OperatorOptions(OP, backend, MAXP, restore_from=restore_from,
                           restore_requires_complete=restore_from is None or complete is None,
                           incremental_checkpoints=incremental)
    runtimes, outputs, acks = {}, [], {}
    for batch_no, batch in enumerate(script["batches"], start=start_batch):
        pdf = script_frame(batch)
        for kg in range(MAXP):
            mine = pdf[(pdf.kind != "record")
                       | pdf["key"].map(lambda k: key_group_of(k, MAXP) == kg)]
            if not len(mine):
                continue
            rt = runtimes.get(kg) or KeyGroupRuntime.create(opts, kg)
            out = rt.process_batch(opts, Everything(), "key", ["word", "count"],
                                   mine.reset_index(drop=True), 1000 * batch_no)
            runtimes[kg] = pickle.loads(pickle.dumps(rt))
            outputs.append(out)
            for raw in out[out.kind == "ack"]["ack"]:
                ack = Acknowledgement.from_json(raw)
                acks.setdefault(ack.checkpoint_id, []).append(ack)
        if complete is not None:
            for n in sorted(acks):
                if len(acks[n]) == MAXP:
                    handles = tuple(SnapshotHandle.from_json(a.snapshot) for a in acks.pop(n))
                    complete.add(CheckpointMetadata(n, n, n, {}, handles))
    return pd.concat(outputs, ignore_index=True)


def states(backend, checkpoint_id):
    return {kg: read_snapshot_state(backend, checkpoint_id, OP, kg) for kg in range(MAXP)}


def comparable(snap):
    return {k: snap[k] for k in ("checkpoint_id", "output_seq", "state")}


@pytest.mark.parametrize("seed", range(6))
def test_folded_parts_equal_the_full_snapshots_of_the_same_run(seed, tmp_path):
    script = make_script(seed, partitions=2, records=60, checkpoints=8, batches=10,
                         keys="abcdefghij")
    full = FilesystemStateBackend(str(tmp_path / "full"), fsync=False)
    inc = FilesystemStateBackend(str(tmp_path / "inc"), fsync=False)
    out_full = run(script, full, incremental=False)
    out_inc = run(script, inc, incremental=True)
    records = lambda out: out[out.kind == "record"][["word", "count", "checkpoint_id"]]  # noqa
    pd.testing.assert_frame_equal(records(out_inc).reset_index(drop=True),
                                  records(out_full).reset_index(drop=True))
    deltas = 0
    for n in range(1, 9):
        for kg, snap in states(inc, n).items():
            assert comparable(snap) == comparable(states(full, n)[kg]), (n, kg)
        raw = [pickle.loads(inc.get(f"chk-{n}/op-{OP}/kg-{kg}")) for kg in range(MAXP)]
        deltas += sum(1 for r in raw if r["version"] == 2)
    assert deltas > 0  # the run did chain deltas, not only full snapshots


def test_a_delta_holds_only_the_touched_keys_and_deleted_ones():
    store = KeyedStateStore()
    for k in range(1000):
        store.put(f"key-{k}", "count", k)
    header = {"operator_id": OP, "key_group": 0, "max_parallelism": 1, "checkpoint_id": 1,
              "output_seq": 0}
    inc = IncrementalSnapshots()
    blob, chain = inc.encode(header, store)
    assert chain == ()
    inc.written(SnapshotHandle(1, OP, 0, "chk-1/op-inc/kg-0", len(blob)))
    for k in range(10):
        inc.touch(f"key-{k}")
        store.put(f"key-{k}", "count", -k)
    inc.touch("key-10")
    store.delete("key-10", "count")
    delta, chain = inc.encode({**header, "checkpoint_id": 2}, store)
    assert chain == (("chk-1/op-inc/kg-0", len(blob)),)
    assert len(delta) < len(blob) / 20
    changes = pickle.loads(delta)["changes"]
    assert list(changes) == [f"key-{k}" for k in range(11)]
    assert changes["key-10"] == (None, None, None) and changes["key-3"][0] == {"count": -3}


def test_a_full_snapshot_again_once_deltas_outgrow_it_or_after_max_deltas():
    store = KeyedStateStore()
    store.put("a", "v", "x" * 50)
    header = {"operator_id": OP, "key_group": 0, "max_parallelism": 1, "checkpoint_id": 1,
              "output_seq": 0}
    inc = IncrementalSnapshots()
    kinds = []
    for n in range(1, 8):
        inc.touch("a")  # every delta rewrites the only key: deltas outgrow the full soon
        blob, chain = inc.encode({**header, "checkpoint_id": n}, store)
        kinds.append("delta" if chain else "full")
        inc.written(SnapshotHandle(n, OP, 0, f"chk-{n}/op-inc/kg-0", len(blob), chain=chain))
    assert kinds[0] == "full" and "delta" in kinds and kinds.count("full") >= 2
    big = KeyedStateStore()
    for k in range(50_000):
        big.put(k, "v", k)
    inc = IncrementalSnapshots()
    kinds = []
    for n in range(1, MAX_DELTAS + 4):
        inc.touch(n)
        blob, chain = inc.encode({**header, "checkpoint_id": n}, big)
        kinds.append("delta" if chain else "full")
        inc.written(SnapshotHandle(n, OP, 0, f"p{n}", len(blob), chain=chain))
    assert kinds.index("full", 1) == MAX_DELTAS + 1
    assert len(inc.chain) <= MAX_DELTAS + 1


def test_retention_keeps_the_parts_a_retained_checkpoint_chains_on_and_restores_exactly(
        tmp_path):
    script = make_script(11, partitions=2, records=60, checkpoints=8, batches=10,
                         keys="abcdefghij")
    backend = FilesystemStateBackend(str(tmp_path / "chk"), fsync=False)
    store = CompletedCheckpointStore(backend, num_retained=1)
    run(script, backend, incremental=True, complete=store)
    assert store.completed_ids() == [8]
    meta = store.load(8)  # verifies every part, the chains included, is stored
    chained = [h for h in meta.operators if h.chain]
    assert chained, "checkpoint 8 should chain on older checkpoints' parts"
    assert all(not p.startswith("chk-8/") for h in chained for p, _ in h.chain)
    reference = FilesystemStateBackend(str(tmp_path / "full"), fsync=False)
    run(script, reference, incremental=False)
    for kg in range(MAXP):
        restored = KeyGroupRuntime.create(
            OperatorOptions(OP, backend, MAXP, restore_from=8, incremental_checkpoints=True), kg)
        ref = read_snapshot_state(reference, 8, OP, kg)
        assert restored.store.to_snapshot() == ref["state"]
        assert restored.output_seq == ref["output_seq"] and restored.epoch == 9
    # every stored snapshot blob is one checkpoint 8 names: retention left no orphans
    named = {p for h in meta.operators for p, _ in h.parts}
    blobs = {p for p in backend.list("") if "/op-" in p}
    assert blobs == named


def test_savepoint_of_a_chain_is_self_contained_and_the_restored_run_continues(tmp_path):
    script = make_script(5, partitions=2, records=60, checkpoints=8, batches=10,
                         keys="abcdefghij")
    a = FilesystemStateBackend(str(tmp_path / "a"), fsync=False)
    store = CompletedCheckpointStore(a, num_retained=1)
    head = {"batches": script["batches"][:6]}
    run(head, a, incremental=True, complete=store)
    n = store.latest_id()
    assert any(h.chain for h in store.load(n).operators)
    b = FilesystemStateBackend(str(tmp_path / "b"), fsync=False)
    store.create_savepoint("sp", target=b)
    a.delete_prefix("")  # the original storage is gone: the savepoint must stand alone
    after = [[r for r in batch if r["checkpoint_id"] > n] for batch in script["batches"]]
    tail = {"batches": after}  # the same batches (event-time timers fire per batch segment)
    run(tail, b, incremental=True, restore_from="savepoints/sp")
    reference = FilesystemStateBackend(str(tmp_path / "ref"), fsync=False)
    run(script, reference, incremental=False)
    for m in range(n + 1, 9):
        for kg in range(MAXP):
            assert comparable(read_snapshot_state(b, m, OP, kg)) == \
                comparable(read_snapshot_state(reference, m, OP, kg)), (m, kg)
    # the first snapshot after a restore is full: it never chains on the savepoint's blobs
    first = [pickle.loads(b.get(f"chk-{n + 1}/op-{OP}/kg-{kg}")) for kg in range(MAXP)]
    assert all(f["version"] == 1 for f in first)


@pytest.mark.parametrize("damage, words", [
    (lambda backend, path: backend.delete([path]), "{path}"),
    # still unpickles, but its size is not what the delta after it was written on
    (lambda backend, path: backend.put(path, backend.get(path) + b"tail"),
     "truncated or overwritten"),
], ids=["missing", "overwritten"])
def test_a_damaged_part_is_named_on_restore(damage, words, tmp_path):
    script = make_script(2, partitions=2, records=40, checkpoints=5, batches=6,
                         keys="abcdefghij")
    backend = FilesystemStateBackend(str(tmp_path), fsync=False)
    store = CompletedCheckpointStore(backend, num_retained=1)
    run(script, backend, incremental=True, complete=store)
    h = next(h for h in store.load(5).operators if h.chain)
    damage(backend, h.chain[0][0])
    opts = OperatorOptions(OP, backend, MAXP, restore_from=5, incremental_checkpoints=True)
    with pytest.raises(RestoreError, match=words.format(path=h.chain[0][0])):
        KeyGroupRuntime.create(opts, h.key_group)


def test_an_incomplete_checkpoint_restores_from_the_chain_in_its_blob(tmp_path):
    script = make_script(4, partitions=2, records=40, checkpoints=5, batches=6,
                         keys="abcdefghij")
    backend = FilesystemStateBackend(str(tmp_path), fsync=False)
    run(script, backend, incremental=True)  # no metadata written at all
    reference = FilesystemStateBackend(str(tmp_path / "ref"), fsync=False)
    run(script, reference, incremental=False)
    for kg in range(MAXP):
        opts = OperatorOptions(OP, backend, MAXP, restore_from=5,
                               restore_requires_complete=False)
        rt = KeyGroupRuntime.create(opts, kg)
        assert rt.store.to_snapshot() == read_snapshot_state(reference, 5, OP, kg)["state"]


def test_inline_backends_take_full_snapshots_only(tmp_path):
    backend = MemoryStateBackend()
    with pytest.raises(Exception, match="cannot chain incremental snapshots"):
        backend.write_snapshot(2, OP, 0, b"delta", chain=(("chk-1/op-inc/kg-0", 5),))
    script = make_script(1, partitions=1, records=20, checkpoints=3, batches=4)
    out = run(script, backend, incremental=True)
    acks = [Acknowledgement.from_json(a) for a in out[out.kind == "ack"]["ack"]]
    assert acks and all(not SnapshotHandle.from_json(a.snapshot).chain for a in acks)


def test_full_snapshot_format_is_unchanged():
    store = KeyedStateStore()
    store.put("k", "count", 1)
    snap = pickle.loads(encode_full({"operator_id": OP, "checkpoint_id": 1}, store))
    assert snap["version"] == 1 and snap["state"]["keyed"] == {"k": {"count": 1}}

