"""Packed operator output: a run of a key's output records crosses from Python to the JVM as one
row of arrays, and the JVM unpacks it (driver builds the plan; executors run it).

Why: ``applyInPandasWithState`` costs several microseconds per output *row* on the Python side,
whatever the row holds. PySpark pads the group-state frame with all-NA rows up to the number of
output rows and concatenates it (pandas checks each padded value in Python, about 1.4 us per
row), infers each output column's type from its values, and converts every row of every column
to Arrow. One packed row carries up to :data:`PACKED_ROW_RECORDS` records of one block
(:class:`~barrier_ops.output_rows.OutputRows`: the records of one key in one epoch segment,
which share every control column but ``offset``, which counts up), so those costs are paid per
block instead of per record.

What the JVM sees:

* a user column ``c`` of type ``T`` becomes ``c: array<T>``, the block's values in order (null on
  control rows);
* ``timestamp`` becomes :data:`PACKED_TIMESTAMPS` (``array<bigint>``): each row's instant in
  microseconds since the epoch, UTC, as PySpark would have converted the row's pandas timestamp
  in the session time zone (:func:`utc_micros`). A block can then hold the records of many keys,
  each with its own timestamp;
* the other control columns stay one value per packed row, ``offset`` the block's first offset;
* :data:`PACKED_COUNT` is the number of output rows the packed row stands for (1 for a control
  row).

:func:`unpack` turns that back into the operator's output schema with
``explode(sequence(0, __n - 1))`` and ``get(c, pos)``, so the rows, their order within a task,
the ``offset`` and the ``timestamp`` of each are those the unpacked path gives.

Only user columns of the types in :data:`PACKABLE_TYPES`, nullable, are packed: PySpark converts
their values inside an array exactly as it converts them in a column of their own (no time zone
or decimal coercion that differs between the two). Any other output schema keeps one row per
output row (:func:`packable`).
"""

from __future__ import annotations

from typing import Optional

import numpy as np

from pyspark.sql import DataFrame
from pyspark.sql.types import (ArrayType, BinaryType, BooleanType, ByteType, DoubleType,
                               FloatType, IntegerType, LongType, ShortType, StringType,
                               StructField, StructType)

from barrier_ops.keygroups import quoted

#: Records per packed row at most. A block of more records takes several rows. PySpark flushes an
#: output Arrow batch once it holds more than ``spark.sql.execution.arrow.maxRecordsPerBatch``
#: (10,000) rows, so this bounds an Arrow batch at 32x the records it held unpacked (320,000 by
#: default), while the per-row cost above is spread over up to 32 records.
PACKED_ROW_RECORDS = 32

#: The column that says how many output rows a packed row stands for.
PACKED_COUNT = "__n"
#: The column that carries each output row's ``timestamp`` (UTC microseconds, null for none).
PACKED_TIMESTAMPS = "__ts"
_POSITION = "__pos"

#: User column types packed (converted identically inside and outside an array by PySpark).
PACKABLE_TYPES = (StringType, BinaryType, BooleanType, ByteType, ShortType, IntegerType,
                  LongType, FloatType, DoubleType)


def packable(user: StructType) -> bool:
    """Whether the user's output columns can cross packed: every one nullable and of a type in
    :data:`PACKABLE_TYPES` (an unpacked column keeps its declared nullability, a packed one would
    come back nullable), and none named like a column the packing adds."""
    return all(f.nullable and type(f.dataType) in PACKABLE_TYPES
               and f.name not in (PACKED_COUNT, PACKED_TIMESTAMPS, _POSITION)
               for f in user.fields)


def packed_schema(user: StructType, control: list) -> StructType:
    """The schema ``applyInPandasWithState`` returns when packing: each user column as an array,
    the ``control`` fields but ``timestamp`` as they are, then :data:`PACKED_TIMESTAMPS` and
    :data:`PACKED_COUNT`."""
    return StructType([StructField(f.name, ArrayType(f.dataType, True)) for f in user.fields]
                      + [f for f in control if f.name != "timestamp"]
                      + [StructField(PACKED_TIMESTAMPS, ArrayType(LongType(), True)),
                         StructField(PACKED_COUNT, IntegerType(), False)])


def unpack(packed: DataFrame, user: StructType, control: list) -> DataFrame:
    """One row per output row of ``packed`` (see the module docstring), in the user's columns
    followed by the ``control`` columns. The expressions are SQL text: one call into the JVM
    each select, not several a column."""
    rows = packed.selectExpr("*", f"explode(sequence(0, {PACKED_COUNT} - 1)) AS {_POSITION}")
    columns = [f"get({quoted(f.name)}, {_POSITION}) AS {quoted(f.name)}" for f in user.fields]
    columns += [_unpacked_control(f.name) for f in control]
    return rows.selectExpr(*columns)


