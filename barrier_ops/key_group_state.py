"""A key group's runtime as its ``GroupState`` value, and one micro-batch of it (executor).

The keyed operator keeps the :class:`~barrier_ops.runtime.KeyGroupRuntime` of a key group as a
single pickled value (:data:`STATE_SCHEMA`) in ``applyInPandasWithState``'s ``GroupState`` and
calls :func:`run_batch` once per key group and micro-batch. Spark commits that value with the
batch, so a retried or replayed task starts from the runtime of the last committed batch and
decides exactly as the first attempt did.
"""

from __future__ import annotations

import io
import pickle
import warnings
from typing import Callable, Iterable, List, Optional, Tuple

import numpy as np
import pandas as pd
from pyspark.sql.types import BinaryType, StructField, StructType

from barrier_core.packed_source import KEY_GROUP_COLUMN  # noqa: F401 - the grouping key
from barrier_core.schema import KIND_RECORD
from barrier_ops.arrow_records import to_record_batch
from barrier_ops.exceptions import InvalidOptionError
from barrier_ops.input_events import GroupEvents, RowSlice, build_group_events
from barrier_ops.keygroups import operator_index
from barrier_ops.options import RECORDS_ARROW, OperatorOptions
from barrier_ops.output_rows import OutputRows
from barrier_ops.range_records import GroupRecords, RangeRecords
from barrier_ops.runtime import KeyGroupRuntime
from barrier_ops.snapshot_uploads import SnapshotUploads

# PySpark's applyInPandasWithState pads the group-state frame with all-NA rows up to the output
# rows and concatenates the two (pyspark/worker.py); pandas 2.1+ warns about that concat once per
# output chunk, which filled executor logs with one FutureWarning per chunk of every batch. The
# frames are PySpark's, not the user's, and pandas < 3 (setup.cfg) keeps the behaviour it warns
# about, so the warning is ignored for that message from that module only, in the worker that
# imports this module.
warnings.filterwarnings("ignore", message="The behavior of DataFrame concatenation with empty or "
                        "all-NA entries is deprecated", category=FutureWarning,
                        module=r"pyspark\.worker")

#: With ``parallelism``: the column naming the row's range of key groups (the grouping key).
RANGE_COLUMN = "__kgr"
STATE_SCHEMA = StructType([StructField("runtime", BinaryType())])


class _RuntimeUnpickler(pickle.Unpickler):
    """Reads a key group's runtime pickled by an older release, where the barrier aligners lived
    in ``barrier_source.alignment`` (now ``barrier_ops.alignment``), so a query upgraded
    mid-stream keeps its in-flight alignment state."""

    def find_class(self, module: str, name: str):
        if module.startswith("barrier_source.alignment"):
            module = "barrier_ops.alignment" + module[len("barrier_source.alignment"):]
        return super().find_class(module, name)


def load_runtime(blob: bytes) -> KeyGroupRuntime:
    """Unpickle a key group's runtime from its state value (executor). Raises
    ``InvalidOptionError`` for the state of a range of key groups (a query started with
    ``parallelism``)."""
    runtime = _RuntimeUnpickler(io.BytesIO(blob)).load()
    if isinstance(runtime, dict):
        raise InvalidOptionError(LAYOUT_CHANGED.format(
            then=f"parallelism={runtime.get('layout', ('?', '?'))[1]}", now="parallelism=None"))
    return runtime


LAYOUT_CHANGED = (
    "This query's state between batches was written with {then} and the operator now runs with "
    "{now}. The operator's parallelism cannot change under a running query (that state is kept "
    "by the groups it had): restore into a new checkpointLocation instead, with "
    "keyed_process(..., restore_from=<checkpoint id or savepoint>) and the new parallelism "
    "(state is snapshotted per key group, so any parallelism restores it).")


def _batch_frame(frames: Iterable[pd.DataFrame], drop: str) -> pd.DataFrame:
    """The batch's frames as one frame without column ``drop``."""
    frames = list(frames)
    pdf = pd.concat(frames, ignore_index=True) if len(frames) != 1 else frames[0]
    pdf = pdf.copy(deep=False)  # a new frame sharing the columns: ``del`` copies none of them,
    del pdf[drop]               # where ``DataFrame.drop`` copied every column of the batch
    return pdf


def _by_key_group(pdf: pd.DataFrame) -> Tuple[pd.DataFrame, np.ndarray, np.ndarray]:
    """A range's rows in one copy without ``__kg`` (deleted from ``pdf``, the caller's own
    frame), each key group's rows together in batch order (a stable sort), its key groups
    ascending and their bounds: key group ``groups[i]`` owns rows ``bounds[i]:bounds[i+1]``.
    One copy of the range is cheaper than one per key group: a frame's ``take`` costs about as
    much per column as per row at a key group's size. Rows already in key-group order (a packed
    source's, :func:`~barrier_core.packed_source.unpack_frames`) are not copied."""
    kgs = pdf.pop(KEY_GROUP_COLUMN).to_numpy()
    if len(kgs) > 1 and not (kgs[1:] >= kgs[:-1]).all():
        order = np.argsort(kgs, kind="stable")
        pdf, kgs = RowSlice(pdf, order).rows(), kgs[order]
    elif not pdf.index.equals(pd.RangeIndex(len(pdf))):
        pdf = pdf.reset_index(drop=True)
    groups, starts = np.unique(kgs, return_index=True)
    return pdf, groups, np.r_[starts, len(kgs)]


