"""KeyGroupRuntime without Spark: scripted batches through every key group, snapshots checked
against the reference count over exactly the records before each cut."""

from __future__ import annotations

import pickle
from collections import Counter

import pandas as pd
import pytest

from barrier_ops.examples.word_count import CountPerKey
from barrier_ops.keygroups import key_group_of
from barrier_ops.options import OperatorOptions
from barrier_ops.input_events import build_events
from barrier_ops.output_rows import CONTROL_COLUMNS
from barrier_ops.runtime import KeyGroupRuntime
from barrier_ops.testing import make_script, reference_counts, script_frame, snapshot_values
from barrier_ops.alignment import Barrier, Records
from state_backends.filesystem import FilesystemStateBackend

MAXP = 4


def run_script(script, backend, mode="exactly_once", restore_from=None, op="count"):
    opts = OperatorOptions(op, backend, MAXP, mode, restore_from, False)
    runtimes = {}
    outputs = []
    for batch_no, batch in enumerate(script["batches"]):
        pdf = script_frame(batch)
        kinds = pdf["kind"]
        for kg in range(MAXP):
            mine = pdf[(kinds != "record") | pdf["key"].map(lambda k: key_group_of(k, MAXP) == kg)]
            if not len(mine):
                continue
            rt = runtimes.get(kg) or KeyGroupRuntime.create(opts, kg)
            out = rt.process_batch(opts, CountPerKey(), "key", ["word", "count"],
                                   mine.reset_index(drop=True), 1000 * batch_no)
            runtimes[kg] = pickle.loads(pickle.dumps(rt))  # GroupState round trip
            outputs.append(out)
    return pd.concat(outputs, ignore_index=True), runtimes


@pytest.mark.parametrize("seed", range(8))
def test_snapshots_equal_reference_and_output_epochs_are_right(seed, tmp_path):
    script = make_script(seed, partitions=3, records=30, checkpoints=3, batches=4)
    backend = FilesystemStateBackend(str(tmp_path), fsync=False)
    out, _ = run_script(script, backend)
    for n in range(1, 4):
        assert snapshot_values(backend, n, "count", MAXP) == reference_counts(script, n)
    assert list(out.columns) == ["word", "count"] + CONTROL_COLUMNS
    acks = out[out.kind == "ack"]
    assert sorted(acks.checkpoint_id.tolist()) == sorted([1, 2, 3] * MAXP)
    barriers = out[out.kind == "barrier"]
    assert len(barriers) == 3 * MAXP and (barriers.topic == "op:count").all()
    recs = out[out.kind == "record"]
    for row in recs.itertuples():
        # a count emitted in epoch e lies between the reference after e - 1 and after e
        lo = reference_counts(script, row.checkpoint_id - 1)[row.word]
        hi = reference_counts(script, row.checkpoint_id)[row.word]
        assert lo < row.count <= hi, row
    final = recs.groupby("word")["count"].max().to_dict()
    assert final == dict(reference_counts(script))
    # the output channel of each key group is gap-free and ordered
    for kg, part in recs.groupby("partition"):
        assert sorted(part.offset) == list(range(len(part)))


@pytest.mark.parametrize("seed", range(4))
def test_at_least_once_snapshots_contain_the_cut(seed, tmp_path):
    script = make_script(seed, partitions=3, records=30, checkpoints=3, batches=4)
    backend = FilesystemStateBackend(str(tmp_path), fsync=False)
    out, _ = run_script(script, backend, mode="at_least_once")
    for n in range(1, 4):
        snap, ref = snapshot_values(backend, n, "count", MAXP), reference_counts(script, n)
        assert all(snap[k] >= v for k, v in ref.items())
    recs = out[out.kind == "record"]
    assert recs.groupby("word")["count"].max().to_dict() == dict(reference_counts(script))


