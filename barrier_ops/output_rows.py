"""The rows one key group emits in one micro-batch, built column by column.

Runs inside ``applyInPandasWithState`` on executors (and in unit tests). Output rows are the
user's columns followed by :data:`CONTROL_COLUMNS` (see ``docs/internals/protocol.md``).
"""

from __future__ import annotations

from typing import Any, Dict, List, Optional, Sequence, Tuple

import numpy as np
import pandas as pd

from barrier_core.schema import KIND_RECORD
from barrier_ops.packed_rows import (PACKED_COUNT, PACKED_TIMESTAMPS, naive_timestamps,
                                     utc_micros)

#: columns every operator output row carries after the user's columns (see protocol.md)
CONTROL_COLUMNS = ["topic", "partition", "offset", "timestamp", "kind", "checkpoint_id",
                   "checkpoint_timestamp", "barrier_channels", "ack"]
#: the control columns a piece holds: ``timestamp`` is kept apart (``OutputRows._stamps``)
_PIECE_COLUMNS = [c for c in CONTROL_COLUMNS if c != "timestamp"]

#: ``barrier_channels`` of every output row but a barrier: an empty list, never null. Spark's JVM
#: hands a list column null on most rows to the next Python step (the sink) at a cost per row
#: several times that of empty lists (Arrow's ``ListVector`` walks back to its last non-null
#: value); bench_pipeline one row per record at 200k-record batches pays it on every record.
NO_CHANNELS: List[str] = []


