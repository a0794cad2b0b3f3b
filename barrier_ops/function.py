"""The user's side of a keyed operator: :class:`KeyedProcessFunction` (Flink's name).

Runs inside ``applyInPandasWithState`` on executors; the function object is pickled there.
"""

from __future__ import annotations

from typing import Any, Callable, List, Optional

import pandas as pd

Rows = Optional[Any]  # a pandas DataFrame, an iterable of tuples / dicts, or None


class KeyedProcessFunction:
    """Process the records of one key with keyed state.

    Override :meth:`process_records`; optionally :meth:`on_timer`. Both return the output rows:
    a pandas DataFrame with the user's output columns, an iterable of tuples (in output schema
    order) or dicts, or ``None``.

    Examples
    --------
    >>> class Count(KeyedProcessFunction):
    ...     def process_records(self, key, records, state):
    ...         total = state.value_state("n", 0)
    ...         total.update(total.value() + len(records))
    ...         return [(key, total.value())]

    Notes
    -----
    Must be picklable. Records of a key arrive in channel order (by Kafka partition, then
    offset), and all records of one call lie in the same checkpoint epoch. ``records`` is a
    pandas DataFrame, or a ``pyarrow.RecordBatch`` of the same columns and rows with
    ``keyed_process(..., records_format="arrow")`` (:mod:`barrier_ops.arrow_records`).
    """

    def process_records(self, key: Any, records, state) -> Rows:
        raise NotImplementedError

    def on_timer(self, key: Any, timestamp_ms: int, state) -> Rows:
        """Called for each due timer of ``key`` (``state.timer_service`` tells which kind)."""
        return None


class _CallableFunction(KeyedProcessFunction):
    def __init__(self, fn: Callable, on_timer: Optional[Callable] = None) -> None:
        self._fn = fn
        self._on_timer = on_timer

    def process_records(self, key, records, state):
        return self._fn(key, records, state)

    def on_timer(self, key, timestamp_ms, state):
        if self._on_timer is None:
            return None
        return self._on_timer(key, timestamp_ms, state)


def as_keyed_function(fn, on_timer: Optional[Callable] = None) -> KeyedProcessFunction:
    """Accept a :class:`KeyedProcessFunction` or a plain ``fn(key, records, state)``."""
    if isinstance(fn, KeyedProcessFunction):
        if on_timer is not None:
            raise TypeError("on_timer is only for plain functions; override "
                            "KeyedProcessFunction.on_timer instead")
        return fn
    if not callable(fn):
        raise TypeError(f"fn must be callable or a KeyedProcessFunction, got {type(fn)!r}")
    return _CallableFunction(fn, on_timer)


def _check_columns(got, columns, what: str) -> None:
    unknown = [c for c in got if c not in columns]
    missing = [c for c in columns if c not in got]
    if unknown or missing:
        raise ValueError(
            f"user function returned {what} with unknown columns {unknown} and without "
            f"columns {missing}; the output schema's columns are {list(columns)}. Return "
            "exactly those columns (None for a null value); a misspelt name would otherwise "
            "write nulls.")


def rows_to_tuples(rows: Rows, columns) -> List[tuple]:
    """Normalise a user function's return value into tuples in ``columns`` order (executor).

    Raises ``ValueError`` naming the unknown and the missing columns when a dict or DataFrame
    does not have exactly the output schema's columns, and when a tuple has the wrong length.
    """
    if rows is None:
        return []
    if type(rows) is list:   # the common case, checked without copying: tuples of the width
        width = len(columns)
        for row in rows:
            if type(row) is not tuple or len(row) != width:
                break
        else:
            return rows
    columns = list(columns)
    if isinstance(rows, pd.DataFrame):
        _check_columns(list(rows.columns), columns, "a DataFrame")
        return list(rows[columns].itertuples(index=False, name=None))
    width = len(columns)
    out = []
    for row in rows:
        if isinstance(row, dict):
            if len(row) != width or any(c not in row for c in columns):
                _check_columns(list(row), columns, f"a dict {sorted(row)}")
            out.append(tuple(row[c] for c in columns))
        else:
            row = tuple(row)
            if len(row) != width:
                raise ValueError(f"user function returned {row!r}; expected {width} "
                                 f"values for {columns}")
            out.append(row)
    return out
