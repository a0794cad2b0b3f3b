"""One key group of a keyed operator, across micro-batches (executor side).

Runs inside ``applyInPandasWithState`` on executors: Spark calls the operator once per key group
per micro-batch; the :class:`KeyGroupRuntime` is unpickled from ``GroupState``, handles the
batch and is pickled back. Per batch:

1. Pass upstream ``ack`` rows through unchanged.
2. Fire processing-time timers due at the batch time.
3. Order each channel's rows by offset (a barrier at offset X precedes the record at X), cut
   them into record chunks and barrier events, and run the barrier handler (aligner or tracker).
4. Apply the user function to released records, key by key, one epoch segment at a time; after
   each segment advance the watermark and fire due event-time timers.
5. At each triggered checkpoint n: serialise the key group's state (the synchronous part),
   start its upload to the state backend (the asynchronous part,
   :mod:`barrier_ops.snapshot_uploads`) and forward barrier n on this key group's output
   channel; later output belongs to epoch n + 1.
6. Once the call's snapshots are durable, emit their ``ack`` rows (after the key group's other
   output, or with ``parallelism`` after the last key group's).
"""

from __future__ import annotations

import functools
import logging
import time
from typing import Any, List, Optional, Tuple

import numpy as np
import pandas as pd

from barrier_core.ack import AckMetrics, Acknowledgement, offsets_by_topic
from barrier_ops.arrow_records import ArrowKeyRows
from barrier_ops.function import KeyedProcessFunction, rows_to_tuples
from barrier_ops.input_events import (GroupEvents, KeyRows, build_group_events, gather,
                                      group_by_key)
from barrier_ops.output_rows import OutputRows
from barrier_ops.options import AT_LEAST_ONCE, RECORDS_ARROW, OperatorOptions
from barrier_ops.range_records import GroupRecords
from barrier_ops.snapshots import (IncrementalSnapshots, decode_full_state, encode_full, fold,
                                   snapshot_parts)
from barrier_ops.snapshot_uploads import SnapshotUploads
from barrier_ops.state import KeyedContext, KeyedStateStore
from barrier_ops.alignment import (BarrierAligner, BarrierTracker, CheckpointAborted,
                                   CheckpointTriggered, Released)
from barrier_core.schema import KIND_ACK, KIND_BARRIER, channel_name
logger = logging.getLogger(__name__)


def output_topic(operator_id: str) -> str:
    """``topic`` of an operator's output rows: ``op:<operator_id>``. Kafka topic names cannot
    contain ``:``, so sinks and coordinators can tell operator channels from Kafka partitions."""
    return f"op:{operator_id}"


def output_channel(operator_id: str, key_group: int) -> str:
    """Channel of key group ``key_group``'s output (``op:<operator_id>:<key_group>``)."""
    return channel_name(output_topic(operator_id), key_group)


@functools.lru_cache(maxsize=64)
def output_channels(operator_id: str, max_parallelism: int) -> Tuple[str, ...]:
    """Every key group's output channel, in key-group order: the ``barrier_channels`` of each
    barrier an operator emits (made once, not once a key group and checkpoint)."""
    return tuple(output_channel(operator_id, k) for k in range(max_parallelism))


