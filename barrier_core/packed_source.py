"""The source's records packed per key group of the keyed operator they feed (source option
``packedKeyGroups``). The schema is chosen on the driver (:func:`packed_schema`), executors
reading Kafka pack (:func:`pack`), the operator's tasks unpack (:func:`unpack_frames`,
:func:`unpack_frame`).

Why: between the source and ``keyed_process`` every record costs Spark a row through the
Python-to-JVM conversion of the reader, the shuffle, and the JVM-to-Python conversion of
``applyInPandasWithState``. Packed, a Kafka fetch of one partition crosses as one row per key
group and epoch of the operator (the key group computed where the key is already in hand, the
Kafka key's ``crc32 mod max_parallelism``, as :mod:`barrier_ops.keygroups` computes it in SQL), so
those costs are paid per key group instead of per record.

What Spark sees with ``packedKeyGroups=N``:

* the per-record columns :data:`PER_RECORD_COLUMNS` become arrays, a packed row's records in
  Kafka order; ``timestamp`` becomes ``array<bigint>``, microseconds since the epoch (UTC),
  which pandas takes as one array where ``array<timestamp>`` is converted value by value;
* ``headers`` (``includeHeaders``) holds every header of the packed row's records end to end,
  and :data:`HEADER_COUNTS_COLUMN` how many are each record's (null: none);
* the other columns (``topic``, ``partition``, ``kind``, ``checkpoint_id``, ...) keep one value:
  every record of a packed row shares them;
* :data:`KEY_GROUP_COLUMN` is the records' key group (null on a barrier row, which every key
  group receives); its field metadata :data:`METADATA_KEY` holds ``N``, so ``keyed_process``
  checks on the driver that it groups by the same key and the same ``max_parallelism``.

A barrier row stays one row (its per-record columns arrays of one value). Within a packed row
records keep their order; a key group's rows keep the order of its records within a partition,
which is all the operator's alignment relies on (records carry their epoch in
``checkpoint_id``). Only ``keyed_process`` reads packed rows; the sinks and the stateless
helpers refuse them with :func:`refuse_packed`.
"""

from __future__ import annotations

import os
import zlib
from typing import List, Optional

from pyspark.sql.types import (ArrayType, IntegerType, LongType, StructField, StructType,
                               TimestampType)

from barrier_core.exceptions import InvalidOptionError
from barrier_core.schema import KIND_RECORD

#: Columns holding one value per record: arrays in the packed layout.
PER_RECORD_COLUMNS = ("key", "value", "offset", "timestamp", "timestampType")
#: Each record's number of headers in a packed row (null: it has none); PySpark cannot hand an
#: ``array<array<struct>>`` to pandas, so ``headers`` is not an array of each record's own.
HEADER_COUNTS_COLUMN = "__header_counts"
#: Per-record columns holding numbers (a null among them makes pandas floats).
NUMBER_COLUMNS = ("offset", "timestamp", "timestampType")
#: The key group column: the packed rows' key group, and the keyed operator's grouping key.
KEY_GROUP_COLUMN = "__kg"
#: Field metadata of :data:`KEY_GROUP_COLUMN`: the number of key groups the source hashed into.
METADATA_KEY = "barrier_kafka.packedKeyGroups"


def packed_schema(flat: StructType, key_groups: int) -> StructType:
    """The packed layout of the source schema ``flat`` for ``key_groups`` key groups (driver)."""
    fields = []
    for f in flat.fields:
        if f.name == "timestamp":
            fields.append(StructField(f.name, ArrayType(LongType())))
        elif f.name in PER_RECORD_COLUMNS:
            fields.append(StructField(f.name, ArrayType(f.dataType)))
        elif f.name == "headers":
            fields += [f, StructField(HEADER_COUNTS_COLUMN, ArrayType(IntegerType()))]
        else:
            fields.append(f)
    fields.append(StructField(KEY_GROUP_COLUMN, IntegerType(),
                              metadata={METADATA_KEY: int(key_groups)}))
    return StructType(fields)


def unpacked_schema(packed: StructType) -> StructType:
    """The row schema :func:`unpack_frame` gives for rows of schema ``packed`` (driver), the
    key group column kept as it is."""
    fields = []
    for f in packed.fields:
        if f.name == "timestamp" and isinstance(f.dataType, ArrayType):
            fields.append(StructField(f.name, TimestampType()))
        elif f.name in PER_RECORD_COLUMNS and isinstance(f.dataType, ArrayType):
            fields.append(StructField(f.name, f.dataType.elementType))
        elif f.name != HEADER_COUNTS_COLUMN:
            fields.append(f)
    return StructType(fields)


