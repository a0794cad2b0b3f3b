"""Cutting a batch into events without copying rows, and building the output column-wise:
the same rows, order and dtypes as the frame-per-chunk and dict-per-row code they replace."""

from __future__ import annotations

import json
import pickle

import numpy as np
import pandas as pd
import pytest

from barrier_ops.alignment import Records
from barrier_ops.examples.word_count import CountPerKey
from barrier_ops.input_events import (KeyRows, RowSlice, build_events, build_group_events,
                                      gather, group_by_key)
from barrier_ops.options import OperatorOptions
from barrier_ops.output_rows import CONTROL_COLUMNS, OutputRows
from barrier_ops.runtime import KeyGroupRuntime
from barrier_ops.testing import script_frame
from state_backends.filesystem import FilesystemStateBackend


def _records(channel_rows):
    rows = []
    for topic, part, offset, key, epoch in channel_rows:
        rows.append({"kind": "record", "topic": topic, "partition": part, "offset": offset,
                     "key": key, "value": f"{topic}{part}@{offset}", "checkpoint_id": epoch})
    return rows


def test_chunks_are_ordered_per_channel_cut_at_barriers_and_epochs():
    rows = _records([("b", 0, 7, "x", 2), ("a", 1, 3, "y", 1), ("a", 1, 1, "x", 1),
                     ("b", 0, 5, "y", 1), ("a", 1, 4, "z", 2), ("b", 0, 6, "x", 1)])
    rows.append({"kind": "barrier", "topic": "b", "partition": 0, "offset": 7,
                 "checkpoint_id": 1, "channels": ["a:1", "b:0"]})
    events = build_events(script_frame(rows))
    got = [(type(e).__name__, e.channel,
            e.payload.rows()["offset"].tolist() if isinstance(e, Records) else e.offset,
            e.epoch if isinstance(e, Records) else e.checkpoint_id) for e in events]
    assert got == [("Records", "a:1", [1, 3], 1), ("Records", "a:1", [4], 2),
                   ("Records", "b:0", [5, 6], 1), ("Barrier", "b:0", 7, 1),
                   ("Records", "b:0", [7], 2)]


def test_a_held_back_chunk_pickles_only_its_own_rows():
    frame = script_frame(_records([("t", 0, i, f"k{i}", 1) for i in range(1000)]))
    chunk = RowSlice(frame, np.arange(10, 13))
    copy = pickle.loads(pickle.dumps(chunk))
    assert len(pickle.dumps(chunk)) < len(pickle.dumps(frame)) / 20
    assert copy.rows()["offset"].tolist() == [10, 11, 12]
    assert copy.rows().index.tolist() == [0, 1, 2]


def test_gather_keeps_release_order_across_batches_and_old_frame_payloads():
    frame = script_frame(_records([("t", 0, i, f"k{i % 3}", 1) for i in range(6)]))
    held = pickle.loads(pickle.dumps(RowSlice(frame, np.array([4, 5]))))  # an earlier batch
    old_release = frame.iloc[[0]].reset_index(drop=True)                   # a DataFrame payload
    now = [held, old_release, RowSlice(frame, np.array([2, 3]))]
    assert RowSlice(*gather(now)).rows()["offset"].tolist() == [4, 5, 0, 2, 3]
    same_batch = [RowSlice(frame, np.array([3])), RowSlice(frame, np.array([1, 2]))]
    frame, positions = gather(same_batch)
    assert frame is same_batch[0].frame and positions.tolist() == [3, 1, 2]  # no copy yet


@pytest.mark.parametrize("keys", [["b", "a", None, "b", "c", None, "a"],
                                  [b"\x01", b"\x00", b"\x01"], [3, 1, 3, 2, 1]])
def test_group_by_key_matches_pandas_groupby_first_appearance_order(keys):
    rows = pd.DataFrame({"key": keys, "n": range(len(keys))})
    grouped, uniques, bounds = group_by_key(rows, np.arange(len(rows)), "key")
    got = [(None if pd.isna(k) else k, grouped["n"].iloc[bounds[i]:bounds[i + 1]].tolist())
           for i, k in enumerate(uniques)]
    want = [(None if pd.isna(k) else k, sub["n"].tolist())
            for k, sub in rows.groupby("key", sort=False, dropna=False)]
    assert got == want