def test_restore_continues_identically(tmp_path):
    script = make_script(3, partitions=2, records=30, checkpoints=3, batches=4)
    a = FilesystemStateBackend(str(tmp_path / "a"), fsync=False)
    run_script(script, a)
    # a new job restored from checkpoint 1 sees only what follows the cut, batched differently
    after = [[r for r in batch if r["checkpoint_id"] > 1] for batch in script["batches"]]
    tail = {"batches": [after[0] + after[1] + after[2], after[3]]}
    b = FilesystemStateBackend(str(tmp_path / "b"), fsync=False)
    for kg in range(MAXP):
        path = f"chk-1/op-count/kg-{kg}"
        b.put(path, a.get(path))
    run_script(tail, b, restore_from=1)
    for n in (2, 3):
        assert snapshot_values(b, n, "count", MAXP) == snapshot_values(a, n, "count", MAXP)


def test_restore_refuses_incomplete_checkpoint(tmp_path):
    from barrier_ops.exceptions import RestoreError

    backend = FilesystemStateBackend(str(tmp_path), fsync=False)
    opts = OperatorOptions("count", backend, MAXP, restore_from=1)
    with pytest.raises(RestoreError, match="not a completed checkpoint"):
        KeyGroupRuntime.create(opts, 0)


def test_build_events_orders_rows_per_channel_barrier_before_same_offset():
    script = {"batches": [[
        {"kind": "record", "topic": "t", "partition": 0, "offset": 5, "key": "a", "value": "x",
         "checkpoint_id": 2},
        {"kind": "barrier", "topic": "t", "partition": 0, "offset": 5, "checkpoint_id": 1,
         "channels": ["t:0"]},
        {"kind": "record", "topic": "t", "partition": 0, "offset": 4, "key": "a", "value": "y",
         "checkpoint_id": 1},
    ]]}
    pdf = script_frame(script["batches"][0])
    events = build_events(pdf)
    assert [type(e).__name__ for e in events] == ["Records", "Barrier", "Records"]
    assert isinstance(events[1], Barrier) and events[1].offset == 5
    assert isinstance(events[0], Records) and events[0].payload.rows()["offset"].tolist() == [4]
    assert events[2].epoch == 2


def test_keyed_state_timers_and_list_map_state(tmp_path):
    from barrier_ops.function import KeyedProcessFunction

    class Session(KeyedProcessFunction):
        def process_records(self, key, records, state):
            state.list_state("vals").add_all(records["value"].tolist())
            state.map_state("seen").put(len(records), True)
            last = int(records["timestamp"].max().value // 1_000_000)
            state.timer_service.register_event_time_timer(last + 2)
            return None

        def on_timer(self, key, ts, state):
            n = len(state.list_state("vals").get())
            state.clear_all()
            return [(key, n)]

    script = make_script(7, partitions=1, records=20, checkpoints=2, batches=3, keys="ab")
    backend = FilesystemStateBackend(str(tmp_path), fsync=False)
    opts = OperatorOptions("sess", backend, 1, restore_requires_complete=False)
    rt = KeyGroupRuntime.create(opts, 0)
    outs = [rt.process_batch(opts, Session(), "key", ["word", "count"], script_frame(b), 0)
            for b in script["batches"]]
    out = pd.concat(outs)
    fired = out[out.kind == "record"]
    # every key's timer fired once its records stopped (watermark passed last + 2), and the
    # state was cleared: total fired counts add up to the records seen before the last timer
    assert fired["count"].sum() <= 20 and len(fired) >= 1
    assert Counter(fired.word.map(lambda k: k.decode() if isinstance(k, bytes) else k))


def test_user_rows_with_a_misspelt_column_fail_naming_both():
    """Issue 14: a dict with 'val' for 'value' used to commit nulls silently."""
    import pandas as pd
    import pytest

    from barrier_ops.function import rows_to_tuples

    columns = ["key", "value"]
    assert rows_to_tuples([{"key": "a", "value": "1"}], columns) == [("a", "1")]
    with pytest.raises(ValueError, match=r"unknown columns \['val'\] and without columns "
                                         r"\['value'\]"):
        rows_to_tuples([{"key": "a", "val": "1"}], columns)
    with pytest.raises(ValueError, match=r"without columns \['value'\]"):
        rows_to_tuples([{"key": "a"}], columns)
    with pytest.raises(ValueError, match=r"unknown columns \['extra'\]"):
        rows_to_tuples(pd.DataFrame({"key": ["a"], "value": ["1"], "extra": [0]}), columns)
