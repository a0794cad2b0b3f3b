"""A micro-batch of one key group, cut into barrier-handler events without copying rows.

Runs inside ``applyInPandasWithState`` on executors (and in unit tests).

:func:`build_events` orders each channel's records by offset and cuts them at every barrier and
epoch change; :func:`build_group_events` does so for every key group of a range's frame in one
pass. A chunk is a :class:`RowSlice`: positions into the batch's frame, not a copy of its
rows. :func:`gather` names the rows of the chunks the handler released, and :func:`group_by_key`
copies them once, each key's rows together, keys in first-appearance order (like
``groupby(sort=False, dropna=False)``).
"""

from __future__ import annotations

import json
from bisect import bisect_left, bisect_right
from typing import Any, Callable, Dict, List, Optional, Sequence, Tuple

import numpy as np
import pandas as pd

from barrier_core.schema import KIND_ACK, KIND_BARRIER, KIND_RECORD, channel_name
from barrier_ops.alignment import Barrier, CancellationBarrier, Records

KIND_CANCEL = "cancel"


class RowSlice:
    """Rows ``positions`` of ``frame``, in that order: a chunk of one channel's records.

    Notes
    -----
    Picklable and self-contained once pickled: a chunk the aligner holds back past the end of the
    micro-batch is stored in ``GroupState`` with only its own rows.
    """

    __slots__ = ("frame", "positions")

    def __init__(self, frame: pd.DataFrame, positions: np.ndarray) -> None:
        self.frame = frame
        self.positions = positions

    def __len__(self) -> int:
        return len(self.positions)

    def rows(self) -> pd.DataFrame:
        """The chunk's rows as a frame of their own (index ``0 .. n - 1``)."""
        rows = self.frame.take(self.positions)
        rows.index = pd.RangeIndex(len(rows))
        return rows

    def __getstate__(self):
        return (self.rows(),)

    def __setstate__(self, state) -> None:
        self.frame = state[0]
        self.positions = np.arange(len(self.frame))


def build_events(pdf: pd.DataFrame) -> List[Any]:
    """Per-channel events of one micro-batch in channel order, channels in sorted order.

    A channel's records are sorted by offset (stable) and cut into :class:`Records` chunks
    (payload a :class:`RowSlice` of ``pdf``) at every barrier / cancellation position (the marker
    at offset X precedes the record at offset X) and wherever the records' epoch changes. Rows of
    other kinds (acks) are not events.
    """
    return build_group_events(pdf, np.array([0, len(pdf)]))[0].events


class GroupEvents:
    """One key group's part of a batch frame: its events (:func:`build_events`, payloads
    :class:`RowSlice` s of the whole frame), the positions of its ack rows, in batch order, and
    of its record rows in the order of its events (each channel's records, channels in sorted
    order): the positions a segment releasing all of them in one go holds."""

    __slots__ = ("events", "acks", "records")

    def __init__(self, events: List[Any], acks: np.ndarray,
                 records: Optional[np.ndarray] = None) -> None:
        self.events = events
        self.acks = acks
        self.records = np.empty(0, dtype="int64") if records is None else records


