"""A range's records, key group by key group and key by key, cut once (executor).

Runs inside ``applyInPandasWithState`` on executors, for ``keyed_process(..., parallelism=N)``
(:func:`~barrier_ops.key_group_state.run_range`), and in unit tests.

Each key group hands its function one key's records at a time, so the rows of every segment the
barrier handler releases are put key by key: a factorize of the keys, a stable sort and a
``take`` of the rows in that order (:func:`~barrier_ops.input_events.key_order`; an Arrow
``take`` with records as Arrow, a pandas one otherwise). That costs about 0.5-0.9 ms a segment
however few rows it holds: 30-60 ms a batch for a task running 64 key groups (the default
``max_parallelism`` 128 over two shuffle partitions), about half of the range's own time.

Almost always a key group's segment is all of its records of the batch in its events' order
(:attr:`~barrier_ops.input_events.GroupEvents.records`): barriers at the end of each
partition's range (the default placement) or no barrier in the batch. For those segments
:class:`RangeRecords` puts every key group of the range key by key in one factorize, one sort
and one ``take``, and a key group's rows are then a slice. Any other segment (records held back
by an aligning barrier, a barrier inside a partition's range) is cut on its own as before. Both
give the same keys, in the same order, with the same records in the same order.
"""

from __future__ import annotations

from typing import Any, NamedTuple, Optional, Sequence, Union

import numpy as np
import pandas as pd

from barrier_ops.arrow_records import ArrowKeyRows
from barrier_ops.input_events import (GroupEvents, KeyRows, RowSlice, group_by_key,
                                      key_order)


class KeyCut(NamedTuple):
    """A segment's rows key by key: key ``keys[i]`` owns rows ``bounds[i]:bounds[i + 1]`` of
    ``rows`` (:class:`~barrier_ops.arrow_records.ArrowKeyRows` or
    :class:`~barrier_ops.input_events.KeyRows`) and of ``timestamps`` (the
    rows' ``timestamp`` values in that order, or None without the column)."""

    rows: Union[ArrowKeyRows, KeyRows]
    keys: np.ndarray
    bounds: np.ndarray
    timestamps: Optional[Any]