def _mixed_frame(n: int) -> pd.DataFrame:
    """Columns of every kind of block pandas keeps: numpy ints, floats, objects, naive and
    zoned datetimes, nullable integers, categoricals and Arrow-backed text."""
    return pd.DataFrame({
        "key": [f"k{i % 4}".encode() for i in range(n)],
        "offset": np.arange(n, dtype="int64"),
        "partition": (np.arange(n) % 3).astype("int32"),
        "score": np.linspace(0.0, 1.0, n),
        "timestamp": pd.date_range("2026-01-01", periods=n, freq="s"),
        "zoned": pd.date_range("2026-01-01", periods=n, freq="min", tz="Europe/Berlin"),
        "maybe": pd.array([None if i % 5 == 0 else i for i in range(n)], dtype="Int64"),
        "colour": pd.Categorical([("red", "green")[i % 2] for i in range(n)]),
        "text": pd.array([f"t{i}" for i in range(n)], dtype="string[pyarrow]"),
    })


@pytest.mark.parametrize("copy_on_write", [False, True])
def test_key_rows_equal_iloc_and_leave_the_batch_alone_when_the_function_writes(copy_on_write):
    with pd.option_context("mode.copy_on_write", copy_on_write):
        rows = _mixed_frame(12)
        expected = rows.copy()
        for cuts in (1, KeyRows.CONSOLIDATE_AT):      # blocks as they are, and consolidated
            cut = KeyRows(rows, cuts)
            for a, b in [(0, 12), (0, 1), (3, 7), (11, 12), (5, 5)]:
                got = cut(a, b)
                pd.testing.assert_frame_equal(got, expected.iloc[a:b])
                assert got.index.equals(pd.RangeIndex(a, b))
            part = cut(3, 7)
            part["note"] = "added"                 # a new column is the function's own
            assert "note" not in rows.columns
            pd.testing.assert_frame_equal(rows, expected)


def test_key_rows_cut_the_block_manager_on_the_supported_pandas():
    # setup.cfg's pandas range has the internals KeyRows uses; a pandas without them would
    # silently cost every key ``iloc`` again (see bench_key_group.py)
    assert KeyRows(_mixed_frame(4), 1)._cut is not None
    assert KeyRows(_mixed_frame(4), KeyRows.CONSOLIDATE_AT)._cut is not None


def test_key_rows_fall_back_to_iloc_for_a_frame_with_attrs():
    rows = _mixed_frame(6)
    rows.attrs["source"] = "test"
    part = KeyRows(rows, 100)(2, 4)
    assert part.attrs == {"source": "test"}
    pd.testing.assert_frame_equal(part, rows.iloc[2:4])


def test_output_rows_have_the_dtypes_of_a_frame_built_row_by_row():
    columns = ["word", "count"]
    out = OutputRows(columns)
    ts = pd.Timestamp("2026-01-01", tz="UTC")
    expected = []
    out.add_control(kind="ack", checkpoint_id=3, topic="t", partition=None, ack='{"a": 1}')
    expected.append(dict(dict.fromkeys(columns + CONTROL_COLUMNS), kind="ack", checkpoint_id=3,
                         topic="t", partition=None, ack='{"a": 1}', barrier_channels=[]))
    out.add_records([("x", 1), ("y", 2)], "op:c", 5, 10, ts, 4)
    for i, (w, c) in enumerate([("x", 1), ("y", 2)]):
        expected.append(dict(word=w, count=c, topic="op:c", partition=5, offset=10 + i,
                             timestamp=ts, kind="record", checkpoint_id=4,
                             checkpoint_timestamp=None, barrier_channels=[], ack=None))
    out.add_control(kind="barrier", checkpoint_id=4, topic="op:c", partition=5, offset=12,
                    checkpoint_timestamp=99, barrier_channels=["op:c:0", "op:c:1"])
    expected.append(dict(dict.fromkeys(columns + CONTROL_COLUMNS), kind="barrier",
                         checkpoint_id=4, topic="op:c", partition=5, offset=12,
                         checkpoint_timestamp=99, barrier_channels=["op:c:0", "op:c:1"]))
    want = pd.DataFrame(expected, columns=columns + CONTROL_COLUMNS)
    want["count"] = pd.Series([row["count"] for row in expected], dtype=object)  # ints, nulls
    pd.testing.assert_frame_equal(out.frame(), want)
    empty = OutputRows(columns).frame()
    assert list(empty.columns) == columns + CONTROL_COLUMNS and len(empty) == 0