def _unpacked_control(name: str) -> str:
    if name == "offset":
        return f"{quoted(name)} + {_POSITION} AS {quoted(name)}"
    if name == "timestamp":
        return f"timestamp_micros(get({PACKED_TIMESTAMPS}, {_POSITION})) AS {quoted(name)}"
    return quoted(name)


#: Session time zones whose wall time is UTC: a naive timestamp's instant is its own value.
_UTC_ZONES = frozenset({"UTC", "Etc/UTC", "GMT", "Etc/GMT", "UCT", "Etc/UCT", "Universal",
                        "Etc/Universal", "Zulu", "Etc/Zulu", "Z"})


def utc_micros(values: list, time_zone: Optional[str]) -> list:
    """``timestamp`` values of output rows (pandas timestamps, naive or with a zone, naive
    nanoseconds as ints, or None) as the microseconds since the epoch that PySpark stores for
    them in a ``timestamp`` column, or None: a naive value is wall time in ``time_zone`` (the
    session's, which PySpark's Arrow conversion uses; None: the worker's local zone), an
    ambiguous one standard time, exactly as PySpark's own conversion of the column (executor).
    Raises ``TypeError`` for values that are not timestamps, which PySpark would refuse for a
    ``timestamp`` column too.

    In a UTC session, values that are all naive nanoseconds (ints, as the operator passes an
    epoch segment's keys) convert as one array; pandas timestamps with a zone, and naive ones
    in a UTC session, are read one by one (a few hundred ns each); anything else goes through
    PySpark's conversion of a whole column."""
    import pandas as pd

    utc_session = time_zone in _UTC_ZONES
    if utc_session and values and type(values[0]) is int and set(map(type, values)) == {int}:
        ns = np.asarray(values, dtype=np.int64)   # every value naive nanoseconds: at once
        return np.where(ns >= 0, ns // 1000, -(-ns // 1000)).tolist()
    out: list = [None] * len(values)
    for i, v in enumerate(values):
        if v is None or v is pd.NaT:
            continue
        if type(v) is int and utc_session:   # naive nanoseconds (see naive_timestamps)
            out[i] = _micros(v)
            continue
        if type(v) is not pd.Timestamp or (v.tz is None and not utc_session):
            return _utc_micros_of_column(naive_timestamps(values), time_zone)
        out[i] = _micros(v.value)
    return out


def naive_timestamps(values: list):
    """Output rows' ``timestamp`` values with each int, a naive timestamp's nanoseconds as the
    operator passes a record block's (:class:`~barrier_ops.output_rows.OutputRows`), made a
    pandas timestamp; ``values`` itself when it holds no int. When every value is such an int
    or None, they come back at once as the ``datetime64[ns]`` array pandas infers from those
    timestamps (None as NaT): one numpy conversion instead of a ``pd.Timestamp`` a key (about
    5 us a key with pandas' inference over them)."""
    import pandas as pd

    if not any(type(v) is int for v in values):
        return values
    if all(type(v) is int or v is None for v in values):
        try:
            ns = np.array([_NAT_NS if v is None else v for v in values], dtype=np.int64)
        except OverflowError:   # not nanoseconds pandas holds: one at a time, as pandas decides
            ns = None
        if ns is not None and (ns != _NAT_NS).any():   # only NaT: left as pandas infers it
            return pd.array(ns.view("M8[ns]"))
    return [pd.Timestamp(v) if type(v) is int else v for v in values]


#: NaT's int64 value (None in a timestamp column)
_NAT_NS = int(np.iinfo(np.int64).min)


def _micros(ns: int) -> int:
    """Nanoseconds to microseconds rounded toward zero, as Arrow's unchecked cast that PySpark
    uses (floor division would put a sub-microsecond time before 1970 one microsecond early)."""
    return ns // 1000 if ns >= 0 else -(-ns // 1000)


def _utc_micros_of_column(values: list, time_zone: Optional[str]) -> list:
    import pandas as pd
    from pyspark.sql.pandas.types import _check_series_convert_timestamps_internal

    series = pd.Series(values, dtype=object if not values else None)
    if series.isna().all():
        return [None] * len(values)
    if not pd.api.types.is_datetime64_any_dtype(series.dtype):
        raise TypeError(f"an output row's timestamp must be a pandas timestamp or None, got "
                        f"{series.dtype} values such as {series.dropna().iloc[0]!r}")
    utc = _check_series_convert_timestamps_internal(series, time_zone)
    return [None if missing else _micros(ns) for ns, missing in zip(utc.array.asi8.tolist(),
                                                                      utc.isna().tolist())]
