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
* the control columns stay one value per packed row, ``offset`` the block's first offset;
* :data:`PACKED_COUNT` is the number of output rows the packed row stands for (1 for a control
  row).

:func:`unpack` turns that back into the operator's output schema with
``explode(sequence(0, __n - 1))`` and ``get(c, pos)``, so the rows, their order within a task
and the ``offset`` of each are those the unpacked path gives.

Only user columns of the types in :data:`PACKABLE_TYPES`, nullable, are packed: PySpark converts
their values inside an array exactly as it converts them in a column of their own (no time zone
or decimal coercion that differs between the two). Any other output schema keeps one row per
output row (:func:`packable`).
"""

from __future__ import annotations

from pyspark.sql import DataFrame
from pyspark.sql import functions as F
from pyspark.sql.types import (ArrayType, BinaryType, BooleanType, ByteType, DoubleType,
                               FloatType, IntegerType, LongType, ShortType, StringType,
                               StructField, StructType)

#: Records per packed row at most. A block of more records takes several rows. PySpark flushes an
#: output Arrow batch once it holds more than ``spark.sql.execution.arrow.maxRecordsPerBatch``
#: (10,000) rows, so this bounds an Arrow batch at 32x the records it held unpacked (320,000 by
#: default), while the per-row cost above is spread over up to 32 records.
PACKED_ROW_RECORDS = 32

#: The column that says how many output rows a packed row stands for.
PACKED_COUNT = "__n"
_POSITION = "__pos"

#: User column types packed (converted identically inside and outside an array by PySpark).
PACKABLE_TYPES = (StringType, BinaryType, BooleanType, ByteType, ShortType, IntegerType,
                  LongType, FloatType, DoubleType)


def packable(user: StructType) -> bool:
    """Whether the user's output columns can cross packed: every one nullable and of a type in
    :data:`PACKABLE_TYPES` (an unpacked column keeps its declared nullability, a packed one would
    come back nullable), and none named like a column the packing adds."""
    return all(f.nullable and type(f.dataType) in PACKABLE_TYPES
               and f.name not in (PACKED_COUNT, _POSITION) for f in user.fields)


def packed_schema(user: StructType, control: list) -> StructType:
    """The schema ``applyInPandasWithState`` returns when packing: each user column as an array,
    the ``control`` fields as they are, then :data:`PACKED_COUNT`."""
    return StructType([StructField(f.name, ArrayType(f.dataType, True)) for f in user.fields]
                      + list(control) + [StructField(PACKED_COUNT, IntegerType(), False)])


def unpack(packed: DataFrame, user: StructType, control: list) -> DataFrame:
    """One row per output row of ``packed`` (see the module docstring), in the user's columns
    followed by the ``control`` columns."""
    rows = packed.select("*", F.explode(F.sequence(F.lit(0), F.col(PACKED_COUNT) - 1))
                         .alias(_POSITION))
    pos = F.col(_POSITION)
    columns = [F.get(F.col(f.name), pos).alias(f.name) for f in user.fields]
    columns += [(F.col(f.name) + pos).alias(f.name) if f.name == "offset" else F.col(f.name)
                for f in control]
    return rows.select(*columns)