def test_records_held_back_as_frames_by_an_older_release_are_processed(tmp_path):
    """A query upgraded mid-alignment: GroupState holds Records whose payload is a DataFrame."""
    opts = OperatorOptions("count", FilesystemStateBackend(str(tmp_path), fsync=False), 1,
                           restore_requires_complete=False)
    rt = KeyGroupRuntime.create(opts, 0)
    chans = ["t:0", "t:1"]
    first = _records([("t", 0, 0, "a", 1), ("t", 0, 1, "a", 2), ("t", 1, 0, "a", 1)])
    first.append({"kind": "barrier", "topic": "t", "partition": 0, "offset": 1,
                  "checkpoint_id": 1, "channels": chans})
    out1 = rt.process_batch(opts, CountPerKey(), "key", ["word", "count"],
                            script_frame(first), 0)
    assert out1[out1.kind == "record"]["count"].tolist() == [2]   # t:0@1 is held back
    rt = pickle.loads(pickle.dumps(rt))
    queue = rt.handler._queues["t:0"]
    held = [e for e in queue if isinstance(e, Records)]
    assert [len(e.payload) for e in held] == [1]
    for e in held:                       # as an older release stored it
        e.payload = e.payload.rows()
    second = [{"kind": "barrier", "topic": "t", "partition": 1, "offset": 1,
               "checkpoint_id": 1, "channels": chans}]
    out2 = rt.process_batch(opts, CountPerKey(), "key", ["word", "count"],
                            script_frame(second), 0)
    records = out2[out2.kind == "record"]
    assert records["count"].tolist() == [3] and records["checkpoint_id"].tolist() == [2]


def test_ack_rows_with_null_partitions_do_not_disturb_the_record_chunks():
    """Upstream ack rows carry no partition or offset: those columns arrive as floats with NaN."""
    import warnings

    pdf = pd.DataFrame({"kind": ["record", "ack", "record"], "topic": ["t", None, "t"],
                        "partition": [0, None, 0], "offset": [3, None, 2],
                        "key": ["a", None, "b"], "checkpoint_id": [1, 1, 1]})
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        events = build_events(pdf)
    assert [(e.channel, e.payload.rows()["key"].tolist()) for e in events] == [("t:0", ["b", "a"])]


@pytest.mark.parametrize("seed", range(6))
def test_output_rows_equal_a_frame_built_row_by_row_in_any_mix(seed):
    """Control columns are built from one value per block and repeated: the values and dtypes
    must still be those of a frame built from every row (ints with nulls, timestamps, lists)."""
    import random

    rng = random.Random(seed)
    columns = ["word", "count"]
    out, expected = OutputRows(columns), []
    ts_choices = [pd.Timestamp("2026-01-01", tz="UTC"), pd.Timestamp("2026-02-01", tz="UTC")]
    for _ in range(rng.randrange(0, 12)):
        if rng.random() < 0.6:
            n = rng.randrange(0, 5)
            rows = [(f"w{rng.randrange(9)}", rng.choice([1, 2, None])) for _ in range(n)]
            topic, part, first = "op:c", rng.randrange(4), rng.randrange(1000)
            ts, epoch = rng.choice(ts_choices), rng.randrange(1, 5)
            out.add_records(rows, topic, part, first, ts, epoch)
            expected += [dict(word=w, count=c, topic=topic, partition=part, offset=first + i,
                              timestamp=ts, kind="record", checkpoint_id=epoch,
                              checkpoint_timestamp=None, barrier_channels=[], ack=None)
                         for i, (w, c) in enumerate(rows)]
        else:
            fields = rng.choice([
                dict(kind="ack", checkpoint_id=3, topic="t", partition=None, ack='{"a": 1}'),
                dict(kind="barrier", checkpoint_id=4, topic="op:c", partition=2, offset=7,
                     checkpoint_timestamp=99, barrier_channels=["op:c:0"]),
                dict(kind="barrier", checkpoint_id=5, topic="op:c", partition=1, offset=None,
                     checkpoint_timestamp=100, barrier_channels=[])])
            out.add_control(**fields)
            expected.append(dict(dict.fromkeys(columns + CONTROL_COLUMNS),
                                 **{"barrier_channels": [], **fields}))
    names = columns + CONTROL_COLUMNS  # column lists, as the code this replaced built them
    want = pd.DataFrame({c: [row[c] for row in expected] for c in names}, columns=names)
    if any(isinstance(row["count"], int) for row in expected) and want["count"].isna().any():
        # ints beside nulls stay object (exact past 2**53)
        want["count"] = pd.Series([row["count"] for row in expected], dtype=object)
    pd.testing.assert_frame_equal(out.frame(), want)


