"""The rows one key group emits in one micro-batch, built column by column.

Runs inside ``applyInPandasWithState`` on executors (and in unit tests). Output rows are the
user's columns followed by :data:`CONTROL_COLUMNS` (see ``docs/internals/protocol.md``).
"""

from __future__ import annotations

from typing import Any, Dict, List, Sequence, Tuple

import pandas as pd

from barrier_core.schema import KIND_RECORD

#: columns every operator output row carries after the user's columns (see protocol.md)
CONTROL_COLUMNS = ["topic", "partition", "offset", "timestamp", "kind", "checkpoint_id",
                   "checkpoint_timestamp", "barrier_channels", "ack"]
_NULL_ON_RECORDS = ("checkpoint_timestamp", "barrier_channels", "ack")


class OutputRows:
    """Output rows in emission order: blocks of user records and single control rows."""

    def __init__(self, user_columns: Sequence[str]) -> None:
        self.user_columns = list(user_columns)
        self.columns: Dict[str, List[Any]] = {c: [] for c in self.user_columns + CONTROL_COLUMNS}

    def add_records(self, rows: List[Tuple], topic: str, partition: int, first_offset: int,
                    timestamp, epoch: int) -> None:
        """User rows (tuples in user-column order) at offsets ``first_offset ..``."""
        n = len(rows)
        if not n:
            return
        cols = self.columns
        for name, values in zip(self.user_columns, zip(*rows)):
            cols[name].extend(values)
        cols["topic"].extend([topic] * n)
        cols["partition"].extend([partition] * n)
        cols["offset"].extend(range(first_offset, first_offset + n))
        cols["timestamp"].extend([timestamp] * n)
        cols["kind"].extend([KIND_RECORD] * n)
        cols["checkpoint_id"].extend([epoch] * n)
        for name in _NULL_ON_RECORDS:
            cols[name].extend([None] * n)

    def add_control(self, **fields) -> None:
        """One control row: the given control fields, every other column null."""
        for name, values in self.columns.items():
            values.append(fields.get(name))

    def frame(self) -> pd.DataFrame:
        return pd.DataFrame(self.columns, columns=list(self.columns))