class OutputRows:
    """Output rows in emission order: blocks of user records and single control rows.

    The user's columns are kept value by value. A control column holds one value per piece (a
    block of records, ``offset`` its first offset, or a control row), repeated when the frame
    is built: pandas infers each control column's dtype from those few values, which gives the
    dtype it would infer from the whole column, since the repeats add no value of a new type.
    ``timestamp`` is not a piece's: it is kept apart, one value per stamp (a piece of
    :meth:`add_blocks` has one a block, any other piece one), so the keys of an epoch segment, each with the latest
    timestamp of its records, make one piece.
    """

    def __init__(self, user_columns: Sequence[str]) -> None:
        self.user_columns = list(user_columns)
        self._user: Dict[str, List[Any]] = {c: [] for c in self.user_columns}
        self._user_lists = [self._user[c] for c in self.user_columns]   # user-column order
        self._pieces: List[Tuple] = []   # a piece's control values, in _PIECE_COLUMNS order
        self._counts: List[int] = []     # rows a piece
        self._stamps: List[Any] = []     # timestamps
        self._stamp_counts: List[int] = []   # rows a timestamp
        self._runs: List[int] = []       # the first piece of each run (packed_frame)
        #: what a piece of records must have to continue the last piece's run: (topic,
        #: partition, epoch, next offset); None after a control row
        self._run_next: Optional[Tuple] = None

    def add_records(self, rows: List[Tuple], topic: str, partition: int, first_offset: int,
                    timestamp, epoch: int) -> None:
        """User rows (tuples in user-column order) at offsets ``first_offset ..``;
        ``timestamp``: a pandas timestamp, None, or a naive one's nanoseconds as an int."""
        n = len(rows)
        if not n:
            return
        if n == 1:   # one row per key and batch: no transpose
            for values, value in zip(self._user_lists, rows[0]):
                values.append(value)
        else:
            for values, column in zip(self._user_lists, zip(*rows)):
                values.extend(column)
        self._add_record_piece(topic, partition, first_offset, epoch, n)
        self._stamps.append(timestamp)
        self._stamp_counts.append(n)

    def add_blocks(self, rows: List[Tuple], counts: List[int], timestamps: List[Any],
                   topic: str, partition: int, first_offset: int, epoch: int) -> None:
        """Consecutive blocks of user rows in one call: block ``i`` is the next ``counts[i]``
        tuples of ``rows`` (every count > 0), with timestamp ``timestamps[i]``; the blocks'
        offsets count on from ``first_offset``. The same rows as :meth:`add_records` for each
        block in turn, added at once as one piece: the keys of an epoch segment, one block a
        key, cost one transpose and two list appends a key instead of a call each."""
        if not counts:
            return
        for values, column in zip(self._user_lists, zip(*rows)):
            values.extend(column)
        self._add_record_piece(topic, partition, first_offset, epoch, len(rows))
        self._stamps.extend(timestamps)
        self._stamp_counts.extend(counts)

    def add_control(self, **fields) -> None:
        """One control row: the given control fields, every other column null."""
        unknown = set(fields).difference(CONTROL_COLUMNS)
        if unknown:
            raise TypeError(f"not control columns: {sorted(unknown)}")
        for values in self._user.values():
            values.append(None)
        fields.setdefault("barrier_channels", NO_CHANNELS)
        self._runs.append(len(self._pieces))   # a control row is a run of its own
        self._run_next = None
        self._pieces.append(tuple(fields.get(name) for name in _PIECE_COLUMNS))
        self._counts.append(1)
        self._stamps.append(fields.get("timestamp"))
        self._stamp_counts.append(1)

    def _add_record_piece(self, topic: str, partition: int, first_offset, epoch: int,
                          n: int) -> None:
        """The control values of ``n`` records at ``first_offset`` (their user values and
        timestamps are the caller's to add). They start a new run unless they continue the last
        piece's (records too, same topic, partition and epoch, offsets going on from it: a key
        group's records between two control rows)."""
        if first_offset is None or self._run_next != (topic, partition, epoch, first_offset):
            self._runs.append(len(self._pieces))
        self._run_next = (None if first_offset is None
                          else (topic, partition, epoch, first_offset + n))
        # _PIECE_COLUMNS order; one tuple a piece: a block costs one append, not eight
        self._pieces.append((topic, partition, first_offset, KIND_RECORD, epoch, None,
                             NO_CHANNELS, None))
        self._counts.append(n)

    def _control(self) -> Dict[str, List[Any]]:
        """Each control column's values but ``timestamp``'s, one a piece."""
        if not self._pieces:
            return {name: [] for name in _PIECE_COLUMNS}
        return dict(zip(_PIECE_COLUMNS, map(list, zip(*self._pieces))))

    def frame(self) -> pd.DataFrame:
        names = self.user_columns + CONTROL_COLUMNS
        counts = np.asarray(self._counts, dtype=np.int64)
        total = int(counts.sum())
        if not total:
            return pd.DataFrame({name: [] for name in names}, columns=names)
        columns = {name: _user_series(values) for name, values in self._user.items()}
        control = self._control()
        for name in CONTROL_COLUMNS:
            if name == "timestamp":
                columns[name] = _control_array(name, naive_timestamps(self._stamps)).repeat(
                    np.asarray(self._stamp_counts, dtype=np.int64))
                continue
            column = _control_array(name, control[name]).repeat(counts)
            if name == "offset" and (counts > 1).any():  # a block counts up from its first
                first_row = np.cumsum(counts) - counts
                column = column + (np.arange(total) - np.repeat(first_row, counts))
            columns[name] = column
        return _frame_of(columns)

    def packed_frame(self, max_records: int, time_zone: Optional[str] = None) -> pd.DataFrame:
        """The same rows packed (:mod:`barrier_ops.packed_rows`). Consecutive blocks of records
        that continue one another (same channel and epoch, offsets counting on: the records of
        one epoch segment, whatever their keys) form a run, and a run takes one row per
        ``max_records`` records: each user column an array of their values
        (:func:`_packed_cells`), :data:`~barrier_ops.packed_rows.PACKED_TIMESTAMPS` an array of
        their timestamps (:func:`~barrier_ops.packed_rows.utc_micros` in ``time_zone``) and
        ``offset`` the first offset of the row. A control row takes one row with null user
        columns. :data:`~barrier_ops.packed_rows.PACKED_COUNT` says how many rows each stands
        for. Built column by column, as :meth:`frame`."""
        names = self.user_columns + _PIECE_COLUMNS + [PACKED_TIMESTAMPS, PACKED_COUNT]
        counts = np.asarray(self._counts, dtype=np.int64)
        if not len(counts):
            return pd.DataFrame({name: [] for name in names}, columns=names)
        control = self._control()
        run = np.asarray(self._runs, dtype=np.int64)    # first piece of each run
        run_counts = np.add.reduceat(counts, run)
        is_record = (np.asarray(control["kind"], dtype=object) == KIND_RECORD)[run]
        rows_per_run = np.where(is_record, -(-run_counts // max_records), 1)
        row_run = np.repeat(np.arange(len(run)), rows_per_run)
        step = (np.arange(len(row_run)) - np.repeat(np.cumsum(rows_per_run) - rows_per_run,
                                                    rows_per_run)) * max_records
        record_row = is_record[row_run]
        first = (np.cumsum(run_counts) - run_counts)[row_run] + step   # into the value lists
        size = np.where(record_row, np.minimum(max_records, run_counts[row_run] - step), 1)
        bounds = list(zip(first.tolist(), (first + size).tolist(), record_row.tolist()))
        columns = {name: _packed_cells(values, bounds) for name, values in self._user.items()}
        piece = run[row_run]                            # the piece whose control values a row takes
        one_row_a_piece = (len(piece) == len(counts)    # no run merged or split: 0, 1, 2 ...
                           and bool((piece == np.arange(len(counts))).all()))
        for name, values in control.items():
            column = _control_array(name, values)
            if not one_row_a_piece:
                column = column.take(piece)
            if name == "offset" and step.any():   # a row of a run counts on from its first
                column = column + step
            columns[name] = column
        micros = np.empty(len(self._stamps), dtype=object)
        micros[:] = utc_micros(self._stamps, time_zone)
        columns[PACKED_TIMESTAMPS] = _packed_cells(micros.repeat(self._stamp_counts), [
            (a, b if is_rec else a + 1, True) for a, b, is_rec in bounds])
        columns[PACKED_COUNT] = size.astype(np.int32)
        return _frame_of(columns)


#: control columns whose values are text, lists or None: their dtype is ``object`` whatever the
#: values, so the column is made without pandas' inference
_OBJECT_CONTROL_COLUMNS = frozenset({"topic", "kind", "barrier_channels", "ack"})
#: control columns of Python ints or None (see :func:`_control_array`)
_INTEGER_CONTROL_COLUMNS = frozenset({"partition", "offset", "checkpoint_id",
                                      "checkpoint_timestamp"})


def _control_array(name: str, values: List[Any]):
    """A control column, one value per piece, as the array ``pd.Series(values)`` holds: its
    dtype is the one pandas infers (Python ints are int64, ints with a None float64 with NaN,
    only None object, timestamps datetime64), made directly where the values are plain ints or
    None and text columns, which are object whatever they hold. A ``Series`` a column costs
    about 15-50 us, and a small key group's batch builds ten of them."""
    if name in _OBJECT_CONTROL_COLUMNS:
        array = np.empty(len(values), dtype=object)
        array[:] = values
        return array
    if name in _INTEGER_CONTROL_COLUMNS:
        ints = [v for v in values if v is not None]
        if ints and all(type(v) is int for v in ints):  # not bool, not numpy scalars
            try:
                if len(ints) == len(values):
                    return np.array(values, dtype=np.int64)
                if max(abs(v) for v in ints) <= 2 ** 53:  # floats hold these exactly, as
                    return np.array([np.nan if v is None else v for v in values],  # pandas'
                                    dtype=np.float64)                               # cast
            except OverflowError:  # beyond int64: pandas decides (uint64 or object)
                pass
    series = pd.Series(values)
    if isinstance(series.dtype, np.dtype) and series.dtype.kind != "M":
        return series.to_numpy()
    return series.array  # datetime64 (naive or with a time zone) and extension types


def _frame_of(columns: Dict[str, Any]) -> pd.DataFrame:
    """A frame of ``columns`` (arrays or Series with index ``0 .. n - 1``, in the dict's order)
    that shares their arrays: without ``copy=False`` pandas copies them into consolidated
    blocks, which cost more than building them (about 0.25 ms a key group and batch)."""
    return pd.DataFrame(columns, copy=False)


def _packed_cells(values: List[Any], bounds: List[Tuple[int, int, bool]]) -> pd.Series:
    """A packed user column: per ``(start, end, is_record)`` the values ``start:end`` as a view
    of one object array (None for a control row). Views, not list slices: a list is an object
    the garbage collector tracks, and thousands of them alive per batch made its collections
    cost more than the packing saved (one row per key, 6,250 keys: +40 ms a batch)."""
    flat = np.empty(len(values), dtype=object)
    flat[:] = values
    cells = np.empty(len(bounds), dtype=object)
    for i, (start, end, is_record) in enumerate(bounds):
        if is_record:
            cells[i] = flat[start:end]
    return pd.Series(cells, dtype=object, copy=False)


def _user_series(values: List[Any]) -> pd.Series:
    """A user column of the output frame. pandas turns integers with a null among them (every
    control row has nulls in the user columns) into floats, which holds an integer exactly only
    up to 2**53: such a column stays object, which PySpark converts to Arrow integers exactly."""
    series = pd.Series(values)
    if series.dtype.kind == "f" and any(isinstance(v, (int, np.integer)) and
                                        not isinstance(v, bool) for v in values):
        return pd.Series(values, dtype=object)
    return series