def test_barrier_channels_arrive_as_json_text_or_as_a_list():
    """``with_key_groups`` sends a barrier's channels as JSON text; frames built without it (unit
    tests calling the runtime directly) hold a list: both give the same barrier."""
    from barrier_ops.input_events import channels_of

    assert channels_of('["t:0", "t:1"]') == ["t:0", "t:1"]
    assert list(channels_of(np.array(["t:0", "t:1"], dtype=object))) == ["t:0", "t:1"]
    assert channels_of(None) is None
    base = dict(kind=["barrier"], topic=["t"], partition=[0], offset=[5], key=[None],
                checkpoint_id=[2], checkpoint_timestamp=[77])
    as_text = build_events(pd.DataFrame(dict(base, barrier_channels=['["t:0", "t:1"]'])))
    as_list = build_events(pd.DataFrame(dict(base, barrier_channels=[["t:0", "t:1"]])))
    assert as_text == as_list
    assert as_text[0].channels == ("t:0", "t:1")


@pytest.mark.parametrize("seed", range(4))
@pytest.mark.parametrize("kind", ["naive", "utc", "berlin", "nat", "object", "missing"])
def test_latest_timestamps_of_all_ranges_equal_those_of_each_range(seed, kind):
    """The runtime takes every key's latest timestamp at once (_LatestTimestamp.of_ranges); it
    must give what between() gives range by range (a naive column's as nanoseconds): tz,
    NaT-only ranges (None), ties, columns that are not datetimes or absent, an index that is
    not 0 .. n - 1."""
    from barrier_ops.runtime import _LatestTimestamp

    rng = np.random.default_rng(seed)
    n = int(rng.integers(1, 60))
    stamps = pd.to_datetime(rng.integers(0, 5, n) * 10**9 + 1_767_225_600 * 10**9)
    if kind == "utc":
        stamps = stamps.tz_localize("UTC")
    elif kind == "berlin":
        stamps = stamps.tz_localize("UTC").tz_convert("Europe/Berlin")
    column = pd.Series(stamps)
    if kind == "nat":
        column[rng.random(n) < 0.6] = pd.NaT
    elif kind == "object":
        column = column.astype(object)
    # ranges are positions: a key group of a range takes its rows with their labels kept
    column.index = rng.permutation(n) + 1000
    cuts = np.sort(rng.choice(np.arange(1, n), size=min(n - 1, int(rng.integers(0, 10))),
                              replace=False)) if n > 1 else np.array([], dtype=np.int64)
    bounds = np.r_[0, cuts, n]
    latest = _LatestTimestamp(None if kind == "missing" else column)
    want = [latest.between(int(a), int(b)) for a, b in zip(bounds[:-1], bounds[1:])]
    got = latest.of_ranges(bounds)
    if kind in ("naive", "nat"):   # naive nanoseconds come back as their ints, unboxed
        assert all(g is None or type(g) is int for g in got)
        got = [None if g is None else pd.Timestamp(g) for g in got]
    assert got == want
    assert [None if w is None else str(w.tz) for w in want] == \
        [None if g is None else str(g.tz) for g in got]


