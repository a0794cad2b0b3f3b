"""The rows one key group emits in one micro-batch, built column by column.

Runs inside ``applyInPandasWithState`` on executors (and in unit tests). Output rows are the
user's columns followed by :data:`CONTROL_COLUMNS` (see ``docs/internals/protocol.md``).
"""

from __future__ import annotations

from typing import Any, Dict, List, Sequence, Tuple

import numpy as np
import pandas as pd

from barrier_core.schema import KIND_RECORD

#: columns every operator output row carries after the user's columns (see protocol.md)
CONTROL_COLUMNS = ["topic", "partition", "offset", "timestamp", "kind", "checkpoint_id",
                   "checkpoint_timestamp", "barrier_channels", "ack"]

#: ``barrier_channels`` of every output row but a barrier: an empty list, never null. Spark's JVM
#: hands a list column null on most rows to the next Python step (the sink) at a cost per row
#: several times that of empty lists (Arrow's ``ListVector`` walks back to its last non-null
#: value); bench_pipeline one row per record at 200k-record batches pays it on every record.
NO_CHANNELS: List[str] = []


class OutputRows:
    """Output rows in emission order: blocks of user records and single control rows.

    The user's columns are kept value by value. A control column holds one value per block of
    records (``offset`` its first offset) and per control row, repeated when the frame is built:
    pandas infers each control column's dtype from those few values, which gives the dtype it
    would infer from the whole column, since the repeats add no value of a new type.
    """

    def __init__(self, user_columns: Sequence[str]) -> None:
        self.user_columns = list(user_columns)
        self._user: Dict[str, List[Any]] = {c: [] for c in self.user_columns}
        self._control: Dict[str, List[Any]] = {c: [] for c in CONTROL_COLUMNS}
        self._counts: List[int] = []

    def add_records(self, rows: List[Tuple], topic: str, partition: int, first_offset: int,
                    timestamp, epoch: int) -> None:
        """User rows (tuples in user-column order) at offsets ``first_offset ..``."""
        n = len(rows)
        if not n:
            return
        for name, values in zip(self.user_columns, zip(*rows)):
            self._user[name].extend(values)
        self._add_piece(n, topic=topic, partition=partition, offset=first_offset,
                        timestamp=timestamp, kind=KIND_RECORD, checkpoint_id=epoch)

    def add_control(self, **fields) -> None:
        """One control row: the given control fields, every other column null."""
        for values in self._user.values():
            values.append(None)
        self._add_piece(1, **fields)

    def _add_piece(self, count: int, **fields) -> None:
        fields.setdefault("barrier_channels", NO_CHANNELS)
        for name, values in self._control.items():
            values.append(fields.get(name))
        self._counts.append(count)

    def frame(self) -> pd.DataFrame:
        names = self.user_columns + CONTROL_COLUMNS
        counts = np.asarray(self._counts, dtype=np.int64)
        total = int(counts.sum())
        if not total:
            return pd.DataFrame({name: [] for name in names}, columns=names)
        columns = {name: pd.Series(values) for name, values in self._user.items()}
        for name, values in self._control.items():
            column = pd.Series(values).repeat(counts)
            column.index = pd.RangeIndex(total)
            if name == "offset" and (counts > 1).any():  # a block counts up from its first
                first_row = np.cumsum(counts) - counts
                column = column + (np.arange(total) - np.repeat(first_row, counts))
            columns[name] = column
        return pd.DataFrame(columns, columns=names)