def build_group_events(pdf: pd.DataFrame, bounds: np.ndarray) -> List[GroupEvents]:
    """:func:`build_events` of each key group of a frame whose key group ``i`` owns rows
    ``bounds[i]:bounds[i+1]`` (``bounds`` from 0 to ``len(pdf)``), in one pass over the frame
    (executor): the events of group ``i`` equal ``build_events(pdf.iloc[bounds[i]:bounds[i+1]])``
    but cut ``pdf``'s rows, not a slice's. A range of key groups (``parallelism``) reads its
    columns and sorts once instead of once a key group, which cost about 1.5 ms a key group and
    batch (a dozen pandas calls).

    The work that grows with the rows is a handful of array operations over the whole frame:
    one comparison of the ``kind`` column (the control rows, a few a key group, are told apart
    among themselves), one stable sort of the records by key group, channel and offset (one
    ``int64`` key where it fits, nearly free on rows that arrive in that order), and the epoch
    changes found once for all channels (:class:`_EpochRuns`)."""
    groups = len(bounds) - 1
    group_of = np.repeat(np.arange(groups), np.diff(bounds))
    kind = pdf["kind"].to_numpy()
    is_record = kind == KIND_RECORD
    records = np.flatnonzero(is_record)
    control = np.flatnonzero(~is_record) if len(records) < len(kind) else records[:0]
    control_kind = kind[control]
    markers = _markers(pdf, control[(control_kind == KIND_BARRIER)
                                    | (control_kind == KIND_CANCEL)], group_of)
    acks = control[control_kind == KIND_ACK]
    by_channel: List[Dict[str, Tuple[int, int]]] = [{} for _ in range(groups)]
    in_order = np.empty(0, dtype="int64")       # each group's records in its events' order
    sorted_offsets = in_order
    group_starts = np.zeros(groups + 1, dtype="int64")
    if len(records):
        topic_col = pdf["topic"].to_numpy()
        topics, topic_names = pd.factorize(topic_col[records])
        # records only: control rows may have null partitions / offsets (a float column)
        partitions = pdf["partition"].to_numpy()[records].astype("int64")
        offsets = pdf["offset"].to_numpy()[records].astype("int64")
        owner = group_of[records]
        width = int(partitions.max()) + 1
        pairs, pair_of = np.unique(topics * width + partitions, return_inverse=True)
        names = [channel_name(topic_names[t], int(p))
                 for t, p in zip((pairs // width).tolist(), (pairs % width).tolist())]
        # channels in the sorted order of their names, as the events below go
        by_name = sorted(range(len(names)), key=names.__getitem__)
        by_rank = [names[i] for i in by_name]
        rank = np.empty(len(names), dtype="int64")
        rank[by_name] = np.arange(len(names))
        channel = rank[pair_of.reshape(-1)]
        # by key group, channel, then offset; stable, so equal offsets keep their batch order
        order = _sort_records(owner, channel, offsets, len(names))
        in_order = records[order]
        sorted_offsets = offsets[order]   # int64: exact, where floats lose offsets past 2**53
        owner_sorted = owner[order]
        group_starts = np.searchsorted(owner_sorted, np.arange(groups + 1))
        channel_sorted = channel[order]
        channel_of = owner_sorted * len(names) + channel_sorted
        starts = np.flatnonzero(np.r_[True, channel_of[1:] != channel_of[:-1]])
        ends = np.r_[starts[1:], len(order)]
        for a, b, g, c in zip(starts.tolist(), ends.tolist(), owner_sorted[starts].tolist(),
                              channel_sorted[starts].tolist()):
            by_channel[g][by_rank[c]] = (a, b)   # the channel's records: in_order[a:b]
    epochs = pdf["checkpoint_id"].to_numpy(dtype="float64", na_value=np.nan)
    runs = _EpochRuns(pdf, in_order, epochs[in_order])
    acks_of = np.searchsorted(acks, bounds)
    out: List[GroupEvents] = []
    for g in range(groups):
        channels, group_markers = by_channel[g], markers.get(g, {})
        events: List[Any] = []
        for ch in sorted(set(channels) | set(group_markers)):
            lo, hi = channels.get(ch, (0, 0))
            start = lo
            if ch in group_markers:
                offsets = sorted_offsets[lo:hi]
                for off, _, ev in sorted(group_markers[ch], key=lambda m: (m[0], m[1])):
                    end = hi if off == np.inf else lo + int(np.searchsorted(offsets, off, "left"))
                    if end > start:
                        runs.chunks(ch, start, end, events)
                        start = end
                    events.append(ev)
            if start < hi:
                runs.chunks(ch, start, hi, events)
        out.append(GroupEvents(events, acks[acks_of[g]:acks_of[g + 1]],
                               in_order[group_starts[g]:group_starts[g + 1]]))
    return out


def _sort_records(owner: np.ndarray, channel: np.ndarray, offsets: np.ndarray,
                  channels: int) -> np.ndarray:
    """The stable order of records by key group, channel rank, then offset: one stable sort of
    a single ``int64`` key when the three fit in one (``lexsort``'s three passes otherwise).
    Rows that already come in that order (a packed source's, one key group after another)
    cost a single pass."""
    lowest, highest = int(offsets.min()), int(offsets.max())
    span = highest - lowest + 1
    if (int(owner.max()) + 1) * channels * span < 2 ** 62:
        key = (owner * channels + channel) * span + (offsets - lowest)
        return np.argsort(key, kind="stable")
    return np.lexsort((offsets, channel, owner))


class _EpochRuns:
    """Where the epoch (``checkpoint_id``) changes along a range's records ``in_order`` (their
    positions in ``pdf``, in their events' order; ``epochs``: theirs, in that order), found once
    for all key groups and channels; a chunk ``lo:hi`` of that order is cut at those changes
    (:meth:`chunks`)."""

    __slots__ = ("_pdf", "_in_order", "_epochs", "_changes")

    def __init__(self, pdf: pd.DataFrame, in_order: np.ndarray, epochs: np.ndarray) -> None:
        self._pdf, self._in_order = pdf, in_order
        self._epochs = epochs
        nan = np.isnan(epochs)
        same = (epochs[1:] == epochs[:-1]) | (nan[1:] & nan[:-1])
        self._changes = (np.flatnonzero(~same) + 1).tolist()

    def chunks(self, channel: str, lo: int, hi: int, out: List[Any]) -> None:
        """Append to ``out`` the :class:`Records` of rows ``in_order[lo:hi]`` (one channel's,
        ``hi > lo``), one a run of equal epoch."""
        cuts = self._changes[bisect_right(self._changes, lo):bisect_left(self._changes, hi)]
        for a, b in zip([lo] + cuts, cuts + [hi]):
            e = self._epochs[a]
            out.append(Records(channel, RowSlice(self._pdf, self._in_order[a:b]),
                               None if e != e else int(e)))


def _markers(pdf: pd.DataFrame, rows: np.ndarray,
             group_of: np.ndarray) -> Dict[int, Dict[str, list]]:
    """``key group index -> channel -> [(offset or inf, checkpoint id, Barrier |
    CancellationBarrier)]`` of the marker rows at positions ``rows`` of ``pdf`` (row ``r`` in
    group ``group_of[r]``), read from the columns' arrays: a key group gets a marker per channel
    and checkpoint, and a frame of them (``iloc`` then ``to_dict``) cost more than the rest of a
    small key group's batch. A marker fanned out to every key group has the same values in each
    of its rows: it is made once and shared (markers are immutable)."""
    markers: Dict[int, Dict[str, list]] = {}
    if not len(rows):
        return markers
    columns = {name: pdf[name].to_numpy()[rows] for name in
               ("topic", "partition", "checkpoint_id", "offset", "kind", "barrier_channels",
                "checkpoint_timestamp") if name in pdf.columns}
    absent = [None] * len(rows)
    made: Dict[tuple, tuple] = {}
    for g, *values in zip(group_of[rows].tolist(), columns["topic"], columns["partition"],
                          columns["checkpoint_id"], columns["offset"], columns["kind"],
                          columns.get("barrier_channels", absent),
                          columns.get("checkpoint_timestamp", absent)):
        row = tuple(values)
        try:
            marker = made.get(row)
        except TypeError:   # channels as a list (a frame built without with_key_groups)
            marker, row = None, None
        if marker is None:
            marker = _marker(*values)
            if row is not None:
                made[row] = marker
        markers.setdefault(g, {}).setdefault(marker[2].channel, []).append(marker)
    return markers


def _marker(topic, part, cid, off, kind, chans, ts) -> tuple:
    """``(offset or inf, checkpoint id, Barrier | CancellationBarrier)`` of one marker row."""
    ch = channel_name(topic, int(part))
    cid = int(cid)
    off = None if off is None or pd.isna(off) else int(off)
    if kind == KIND_CANCEL:
        ev = CancellationBarrier(cid, ch)
    else:
        chans = channels_of(chans)
        ev = Barrier(cid, ch, off, None if ts is None or pd.isna(ts) else int(ts),
                     tuple(chans) if chans is not None else ())
    return (np.inf if off is None else off, cid, ev)


def channels_of(value) -> Optional[Sequence[str]]:
    """A barrier row's ``barrier_channels``: the JSON text ``with_key_groups`` sends, or a list
    from a frame built without it (unit tests calling the runtime directly)."""
    if isinstance(value, str):
        return json.loads(value)
    return value


def gather(payloads: Sequence[Any]) -> Tuple[pd.DataFrame, np.ndarray]:
    """``(frame, positions)``: the rows of released chunks, in order, not copied yet.

    Chunks of this micro-batch share its frame; chunks held back from an earlier batch (or
    DataFrames pickled by an older release) are concatenated first.
    """
    first = payloads[0]
    if isinstance(first, RowSlice) and all(
            isinstance(p, RowSlice) and p.frame is first.frame for p in payloads):
        positions = (first.positions if len(payloads) == 1
                     else np.concatenate([p.positions for p in payloads]))
        return first.frame, positions
    parts = [p.rows() if isinstance(p, RowSlice) else p for p in payloads]
    frame = pd.concat(parts, ignore_index=True) if len(parts) > 1 else parts[0]
    return frame, np.arange(len(frame))


def group_by_key(frame: pd.DataFrame, positions: np.ndarray,
                 key_col: str) -> Tuple[pd.DataFrame, np.ndarray, np.ndarray]:
    """Rows ``positions`` of ``frame`` in one copy (index ``0 .. n - 1``), reordered so each key's
    rows are contiguous (stable); the keys in order of first appearance (a null key is one key);
    and the bounds: key ``i`` owns rows ``bounds[i]:bounds[i+1]``."""
    grouped, keys, bounds = key_order(frame, positions, key_col)
    return RowSlice(frame, grouped).rows(), keys, bounds


def key_order(frame: pd.DataFrame, positions: np.ndarray,
              key_col: str) -> Tuple[np.ndarray, np.ndarray, np.ndarray]:
    """:func:`group_by_key` without the copy: ``positions`` reordered so each key's rows are
    contiguous (stable), the keys in order of first appearance and their bounds."""
    codes, keys = pd.factorize(frame[key_col].to_numpy()[positions], use_na_sentinel=False)
    order = np.argsort(codes, kind="stable")
    bounds = np.r_[0, np.cumsum(np.bincount(codes, minlength=len(keys)))]
    return positions[order], keys, bounds


class KeyRows:
    """The rows ``a:b`` of a key-grouped frame (:func:`group_by_key`) as a frame of their own,
    equal to ``rows.iloc[a:b]`` (same columns, dtypes, values and index ``a .. b - 1``; a view,
    as that is).

    The operator hands each key's records to the user's function as such a frame, so at 100,000
    keys it cuts tens of thousands of them a key group and batch. ``iloc`` costs about 11 us a
    cut (pandas checks the indexer, slices the index, then copies the frame's metadata over in
    ``__finalize__``); slicing the frame's block manager costs about 8 us, and about 6 us with
    the frame's blocks consolidated first (one block a dtype instead of one a column).
    Consolidating copies the rows (75-100 us for a key group's batch), so it is done for
    :data:`CONSOLIDATE_AT` cuts or more. Where the installed pandas lacks those internals, every
    cut is ``iloc``.
    """

    #: Cuts from which consolidating the frame's blocks first pays for its copy.
    CONSOLIDATE_AT = 48

    __slots__ = ("_rows", "_cut")

    def __init__(self, rows: pd.DataFrame, cuts: int) -> None:
        self._rows = rows
        self._cut: Optional[Callable[[int, int], pd.DataFrame]] = None
        mgr = getattr(rows, "_mgr", None)
        from_mgr = getattr(pd.DataFrame, "_from_mgr", None)
        if (mgr is not None and from_mgr is not None and hasattr(mgr, "get_slice")
                and not rows.attrs and rows.flags.allows_duplicate_labels):
            try:
                if cuts >= self.CONSOLIDATE_AT:
                    rows._consolidate_inplace()
                    mgr = rows._mgr
                empty = mgr.get_slice(slice(0, 0), axis=1)
                probe = from_mgr(empty, axes=empty.axes)
            except (AttributeError, TypeError):
                return
            if list(probe.columns) == list(rows.columns):

                def cut(a: int, b: int) -> pd.DataFrame:
                    part = mgr.get_slice(slice(a, b), axis=1)
                    return from_mgr(part, axes=part.axes)

                self._cut = cut

    def __call__(self, a: int, b: int) -> pd.DataFrame:
        if self._cut is None:
            return self._rows.iloc[a:b]
        return self._cut(a, b)