def test_output_rows_refuse_a_control_field_that_is_not_a_control_column():
    out = OutputRows(["word"])
    with pytest.raises(TypeError, match="checkpoint_idd"):
        out.add_control(kind="ack", checkpoint_idd=3)
    out.add_control(kind="ack", checkpoint_id=3, ack="{}")
    frame = out.frame()
    assert frame["checkpoint_id"].tolist() == [3] and frame["word"].isna().all()


def _describe(events):
    """Events as comparable tuples: a chunk by its rows' values, not its positions."""
    out = []
    for e in events:
        if isinstance(e, Records):
            rows = e.payload.rows()
            out.append(("records", e.channel, e.epoch, rows["offset"].tolist(),
                        rows["key"].tolist()))
        else:
            out.append(e)
    return out


@pytest.mark.parametrize("seed", range(8))
def test_a_range_cuts_each_key_group_as_its_own_frame_would(seed):
    """A range of key groups builds every key group's events in one pass over its frame
    (build_group_events): each group gets the events and ack rows of its own rows alone, in
    any mix of topics, partitions, epochs, barriers with and without an offset, cancellations,
    acks with null partitions, duplicate offsets and empty groups."""
    rng = np.random.default_rng(seed)
    parts = []
    for group in range(int(rng.integers(1, 7))):
        rows = []
        for _ in range(int(rng.integers(0, 30))):
            kind = rng.choice(["record"] * 6 + ["barrier", "cancel", "ack"])
            topic, part = str(rng.choice(["a", "b"])), int(rng.integers(0, 3))
            cid = int(rng.integers(1, 4))
            if kind == "ack":
                rows.append({"kind": "ack", "topic": None, "partition": None, "offset": None,
                             "checkpoint_id": cid, "key": None, "ack": f"g{group}"})
            elif kind == "record":
                rows.append({"kind": "record", "topic": topic, "partition": part,
                             "offset": int(rng.integers(0, 12)), "checkpoint_id": cid,
                             "key": f"k{rng.integers(5)}"})
            else:
                offset = None if rng.random() < 0.3 else int(rng.integers(0, 12))
                rows.append({"kind": kind, "topic": topic, "partition": part, "offset": offset,
                             "checkpoint_id": cid, "key": None, "checkpoint_timestamp": 7,
                             "barrier_channels": '["a:0", "b:1"]'})
        parts.append(pd.DataFrame(rows, columns=["kind", "topic", "partition", "offset",
                                                 "checkpoint_id", "key", "ack",
                                                 "checkpoint_timestamp", "barrier_channels"]))
    frame = pd.concat(parts, ignore_index=True)
    bounds = np.r_[0, np.cumsum([len(p) for p in parts])]
    together = build_group_events(frame, bounds)
    assert len(together) == len(parts)
    for group, (a, b) in enumerate(zip(bounds[:-1], bounds[1:])):
        alone = frame.iloc[a:b].reset_index(drop=True)
        assert _describe(together[group].events) == _describe(build_events(alone))
        assert frame["ack"].take(together[group].acks).tolist() == [f"g{group}"] * int(
            (alone["kind"] == "ack").sum())
        for e in together[group].events:   # chunks cut the range's frame, inside the group
            if isinstance(e, Records):
                assert e.payload.frame is frame
                assert ((e.payload.positions >= a) & (e.payload.positions < b)).all()


