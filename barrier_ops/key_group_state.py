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

import pandas as pd
from pyspark.sql.types import BinaryType, StructField, StructType

from barrier_ops.options import OperatorOptions
from barrier_ops.runtime import KeyGroupRuntime

# PySpark's applyInPandasWithState pads the group-state frame with all-NA rows up to the output
# rows and concatenates the two (pyspark/worker.py); pandas 2.1+ warns about that concat once per
# output chunk, which filled executor logs with one FutureWarning per chunk of every batch. The
# frames are PySpark's, not the user's, and pandas < 3 (setup.cfg) keeps the behaviour it warns
# about, so the warning is ignored for that message from that module only, in the worker that
# imports this module.
warnings.filterwarnings("ignore", message="The behavior of DataFrame concatenation with empty or "
                        "all-NA entries is deprecated", category=FutureWarning,
                        module=r"pyspark\.worker")

#: The key group column ``with_key_groups`` adds (the operator's grouping key).
KEY_GROUP_COLUMN = "__kg"
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
    """Unpickle a key group's runtime from its state value (executor)."""
    return _RuntimeUnpickler(io.BytesIO(blob)).load()


def run_batch(opts: OperatorOptions, fn: Callable, key_col: str, user_columns: List[str],
              key_group: int, blob: Optional[bytes], frames: Iterable[pd.DataFrame],
              batch_time_ms: int, pack: Optional[int] = None,
              time_zone: Optional[str] = None,
              record_types: Optional[dict] = None) -> Tuple[pd.DataFrame, bytes]:
    """Run key group ``key_group``'s rows of one micro-batch through its runtime (``blob``, or a
    new one, restored from ``opts.restore_from`` when set); returns the output rows (packed up
    to ``pack`` records a row when set, timestamps in the session time zone ``time_zone``,
    :mod:`barrier_ops.packed_rows`) and the runtime's new
    state value. The frames' ``__kg`` column is dropped before the runtime sees the rows.
    ``record_types``: the Arrow types of the records' columns when ``opts.records_format`` is
    "arrow" (:func:`~barrier_ops.arrow_records.arrow_record_types`)."""
    runtime = load_runtime(blob) if blob is not None else KeyGroupRuntime.create(opts, key_group)
    frames = list(frames)
    pdf = pd.concat(frames, ignore_index=True) if len(frames) != 1 else frames[0]
    pdf = pdf.copy(deep=False)  # a new frame sharing the columns: ``del`` copies none of them,
    del pdf[KEY_GROUP_COLUMN]   # where ``drop`` copied every column of the batch
    out = runtime.process_batch(opts, fn, key_col, user_columns, pdf, batch_time_ms, pack,
                                time_zone, record_types)
    return out, pickle.dumps(runtime, protocol=4)