def packed_key_groups(schema: StructType) -> Optional[int]:
    """The key groups rows of ``schema`` are packed for, or None for one row per record."""
    if KEY_GROUP_COLUMN not in schema.names:
        return None
    value = schema[KEY_GROUP_COLUMN].metadata.get(METADATA_KEY)
    return None if value is None else int(value)


def refuse_packed(schema: StructType, step: str) -> None:
    """Raise ``InvalidOptionError`` when ``schema`` is the packed layout: ``step`` (a sink, a
    stateless helper) needs one row per record (driver)."""
    n = packed_key_groups(schema)
    if n is not None:
        raise InvalidOptionError(
            f"{step} needs one row per record, but this stream comes from the barrier-kafka "
            f"source with packedKeyGroups={n}, which packs records per key group for "
            "barrier_ops.keyed_process. Feed the stream straight into keyed_process (do the "
            "stateless work inside its function), or drop the packedKeyGroups option.")


def key_groups_of(keys: List[Optional[bytes]], key_groups: int) -> np.ndarray:
    """Key group of each Kafka key: ``crc32(key) mod key_groups``, a null key group 0, as
    :func:`barrier_ops.keygroups.key_group_sql` computes it for a binary key (executor)."""
    import numpy as np

    return np.fromiter(((zlib.crc32(k) % key_groups) if k is not None else 0 for k in keys),
                       dtype=np.int32, count=len(keys))


def pack(batch, arrow_schema, key_groups: int):
    """One source ``RecordBatch`` (its records, or one barrier row) -> its packed rows of
    ``arrow_schema``: the records one row per key group and epoch, key groups ascending, or the
    barrier row as one row (executor)."""
    import numpy as np
    import pyarrow as pa
    import pyarrow.compute as pc

    n = batch.num_rows
    is_records = n > 0 and pc.all(pc.equal(batch.column("kind"), KIND_RECORD)).as_py()
    if not is_records:
        if n > 1:
            raise ValueError(f"pack: a batch of {n} rows that are not all records")
        order = np.zeros(n, dtype=np.int64)
        starts = np.zeros(n, dtype=np.int64)
        groups = pa.nulls(n, pa.int32())
    else:
        kgs = key_groups_of(batch.column("key").to_pylist(), key_groups)
        epochs = batch.column("checkpoint_id").to_numpy(zero_copy_only=False)
        order = np.lexsort((epochs, kgs))       # stable: each group's records in Kafka order
        kgs, epochs = kgs[order], epochs[order]
        starts = np.flatnonzero(np.r_[True, (kgs[1:] != kgs[:-1]) | (epochs[1:] != epochs[:-1])])
        groups = pa.array(kgs[starts], pa.int32())
    rows = batch.take(pa.array(order))
    offsets = pa.array(np.r_[starts, n].astype(np.int32))
    firsts = pa.array(starts)
    columns = []
    for field in arrow_schema:
        if field.name == KEY_GROUP_COLUMN:
            columns.append(groups)
        elif field.name in PER_RECORD_COLUMNS:
            values = rows.column(field.name)
            if field.name == "timestamp":
                values = values.cast(pa.int64())
            columns.append(pa.ListArray.from_arrays(offsets, values, type=field.type))
        elif field.name == "headers":
            columns += _packed_headers(rows.column("headers"), starts, offsets, field.type)
        elif field.name == HEADER_COUNTS_COLUMN:
            continue
        else:
            columns.append(rows.column(field.name).take(firsts))
    return pa.RecordBatch.from_arrays(columns, schema=arrow_schema)


def _packed_headers(headers, starts: np.ndarray, offsets, packed_type) -> list:
    """``headers`` (one list a record, in packed order) as the packed ``headers`` column (every
    header of a packed row's records) and :data:`HEADER_COUNTS_COLUMN` (executor)."""
    import numpy as np
    import pyarrow as pa
    import pyarrow.compute as pc

    counts = pc.list_value_length(headers)
    ends = np.cumsum(counts.fill_null(0).to_numpy(zero_copy_only=False), dtype=np.int64)
    bounds = np.r_[0, ends][np.r_[starts, len(headers)]].astype(np.int32)
    return [pa.ListArray.from_arrays(pa.array(bounds), headers.flatten(), type=packed_type),
            pa.ListArray.from_arrays(offsets, counts.cast(pa.int32()),
                                     type=pa.list_(pa.int32()))]