class KeyGroupRuntime:
    """Barrier handler, keyed state and output position of one key group.

    Notes
    -----
    Must be picklable: it is the ``GroupState`` of the key group (held-back records included).
    """

    #: Keys touched since the last snapshot and its parts, with ``incremental_checkpoints``
    #: (the class default reads runtimes pickled before the option existed).
    incremental: Optional[IncrementalSnapshots] = None

    def __init__(self, opts: OperatorOptions, key_group: int) -> None:
        self.key_group = key_group
        name = f"{opts.operator_id}/kg-{key_group}"
        handler_cls = BarrierTracker if opts.mode == AT_LEAST_ONCE else BarrierAligner
        self.handler = handler_cls(name)
        self.store = KeyedStateStore()
        self._store_blob: Optional[bytes] = None  # the store serialised, None: not (or stale)
        self.epoch: Optional[int] = None          # epoch of output produced now
        self.output_seq = 0                       # next offset on this key group's channel
        self.snapshots_taken = 0
        self.incremental = IncrementalSnapshots() if opts.incremental_checkpoints else None

    # ------------------------------------------------------------------ restore
    @classmethod
    def create(cls, opts: OperatorOptions, key_group: int) -> "KeyGroupRuntime":
        """A fresh runtime, loaded from ``opts.restore_from`` when set (executor)."""
        rt = cls(opts, key_group)
        prefix = opts.restore_prefix
        if prefix is not None:
            rt._restore(opts, prefix)
        return rt

    def _restore(self, opts: OperatorOptions, prefix: str) -> None:
        backend = opts.open_backend()
        blobs, path = snapshot_parts(backend, prefix, opts.operator_id, self.key_group,
                                     opts.restore_requires_complete)
        snap, self.store = fold(blobs, path, opts.operator_id, opts.max_parallelism)
        self._store_changes()
        self.output_seq = snap["output_seq"]
        self.handler.start_after(snap["checkpoint_id"])
        self.epoch = snap["checkpoint_id"] + 1
        logger.info("%s: restored checkpoint %d from %s (%d parts)", self.handler.name,
                    snap["checkpoint_id"], path, len(blobs))

    # ------------------------------------------------------------------ one micro-batch
    def process_batch(self, opts: OperatorOptions, fn: KeyedProcessFunction, key_col: str,
                      user_columns: List[str], pdf: pd.DataFrame, batch_time_ms: int,
                      pack: Optional[int] = None,
                      time_zone: Optional[str] = None,
                      record_types: Optional[dict] = None,
                      uploads: Optional[SnapshotUploads] = None,
                      output: Optional[OutputRows] = None,
                      records: Optional[GroupRecords] = None,
                      events: Optional[GroupEvents] = None) -> Optional[pd.DataFrame]:
        """Handle the rows one micro-batch delivered to this key group; return the output, one
        row per output row, or packed up to ``pack`` records a row, timestamps converted in
        ``time_zone`` (the session's; :meth:`~barrier_ops.output_rows.OutputRows.packed_frame`).
        With ``opts.records_format`` "arrow" the function gets each key's records as a record
        batch whose columns have the types ``record_types`` names
        (:mod:`barrier_ops.arrow_records`).

        Snapshots are uploaded in the background (:mod:`barrier_ops.snapshot_uploads`). Without
        ``uploads`` this call waits for them and its output ends with their acknowledgements;
        with it, the caller does (:meth:`SnapshotUploads.finish`), so the uploads of several
        key groups overlap. With ``output`` the rows are added to it and None is returned: the
        caller builds one frame for several key groups (``pack`` and ``time_zone`` unused).
        ``records``: this key group's records among ``pdf``'s rows, put key by key for the
        whole range of key groups at once (:mod:`barrier_ops.range_records`; converted to
        Arrow once with records as Arrow). ``events``: this key group's events and ack rows
        among ``pdf``'s rows, when ``pdf`` holds a whole range of key groups
        (:func:`~barrier_ops.input_events.build_group_events`); without it every row of
        ``pdf`` is this key group's."""
        own_uploads = uploads is None
        self._uploads = SnapshotUploads() if own_uploads else uploads
        self._opts, self._fn, self._key_col = opts, fn, key_col
        self._record_types = record_types or {}
        self._topic = output_topic(opts.operator_id)
        self._user_columns, self._now_ms = user_columns, batch_time_ms
        self._pdf, self._records = pdf, records
        self._out = OutputRows(user_columns) if output is None else output
        self._backend = None
        try:
            if events is None:
                events = build_group_events(pdf, np.array([0, len(pdf)]))[0]
            acks = events.acks
            for row in pdf.iloc[acks].to_dict("records") if len(acks) else ():   # step 1
                part = _py(row.get("partition"))
                self._emit_control(KIND_ACK, row["checkpoint_id"], topic=row.get("topic"),
                                   partition=None if part is None else int(part),
                                   ack=row.get("ack"))
            self.handler.push_all(events.events)
            if self.epoch is None:
                self.handler.adopt_first_checkpoint()
                current = self.handler.current_checkpoint_id
                self.epoch = 1 if current is None else current + 1
            self._fire_timers(self.store.processing_timers, batch_time_ms)  # step 2
            segment: List[Any] = []
            for out in self.handler.poll():                                   # step 3
                if isinstance(out, Released):
                    segment.append(out.payload)
                    continue
                self._process_segment(segment)                                # step 4
                segment = []
                if isinstance(out, CheckpointTriggered):
                    self._checkpoint(out)                                     # step 5
                    self.epoch = out.checkpoint_id + 1
                elif isinstance(out, CheckpointAborted):
                    self.epoch = max(self.epoch, out.checkpoint_id + 1)
            self._process_segment(segment)
            if own_uploads:
                self._uploads.finish(self._out)                               # step 6
            if output is not None:
                return None
            return (self._out.frame() if pack is None
                    else self._out.packed_frame(pack, time_zone))
        except BaseException:
            if own_uploads:   # no upload of this failed call lands after it
                self._uploads.abandon()
            raise
        finally:
            del self._opts, self._fn, self._key_col, self._user_columns, self._now_ms
            del self._record_types, self._topic, self._pdf, self._records
            del self._out, self._backend, self._uploads

    # ------------------------------------------------------------------ GroupState value
    def __getstate__(self):
        """The runtime as its ``GroupState`` value: the keyed state travels as ``store_blob``,
        a full snapshot's bytes (:func:`~barrier_ops.snapshots.encode_full`). When the key group
        wrote a full snapshot in this batch and nothing changed after it, or when nothing
        changed since the batch loaded its state, those bytes are reused: the state is
        serialised once a batch instead of twice (once for the snapshot, once for
        ``GroupState``), or not at all in a batch that neither changed nor snapshotted the state
        (acks only, or a barrier still aligning)."""
        state = {k: v for k, v in self.__dict__.items() if not k.startswith("_") and k != "store"}
        blob = self.__dict__.get("_store_blob")
        state["store_blob"] = blob if blob is not None else encode_full({}, self.store)
        return state

    def __setstate__(self, state: dict) -> None:
        blob = state.pop("store_blob", None)
        self.__dict__.update(state)
        if blob is not None:   # runtimes pickled before store_blob hold the store itself
            self.store = decode_full_state(blob)
        self._store_blob = blob

    def _store_changes(self) -> None:
        """The keyed state is about to change: its serialised copy is stale."""
        self._store_blob = None

    # ------------------------------------------------------------------ records and timers
    def _process_segment(self, segment: List[Any]) -> None:
        if not segment:
            return
        self._store_changes()
        frame, positions = gather(segment)
        if self._records is not None and frame is self._pdf:   # this batch's rows
            key_rows, keys, bounds, stamps = self._records.cut(positions)
            latest = _LatestTimestamp(stamps)
        else:
            rows, keys, bounds = group_by_key(frame, positions, self._key_col)
            latest = _LatestTimestamp(rows["timestamp"] if "timestamp" in rows.columns else None)
            if self._opts.records_format == RECORDS_ARROW:
                key_rows = ArrowKeyRows(rows, self._record_types)
            else:
                key_rows = KeyRows(rows, len(keys))
        ranges = zip(bounds[:-1].tolist(), bounds[1:].tolist(), latest.of_ranges(bounds))
        # the loop runs once per key: what it reads from self is looked up once, and the keys'
        # output goes to the output rows in one call after it (OutputRows.add_blocks)
        process, columns = self._fn.process_records, self._user_columns
        store, key_group, epoch, now_ms = self.store, self.key_group, self.epoch, self._now_ms
        touch = self.incremental.touch if self.incremental is not None else None
        rows: List[tuple] = []
        counts: List[int] = []
        stamps: List[Any] = []   # of_ranges gives None for no timestamp, never NaT
        for key, (a, b, ts) in zip(keys, ranges):
            if type(key) not in _PLAIN_KEYS:   # numpy scalars, NaN
                key = _py(key)
            if touch is not None:
                touch(key)
            out = rows_to_tuples(process(key, key_rows(a, b),
                                         KeyedContext(store, key, key_group, epoch, now_ms)),
                                 columns)
            if out:
                rows += out
                counts.append(len(out))
                stamps.append(ts)
        self._out.add_blocks(rows, counts, stamps, self._topic, key_group, self.output_seq, epoch)
        self.output_seq += len(rows)
        wm_ts = latest.between(0, len(positions))
        if wm_ts is not None:
            wm = int(wm_ts.value // 1_000_000) - self._opts.watermark_delay_ms
            if self.store.watermark_ms is None or wm > self.store.watermark_ms:
                self.store.watermark_ms = wm
                self._fire_timers(self.store.event_timers, wm)

    def _fire_timers(self, timers, up_to_ms: int) -> None:
        if not timers:
            return
        due = self.store.due_timers(timers, up_to_ms)
        if due:
            self._store_changes()
        for ts, key in due:
            if self.incremental is not None:
                self.incremental.touch(key)
            ctx = KeyedContext(self.store, key, self.key_group, self.epoch, self._now_ms)
            self._emit_records(self._fn.on_timer(key, ts, ctx), pd.Timestamp(ts, unit="ms"))

    def _emit_records(self, rows, ts) -> None:
        tuples = rows_to_tuples(rows, self._user_columns)
        if tuples:
            if ts is not None and type(ts) not in (int, pd.Timestamp) and pd.isna(ts):
                ts = None
            self._out.add_records(tuples, self._topic, self.key_group, self.output_seq, ts,
                                  self.epoch)
            self.output_seq += len(tuples)

    def _emit_control(self, kind: str, checkpoint_id, **fields) -> None:
        self._out.add_control(kind=kind, checkpoint_id=_py(checkpoint_id), **fields)

    # ------------------------------------------------------------------ checkpoints
    def _checkpoint(self, trig: CheckpointTriggered) -> None:
        opts = self._opts
        started = time.perf_counter()
        if self._backend is None:
            self._backend = opts.open_backend()
        header = {"operator_id": opts.operator_id, "key_group": self.key_group,
                  "max_parallelism": opts.max_parallelism,
                  "checkpoint_id": trig.checkpoint_id, "output_seq": self.output_seq}
        incremental = self._incremental_snapshots(opts)
        if incremental is None:
            blob, chain = encode_full(header, self.store), ()
        else:
            blob, chain = incremental.encode(header, self.store)
        if not chain:
            self._store_blob = blob   # GroupState reuses it unless the state changes again
        handle = self._backend.snapshot_handle(trig.checkpoint_id, opts.operator_id,
                                               self.key_group, blob, chain)
        if incremental is not None:
            incremental.written(handle)   # the next snapshot's chain; the upload is below
        sync_ms = (time.perf_counter() - started) * 1000.0
        self.snapshots_taken += 1
        ack = Acknowledgement(
            opts.operator_id, self.key_group, opts.max_parallelism, trig.checkpoint_id,
            handle.to_json(), offsets_by_topic(trig.offsets),
            AckMetrics(round(trig.alignment_ms, 3), trig.held_back_records, round(sync_ms, 3),
                       None, len(blob)), trig.timestamp_ms, self._backend.describe())
        # The acknowledgement follows once the blob is durable (SnapshotUploads.finish).
        self._uploads.start(self._backend, handle, blob, ack, output_topic(opts.operator_id))
        self._emit_control(
            KIND_BARRIER, trig.checkpoint_id, topic=output_topic(opts.operator_id),
            partition=self.key_group,
            offset=self.output_seq, checkpoint_timestamp=trig.timestamp_ms,
            barrier_channels=list(output_channels(opts.operator_id, opts.max_parallelism)))
        logger.debug("%s: snapshot of checkpoint %d, %d bytes serialised in %.1f ms",
                     self.handler.name, trig.checkpoint_id, len(blob), sync_ms)


    def _incremental_snapshots(self, opts: OperatorOptions) -> Optional[IncrementalSnapshots]:
        """The key group's incremental snapshot bookkeeping, None for a full snapshot: the
        option is off, the backend keeps snapshots inline, or tracking starts only now (a
        runtime from before the option was set, whose first snapshot is then full)."""
        if not opts.incremental_checkpoints or self._backend.inline_snapshots:
            self.incremental = None
        elif self.incremental is None:
            self.incremental = IncrementalSnapshots()
        return self.incremental


class _LatestTimestamp:
    """The latest value of row ranges of one ``timestamp`` column (None: no column, or all
    null); ranges are positions. ``col``: a Series or a pandas array."""

    def __init__(self, col) -> None:
        self._col = None      # a column that is not datetimes, as a Series
        self._i8 = None       # a datetime column's values as int64 (``_values``: as they are)
        self._naive_ns = False
        if col is None:
            return
        if pd.api.types.is_datetime64_any_dtype(col.dtype):
            # no Series: building one cost more than the rest of a small key group's lookups
            self._values = col.array if isinstance(col, pd.Series) else col
            self._i8 = self._values.asi8   # NaT is the smallest int64: argmax skips it
            self._naive_ns = col.dtype == _NAIVE_NS
        else:
            self._col = pd.Series(col, copy=False)

    def between(self, a: int, b: int):
        if (self._col is None and self._i8 is None) or b <= a:
            return None
        if self._i8 is None:
            ts = self._col.iloc[a:b].max()
        else:
            ts = self._values[a + int(self._i8[a:b].argmax())]
        return None if pd.isna(ts) else ts

    def of_ranges(self, bounds: np.ndarray) -> List[Any]:
        """``between(bounds[i], bounds[i + 1])`` for every ``i`` (non-empty ranges), computed
        for all ranges at once; a naive nanosecond column's values come back as their ints
        (:class:`~barrier_ops.output_rows.OutputRows` takes those as they are): boxing each
        range's maximum as a ``pd.Timestamp`` cost about 0.4 us a key, one at a time about 3."""
        if self._i8 is None or len(bounds) < 2:
            return [self.between(a, b) for a, b in zip(bounds[:-1].tolist(), bounds[1:].tolist())]
        starts = np.asarray(bounds[:-1], dtype=np.int64)
        peak = np.maximum.reduceat(self._i8, starts)
        if self._naive_ns:
            return [None if ns == _NAT else ns for ns in peak.tolist()]
        hits = np.flatnonzero(self._i8 == np.repeat(peak, np.diff(bounds)))
        first = hits[np.searchsorted(hits, starts)]   # a row of each range holding its maximum
        return [None if ts is pd.NaT else ts for ts in self._values.take(first).astype(object)]


#: The dtype of a timestamp column PySpark hands ``applyInPandasWithState`` (session wall time).
_NAIVE_NS = np.dtype("datetime64[ns]")
#: NaT's int64 value.
_NAT = np.iinfo(np.int64).min


#: Key types that are already plain Python values (``_py`` would return them unchanged).
_PLAIN_KEYS = frozenset({bytes, str, int})


def _py(value):
    """numpy scalar -> Python value (stable pickles, hashable keys)."""
    if isinstance(value, np.generic):
        return value.item()
    if value is not None and not isinstance(value, (str, bytes)) and pd.isna(value):
        return None
    return value