class RangeRecords:
    """The record rows of a range's frame ``pdf``, cut into each key group's keys (``events``:
    the key groups' events, in order), as Arrow (``batch``: ``pdf`` as Arrow, row for row) or,
    with ``batch`` None, as pandas frames (:class:`~barrier_ops.input_events.KeyRows`)."""

    def __init__(self, pdf: pd.DataFrame, batch, key_col: str,
                 events: Sequence[GroupEvents]) -> None:
        self._pdf, self._batch, self._key_col = pdf, batch, key_col
        sizes = [len(e.records) for e in events]
        self._starts = np.r_[0, np.cumsum(sizes, dtype="int64")]
        self._records = (np.concatenate([e.records for e in events]) if sum(sizes)
                         else np.empty(0, dtype="int64"))
        self._sorted: Optional[tuple] = None   # the whole range key by key, on first use

    def of_group(self, index: int) -> "GroupRecords":
        """The records of the range's ``index``-th key group (in ``events`` order)."""
        return GroupRecords(self, index)

    def cut(self, index: int, positions: np.ndarray) -> KeyCut:
        """Rows ``positions`` of ``pdf`` (a segment of key group ``index``) key by key, in the
        order :func:`~barrier_ops.input_events.key_order` gives: keys in order of first
        appearance, each key's rows in segment order."""
        a, b = int(self._starts[index]), int(self._starts[index + 1])
        if len(positions) == b - a and np.array_equal(positions, self._records[a:b]):
            return self._slice(a, b)
        if self._batch is None:
            rows, keys, bounds = group_by_key(self._pdf, positions, self._key_col)
            return KeyCut(KeyRows(rows, len(keys)), keys, bounds, _timestamps(rows, None))
        grouped, keys, bounds = key_order(self._pdf, positions, self._key_col)
        return KeyCut(ArrowKeyRows.taken(self._batch, grouped), keys, bounds,
                      _timestamps(self._pdf, grouped))

    def _slice(self, a: int, b: int) -> KeyCut:
        if self._sorted is None:
            self._sorted = self._sort()
        table, keys, key_bounds, stamps = self._sorted
        k0, k1 = np.searchsorted(key_bounds, [a, b]).tolist()
        if self._batch is None:
            rows = table.iloc[a:b]
            rows.index = pd.RangeIndex(b - a)   # as a copy of the segment's rows has it
            key_rows = KeyRows(rows, k1 - k0)
        else:
            key_rows = ArrowKeyRows.sliced(table, a, b)
        return KeyCut(key_rows, keys[k0:k1], key_bounds[k0:k1 + 1] - a,
                      None if stamps is None else stamps[a:b])

    def _sort(self) -> tuple:
        """Every key group's records key by key, in one pass: a key of key group ``g`` is the
        pair ``(g, key)``, numbered in order of first appearance; the records sorted stably by
        that number stay in their key group's block (the groups are in order) and are within
        it what :func:`key_order` gives for the block alone. Where every key lies in one key
        group (always, for a range cut by the keys' hash) the pairs are numbered as the keys
        are, so the keys' numbers are sorted and no pair is numbered."""
        records, pdf = self._records, self._pdf
        codes = _key_codes(pdf, self._batch, self._key_col, records)
        order = np.argsort(codes, kind="stable")
        key_bounds = np.r_[0, np.cumsum(np.bincount(codes), dtype="int64")]
        group = np.repeat(np.arange(len(self._starts) - 1, dtype="int64"), np.diff(self._starts))
        in_order = group[order]   # non-decreasing along each key's records (they keep order)
        if (in_order[key_bounds[:-1]] != in_order[key_bounds[1:] - 1]).any():
            # a key in several key groups (a frame not cut by the keys' hash): number the pairs
            pairs, _ = pd.factorize(group * (int(codes.max(initial=0)) + 1) + codes)
            order = np.argsort(pairs, kind="stable")
            key_bounds = np.r_[0, np.cumsum(np.bincount(pairs), dtype="int64")]
        grouped = records[order]
        # each key's first record in its key group
        keys = pdf[self._key_col].to_numpy()[grouped[key_bounds[:-1]]]
        stamps = _timestamps(pdf, grouped)
        if self._batch is None:
            table = RowSlice(pdf, grouped).rows()
        else:
            import pyarrow as pa

            table = self._batch.take(pa.array(grouped))
        return table, keys, key_bounds, stamps


#: Arrow types whose values are equal exactly when the pandas values they were converted from
#: are (no float: NaN and -0.0; no nested or inferred type).
_EXACT_KEY_TYPES = ("binary", "large_binary", "string", "large_string", "int8", "int16",
                    "int32", "int64", "uint8", "uint16", "uint32", "uint64")


def _key_codes(pdf: pd.DataFrame, batch, key_col: str, records: np.ndarray) -> np.ndarray:
    """The key of each row ``records`` of ``pdf`` numbered in order of first appearance among
    them, null keys one key (``pd.factorize(..., use_na_sentinel=False)``). With ``batch``
    (``pdf`` as Arrow, row for row) and a key column of a type in :data:`_EXACT_KEY_TYPES`, the
    keys are hashed by Arrow, in the batch, and only their numbers are factorized: about a
    third of the time for bytes keys, which pandas hashes as Python objects."""
    if batch is not None and len(records):
        import pyarrow.compute as pc

        column = batch.column(key_col)
        if str(column.type) in _EXACT_KEY_TYPES:
            numbers = pc.dictionary_encode(column, null_encoding="encode").indices
            codes, _ = pd.factorize(numbers.to_numpy(zero_copy_only=False)[records])
            return codes
    codes, _ = pd.factorize(pdf[key_col].to_numpy()[records], use_na_sentinel=False)
    return codes


def _timestamps(frame: pd.DataFrame, positions: Optional[np.ndarray]):
    """The ``timestamp`` values of rows ``positions`` of ``frame`` (all rows: None) in that
    order, or None when it has no such column."""
    if "timestamp" not in frame.columns:
        return None
    values = frame["timestamp"].array
    return values if positions is None else values.take(positions)


class GroupRecords:
    """One key group's view of :class:`RangeRecords` (what the key group's runtime gets)."""

    __slots__ = ("_range", "_index")

    def __init__(self, records: RangeRecords, index: int) -> None:
        self._range, self._index = records, index

    def cut(self, positions: np.ndarray) -> KeyCut:
        """:meth:`RangeRecords.cut` for this key group."""
        return self._range.cut(self._index, positions)