def run_batch(opts: OperatorOptions, fn: Callable, key_col: str, user_columns: List[str],
              key_group: int, blob: Optional[bytes], frames: Iterable[pd.DataFrame],
              batch_time_ms: int, pack: Optional[int] = None,
              time_zone: Optional[str] = None,
              record_types: Optional[dict] = None,
              uploads: Optional[SnapshotUploads] = None) -> Tuple[pd.DataFrame, bytes]:
    """Run key group ``key_group``'s rows of one micro-batch through its runtime (``blob``, or a
    new one, restored from ``opts.restore_from`` when set); returns the output rows (packed up
    to ``pack`` records a row when set, timestamps in the session time zone ``time_zone``,
    :mod:`barrier_ops.packed_rows`) and the runtime's new
    state value. The frames' ``__kg`` column is dropped before the runtime sees the rows.
    ``record_types``: the Arrow types of the records' columns when ``opts.records_format`` is
    "arrow" (:func:`~barrier_ops.arrow_records.arrow_record_types`). ``uploads``: where the
    key group's snapshot uploads and acknowledgements go when the caller finishes them
    (:meth:`KeyGroupRuntime.process_batch`)."""
    return _run_rows(opts, fn, key_col, user_columns, key_group, blob,
                     _batch_frame(frames, KEY_GROUP_COLUMN), batch_time_ms, pack, time_zone,
                     record_types, uploads)


def _run_rows(opts: OperatorOptions, fn: Callable, key_col: str, user_columns: List[str],
              key_group: int, blob: Optional[bytes], pdf: pd.DataFrame, batch_time_ms: int,
              pack: Optional[int], time_zone: Optional[str], record_types: Optional[dict],
              uploads: Optional[SnapshotUploads],
              output: Optional[OutputRows] = None,
              records: Optional[GroupRecords] = None,
              events: Optional[GroupEvents] = None) -> Tuple[Optional[pd.DataFrame], bytes]:
    """:func:`run_batch` on the key group's rows ``pdf`` (no ``__kg`` column; any index); with
    ``output``, the output rows go there and None is returned in their place;
    ``records``: the key group's records of ``pdf``, key by key
    (:mod:`barrier_ops.range_records`); ``events``: the key group's events among ``pdf``'s
    rows when ``pdf`` holds a whole range (:meth:`KeyGroupRuntime.process_batch`)."""
    runtime = load_runtime(blob) if blob is not None else KeyGroupRuntime.create(opts, key_group)
    out = runtime.process_batch(opts, fn, key_col, user_columns, pdf, batch_time_ms, pack,
                                time_zone, record_types, uploads, output, records,
                                events)
    return out, pickle.dumps(runtime, protocol=4)


def run_range(opts: OperatorOptions, fn: Callable, key_col: str, user_columns: List[str],
              index: int, blob: Optional[bytes], frames: Iterable[pd.DataFrame],
              batch_time_ms: int, pack: Optional[int] = None,
              time_zone: Optional[str] = None,
              record_types: Optional[dict] = None) -> Tuple[pd.DataFrame, bytes]:
    """:func:`run_batch` for each key group of range ``index`` (``opts.parallelism`` ranges)
    that has rows in this batch, in key-group order; returns their output rows one key group
    after another and the range's new state value: each of its key groups' runtime value, as
    :func:`run_batch` returns it (executor). Spark then calls the operator once per range and
    batch, not once per key group; every key group keeps its own runtime, barrier alignment,
    snapshots and output channel, exactly as without ranges. The key groups' snapshot uploads
    overlap (:mod:`barrier_ops.snapshot_uploads`); their acknowledgements follow the output of
    the last key group, once every snapshot of the call is durable."""
    layout = (opts.max_parallelism, opts.parallelism, index)
    values: dict = {}
    if blob is not None:
        state = pickle.loads(blob)
        if not isinstance(state, dict) or "key_groups" not in state:
            raise InvalidOptionError(LAYOUT_CHANGED.format(
                then="one Spark group per key group (parallelism=None)",
                now=f"parallelism={opts.parallelism}"))
        if tuple(state["layout"]) != layout:
            then, now = state["layout"], layout
            raise InvalidOptionError(LAYOUT_CHANGED.format(
                then=f"max_parallelism={then[0]}, parallelism={then[1]}",
                now=f"max_parallelism={now[0]}, parallelism={now[1]}"))
        values = state["key_groups"]
    pdf, groups, bounds = _by_key_group(_batch_frame(frames, RANGE_COLUMN))
    output = OutputRows(user_columns)   # one frame for the range, not one a key group
    # every key group's events from one pass over the range's rows, not one a key group
    events = build_group_events(pdf, bounds)
    # the range's records put key by key once, not once a key group; as Arrow converted once
    # (only its records are read: their kind is known)
    batch = (to_record_batch(pdf, record_types or {}, same={"kind": KIND_RECORD})
             if opts.records_format == RECORDS_ARROW and len(pdf) else None)
    records = RangeRecords(pdf, batch, key_col, events)
    with SnapshotUploads() as uploads:
        for i, (kg, group_events) in enumerate(zip(groups.tolist(), events)):
            if operator_index(kg, opts.max_parallelism, opts.parallelism) != index:
                raise ValueError(f"key group {kg} is not in range {index} of "
                                 f"{opts.parallelism} (max_parallelism {opts.max_parallelism})")
            _, values[kg] = _run_rows(opts, fn, key_col, user_columns, kg, values.get(kg),
                                      pdf, batch_time_ms, pack, time_zone, record_types,
                                      uploads, output, records.of_group(i), group_events)
        uploads.finish(output)
    out = output.frame() if pack is None else output.packed_frame(pack, time_zone)
    return out, pickle.dumps({"layout": layout, "key_groups": values}, protocol=4)