def _unpacked_headers(headers: list, counts: list, total: int) -> np.ndarray:
    """Each record's headers from the packed rows' ``headers`` and header counts: its own run
    of the row's headers, or None (executor)."""
    import numpy as np

    out = np.empty(total, dtype=object)
    i = 0
    for row_headers, row_counts in zip(headers, counts):
        at = 0
        for n in row_counts:
            if n is None or n != n:   # null (None, or NaN where pandas made the array float)
                out[i] = None
            else:
                out[i] = row_headers[at:at + int(n)]
                at += int(n)
            i += 1
    return out


def unpack_frames(pdfs, time_zone: Optional[str], order_by: str) -> list:
    """The packed frames of one operator call (``pdfs``, as PySpark hands them) as one frame of
    records (a list of it; the frames as they are when none has a row), its packed rows first
    put in the order of column ``order_by`` (stable; executor). Sorting a few hundred packed
    rows by key group gives the records of a range of key groups already grouped, which the
    operator would otherwise sort, and copy, record by record
    (:func:`~barrier_ops.key_group_state.run_range`); each key group's rows keep their order."""
    import pandas as pd

    given = list(pdfs)
    frames = [pdf for pdf in given if len(pdf)]
    if not frames:
        return given   # no rows: as unpack_frame gives them, each empty frame as it is
    packed = frames[0] if len(frames) == 1 else pd.concat(frames, ignore_index=True)
    values = packed[order_by].to_numpy()
    if len(values) > 1 and not (values[1:] >= values[:-1]).all():
        packed = packed.take(values.argsort(kind="stable")).reset_index(drop=True)
    return [unpack_frame(packed, time_zone)]


def unpack_frame(pdf, time_zone: Optional[str]):
    """A pandas frame of packed rows -> one row per record, the columns and values the
    unpacked source gives, ``timestamp`` naive wall time in ``time_zone`` as PySpark converts
    a ``timestamp`` column (the session time zone; None: the worker's local zone) (executor)."""
    import numpy as np
    import pandas as pd

    if not len(pdf):
        return pdf
    counts = pdf["offset"].map(len).to_numpy()
    out = {}
    total = int(counts.sum())
    for name in pdf.columns:
        if name in PER_RECORD_COLUMNS:
            out[name] = _concatenate(pdf[name].tolist(), total)
            if name in NUMBER_COLUMNS and out[name].dtype == object:
                # numbers with a null (a barrier's timestampType): floats, as PySpark gives them
                out[name] = pd.to_numeric(out[name]).astype(np.float64)
        elif name == "headers":
            out[name] = _unpacked_headers(pdf[name].tolist(), pdf[HEADER_COUNTS_COLUMN].tolist(),
                                          total)
        elif name == HEADER_COUNTS_COLUMN:
            continue
        else:
            out[name] = np.repeat(pdf[name].to_numpy(), counts)
    # the arrays are this call's own: each becomes its column as it is, where consolidating
    # them into one block a dtype copied every column (about 4 ms for 50,000 records)
    flat = pd.DataFrame(out, copy=False)
    if "timestamp" in flat.columns:
        zone = time_zone or os.environ.get("TZ", "dateutil/:")
        flat["timestamp"] = (pd.to_datetime(flat["timestamp"], unit="us", utc=True)
                             .dt.tz_convert(zone).dt.tz_localize(None))
    return flat


def _concatenate(cells: list, total: int) -> np.ndarray:
    """The packed rows' arrays of one column end to end: at once where every cell is a flat
    numpy array (numbers, bytes), else value by value into an object array (values that are
    themselves sequences, as ``headers``, which numpy would otherwise read as dimensions)."""
    import numpy as np

    if all(isinstance(c, np.ndarray) and c.ndim == 1 for c in cells):
        return np.concatenate(cells)
    out = np.empty(total, dtype=object)
    i = 0
    for cell in cells:
        for value in cell:
            out[i] = value
            i += 1
    return out
