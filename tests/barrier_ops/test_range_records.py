"""A range's records key by key, cut once for all its key groups (barrier_ops.range_records):
every cut equals the one each key group's segment gets on its own (input_events.key_order)."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from barrier_core.schema import source_schema
from barrier_ops.alignment import Records
from barrier_ops.arrow_records import ArrowKeyRows, arrow_record_types, to_record_batch
from barrier_ops.input_events import build_group_events, group_by_key, key_order
from barrier_ops.keygroups import key_group_of
from barrier_ops.range_records import RangeRecords
from barrier_ops.testing import make_script, script_frame

GROUPS = 6


def range_frame(seed: int, partitions: int = 12, null_keys: bool = True):
    """A script batch with every row of each key group together, key groups ascending (as
    ``run_range`` sorts a range's rows), and the key groups' bounds; a few null keys. Twelve
    partitions: ``t:10`` sorts before ``t:2`` by name, not by number."""
    script = make_script(seed, partitions=partitions, records=30, checkpoints=2, batches=2,
                         keys="abcdefghijklmnop")
    pdf = script_frame(script["batches"][0])
    if null_keys:
        records = np.flatnonzero((pdf["kind"] == "record").to_numpy())
        pdf.loc[records[::7], "key"] = None
    group = [0 if k is None else key_group_of(k, GROUPS) for k in pdf["key"]]
    order = np.argsort(group, kind="stable")
    pdf = pdf.take(order).reset_index(drop=True)
    groups, starts = np.unique(np.asarray(group)[order], return_index=True)
    return pdf, np.r_[starts, len(pdf)]


def event_positions(group_events) -> np.ndarray:
    """The positions of a key group's record events, in event order."""
    parts = [ev.payload.positions for ev in group_events.events if isinstance(ev, Records)]
    return np.concatenate(parts) if parts else np.empty(0, dtype="int64")


def plain_keys(keys) -> list:
    """Keys with null keys as None, whether None or NaN."""
    return [None if k is None or k != k else k for k in keys]


def as_lists(cut_rows: ArrowKeyRows, keys, bounds):
    """Each key with its records as Arrow rows (null keys as None, whether None or NaN)."""
    return [(None if k is None or k != k else k, cut_rows(a, b).to_pylist())
            for k, a, b in zip(keys, bounds[:-1].tolist(), bounds[1:].tolist())]


@pytest.mark.parametrize("seed", range(5))
def test_a_key_groups_records_are_listed_in_the_order_of_its_events(seed):
    pdf, bounds = range_frame(seed)
    events = build_group_events(pdf, bounds)
    assert sum(len(e.records) for e in events) == int((pdf["kind"] == "record").sum())
    for group_events in events:
        assert event_positions(group_events).tolist() == group_events.records.tolist()


@pytest.mark.parametrize("records_format", ["arrow", "pandas"])
@pytest.mark.parametrize("seed", range(5))
def test_every_cut_equals_the_segments_own_cut(seed, records_format):
    """A key group's whole records (sliced from the range's one sort) and any other segment
    (cut on its own) give the keys, order and records that key_order and a take of its rows
    give: the same Arrow rows, or the same pandas frames (index included)."""
    pdf, bounds = range_frame(seed)
    events = build_group_events(pdf, bounds)
    batch = to_record_batch(pdf, arrow_record_types(source_schema()))
    records = RangeRecords(pdf, batch if records_format == "arrow" else None, "key", events)
    rng = np.random.default_rng(seed)
    for i, group_events in enumerate(events):
        whole = group_events.records
        part = np.sort(rng.choice(whole, size=len(whole) // 2, replace=False)) if len(whole) else whole
        for positions in (whole, part, whole[::-1]):
            cut = records.of_group(i).cut(positions)
            grouped, keys, key_bounds = key_order(pdf, positions, "key")
            if records_format == "arrow":
                expected = ArrowKeyRows.taken(batch, grouped)
                assert (as_lists(cut.rows, cut.keys, cut.bounds)
                        == as_lists(expected, keys, key_bounds))
            else:
                rows = group_by_key(pdf, positions, "key")[0]
                for a, b in zip(key_bounds[:-1].tolist(), key_bounds[1:].tolist()):
                    pd.testing.assert_frame_equal(cut.rows(a, b), rows.iloc[a:b])
            assert [None if k is None or k != k else k for k in cut.keys] == [
                None if k is None or k != k else k for k in keys]
            assert cut.bounds.tolist() == key_bounds.tolist()
            assert list(cut.timestamps) == list(pdf["timestamp"].array.take(grouped))


def test_a_range_without_records_or_timestamps_cuts_nothing():
    pdf, bounds = range_frame(0, partitions=2, null_keys=False)
    pdf = pdf[pdf["kind"] != "record"].reset_index(drop=True)
    pdf = pdf.drop(columns=["timestamp"])
    events = build_group_events(pdf, np.array([0, len(pdf)]))
    for batch in (to_record_batch(pdf, {}), None):
        records = RangeRecords(pdf, batch, "key", events)
        cut = records.of_group(0).cut(np.empty(0, dtype="int64"))
        assert len(cut.keys) == 0 and cut.bounds.tolist() == [0] and cut.timestamps is None


@pytest.mark.parametrize("seed", range(3))
def test_record_rows_convert_the_same_with_their_kind_known(seed):
    """run_range converts its range to Arrow with the records' kind known (to_record_batch's
    ``same``): the rows it reads, the records, are exactly those of a full conversion, column
    types included."""
    pdf, _ = range_frame(seed)
    types = arrow_record_types(source_schema())
    records = np.flatnonzero((pdf["kind"] == "record").to_numpy())
    full = to_record_batch(pdf, types).take(records)
    known = to_record_batch(pdf, types, same={"kind": "record"}).take(records)
    assert known.schema == full.schema and known.equals(full)


@pytest.mark.parametrize("seed", range(3))
def test_a_range_already_in_key_group_order_is_grouped_without_a_copy(seed):
    """_by_key_group takes rows that come in key-group order (a packed source's) as they are,
    and puts rows in any other order in that order with one stable sort: the same rows, key
    groups and bounds either way."""
    from barrier_ops.key_group_state import KEY_GROUP_COLUMN, _by_key_group

    pdf, bounds = range_frame(seed)
    pdf[KEY_GROUP_COLUMN] = np.repeat(np.arange(len(bounds) - 1), np.diff(bounds)).astype("int32")
    rows, groups, group_bounds = _by_key_group(pdf.copy(deep=False))
    assert np.shares_memory(rows["offset"].to_numpy(), pdf["offset"].to_numpy())
    pd.testing.assert_frame_equal(rows, pdf.drop(columns=[KEY_GROUP_COLUMN]))
    assert group_bounds.tolist() == bounds.tolist()
    shuffled = pdf.take(np.random.default_rng(seed).permutation(len(pdf)))
    sorted_rows, sorted_groups, sorted_bounds = _by_key_group(shuffled.copy(deep=False))
    in_order = shuffled.sort_values(KEY_GROUP_COLUMN, kind="stable")   # its own index kept
    as_given, given_groups, given_bounds = _by_key_group(in_order.copy(deep=False))
    pd.testing.assert_frame_equal(sorted_rows, as_given)   # index 0 .. n - 1 in both
    assert sorted_groups.tolist() == given_groups.tolist() == groups.tolist()
    assert sorted_bounds.tolist() == given_bounds.tolist() == group_bounds.tolist()


@pytest.mark.parametrize("records_format", ["arrow", "pandas"])
@pytest.mark.parametrize("seed", range(3))
def test_a_key_in_several_key_groups_is_cut_in_each(seed, records_format):
    """A frame cut into key groups by position, not by the keys' hash, has keys in several key
    groups: each group's cut still holds only its own records of each key, as key_order gives
    for that group alone."""
    pdf, _ = range_frame(seed)
    pdf = pdf.take(np.random.default_rng(seed).permutation(len(pdf))).reset_index(drop=True)
    bounds = np.linspace(0, len(pdf), 4).astype("int64")
    events = build_group_events(pdf, bounds)
    batch = to_record_batch(pdf, arrow_record_types(source_schema()))
    records = RangeRecords(pdf, batch if records_format == "arrow" else None, "key", events)
    seen: list = []
    for i, group_events in enumerate(events):
        positions = group_events.records
        cut = records.of_group(i).cut(positions)
        grouped, keys, key_bounds = key_order(pdf, positions, "key")
        assert cut.bounds.tolist() == key_bounds.tolist()
        assert plain_keys(cut.keys) == plain_keys(keys)
        expected = ArrowKeyRows.taken(batch, grouped)
        if records_format == "arrow":
            assert as_lists(cut.rows, cut.keys, cut.bounds) == as_lists(expected, keys, key_bounds)
        else:
            for a, b in zip(key_bounds[:-1].tolist(), key_bounds[1:].tolist()):
                assert cut.rows(a, b)["offset"].tolist() == pdf["offset"].to_numpy()[
                    grouped[a:b]].tolist()
        seen += set(plain_keys(keys))
    assert len(seen) > len(set(seen))   # some key is in several key groups: this test's case


@pytest.mark.parametrize("values", [
    [b"b", None, b"a", b"b", None, b"c", b"a"],
    ["x", "y", None, "x", "z", "y", "y"],
    [7, 3, 7, 9, 3, 3, 1],
    [1.5, float("nan"), 1.5, -0.0, 0.0, float("nan"), 2.0],
], ids=["bytes", "str", "int", "float"])
def test_keys_numbered_by_arrow_equal_pandas_numbers(values):
    """_key_codes numbers keys with Arrow for exact key types, and falls back to pandas for
    others (floats: NaN and -0.0): either way the numbers are pandas' own, nulls one key, in
    order of first appearance among the records asked for."""
    from barrier_ops.range_records import _key_codes

    pdf = pd.DataFrame({"key": pd.Series(values, dtype=None if type(values[0]) in (int, float)
                                         else object)})
    batch = to_record_batch(pdf, {})
    records = np.array([6, 5, 4, 3, 2, 1, 0, 2, 6], dtype="int64")
    expected, _ = pd.factorize(pdf["key"].to_numpy()[records], use_na_sentinel=False)
    assert _key_codes(pdf, batch, "key", records).tolist() == expected.tolist()
    assert _key_codes(pdf, None, "key", records).tolist() == expected.tolist()