def _reference_events(rows: pd.DataFrame) -> list:
    """build_events written plainly, row by row (the specification the vectorised code must
    meet): channels in sorted name order; in each, the records by offset (ties in batch order)
    and the markers by (offset, checkpoint id), a marker at offset X before the records at X or
    later, one without an offset after them all; records cut wherever their epoch changes."""
    from barrier_core.schema import channel_name
    from barrier_ops.alignment import Barrier, CancellationBarrier

    channels: dict = {}
    for i, row in enumerate(rows.to_dict("records")):
        if row["kind"] not in ("record", "barrier", "cancel"):
            continue
        ch = channel_name(row["topic"], int(row["partition"]))
        entry = channels.setdefault(ch, {"records": [], "markers": []})
        if row["kind"] == "record":
            entry["records"].append((int(row["offset"]), i, row))
            continue
        off = None if pd.isna(row["offset"]) else int(row["offset"])
        if row["kind"] == "cancel":
            ev = CancellationBarrier(int(row["checkpoint_id"]), ch)
        else:
            chans = row["barrier_channels"]
            chans = json.loads(chans) if isinstance(chans, str) else chans
            ts = row["checkpoint_timestamp"]
            ev = Barrier(int(row["checkpoint_id"]), ch, off,
                         None if ts is None or pd.isna(ts) else int(ts),
                         tuple(chans) if chans is not None else ())
        entry["markers"].append((float("inf") if off is None else off,
                                 int(row["checkpoint_id"]), ev))
    events = []
    for ch in sorted(channels):
        records = [r for _, _, r in sorted(channels[ch]["records"], key=lambda r: r[:2])]
        pending: list = []

        def flush():
            run: list = []
            for r in pending:
                epoch = None if pd.isna(r["checkpoint_id"]) else int(r["checkpoint_id"])
                if run and run[0] != epoch:
                    events.append(("records", ch, run[0], [x["offset"] for x in run[1]],
                                   [x["key"] for x in run[1]]))
                    run = []
                run = run or [epoch, []]
                run[1].append(r)
            if run:
                events.append(("records", ch, run[0], [x["offset"] for x in run[1]],
                               [x["key"] for x in run[1]]))
            pending.clear()

        for off, _, ev in sorted(channels[ch]["markers"], key=lambda m: m[:2]):
            while records and records[0]["offset"] < off:
                pending.append(records.pop(0))
            flush()
            events.append(ev)
        pending.extend(records)
        flush()
    return events


@pytest.mark.parametrize("seed", range(10))
def test_every_key_groups_events_equal_a_plain_row_by_row_cut(seed):
    """build_group_events (one sort of the whole range, the epoch changes found once, markers
    made once and shared) gives each key group exactly the events a plain row-by-row reading of
    its own rows gives: in any mix of topics, partitions named out of numeric order (t:10 before
    t:2), epochs changing inside a channel, duplicate offsets, markers with and without an
    offset, cancellations, acks, rows arriving in any order, and offsets far apart (the sort's
    fallback when key group, channel and offset do not fit one int64)."""
    rng = np.random.default_rng(100 + seed)
    base = int(rng.choice([0, 2 ** 61]))
    parts = []
    for group in range(int(rng.integers(1, 9))):
        rows = []
        for _ in range(int(rng.integers(0, 60))):
            kind = rng.choice(["record"] * 8 + ["barrier", "barrier", "cancel", "ack"])
            topic, part = str(rng.choice(["t", "u"])), int(rng.choice([0, 1, 2, 10]))
            cid = int(rng.integers(1, 4))
            far = base if rng.random() < 0.5 else 0
            if kind == "ack":
                rows.append({"kind": "ack", "topic": None, "partition": None, "offset": None,
                             "checkpoint_id": cid, "key": None, "ack": f"g{group}"})
            elif kind == "record":
                rows.append({"kind": "record", "topic": topic, "partition": part,
                             "offset": far + int(rng.integers(0, 20)), "checkpoint_id": cid,
                             "key": f"k{rng.integers(6)}"})
            else:
                offset = None if rng.random() < 0.3 else far + int(rng.integers(0, 20))
                rows.append({"kind": kind, "topic": topic, "partition": part, "offset": offset,
                             "checkpoint_id": cid, "key": None,
                             "checkpoint_timestamp": int(rng.integers(5, 9)),
                             "barrier_channels": '["t:0", "t:10", "u:2"]'})
        parts.append(pd.DataFrame(rows, columns=["kind", "topic", "partition", "offset",
                                                 "checkpoint_id", "key", "ack",
                                                 "checkpoint_timestamp", "barrier_channels"],
                                  dtype=object))
    frame = pd.concat(parts, ignore_index=True)
    bounds = np.r_[0, np.cumsum([len(p) for p in parts])]
    together = build_group_events(frame, bounds)
    for group, (a, b) in enumerate(zip(bounds[:-1], bounds[1:])):
        alone = frame.iloc[a:b].reset_index(drop=True)
        assert _describe(together[group].events) == _reference_events(alone)
        assert frame["ack"].take(together[group].acks).tolist() == [f"g{group}"] * int(
            (alone["kind"] == "ack").sum())
